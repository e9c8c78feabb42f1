"""The run's data loaders: how they shard, preparing one, skipping batches, metrics counted once.

:class:`DataLoading` is the ``Accelerator``'s collaborator for data: it holds the
``DataLoaderConfiguration`` (Accelerate reads ``split_batches``, ``even_batches``, ... from it),
rebuilds a ``DataLoader`` for the run, and drops from ``gather_for_metrics`` the samples a
prepared loader repeated to complete its last round.

Nothing here imports torch at module import time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import ConfigError
from accelkw_core.runtime import collectives as ops
from accelkw_core.runtime.data.dataloader_config import DataLoaderConfiguration

if TYPE_CHECKING:
    from accelkw_core.runtime.data.data_loader import LoaderProgress
    from accelkw_core.runtime.run_state import RunState

__all__ = ["DataLoading", "dataloader_configuration"]


def dataloader_configuration(config: Any) -> DataLoaderConfiguration:
    """The run's configuration from ``Accelerator(dataloader_config=)``: the default for ``None``."""
    if config is None:
        return DataLoaderConfiguration()
    if not isinstance(config, DataLoaderConfiguration):
        raise ConfigError(
            "accelerator", "dataloader_config", config, "a DataLoaderConfiguration or None"
        )
    return config


class DataLoading:
    """Data loaders of one run, sharded as ``config`` says.

    ``progress`` tracks which prepared loaders are being iterated (the gradient state reads it
    too); the loaders this prepares report to it, and :meth:`gather_for_metrics` reads it.
    """

    def __init__(
        self, state: RunState, progress: LoaderProgress, config: DataLoaderConfiguration
    ) -> None:
        self.state = state
        self.progress = progress
        #: ``Accelerator.dataloader_config``: read again by every ``prepare``.
        self.config = config

    # -- the configuration's facts (Accelerate reads these from ``dataloader_config``) -----------

    @property
    def split_batches(self) -> bool:
        return self.config.split_batches

    @property
    def dispatch_batches(self) -> bool | None:
        return self.config.dispatch_batches

    @property
    def even_batches(self) -> bool:
        return self.config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        dataclasses.replace(self.config, even_batches=value)  # checks the value
        self.config.even_batches = value

    @property
    def use_seedable_sampler(self) -> bool:
        return self.config.use_seedable_sampler

    @property
    def non_blocking(self) -> bool:
        return self.config.non_blocking

    @property
    def use_stateful_dataloader(self) -> bool:
        return self.config.use_stateful_dataloader

    # -- loaders ---------------------------------------------------------------------------------

    def prepare(self, loader: Any) -> Any:
        """``loader`` rebuilt for the run: its batches dealt across processes, on the device."""
        from accelkw_core.runtime.data.data_loader import prepare_data_loader

        return prepare_data_loader(loader, self.state, self.progress, self.config)

    def skip_first_batches(self, dataloader: Any, num_batches: int) -> Any:
        """``dataloader`` without its first ``num_batches`` batches (to resume mid-epoch)."""
        from accelkw_core.runtime.data.data_loader import skip_first_batches

        return skip_first_batches(dataloader, num_batches=num_batches)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool) -> Any:
        """Gather ``input_data`` from every process, without the samples repeated at the end.

        On the last batch of a prepared data loader, the samples added to complete the last
        round are dropped, so each sample counts once. Anything that is not a tensor (or a
        nested list/tuple/dict of tensors), or ``use_gather_object=True``, is gathered as
        Python objects into one list.
        """
        as_objects = use_gather_object or not _all_tensors(input_data)
        data = (
            ops.gather_objects(input_data, self.state)
            if as_objects
            else ops.gather(input_data, self.state)
        )
        progress = self.progress
        if not progress.end_of_dataloader:
            return data
        remainder = progress.remainder
        if remainder <= 0:
            return data
        if as_objects:
            return data[:remainder]
        return _map_tensors(lambda t: t[:remainder], data)


def _all_tensors(data: Any) -> bool:
    import torch

    if isinstance(data, torch.Tensor):
        return True
    if isinstance(data, dict):
        return all(_all_tensors(v) for v in data.values())
    if isinstance(data, list | tuple):
        return all(_all_tensors(v) for v in data)
    return False


def _map_tensors(fn: Callable[[Any], Any], data: Any) -> Any:
    if isinstance(data, dict):
        return type(data)({k: _map_tensors(fn, v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_map_tensors(fn, v) for v in data))
    if isinstance(data, list | tuple):
        return type(data)(_map_tensors(fn, v) for v in data)
    return fn(data)

"""Data loaders for a run: sharded across processes, batches moved to the process's device.

Imported by ``Accelerator.prepare`` only, so importing torch here costs nothing at package import.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import (
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from accelkw_core.errors import AccelkwError
from accelkw_core.runtime.state import AcceleratorState

__all__ = ["PreparedDataLoader", "move_to_device", "prepare_data_loader"]

# DataLoader arguments copied from the original onto the rebuilt loader, when torch has them.
_COPIED = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


class PreparedDataLoader(DataLoader):  # type: ignore[misc]
    """A ``DataLoader`` that reshuffles per epoch across processes and yields device batches.

    ``set_epoch(n)`` seeds the distributed shuffle of the next pass; without it, each full pass
    advances the epoch by one, so every epoch sees a new order on every process.
    """

    def __init__(self, *args: Any, device: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.device = device
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` to seed the shuffle of the next pass (``DistributedSampler.set_epoch``)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        sampler = self.sampler
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        device = self.device
        if device is None:
            yield from super().__iter__()
        else:
            for batch in super().__iter__():
                yield move_to_device(batch, device)
        self.epoch += 1


def move_to_device(data: Any, device: Any) -> Any:
    """``data`` with every tensor in it (nested lists, tuples, dicts) moved to ``device``."""
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=True)
    if isinstance(data, dict):
        return type(data)({k: move_to_device(v, device) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(move_to_device(v, device) for v in data))
    if isinstance(data, list | tuple):
        return type(data)(move_to_device(v, device) for v in data)
    return data


def _copied_kwargs(loader: Any) -> dict[str, Any]:
    accepted = inspect.signature(DataLoader.__init__).parameters
    kwargs = {k: getattr(loader, k) for k in _COPIED if k in accepted and hasattr(loader, k)}
    if not kwargs.get("num_workers"):
        # torch rejects these two without worker processes.
        kwargs.pop("prefetch_factor", None)
        kwargs["persistent_workers"] = False
    return kwargs


def prepare_data_loader(loader: Any, state: AcceleratorState) -> Any:
    """``loader`` rebuilt for ``state``: one shard per process (when distributed) on its device.

    The per-process batch size and whether it shuffles are kept; a ``DistributedSampler`` gives
    each process a disjoint ``1/world_size`` of the dataset. Loaders over an ``IterableDataset``
    are returned unchanged, with a warning when distributed (they cannot be sharded by index).
    """
    device = None if state.device_type == "cpu" else state.device
    if isinstance(loader.dataset, IterableDataset):
        if state.distributed:
            message = (
                "prepare: a DataLoader over an IterableDataset is not sharded; every process "
                "reads the whole stream unless the dataset splits itself by rank"
            )
            state.record("accelerator", message, applied=False)
            warnings.warn(message, stacklevel=3)
        return loader
    kwargs = _copied_kwargs(loader)
    if not state.distributed:
        if loader.batch_size is None:
            return PreparedDataLoader(
                loader.dataset, batch_sampler=loader.batch_sampler, device=device, **kwargs
            )
        return PreparedDataLoader(
            loader.dataset,
            batch_size=loader.batch_size,
            sampler=loader.sampler,
            drop_last=loader.drop_last,
            device=device,
            **kwargs,
        )
    if loader.batch_size is None or not isinstance(
        loader.sampler, RandomSampler | SequentialSampler
    ):
        sampler = type(loader.sampler).__name__
        raise AccelkwError(
            f"prepare: cannot shard a DataLoader with a custom {'batch_sampler' if loader.batch_size is None else 'sampler'} "
            f"({sampler}) across {state.world_size} processes; build it with batch_size= and "
            "shuffle=True/False, or shard it yourself and do not pass it to prepare()"
        )
    shuffle = isinstance(loader.sampler, RandomSampler)
    sampler = DistributedSampler(
        loader.dataset,
        num_replicas=state.world_size,
        rank=state.rank,
        shuffle=shuffle,
        drop_last=loader.drop_last,
    )
    state.record(
        "accelerator",
        f"data loader sharded over {state.world_size} processes "
        f"(DistributedSampler, shuffle={shuffle}, batch size {loader.batch_size} per process)",
    )
    return PreparedDataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        drop_last=loader.drop_last,
        device=device,
        **kwargs,
    )

"""``TensorBoardTracker``: Accelerate's TensorBoard tracker, on ``torch.utils.tensorboard``.

The same files as Accelerate 1.15's ``TensorBoardTracker``: event files in
``<logging_dir>/<project_name>``, the hyperparameters through ``SummaryWriter.add_hparams``
and in ``<logging_dir>/<project_name>/<time>/hparams.yml``. torch and tensorboard are imported
in :meth:`TensorBoardTracker.start`, so importing the plugin (listing plugins) loads neither.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from accelkw_core.tracking import GeneralTracker, on_main_process

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["TensorBoardTracker", "plain_values"]


def plain_values(data: Any) -> Any:
    """``data`` with every tensor turned into Python numbers (``tensor.tolist()``), recursively.

    Accelerate's ``listify``: a 0-d tensor becomes a float or int, bfloat16 is read as float32.
    """
    if isinstance(data, dict):
        return {k: plain_values(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(plain_values(v) for v in data)
    if type(data).__module__.startswith("torch") and hasattr(data, "detach"):
        import torch

        tensor = data.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.to(torch.float32)
        return tensor.tolist()
    return data


class TensorBoardTracker(GeneralTracker):
    """Write a run's scalars, texts and hyperparameters as TensorBoard event files.

    ``run_name`` (the project name ``init_trackers`` got) names the folder under
    ``logging_dir``; ``**kwargs`` go to ``SummaryWriter`` (``flush_secs=60``, ...). Pass them
    through ``init_trackers(..., init_kwargs={"tensorboard": {...}})``. Only the main process
    writes.
    """

    name = "tensorboard"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir_param = logging_dir
        self.init_kwargs = kwargs
        self.logging_dir = os.path.join(logging_dir, run_name)
        self.writer: SummaryWriter | None = None

    @on_main_process
    def start(self) -> None:
        """Open a ``SummaryWriter`` on ``<logging_dir>/<run_name>``."""
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(self.logging_dir, **self.init_kwargs)

    @property
    def tracker(self) -> SummaryWriter | None:
        """The ``SummaryWriter`` (``None`` before :meth:`start` and on the other processes)."""
        return self.writer

    def _open_writer(self) -> SummaryWriter:
        if self.writer is None:
            raise RuntimeError(
                "TensorBoardTracker: the writer is not open; call accelerator.init_trackers() "
                "(or tracker.start()) first"
            )
        return self.writer

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record ``values`` with ``add_hparams`` and in ``<time>/hparams.yml``, as Accelerate."""
        import yaml

        writer = self._open_writer()
        writer.add_hparams(values, metric_dict={})
        writer.flush()
        folder = os.path.join(self.logging_dir, str(time.time()))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "hparams.yml"), "w", encoding="utf-8") as out:
            yaml.dump(values, out)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Write numbers as scalars, strings as text, dicts of numbers as grouped scalars.

        Tensors are read as numbers first; ``kwargs`` go to the ``SummaryWriter`` method.
        """
        writer = self._open_writer()
        for key, value in plain_values(values).items():
            if isinstance(value, (int, float)):
                writer.add_scalar(key, value, global_step=step, **kwargs)
            elif isinstance(value, str):
                writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                writer.add_scalars(key, value, global_step=step, **kwargs)
        writer.flush()

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Write each value (a batch of images) with ``SummaryWriter.add_images``."""
        writer = self._open_writer()
        for key, value in values.items():
            writer.add_images(key, value, global_step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        """Close the writer."""
        if self.writer is not None:
            self.writer.close()

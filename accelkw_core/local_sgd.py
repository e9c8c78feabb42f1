"""``LocalSGD``: train each process on its own for a few steps, then average the weights.

Accelerate's helper (``accelerate.local_sgd.LocalSGD``), at the same import path, built on the
public ``Accelerator`` surface only: gradients are not synchronised inside the block (the
model's ``no_sync``), and every ``local_sgd_steps`` steps, and once more when the block ends,
each parameter becomes its mean over the processes.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import ConfigError
from accelkw_core.runtime.processes import DistributedType

if TYPE_CHECKING:
    from accelkw_core.runtime.accelerator import Accelerator

__all__ = ["LocalSGD"]

_SUPPORTED = {
    DistributedType.NO,
    DistributedType.MULTI_CPU,
    DistributedType.MULTI_GPU,
    DistributedType.MULTI_XPU,
    DistributedType.MULTI_MLU,
    DistributedType.MULTI_HPU,
    DistributedType.MULTI_SDAA,
    DistributedType.MULTI_MUSA,
    DistributedType.MULTI_NPU,
    DistributedType.MULTI_NEURON,
}


class LocalSGD:
    """Local SGD over a prepared ``model``: use it as a context manager around the epoch.

    Call :meth:`step` after each optimizer step. Disabled (every call does nothing) with
    ``enabled=False`` or with one process. Data parallel runs only: a sharded model (FSDP)
    is refused with ``NotImplementedError``, as in Accelerate.
    """

    def __init__(
        self,
        accelerator: Accelerator,
        model: Any,
        local_sgd_steps: int,
        enabled: bool = True,
    ) -> None:
        kind = accelerator.distributed_type
        if kind not in _SUPPORTED:
            raise NotImplementedError(
                f"LocalSGD is supported only for CPUs and GPUs (no DeepSpeed or MegatronLM); "
                f"this run is {kind.value}"
            )
        self.enabled = enabled and kind != DistributedType.NO
        self.num_steps = 0
        if self.enabled:
            if isinstance(local_sgd_steps, bool) or not isinstance(local_sgd_steps, int):
                raise ConfigError("LocalSGD", "local_sgd_steps", local_sgd_steps, "an int >= 1")
            if local_sgd_steps < 1:
                raise ConfigError("LocalSGD", "local_sgd_steps", local_sgd_steps, "an int >= 1")
            self.accelerator = accelerator
            self.model = model
            self.local_sgd_steps = local_sgd_steps
        self._no_sync: AbstractContextManager[Any] | None = None

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync = self.model.no_sync()
            self._no_sync.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.enabled and self._no_sync is not None:
            self._sync_and_avg_model_params()
            self._no_sync.__exit__(exc_type, exc, tb)
            self._no_sync = None

    def step(self) -> None:
        """Count a step; every ``local_sgd_steps`` steps, average the weights over processes."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._sync_and_avg_model_params()

    def _sync_and_avg_model_params(self) -> None:
        self.accelerator.wait_for_everyone()
        with self.accelerator.autocast():
            for param in self.model.parameters():
                param.data = self.accelerator.reduce(param.data, reduction="mean")

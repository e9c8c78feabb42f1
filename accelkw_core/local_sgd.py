"""``LocalSGD``: processes train apart for a few optimizer steps, then agree on the mean weights.

Accelerate's class at its import path (``accelerate.local_sgd.LocalSGD``): the same constructor,
context-manager use and ``step()``. Inside the block the prepared model skips gradient
synchronisation; every ``local_sgd_steps`` calls of ``step()``, and when the block exits, every
parameter is replaced by its mean over the processes. It touches only the public ``Accelerator``.
"""

from __future__ import annotations

from contextlib import ExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import ConfigError
from accelkw_core.runtime.processes.coordination import DistributedType

if TYPE_CHECKING:
    from accelkw_core.accelerator import Accelerator

__all__ = ["LocalSGD"]


def _replicated(kind: DistributedType) -> bool:
    """Whether every process holds the whole model: one process, or plain data parallel."""
    return kind is DistributedType.NO or kind.value.startswith("MULTI_")


class LocalSGD:
    """Local SGD over a prepared ``model``, used as ``with LocalSGD(...) as local_sgd:``.

    Call :meth:`step` after each optimizer step. With ``enabled=False``, or on one process, the
    block does nothing. A run whose model is sharded or managed by another engine (FSDP,
    DeepSpeed, Megatron-LM, XLA) raises ``NotImplementedError``: its processes hold no full copy
    to average. An enabled block's ``local_sgd_steps`` must be an int of at least 1
    (:class:`~accelkw_core.errors.ConfigError`).
    """

    def __init__(
        self,
        accelerator: Accelerator,
        model: Any,
        local_sgd_steps: int,
        enabled: bool = True,
    ) -> None:
        kind = accelerator.distributed_type
        if not _replicated(kind):
            raise NotImplementedError(
                f"LocalSGD averages whole replicas of the model, and a {kind.value} run holds "
                "none: use it with one process or plain data parallel (NO or MULTI_*)"
            )
        self.enabled = enabled and kind is not DistributedType.NO
        self.num_steps = 0
        if self.enabled and (
            isinstance(local_sgd_steps, bool)
            or not isinstance(local_sgd_steps, int)
            or local_sgd_steps < 1
        ):
            raise ConfigError("LocalSGD", "local_sgd_steps", local_sgd_steps, "an int >= 1")
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self._inside = ExitStack()

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._inside.enter_context(self.model.no_sync())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.enabled:
            return
        # The replicas agree once more before gradients flow between them again.
        with self._inside:
            self._average()

    def step(self) -> None:
        """Count one optimizer step; on every ``local_sgd_steps``-th, average the weights."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._average()

    def _average(self) -> None:
        accelerator = self.accelerator
        accelerator.wait_for_everyone()
        for parameter in self.model.parameters():
            parameter.data = accelerator.reduce(parameter.data, reduction="mean")

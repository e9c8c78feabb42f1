"""``AsyncCheckpointKwargs``: ``save_state`` returns once the state is staged; a thread commits it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from accelkw_async_checkpoint.background import BackgroundSaves
from accelkw_core.plugin import CHECKPOINT_EXECUTOR, TEARDOWN, KwargsHandler, Plan, handler_field

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["AsyncCheckpointKwargs"]


@dataclass
class AsyncCheckpointKwargs(KwargsHandler):
    """Save checkpoints in the background: ``save_state()`` returns once the state is copied.

    The copy is in CPU memory (pinned, for CUDA tensors) and shares no storage with the live
    model, so training goes on at once; a thread writes, hashes, fsyncs and commits it with
    the synchronous save's protocol, files and manifest, the processes agreeing on a process
    group of its own. At most ``max_pending`` saves are in flight: the next ``save_state``
    waits for the oldest. ``load_state``, ``wait_for_everyone``, ``end_training`` and
    ``accelerator.wait_for_checkpoints()`` wait for them, and raise the ``CheckpointError`` of
    one that failed (the checkpoint saved before it is kept); so does the first ``save_state``
    that waits for it, at the same call on every process.

    Opt-in: installing the plugin changes no run; a run asks for it::

        from accelkw_core.utils import AsyncCheckpointKwargs

        accelerator = Accelerator(kwargs_handlers=[AsyncCheckpointKwargs(max_pending=1)])
    """

    name: ClassVar[str] = "async_checkpoint"
    opt_in: ClassVar[bool] = True

    max_pending: int = handler_field(
        1,
        doc="How many saves may be written in the background at once; the next save_state "
        "waits for the oldest (each holds a copy of the state in memory).",
        ge=1,
    )

    def plan(self, state: AcceleratorState) -> Plan:
        """The background executor of saves, and its teardown (pending saves finished)."""
        plan = Plan(self.name)
        saves = BackgroundSaves(self.max_pending)
        plan.contribute(
            CHECKPOINT_EXECUTOR,
            saves,
            f"save_state stages the state in CPU memory and returns; a thread writes and "
            f"commits it (at most {self.max_pending} in flight)",
        )
        plan.contribute(TEARDOWN, saves.close, "pending saves finish before the run ends")
        return plan

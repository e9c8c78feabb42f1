"""Workers for tests/test_partial_state_core.py: ``PartialState()`` alone on real gloo processes,
with a handler of the test's own providing the process group (no built-in involved)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from accelkw_core.plugin import TEARDOWN, AcceleratorState, KwargsHandler, Plan, handler_field


@dataclass
class GroupMakerKwargs(KwargsHandler):
    """Starts a gloo group on several processes, as a process-group plugin would."""

    name: ClassVar[str] = "group_maker"
    timeout_s: float = handler_field(60.0, doc="the group's timeout, in seconds", ge=1.0)

    def plan(self, state: AcceleratorState) -> Plan:
        plan = Plan(self.name)
        if state.world_size <= 1:
            return plan.note("one process: no group")
        return plan.run(self._start, "start a gloo group", provides=("process_group",))

    def _start(self, state: AcceleratorState) -> None:
        from datetime import timedelta

        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            rank=state.rank,
            world_size=state.world_size,
            timeout=timedelta(seconds=self.timeout_s),
        )
        STARTED.append(self.timeout_s)
        state.contribute(TEARDOWN, self.name, dist.destroy_process_group)


STARTED: list[float] = []


def partial_state_worker(rank: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from accelkw_core.discovery.default_registry import set_registry
    from accelkw_core.logging import get_logger
    from accelkw_core.state import GradientState, PartialState
    from accelkw_core.testing import isolated_registry, plugin_of

    set_registry(isolated_registry([plugin_of(GroupMakerKwargs)]))
    state = PartialState(cpu=True, timeout_s=30.0)
    out: dict[str, Any] = {"group": dist.is_initialized(), "started": list(STARTED)}
    out["same"] = PartialState().process_index == state.process_index  # shared, not started twice
    table = {"ids": [1, 2, 3], "x": torch.arange(6).reshape(3, 2)}
    with state.split_between_processes(table, apply_padding=True) as share:
        out["ids"], out["x"] = share["ids"], share["x"].tolist()
    logger = get_logger("partial-state-test")
    logger.info("in order", main_process_only=False, in_order=True)  # barriers on the group
    out["on_local_process"] = state.on_local_process(lambda: "here", local_process_index=1)()
    out["gradients"] = [GradientState().sync_gradients, GradientState().num_steps]
    state.wait_for_everyone()
    state.destroy_process_group()
    out["after"] = dist.is_initialized()
    return out

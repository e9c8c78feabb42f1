"""Worker functions for the multi-process tests (run in spawned processes by ``run_workers``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from accelkw_process_group import InitProcessGroupKwargs

from accelkw_core import RunState
from accelkw_core.plugin import KwargsHandler, Plan, handler_field
from accelkw_core.testing import apply_handler


def collective_timeout(rank: int, seconds: float) -> dict[str, Any]:
    """Rank 1 never joins an all_reduce; rank 0's must fail after ``seconds``."""
    state = RunState.from_env(cpu=True)
    apply_handler(InitProcessGroupKwargs(backend="gloo", timeout=timedelta(seconds=seconds)), state)
    out: dict[str, Any] = {"backend": str(dist.get_backend())}
    if rank == 0:
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1))
            out["error"] = None
        except RuntimeError as exc:
            out["error"] = str(exc)
        out["elapsed"] = time.monotonic() - start
    else:
        # Outlive rank 0's wait, so its failure is the timeout and not a closed connection.
        time.sleep(seconds + 2.0)
    out["teardown_failures"] = [repr(exc) for _, exc in state.run_teardowns()]
    out["initialised_after_teardown"] = dist.is_initialized()
    out["log"] = state.summary()
    return out


def default_then_existing(rank: int) -> dict[str, Any]:
    """The default handler on CPU (nccl -> gloo), then a second handler meeting that group."""
    state = RunState.from_env(cpu=True)
    apply_handler(InitProcessGroupKwargs(), state)
    backend = str(dist.get_backend())
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    second = RunState.from_env(cpu=True)
    apply_handler(
        InitProcessGroupKwargs(
            backend="gloo", init_method="tcp://127.0.0.1:1", timeout=timedelta(minutes=30)
        ),
        second,
    )
    second_teardowns = len(second.teardowns)
    second.run_teardowns()
    alive_after_second = dist.is_initialized()
    state.run_teardowns()
    return {
        "backend": backend,
        "sum": float(value.item()),
        "log": state.summary(),
        "second_log": second.summary(),
        "second_teardowns": second_teardowns,
        "alive_after_second_teardown": alive_after_second,
        "initialised_after_teardown": dist.is_initialized(),
    }


@dataclass
class FailsAfterGroup(KwargsHandler):
    """A handler applied after the process group that fails when ``armed``: composition then
    undoes what ran before it, destroying the group."""

    name: ClassVar[str] = "fails_after_group"
    after: ClassVar[tuple[str, ...]] = ("process_group",)
    armed: bool = handler_field(False, doc="fail in apply")

    def plan(self, state: Any) -> Plan:
        return Plan(self.name).run(self._apply, "fails when armed")

    def _apply(self, state: Any) -> None:
        if self.armed:
            if state.rank == 0:
                # Rank 0 undoes its group last: rank 1 is already starting the next one, and
                # rank 0's first store is still there to be met (what made retries flaky).
                time.sleep(2.0)
            raise RuntimeError("this handler's apply failed")


def retries_after_failed_apply(rank: int, tries: int) -> list[dict[str, Any]]:
    """``tries`` times: an Accelerator whose composition fails after the group was made (and
    undone), then one that starts, sums across the two processes, and ends."""
    from accelkw_core import Accelerator, HandlerApplyError
    from accelkw_core.testing import isolated_registry, plugin_of

    registry = isolated_registry([plugin_of(InitProcessGroupKwargs, FailsAfterGroup)])
    out = []
    for _ in range(tries):
        found: dict[str, Any] = {}
        try:
            Accelerator(cpu=True, registry=registry, kwargs_handlers=[FailsAfterGroup(armed=True)])
        except HandlerApplyError as exc:
            found["failed"] = str(exc).splitlines()[0]
        found["group-after-failure"] = dist.is_initialized()
        acc = Accelerator(cpu=True, registry=registry)
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value)
        found["sum"] = float(value.item())
        acc.end_training()
        found["group-after-end"] = dist.is_initialized()
        out.append(found)
    return out


def retired_until_the_next_group(rank: int) -> dict[str, Any]:
    """A run's group destroyed by the teardown and its DDP model freed, then a second run."""
    import gc

    from accelkw_process_group import _exit_guard

    state = RunState.from_env(cpu=True)
    apply_handler(InitProcessGroupKwargs(backend="gloo"), state)
    first = dist.group.WORLD
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    model(torch.ones(1, 2)).sum().backward()
    state.run_teardowns()
    destroyed = not dist.is_initialized()
    del model
    gc.collect()
    kept = any(group is first for group in _exit_guard._RETIRED)
    del first
    second = RunState.from_env(cpu=True)
    apply_handler(InitProcessGroupKwargs(backend="gloo"), second)
    released = _exit_guard._RETIRED == []
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    second.run_teardowns()
    return {
        "destroyed": destroyed,
        "kept": kept,
        "released": released,
        "sum": value.item(),
        "retired_after_second": len(_exit_guard._RETIRED),
    }

"""Worker functions for the multi-process tests (run in spawned processes by ``run_workers``)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from accelkw_process_group import InitProcessGroupKwargs

from accelkw_core import RunState
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

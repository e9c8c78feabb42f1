"""Processes that reach checkpoint calls apart, for tests/test_checkpoint_no_wait.py.

Each function runs on one rank of a two-process gloo run (``run_workers``) and returns what it
saw: how long its calls took, the warnings they gave, the step and random draws after a load.
A saving process never waits for another one (replicated state); sharded state is a collective,
whose missing process is named. The functions live in a plain module: the spawned workers
unpickle them by name.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any


def _ddp(*handlers: Any, **keywords: Any) -> Any:
    """An Accelerator with a gloo group and DDP (the suite's stand-ins for the built-ins), and
    ``handlers``."""
    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry, plugin_of
    from tests.runtime_helpers import GroupKwargs, SyncKwargs

    kinds = [type(h) for h in handlers]
    registry = isolated_registry([plugin_of(GroupKwargs, SyncKwargs, *kinds)])
    return Accelerator(cpu=True, registry=registry, kwargs_handlers=list(handlers), **keywords)


def _prepared(acc: Any) -> tuple[Any, Any, Any]:
    """A small model, its SGD and a shuffled loader of 64 samples, prepared."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 4))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
    return acc.prepare(model, optimizer, loader)  # type: ignore[no-any-return]


def _micro_steps(acc: Any, model: Any, optimizer: Any, batches: Any, n: int) -> None:
    """``n`` micro-steps under ``accumulate`` (each counts one on ``accelerator.step``)."""
    for _ in range(n):
        (x,) = next(batches)
        with acc.accumulate(model):
            acc.backward(model(x).pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()


def _timed(call: Any) -> float:
    start = time.monotonic()
    call()
    return time.monotonic() - start


def late_rank(rank: int, run_dir: str, late_s: float) -> dict[str, Any]:
    """Rank 1 reaches ``save_state(A)`` ``late_s`` seconds after rank 0, then both save B.

    Rank 0 records how long its save of A took (it must not wait for rank 1); rank 1 the
    random state it saved. Both then load A and draw, and rank 1 checks that it drew what it
    drew right after its own save.
    """
    import torch

    out = Path(run_dir)
    acc = _ddp()
    model, optimizer, loader = _prepared(acc)
    batches = iter(loader)
    _micro_steps(acc, model, optimizer, batches, 2)
    found: dict[str, Any] = {}
    if rank == 1:
        time.sleep(late_s)  # uneven work (an evaluation) before the save
    found["save-a-s"] = _timed(lambda: acc.save_state(out / "A"))
    found["draw-after-a"] = torch.rand(3).tolist()
    acc.wait_for_everyone()
    _micro_steps(acc, model, optimizer, batches, 1)
    acc.save_state(out / "B")  # at once on both: a late part of A never lands here
    acc.wait_for_everyone()
    acc.step = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc.load_state(out / "A")
    found["warnings"] = [str(w.message) for w in caught]
    found["step"] = acc.step
    found["draw-after-load"] = torch.rand(3).tolist()
    acc.end_training()
    return found


def main_only(rank: int, run_dir: str) -> dict[str, Any]:
    """diffusers' pattern: ``if accelerator.is_main_process: accelerator.save_state(...)``
    after three micro-steps; every process then starts again at step 0 and resumes."""
    out = Path(run_dir)
    acc = _ddp()
    model, optimizer, loader = _prepared(acc)
    batches = iter(loader)
    _micro_steps(acc, model, optimizer, batches, 3)
    found: dict[str, Any] = {"saved-step": acc.step}
    if acc.is_main_process:
        found["save-s"] = _timed(lambda: acc.save_state(out / "ckpt"))
    acc.wait_for_everyone()
    _micro_steps(acc, model, optimizer, batches, 2)
    acc.step = 0  # as a restarted run begins
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc.load_state(out / "ckpt")
    found["warnings"] = [str(w.message) for w in caught]
    found["step"] = acc.step
    found["weights"] = [float(v) for v in acc.unwrap_model(model).weight.flatten()]
    acc.end_training()
    return found


def load_hook_on_main(rank: int, run_dir: str) -> dict[str, Any]:
    """A load-state pre-hook registered on the main process only, as some scripts do."""
    import torch

    out = Path(run_dir)
    acc = _ddp()
    model, _optimizer, _loader = _prepared(acc)
    calls: list[tuple[str, str]] = []

    def hook(models: list[Any], input_dir: str) -> None:
        calls.append((type(models[0]).__name__, Path(input_dir).name))

    if acc.is_main_process:
        acc.register_load_state_pre_hook(hook)
    acc.save_state(out / "ckpt")
    saved = [float(v) for v in acc.unwrap_model(model).weight.flatten()]
    with torch.no_grad():
        acc.unwrap_model(model).weight.zero_()
    acc.load_state(out / "ckpt")
    found = {
        "calls": calls,
        "restored": saved == [float(v) for v in acc.unwrap_model(model).weight.flatten()],
    }
    acc.wait_for_everyone()  # the collectives still line up after the load
    acc.end_training()
    return found


def sharded_missing_rank(rank: int, run_dir: str) -> dict[str, Any]:
    """FSDP2: rank 0 calls ``save_state``, rank 1 does not (it waits for rank 0's word)."""
    from datetime import timedelta

    import accelkw_ddp.plugin
    import accelkw_fsdp.plugin
    import accelkw_process_group.plugin
    from accelkw_fsdp import FullyShardedDataParallelPlugin
    from accelkw_process_group import InitProcessGroupKwargs

    from accelkw_core import Accelerator, CheckpointError
    from accelkw_core.testing import isolated_registry
    from tests.checkpoint_workers import fsdp_model

    out = Path(run_dir)
    registry = isolated_registry(
        [accelkw_process_group.plugin, accelkw_ddp.plugin, accelkw_fsdp.plugin]
    )
    acc = Accelerator(
        cpu=True,
        registry=registry,
        kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=5))],
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2),
    )
    acc.prepare(*fsdp_model(0))
    found: dict[str, Any] = {}
    if rank == 0:
        try:
            acc.save_state(out / "ckpt")
        except CheckpointError as exc:
            found["error"] = str(exc)
        else:
            found["error"] = ""
        (out / "told").write_text("done")
    else:
        while not (out / "told").exists():
            time.sleep(0.05)
    found["committed"] = (out / "ckpt").exists()
    acc.end_training()
    return found


def exit_paths(rank: int, run_dir: str) -> dict[str, Any]:
    """Background saves on; rank 1 leaves a ``with accelerator:`` block by an exception, rank 0
    calls ``end_training`` while an exception unwinds, each after the other is gone or busy.

    Rank 0 does nothing collective until rank 1 says it has left its block: had ``__exit__``
    entered a collective, rank 1 would wait for rank 0 there and never say so. Rank 0 then ends
    while rank 1 is gone; had it entered a collective, it would fail or hang there.
    """
    from accelkw_async_checkpoint import AsyncCheckpointKwargs

    out = Path(run_dir)
    acc = _ddp(AsyncCheckpointKwargs())
    _prepared(acc)
    acc.save_state(out / "ckpt")  # committed in the background by rank 0
    found: dict[str, Any] = {}
    if rank == 1:
        try:
            with acc:
                raise RuntimeError("rank 1 fails inside its block")
        except RuntimeError as exc:
            found["raised"] = str(exc)
        (out / "rank1-left").write_text("yes")
        return found
    deadline = time.monotonic() + 60
    while not (out / "rank1-left").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    found["rank1-left"] = (out / "rank1-left").exists()
    try:
        raise ValueError("rank 0 fails")
    except ValueError:
        acc.end_training()  # unwinding: this process's own save finished, no collective
    found["committed"] = (out / "ckpt" / "accelkw_checkpoint.json").is_file()
    return found


def automatic_naming_late(rank: int, run_dir: str) -> dict[str, Any]:
    """Automatic naming: rank 1 calls ``save_state()`` only once rank 0 has committed it."""
    from accelkw_core import ProjectConfiguration

    out = Path(run_dir)
    config = ProjectConfiguration(project_dir=str(out), automatic_checkpoint_naming=True)
    acc = _ddp(project_config=config)
    _prepared(acc)
    first = out / "checkpoints" / "checkpoint_0" / "accelkw_checkpoint.json"
    if rank == 1:
        deadline = time.monotonic() + 60
        while not first.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    saved = acc.save_state()
    acc.wait_for_everyone()
    acc.end_training()
    return {"saved": saved.name, "next": acc.save_iteration}

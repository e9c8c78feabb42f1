"""Training programs killed while they save, for tests/test_checkpoints.py.

Run as a script (one process) or through ``run_workers`` (two)::

    python tests/checkpoint_workers.py RUN_DIR MOMENT

Each saves ``RUN_DIR/ckpt`` once (the *first* checkpoint), takes a step, and saves over it (the
*second*), dying with SIGKILL at ``MOMENT`` of the second save:

- ``object``: while the files are written (a registered object's ``state_dict`` kills);
- ``write``: at the process's first file write of the save (what a rank other than 0 writes);
- ``rename-<n>``: at the n-th ``os.rename`` of the save (the commit), with the atomic exchange
  turned off, so the fallback's two renames and their recovery are what is tested;
- ``commit``: right after the commit, before the processes meet again;
- ``exchange-<n>`` / ``exchanged-<n>``: as the process enters (``exchange``) or right after it
  leaves (``exchanged``) the n-th agreement of the background save's commit, on the worker
  thread: ``1`` the agreement that every process wrote its files (before the manifest and the
  commit), ``2`` the agreement on the commit (after it). A process still in the agreement
  meets a dead peer there;
- ``timed``: not at all from inside: the script writes ``RUN_DIR/saving`` just before the save,
  and the test kills it after a delay of its choosing;
- ``none``: no kill.

With ``async`` (a third argument, or ``async_saves=True``) the saves go through
accelkw-async-checkpoint: ``write`` and ``commit`` then kill the background thread's save.

Before each save the weights it will hold are written to ``RUN_DIR/first.pt`` and
``RUN_DIR/second.pt`` (rank 0), so the test can tell which checkpoint survived.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Tripwire:
    """A registered object whose ``state_dict`` kills the process once armed."""

    def __init__(self) -> None:
        self.armed = False
        self.count = 0

    def state_dict(self) -> dict[str, int]:
        if self.armed:
            _kill()
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.count = state["count"]


def _arm_renames(n: int) -> None:
    from accelkw_core.runtime.checkpoints import atomic_folders

    atomic_folders._exchange = lambda a, b: False  # type: ignore[attr-defined]
    real = os.rename
    seen = [0]

    def rename(src: Any, dst: Any) -> None:
        seen[0] += 1
        if seen[0] == n:
            _kill()
        real(src, dst)

    os.rename = rename  # type: ignore[assignment]


def _arm_write() -> None:
    from accelkw_core.runtime.checkpoints import folder_io

    # CheckpointWriter.finish syncs the files (folder_io._sync_all) once every file is written
    # and hashed: killed there, the largest file cut short, as a crash before the disk had it
    # all leaves it.
    def sync_all(folder: Path, *args: Any) -> Any:
        written = [p for p in folder.rglob("*") if p.is_file()]
        largest = max(written, key=lambda p: p.stat().st_size)
        largest.write_bytes(largest.read_bytes()[: largest.stat().st_size // 2])
        _kill()

    folder_io._sync_all = sync_all  # type: ignore[attr-defined]

    from accelkw_core.runtime.checkpoints import parts

    # A process other than the committing one writes only its own part: killed as it
    # records it (its files written, the record half written, nothing published).
    def write_durably(path: Path, data: Any) -> Any:
        path.write_bytes(bytes(data)[: len(data) // 2])
        _kill()

    parts.write_durably = write_durably  # type: ignore[attr-defined]


def _arm_commit() -> None:
    from accelkw_core.runtime.checkpoints import atomic_folders

    real = atomic_folders.commit_folder

    def commit(temporary: Path, final: Path, *rest: Any) -> None:
        real(temporary, final, *rest)
        _kill()

    atomic_folders.commit_folder = commit


def _arm_exchange(moment: str) -> None:
    import threading

    from accelkw_core.runtime.checkpoints import agreement, save

    when, n = moment.split("-")
    # The commit's agreements: the files' (save.exchange, in _gather_entries), then the
    # commit's (agreement.exchange, through failures). Only the worker thread's are counted:
    # the caller's thread agrees on the staging with the same functions.
    seen = [0]

    def arm(real: Any) -> Any:
        def exchange(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is threading.main_thread():
                return real(*args, **kwargs)
            seen[0] += 1
            if seen[0] == int(n) and when == "exchange":
                _kill()
            out = real(*args, **kwargs)
            if seen[0] == int(n):
                _kill()
            return out

        return exchange

    save.exchange = arm(save.exchange)
    agreement.exchange = arm(agreement.exchange)


def build(rank: int, world_size: int, async_saves: bool = False) -> tuple[Any, ...]:
    """An Accelerator (a gloo group for two processes), a model of ~4 MB, Adam, a Tripwire."""
    import torch

    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry, plugin_of
    from tests.runtime_helpers import GroupKwargs, SyncKwargs

    plugins = [plugin_of(GroupKwargs, SyncKwargs)]
    handlers = []
    if async_saves:
        from accelkw_async_checkpoint import AsyncCheckpointKwargs

        plugins.append(plugin_of(AsyncCheckpointKwargs))
        handlers.append(AsyncCheckpointKwargs())
    acc = Accelerator(cpu=True, registry=isolated_registry(plugins), kwargs_handlers=handlers)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = acc.prepare(model, optimizer)
    tripwire = Tripwire()
    acc.register_for_checkpointing(tripwire)
    return acc, model, optimizer, tripwire


def _step(acc: Any, model: Any, optimizer: Any) -> None:
    import torch

    loss = model(torch.randn(8, 256)).pow(2).mean()
    acc.backward(loss)
    optimizer.step()
    optimizer.zero_grad()


def run(rank: int, run_dir: str, moment: str, victim: int = 0, async_saves: bool = False) -> None:
    """Save, step, save again and die at ``moment`` of the second save (on rank ``victim``)."""
    import torch

    out = Path(run_dir)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    acc, model, optimizer, tripwire = build(rank, world_size, async_saves)
    _step(acc, model, optimizer)
    if rank == 0:
        torch.save(acc.get_state_dict(model), out / "first.pt")
    acc.save_state(out / "ckpt")
    _step(acc, model, optimizer)
    if rank == 0:
        torch.save(acc.get_state_dict(model), out / "second.pt")
    acc.wait_for_everyone()
    if rank == victim:
        if moment == "object":
            tripwire.armed = True
        elif moment.startswith("rename-"):
            _arm_renames(int(moment.split("-")[1]))
        elif moment == "write":
            _arm_write()
        elif moment == "commit":
            _arm_commit()
        elif moment.startswith("exchange"):
            _arm_exchange(moment)
        elif moment == "timed":
            (out / "saving").write_text("now")
    acc.save_state(out / "ckpt")
    if async_saves:  # training goes on while the thread writes: what it writes must not change
        _step(acc, model, optimizer)
    acc.end_training()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    run(0, sys.argv[1], sys.argv[2], async_saves=sys.argv[3:] == ["async"])


class Steps:
    """The number of optimizer steps taken, saved with the run."""

    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict[str, int]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.n = state["n"]


def _trained_on(acc: Any, model: Any, optimizer: Any, x: Any) -> list[float]:
    """One optimizer step on the batch ``x``; the batch, as plain floats."""
    loss = model(x).pow(2).mean()
    acc.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    return list(x.flatten().tolist())


def shuffled_run(rank: int, folder: str, stop_at: int | None, resume: bool) -> dict[str, Any]:
    """Two epochs over a shuffled loader, as a resume recipe writes them.

    ``stop_at``: save after that many steps and stop. ``resume``: load the checkpoint first,
    then skip the batches of the current epoch that were already done. Returns the batches
    seen after the start and the final weights.
    """
    import torch

    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry, plugin_of
    from tests.runtime_helpers import GroupKwargs, SyncKwargs

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    acc = Accelerator(cpu=True, registry=isolated_registry([plugin_of(GroupKwargs, SyncKwargs)]))
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.arange(24, dtype=torch.float32).unsqueeze(1))
    # One process: the user's generator; two: the one prepare gives (drawn from torch's).
    generator = torch.Generator().manual_seed(5) if world_size == 1 else None
    loader = torch.utils.data.DataLoader(data, batch_size=2, shuffle=True, generator=generator)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    steps = Steps()
    acc.register_for_checkpointing(steps)
    if resume:
        acc.load_state(Path(folder) / "ckpt")
    start_epoch, skip = divmod(steps.n, len(loader))
    seen: list[list[float]] = []
    for _ in range(start_epoch, 2):
        for i, (x,) in enumerate(loader):
            if skip and i < skip:
                continue
            seen.append(_trained_on(acc, model, optimizer, x))
            steps.n += 1
            if steps.n == stop_at:
                acc.save_state(Path(folder) / "ckpt")
                acc.end_training()
                return {"seen": seen, "weights": None}
        skip = 0
    # Plain lists of floats (exact for float32): tensors would not outlive a worker process.
    weights = [p.detach().flatten().tolist() for p in acc.unwrap_model(model).parameters()]
    acc.end_training()
    return {"seen": seen, "weights": weights}


def small_model() -> Any:
    """The model the checkpoint-moving tests share (both frameworks, one and two processes)."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


class Refuses:
    """A registered object whose ``load_state_dict`` raises once ``armed`` (a changed class)."""

    def __init__(self) -> None:
        self.armed = False
        self.n = 0

    def state_dict(self) -> dict[str, int]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if self.armed:
            raise KeyError("lr_lambdas")
        self.n = state["n"]


def _plain(model: Any) -> dict[str, list[float]]:
    return {k: v.flatten().tolist() for k, v in model.state_dict().items()}


def moves(rank: int, run_dir: str) -> dict[str, Any]:
    """Two processes over checkpoints of one: load them, save one, refuse one, fail a commit.

    ``run_dir`` holds ``one`` (accelkw, one process), ``accel`` (Accelerate, one process) and
    ``legacy`` (``one`` with the ``module.`` key names accelkw 0.2 saved on several processes).
    Returns the weights after each load, the save's weights, and what the faults raised.
    """
    import warnings

    import torch

    from accelkw_core import Accelerator, CheckpointError
    from accelkw_core.runtime.checkpoints import atomic_folders
    from accelkw_core.testing import isolated_registry, plugin_of
    from tests.runtime_helpers import GroupKwargs, SyncKwargs

    out = Path(run_dir)
    acc = Accelerator(cpu=True, registry=isolated_registry([plugin_of(GroupKwargs, SyncKwargs)]))
    torch.manual_seed(7)
    model = small_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    inner = acc.unwrap_model(model)
    found: dict[str, Any] = {"wrapped": type(model).__name__}
    for name in ("one", "accel", "legacy"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            acc.load_state(out / name)
        found[name] = _plain(inner)
        found[f"{name}-warnings"] = [str(w.message) for w in caught]
    refuses = Refuses()
    acc.register_for_checkpointing(refuses)
    loss = model(torch.randn(3, 4)).pow(2).mean()
    acc.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    refuses.n = 5
    acc.save_state(out / "two")
    found["two"] = _plain(inner)
    # A load rank 1 cannot apply: both processes raise, and both go back.
    loss = model(torch.randn(3, 4)).pow(2).mean()
    acc.backward(loss)
    optimizer.step()
    before = (_plain(inner), repr(optimizer.state_dict()))
    refuses.armed = rank == 1
    try:
        acc.load_state(out / "two")
        found["refused"] = ""
    except CheckpointError as exc:
        found["refused"] = str(exc)
    found["unchanged"] = before == (_plain(inner), repr(optimizer.state_dict()))
    refuses.armed = False
    # A commit that fails on the committing process: it raises; the others, whose own parts
    # wait for a commit that does not come, do not (none waits for another).
    real = atomic_folders.commit_folder

    def full(temporary: Path, final: Path, *rest: Any) -> None:
        raise OSError(28, "No space left on device")

    if rank == 0:
        atomic_folders.commit_folder = full
    try:
        acc.save_state(out / "two")
        found["commit"] = ""
    except CheckpointError as exc:
        found["commit"] = str(exc)
    finally:
        atomic_folders.commit_folder = real
    acc.end_training()
    return found


def resume_chain(rank: int, folder: str, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each config, an uninterrupted run and a chain of runs each resumed from the last.

    A config gives ``generator`` (the user's ``DataLoader(generator=...)``), ``seedable``
    (``use_seedable_sampler``) and ``stops`` (the steps after which a run saves and ends; the
    run after the last stop finishes). Each run starts as a fresh process would (seeded, new
    objects prepared); a resumed one loads the checkpoint, then skips the batches of the
    current pass already done with ``skip_first_batches``. The model has dropout. Returns,
    per config, the batches each run saw and the final weights of both.
    """
    import torch

    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry, plugin_of
    from accelkw_core.utils import DataLoaderConfiguration
    from tests.runtime_helpers import GroupKwargs, SyncKwargs

    results = []
    epochs = 3
    # One Accelerator (one process group) for every config: free_memory() between runs.
    acc = Accelerator(
        cpu=True,
        registry=isolated_registry([plugin_of(GroupKwargs, SyncKwargs)]),
        dataloader_config=DataLoaderConfiguration(),
    )
    ckpt = Path(folder) / "ckpt"
    for config in configs:
        acc.dataloader_config.use_seedable_sampler = config["seedable"]

        def run(
            stop_at: int | None, resume: bool, config: dict[str, Any] = config
        ) -> tuple[list[list[float]], Any]:
            acc.free_memory()
            torch.manual_seed(0)
            # Small inputs (eighths, exact in float32) keep the training finite.
            data = torch.utils.data.TensorDataset(
                torch.arange(24, dtype=torch.float32).unsqueeze(1) / 8
            )
            generator = torch.Generator().manual_seed(5) if config["generator"] else None
            loader = torch.utils.data.DataLoader(
                data, batch_size=2, shuffle=True, generator=generator
            )
            model = torch.nn.Sequential(
                torch.nn.Linear(1, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)
            )
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            model, optimizer, loader = acc.prepare(model, optimizer, loader)
            steps = Steps()
            acc.register_for_checkpointing(steps)
            if resume:
                acc.load_state(ckpt)
            start, skip = divmod(steps.n, len(loader))
            seen: list[list[float]] = []
            for _ in range(start, epochs):
                active = acc.skip_first_batches(loader, skip) if skip else loader
                for (x,) in active:
                    seen.append(_trained_on(acc, model, optimizer, x))
                    steps.n += 1
                    if steps.n == stop_at:
                        acc.save_state(ckpt)
                        return seen, None
                skip = 0
            return seen, _plain(acc.unwrap_model(model))

        whole, weights = run(None, False)
        chain: list[list[list[float]]] = []
        final = None
        for i, stop in enumerate([*config["stops"], None]):
            seen, final = run(stop, i > 0)
            chain.append(seen)
        results.append({"whole": whole, "weights": weights, "chain": chain, "final": final})
    acc.end_training()
    return results


def async_resume(rank: int, folder: str, resume: bool) -> list[float]:
    """8 steps of the ``build`` run with asynchronous saves: saving at step 4 and going on, or
    (``resume``) loading that checkpoint and doing steps 5 to 8; the final weights, flattened."""
    import torch

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    acc, model, optimizer, _tripwire = build(rank, world_size, async_saves=True)
    torch.manual_seed(100 + rank)
    start = 0
    if resume:
        acc.load_state(Path(folder))
        start = 4
    for i in range(start, 8):
        _step(acc, model, optimizer)
        if not resume and i + 1 == 4:
            acc.save_state(Path(folder))
    acc.end_training()
    return [float(x) for p in model.parameters() for x in p.detach().flatten()[:64]]


def fsdp_async_run(seed: int, state_dict_type: str = "SHARDED_STATE_DICT") -> tuple[Any, Any, Any]:
    """FSDP2 (sharded state dicts unless said) with asynchronous saves: the Accelerator, and
    the model and AdamW of :func:`fsdp_model` prepared."""
    import accelkw_async_checkpoint.plugin
    import accelkw_ddp.plugin
    import accelkw_fsdp.plugin
    import accelkw_process_group.plugin
    from accelkw_async_checkpoint import AsyncCheckpointKwargs
    from accelkw_fsdp import FullyShardedDataParallelPlugin

    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry

    registry = isolated_registry(
        [
            accelkw_process_group.plugin,
            accelkw_ddp.plugin,
            accelkw_fsdp.plugin,
            accelkw_async_checkpoint.plugin,
        ]
    )
    acc = Accelerator(
        cpu=True,
        registry=registry,
        kwargs_handlers=[AsyncCheckpointKwargs()],
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type=state_dict_type),
    )
    model, optimizer = acc.prepare(*fsdp_model(seed))
    return acc, model, optimizer


def fsdp_model(seed: int) -> tuple[Any, Any]:
    """A small MLP seeded with ``seed`` and its AdamW, not prepared."""
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=0.05)


def _fsdp_steps(acc: Any, model: Any, optimizer: Any, rank: int, first: int) -> None:
    """Three AdamW steps, each on this rank's half of a batch drawn from the step's number."""
    import torch

    for step in range(first, first + 3):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1000 + step))
        acc.backward(model(x[rank * 4 : rank * 4 + 4]).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()


def _fsdp_weights(model: Any) -> dict[str, list[float]]:
    """The whole weights, on every rank (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
    full = get_model_state_dict(model, options=options)
    return {k: v.flatten().tolist() for k, v in full.items()}


def fsdp_async_killed(rank: int, run_dir: str, victim: int) -> None:
    """Save (the *first* checkpoint), step, save again and die (``victim``) inside the second
    save's DCP writes, in the background: the model's shards written by ``async_save``, the
    optimizer's not yet."""
    import json
    import threading

    from accelkw_fsdp._checkpoint import FSDPCheckpoint

    out = Path(run_dir)
    acc, model, optimizer = fsdp_async_run(0)
    _fsdp_steps(acc, model, optimizer, rank, 0)
    weights = _fsdp_weights(model)
    if rank == 0:
        (out / "first.json").write_text(json.dumps(weights))
    acc.save_state(out / "ckpt")
    acc.wait_for_checkpoints()
    _fsdp_steps(acc, model, optimizer, rank, 3)
    if rank == victim:
        real = FSDPCheckpoint._record_share

        def record_share(writer: Any, name: str) -> None:
            if threading.current_thread() is not threading.main_thread():
                _kill()  # on the commit's thread, once DCP wrote pytorch_model_fsdp_0
            real(writer, name)

        FSDPCheckpoint._record_share = staticmethod(record_share)  # type: ignore[method-assign]
    acc.save_state(out / "ckpt")
    _fsdp_steps(acc, model, optimizer, rank, 6)  # training goes on, until the peer is gone
    acc.end_training()


def fsdp_async_resume(rank: int, run_dir: str) -> dict[str, Any]:
    """Load what ``fsdp_async_killed`` left; step, save in the background and train on while it
    is written; then a fresh model loads that save and takes the same steps.

    Returns whether the loaded weights were the first checkpoint's, the final weights of the
    run and of the resumed one, the saved folder's files, and how many DCP writes went through
    ``async_save``.
    """
    import json

    from accelkw_fsdp import _checkpoint

    out = Path(run_dir)
    calls = [0]
    real = _checkpoint.save_later

    def save_later(*args: Any) -> None:
        calls[0] += 1
        real(*args)

    _checkpoint.save_later = save_later  # type: ignore[assignment]
    acc, model, optimizer = fsdp_async_run(7)
    acc.load_state(out / "ckpt")
    first = json.loads((out / "first.json").read_text())
    survived = _fsdp_weights(model) == first
    _fsdp_steps(acc, model, optimizer, rank, 3)
    acc.save_state(out / "second")  # returns once staged: the steps below change nothing in it
    _fsdp_steps(acc, model, optimizer, rank, 6)
    whole = _fsdp_weights(model)
    acc.wait_for_checkpoints()
    files = sorted(
        str(p.relative_to(out / "second")) for p in (out / "second").rglob("*") if p.is_file()
    )
    acc.free_memory()
    model, optimizer = acc.prepare(*fsdp_model(9))
    acc.load_state(out / "second")
    _fsdp_steps(acc, model, optimizer, rank, 6)
    resumed = _fsdp_weights(model)
    acc.end_training()
    return {
        "survived": survived,
        "whole": whole,
        "resumed": resumed,
        "files": files,
        "async_saves": calls[0],
    }

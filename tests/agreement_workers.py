"""Two processes, one of them failing, for tests/test_checkpoint_agreement.py.

``one_outcome`` runs on each rank (through ``run_workers``) and injects a failure on one rank at
each point where a rank could leave a checkpoint call before the other: a checkpoint that
cannot be pruned, a load the other rank cannot apply in its last stage, background commits
that fail with ``max_pending=2``, their failures raised by ``save_state``, ``load_state``,
``wait_for_everyone`` and ``end_training``, and a background prune that fails. The faults are
real: folders made read-only (as ``nobody`` when run as root, whose permissions do not bind)
and a model that refuses its weights. Each rank returns what it saw; the test compares them.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

NOBODY = 65534


def _as_nobody(acc: Any, model: Any, out: Path) -> None:
    """Drop to ``nobody`` when root, so that a read-only folder is read-only to this process.

    First what a save, a load and a background save import is imported, as root (``nobody``
    may not read root's Python).
    """
    if os.geteuid() != 0:
        return
    import concurrent.futures  # noqa: F401  (the background saves' thread pool)

    import accelkw_async_checkpoint  # noqa: F401

    import accelkw_core.runtime.checkpoints.staging  # noqa: F401

    acc.save_state(out / "warm")
    acc.load_state(out / "warm")
    acc.wait_for_everyone()
    os.setegid(NOBODY)
    os.seteuid(NOBODY)


def _model() -> Any:
    import torch

    class Refusing(torch.nn.Linear):
        """A model whose ``load_state_dict`` raises once ``armed``, having changed nothing."""

        armed = False

        def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
            if self.armed:
                raise RuntimeError("refused on this rank")
            return super().load_state_dict(*args, **kwargs)

    torch.manual_seed(0)
    return Refusing(4, 2)


def _accelerator(async_saves: bool) -> Any:
    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry, plugin_of
    from tests.runtime_helpers import GroupKwargs

    plugins = [plugin_of(GroupKwargs)]
    handlers = []
    if async_saves:
        from accelkw_async_checkpoint import AsyncCheckpointKwargs

        plugins.append(plugin_of(AsyncCheckpointKwargs))
        handlers.append(AsyncCheckpointKwargs(max_pending=2))
    return Accelerator(cpu=True, registry=isolated_registry(plugins), kwargs_handlers=handlers)


def _step(acc: Any, model: Any, optimizer: Any) -> None:
    import torch

    acc.backward(model(torch.randn(3, 4)).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()


def _weights(model: Any) -> list[float]:
    return [float(x) for p in model.parameters() for x in p.detach().flatten()]


def _outcome(call: Any) -> str:
    """``"ok"``, or the one line of the ``CheckpointError`` ``call`` raised."""
    from accelkw_core import CheckpointError

    try:
        call()
    except CheckpointError as exc:
        return f"error: {exc}"
    return "ok"


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _prune(acc: Any, rank: int, project: Path, found: dict[str, Any], key: str) -> None:
    """total_limit=1; the oldest checkpoint made unremovable on rank 0 (the one that prunes)."""
    from accelkw_core import ProjectConfiguration

    acc.project_configuration = ProjectConfiguration(
        project_dir=str(project), automatic_checkpoint_naming=True, total_limit=1
    )
    checkpoints = project / "checkpoints"
    acc.save_state()
    acc.wait_for_everyone()
    if rank == 0:
        os.chmod(checkpoints / "checkpoint_0", 0o555)  # its files cannot be removed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        saved = acc.save_state()
        found[f"{key}-outcome"] = _outcome(acc.wait_for_everyone)
    found[f"{key}-saved"] = saved.name
    found[f"{key}-warnings"] = [str(w.message) for w in caught]
    found[f"{key}-left"] = _listing(checkpoints)
    acc.wait_for_everyone()
    if rank == 0:
        os.chmod(checkpoints / "checkpoint_0", 0o755)
    acc.save_state()  # the next save tries again
    acc.wait_for_everyone()
    found[f"{key}-after-retry"] = _listing(checkpoints)


def _sync_part(rank: int, out: Path, found: dict[str, Any]) -> None:
    import torch

    from accelkw_core import ProjectConfiguration

    acc = _accelerator(async_saves=False)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    _step(acc, model, optimizer)
    _as_nobody(acc, model, out)
    _prune(acc, rank, out / "sync", found, "prune")
    acc.project_configuration = ProjectConfiguration()
    # A load whose last stage (the checked weights) rank 1 cannot apply: both raise; every
    # other object is loaded on both, and the weights on rank 0 (no copy is kept to go back).
    acc.save_state(out / "weights")
    saved = (_weights(model), repr(optimizer.state_dict()))
    _step(acc, model, optimizer)
    before = _weights(model)
    acc.unwrap_model(model).armed = rank == 1
    found["load-outcome"] = _outcome(lambda: acc.load_state(out / "weights"))
    found["load-optimizer-loaded"] = repr(optimizer.state_dict()) == saved[1]
    found["load-weights"] = (
        "saved" if _weights(model) == saved[0] else "before" if _weights(model) == before else "?"
    )
    acc.unwrap_model(model).armed = False
    acc.end_training()


def _fail_commit(rank: int, folder: Path) -> Any:
    """Rank 0's background commit of ``folder`` finds its parent read-only.

    A real ``EACCES`` from the rename into place, on the committing rank only; undone by
    calling what this returns, once the save was waited for.
    """
    from accelkw_core.runtime.checkpoints import atomic_folders

    real = atomic_folders.commit_folder

    def commit_folder(temporary: Path, final: Path, *rest: Any) -> None:
        if final == folder:
            os.chmod(final.parent, 0o555)
        real(temporary, final, *rest)

    def undo() -> None:
        atomic_folders.commit_folder = real  # type: ignore[assignment]
        if rank == 0:
            os.chmod(folder.parent, 0o755)

    if rank == 0:
        atomic_folders.commit_folder = commit_folder  # type: ignore[assignment]
    return undo


def _async_part(rank: int, out: Path, found: dict[str, Any], manifest: str) -> None:
    import torch

    from accelkw_core import ProjectConfiguration

    acc = _accelerator(async_saves=True)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    _step(acc, model, optimizer)
    _as_nobody(acc, model, out)
    for name in ("a", "b", "c", "d", "e", "f"):
        (out / name).mkdir(exist_ok=True)
    acc.wait_for_everyone()
    # max_pending=2: save a fails in the background on rank 0, which commits it alone (no
    # other rank waits for it). Rank 0 sees it done long before its second save: it raises it
    # at the third save, the first that must wait for it.
    undo = _fail_commit(rank, out / "a" / "ckpt")
    acc.save_state(out / "a" / "ckpt")
    if rank == 0:
        time.sleep(1.0)  # the failure is long known here: it must not be raised early
    calls = []
    for name in ("b", "c"):
        outcome = _outcome(lambda name=name: acc.save_state(out / name / "ckpt"))
        calls.append(f"{name}: {outcome}")
    found["pending-calls"] = calls
    acc.wait_for_everyone()
    undo()
    # A failed background commit raised by each of the other calls that wait for saves.
    for name, call in (
        ("d", acc.wait_for_everyone),
        ("e", lambda: acc.load_state(out / "b" / "ckpt")),
    ):
        undo = _fail_commit(rank, out / name / "ckpt")
        acc.save_state(out / name / "ckpt")
        found[f"raised-by-{name}"] = _outcome(call)
        undo()
        acc.wait_for_everyone()
    _prune(acc, rank, out / "async", found, "async-prune")
    acc.project_configuration = ProjectConfiguration()
    undo = _fail_commit(rank, out / "f" / "ckpt")
    acc.save_state(out / "f" / "ckpt")
    found["raised-by-end_training"] = _outcome(acc.end_training)
    undo()
    found["saved"] = {  # which of the saves were committed
        name: (out / name / "ckpt" / manifest).is_file() for name in "abcdef"
    }


def one_outcome(rank: int, run_dir: str, async_saves: bool) -> dict[str, Any]:
    """The injected failures of the module's docstring, synchronous or background saves
    (one process group per launch); what this rank saw."""
    from accelkw_core.runtime.checkpoints.manifest import MANIFEST

    out = Path(run_dir)
    found: dict[str, Any] = {}
    if async_saves:
        _async_part(rank, out, found, MANIFEST)
    else:
        _sync_part(rank, out, found)
    return found

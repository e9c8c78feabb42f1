"""Every rank gets one outcome, and an error keeps its cause (issue 32, items 3 and 4).

On two processes over gloo (one launch, ``tests/agreement_workers.py``), a failure injected on
one rank at each point where a rank could leave a checkpoint call alone: a checkpoint rank 0
cannot prune, a load rank 1 cannot apply in its last stage, background commits failing on rank
0 with ``max_pending=2`` and raised by ``save_state``, ``wait_for_everyone``, ``load_state`` and
``end_training``, a background prune that fails. Real faults: read-only folders (as ``nobody``
when root) and a model refusing its weights. On one process: the cause of a failed apply, a
restore that fails too, Ctrl-C while waiting for a background save and during ``end_training``,
a disk already full when a save starts (a real ``ENOSPC``, from ``/dev/full``).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from accelkw_async_checkpoint import AsyncCheckpointKwargs

from accelkw_core import Accelerator, CheckpointError
from accelkw_core.plugin import TEARDOWN, KwargsHandler, Plan
from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.runtime.checkpoints.lock import lock_of
from accelkw_core.runtime.checkpoints.manifest import read_manifest
from accelkw_core.testing import isolated_registry, plugin_of, run_workers
from tests import agreement_workers as workers
from tests.checkpoint_workers import Refuses
from tests.runtime_helpers import ScaleKwargs
from tests.test_checkpoints import make, same, snapshot, step, trained

NOBODY = 65534


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A folder the workers (``nobody`` when the tests run as root) can write in.

    Outside pytest's own temporary folders: every pytest session of the machine's user makes
    their root private again as it starts, which would lock ``nobody`` out mid-test.
    """
    base = Path(tempfile.mkdtemp(prefix="accelkw-agreement-"))
    place = base / "run"
    place.mkdir()
    if os.geteuid() == 0:
        os.chmod(base, 0o711)  # others may pass through
        os.chown(place, NOBODY, NOBODY)
    try:
        yield place
    finally:
        shutil.rmtree(base)


def test_a_failure_on_one_rank_gives_every_rank_the_same_outcome_with_no_hang(
    run_dir: Path,
) -> None:
    sync = run_workers(
        workers.one_outcome,
        2,
        args=(str(run_dir), False),
        timeout=120,
        env={"OMP_NUM_THREADS": "1"},
    )
    background = run_workers(
        workers.one_outcome, 2, args=(str(run_dir), True), timeout=120, env={"OMP_NUM_THREADS": "1"}
    )
    r0, r1 = ({**s, **b} for s, b in zip(sync, background, strict=True))
    # A checkpoint rank 0 cannot prune: the new one is saved on both, one warning names the
    # old one, and the next save removes it.
    for r in (r0, r1):
        assert r["prune-outcome"] == "ok" and r["prune-saved"] == "checkpoint_1"
        assert r["prune-left"] == ["checkpoint_0", "checkpoint_1"]
        assert r["prune-after-retry"] == ["checkpoint_2"]
        assert r["async-prune-outcome"] == "ok" and r["async-prune-saved"] == "checkpoint_1"
        assert r["async-prune-after-retry"] == ["checkpoint_2"]
    for key in ("prune-warnings", "async-prune-warnings"):
        (warning,) = [w for w in r0[key] if "could not remove" in w]
        assert "checkpoint_0" in warning and "tried again at the next save" in warning
        assert not [w for w in r1[key] if "could not remove" in w]
    # A load rank 1 cannot apply in its last stage (the weights): both raise, with one
    # "checkpoint:" prefix; everything before the weights is loaded on both, the weights on
    # rank 0 (the last stage keeps no copy: docs/checkpoints.md says so).
    assert "refused on this rank" in r1["load-outcome"]
    assert "process 1" in r0["load-outcome"] and "refused on this rank" in r0["load-outcome"]
    assert r0["load-outcome"].count("checkpoint:") == 1
    assert "load a checkpoint again" in r1["load-outcome"]
    assert r0["load-optimizer-loaded"] and r1["load-optimizer-loaded"]
    assert (r0["load-weights"], r1["load-weights"]) == ("saved", "before")
    # max_pending=2: the failed commit of a (rank 0 commits it alone, replicated state) is
    # raised by rank 0's first save that waits for it; rank 1 had nothing to commit, and
    # never waits for rank 0 in save_state. The calls every process makes agree (below).
    b, c = r0["pending-calls"]
    assert b == "b: ok"
    assert c.startswith("c: error:") and "a/ckpt was not saved" in c
    assert r1["pending-calls"] == ["b: ok", "c: ok"]
    for r in (r0, r1):
        for name in ("d", "e"):
            assert f"{name}/ckpt was not saved" in r[f"raised-by-{name}"]
        assert "f/ckpt was not saved" in r["raised-by-end_training"]
        assert r["saved"] == {"a": False, "b": True, "c": False, "d": False, "e": False, "f": False}
    assert "Permission denied" in r0["raised-by-d"] and "process 0" in r1["raised-by-d"]


# -- errors keep their cause (one process) -----------------------------------------------------


def test_a_failed_apply_has_the_original_as_its_cause(tmp_path: Path) -> None:
    acc = make()
    objects = trained(acc)
    refuses = Refuses()
    acc.register_for_checkpointing(refuses)
    acc.save_state(tmp_path / "ckpt")
    refuses.armed = True
    with pytest.raises(CheckpointError) as caught:
        acc.load_state(tmp_path / "ckpt")
    assert "registered object 1 (Refuses)" in str(caught.value)
    assert isinstance(caught.value.__cause__, KeyError)
    assert "every object the load had changed was restored" in str(caught.value)
    del objects


@dataclass
class _Breaks:
    """A registered object that loads once, then refuses even its own old state back."""

    n: int = 0
    loads: int = 0

    def state_dict(self) -> dict[str, int]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.loads += 1
        if self.loads > 1:
            raise ValueError("the restore is refused too")
        self.n = state["n"]


def test_a_restore_that_fails_too_is_a_note_on_the_first_error(tmp_path: Path) -> None:
    acc = make()
    trained(acc)
    breaks, refuses = _Breaks(), Refuses()
    acc.register_for_checkpointing(breaks, refuses)
    acc.save_state(tmp_path / "ckpt")
    refuses.armed = True  # applied after breaks, which then refuses to go back
    with pytest.raises(CheckpointError) as caught:
        acc.load_state(tmp_path / "ckpt")
    error = caught.value
    assert "Refuses" in str(error) and isinstance(error.__cause__, KeyError)  # the first
    assert "could not be restored" in str(error) and "\n" not in str(error)
    assert any("the restore is refused too" in note for note in error.__notes__)


def test_a_disk_already_full_when_a_save_starts_is_the_one_line_full_disk_error(
    tmp_path: Path,
) -> None:
    # A real ENOSPC: the lock, the first file a save writes, lands on /dev/full.
    acc = make()
    objects = trained(acc)
    acc.save_state(tmp_path / "ckpt")
    kept = read_manifest(tmp_path / "ckpt")
    lock_of(tmp_path / "ckpt").symlink_to("/dev/full")
    step(acc, *objects[:3])
    with pytest.raises(CheckpointError) as caught:
        acc.save_state(tmp_path / "ckpt")
    message = str(caught.value)
    assert "\n" not in message and message.endswith(
        "cannot be written: no space left on the device"
    )
    cause = caught.value.__cause__
    assert isinstance(cause, OSError) and cause.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # nothing left, lock included
    assert read_manifest(tmp_path / "ckpt") == kept
    acc.save_state(tmp_path / "ckpt")  # room again


# -- Ctrl-C while waiting for a background save ------------------------------------------------


@dataclass
class _TornDown(KwargsHandler):
    """A handler whose teardown records that it ran."""

    name: ClassVar[str] = "torn_down"
    ran: list[str] = field(default_factory=list)

    def plan(self, state: Any) -> Plan:
        plan = Plan(self.name)
        plan.contribute(TEARDOWN, lambda: self.ran.append("teardown"), "records its teardown")
        return plan


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Background writes held at their first file until ``release`` is set; ``reached`` says
    one is held. SIGINT raises KeyboardInterrupt in this thread for the test's length."""
    reached, release = threading.Event(), threading.Event()
    real = atomic_folders.open_new

    def open_new(path: Path) -> Any:
        reached.set()
        release.wait(timeout=60)
        return real(path)

    monkeypatch.setattr(atomic_folders, "open_new", open_new)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield reached, release
    finally:
        release.set()
        signal.signal(signal.SIGINT, previous)


def _interrupt_soon(release: threading.Event | None = None) -> threading.Thread:
    """Ctrl-C for this (the main) thread in a moment, then let the held write go on."""
    main = threading.main_thread().ident
    assert main is not None

    def later() -> None:
        threading.Event().wait(0.3)
        signal.pthread_kill(main, signal.SIGINT)
        if release is not None:
            threading.Event().wait(0.3)
            release.set()

    thread = threading.Thread(target=later)
    thread.start()
    return thread


def _async(torn: _TornDown | None = None) -> Accelerator:
    handlers: list[KwargsHandler] = [AsyncCheckpointKwargs()]
    plugins = [plugin_of(ScaleKwargs, AsyncCheckpointKwargs, _TornDown)]
    if torn is not None:
        handlers.append(torn)
    return Accelerator(cpu=True, registry=isolated_registry(plugins), kwargs_handlers=handlers)


def test_ctrl_c_while_waiting_for_a_background_save_is_raised_and_the_save_stays_tracked(
    tmp_path: Path, gated: tuple[threading.Event, threading.Event]
) -> None:
    reached, release = gated
    acc = _async()
    objects = trained(acc)
    saved = snapshot(*objects)
    acc.save_state(tmp_path / "ckpt")
    assert reached.wait(timeout=60)
    thread = _interrupt_soon()
    with pytest.raises(KeyboardInterrupt):
        acc.wait_for_checkpoints()
    thread.join()
    release.set()
    acc.wait_for_checkpoints()  # still tracked: this waits for it, and it was committed
    assert read_manifest(tmp_path / "ckpt") is not None
    step(acc, *objects[:3])
    acc.load_state(tmp_path / "ckpt")
    assert same(saved, snapshot(*objects))
    acc.end_training()


def test_end_training_interrupted_still_runs_every_teardown(
    tmp_path: Path, gated: tuple[threading.Event, threading.Event]
) -> None:
    reached, release = gated
    torn = _TornDown()
    acc = _async(torn)
    trained(acc)
    acc.save_state(tmp_path / "ckpt")
    assert reached.wait(timeout=60)
    thread = _interrupt_soon(release)
    with pytest.raises(KeyboardInterrupt):
        acc.end_training()
    thread.join()
    assert torn.ran == ["teardown"]
    assert read_manifest(tmp_path / "ckpt") is not None  # the save finished in the teardown
    acc.end_training()  # once only
    assert torn.ran == ["teardown"]

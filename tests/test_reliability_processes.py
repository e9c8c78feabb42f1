"""Process failures in real gloo runs: a rank killed or stalled mid-training, and Ctrl-C.

Every run trains a small model with a collective each step (tests/reliability_workers.py); the
ranks write their pid, progress and error to JSON files, so the test can tell when the fault
happened, how each survivor stopped, and that no process is left.

The longest cases (3 processes through ``accelkw launch``, a stall without a supervisor,
SIGTERM) are marked ``slow``; run them with::

    python -m pytest tests/test_reliability_processes.py -m slow
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import accelkw_process_group  # noqa: F401  (integration: a broken install fails, never skips)
import pytest

from accelkw_core.testing import WorkerFailed, run_workers
from tests import reliability_workers

pytestmark = pytest.mark.multiprocess

WORKER = Path(__file__).resolve().parent / "reliability_workers.py"
# The process-group timeout of every run: short, so a stalled peer costs seconds.
TIMEOUT_S = 4.0
# Scheduling slack on a loaded 2-core machine: process exit, torchrun's monitor interval.
MARGIN_S = 4.0
# What gloo says when a peer dies (its socket closes) or does not answer in time.
PEER_FAILED = re.compile(
    r"Connection (reset|closed) by peer|Timed out waiting \d+ms|timed out", re.IGNORECASE
)


_LAUNCHES: list[Launch] = []


@pytest.fixture(autouse=True)
def _no_process_left(tmp_path: Path) -> Iterator[None]:
    # After the test's own checks, so a process that outlived its run fails the test first.
    yield
    while _LAUNCHES:
        _LAUNCHES.pop().close()
    kill_leftovers(tmp_path)


def read_reports(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in sorted(run_dir.glob("rank*.json"))}


def fault_time(run_dir: Path) -> float:
    return float(json.loads((run_dir / "fault.json").read_text())["time"])


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie awaiting its parent does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids: list[int], within: float) -> list[int]:
    """The pids still running after ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def kill_leftovers(run_dir: Path) -> None:
    """Kill every recorded worker and agent still running (none, when the run ended well)."""
    for report in read_reports(run_dir).values():
        for key in ("pid", "ppid"):
            pid = report.get(key)
            if pid and pid != os.getpid() and alive(pid):
                os.kill(pid, signal.SIGKILL)


class Launch:
    """``accelkw launch`` of the worker script in its own session, as a terminal would run it."""

    def __init__(self, run_dir: Path, nproc: int, mode: str, victim: int, step: int) -> None:
        self.run_dir = run_dir
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
        cmd = [sys.executable, "-m", "accelkw_core", "launch", "--nproc-per-node", str(nproc)]
        cmd += [str(WORKER), str(run_dir), mode, str(victim), str(step), str(TIMEOUT_S)]
        # A session of its own, so that a hung launch's whole process group can be killed.
        piped = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        self.proc = subprocess.Popen(cmd, env=env, cwd=run_dir, start_new_session=True, **piped)
        self.stderr = ""
        self.ended_at = 0.0
        _LAUNCHES.append(self)

    def wait(self, timeout: float = 120) -> int:
        """The launcher's exit status; a launcher still running after ``timeout`` is killed."""
        try:
            _, self.stderr = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise
        self.ended_at = time.time()
        return self.proc.returncode

    def close(self) -> None:
        """Kill whatever is left of the run (nothing, when it ended as it should)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        kill_leftovers(self.run_dir)


def worker_pids(reports: dict[int, dict[str, Any]]) -> list[int]:
    """Every worker and its torchrun agent."""
    return sorted({r["pid"] for r in reports.values()} | {r["ppid"] for r in reports.values()})


# -- through accelkw launch (torchrun supervises the workers) ----------------------------------


def launch_and_fail(tmp_path: Path, nproc: int, mode: str) -> tuple[Launch, int]:
    victim = nproc - 1
    launch = Launch(tmp_path, nproc, mode, victim=victim, step=3)
    code = launch.wait()
    return launch, code


def check_no_orphans(launch: Launch) -> dict[int, dict[str, Any]]:
    reports = read_reports(launch.run_dir)
    assert wait_gone(worker_pids(reports), within=2.0) == []
    return reports


@pytest.mark.parametrize("nproc", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_launch_with_a_rank_killed_mid_training_exits_nonzero(tmp_path: Path, nproc: int) -> None:
    launch, code = launch_and_fail(tmp_path, nproc, "kill")
    reports = check_no_orphans(launch)
    victim = reports[nproc - 1]
    # torchrun reports the killed rank by pid; the launch exits with the first failure's status:
    # 128 + SIGKILL, or 1 when a survivor's own error is observed in the same monitor pass.
    assert f"Signal 9 (SIGKILL) received by PID {victim['pid']}" in launch.stderr
    assert code in (1, 128 + signal.SIGKILL), launch.stderr[-2000:]
    assert launch.ended_at - fault_time(tmp_path) < TIMEOUT_S + MARGIN_S
    for rank, report in reports.items():
        assert report["step"] >= 2, report  # every rank was training when the fault came
        if report["error"] is not None:  # a survivor that saw the failure before torchrun's SIGTERM
            assert rank != nproc - 1
            assert PEER_FAILED.search(report["error"]), report["error"]
            assert report["initialized_after"] is False


@pytest.mark.parametrize("nproc", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_launch_with_a_stalled_rank_stops_after_the_group_timeout(
    tmp_path: Path, nproc: int
) -> None:
    launch, code = launch_and_fail(tmp_path, nproc, "stall")
    reports = check_no_orphans(launch)
    fault = fault_time(tmp_path)
    # The stalled rank is last, so the survivors' own error (exit 1) is the first failure.
    assert code == 1, launch.stderr[-2000:]
    assert f"Timed out waiting {int(TIMEOUT_S * 1000)}ms" in launch.stderr
    survivors = [r for rank, r in reports.items() if rank != nproc - 1]
    timed_out = [r for r in survivors if r["error"] is not None]
    assert timed_out, "no survivor recorded its error"
    first = min(r["error_time"] for r in timed_out)
    assert TIMEOUT_S - 1.0 < first - fault < TIMEOUT_S + MARGIN_S
    for report in timed_out:
        assert PEER_FAILED.search(report["error"]), report["error"]
        assert report["initialized_after"] is False
    assert launch.ended_at - fault < TIMEOUT_S + MARGIN_S + 2.0
    assert reports[nproc - 1]["error"] is None  # the stalled rank was stopped from outside


def wait_training(run_dir: Path, nproc: int, steps: int = 2, within: float = 90) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        reports = read_reports(run_dir)
        if len(reports) == nproc and min(r["step"] for r in reports.values()) >= steps:
            return
        time.sleep(0.1)
    raise AssertionError(f"the ranks did not start training: {read_reports(run_dir)}")


@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGINT, 130), pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)],
    ids=["ctrl-c", "sigterm"],
)
def test_interrupting_the_launcher_stops_every_worker(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    launch = Launch(tmp_path, 2, "spin", victim=0, step=0)
    wait_training(tmp_path, 2)
    sent = time.monotonic()
    # Ctrl-C in a terminal signals the foreground process group: the launcher's session.
    os.killpg(launch.proc.pid, sig)
    assert launch.wait(timeout=60) == code, launch.stderr[-2000:]
    assert time.monotonic() - sent < 15
    reports = read_reports(tmp_path)
    assert len(reports) == 2
    assert wait_gone(worker_pids(reports), within=2.0) == []
    assert f"Received {int(sig)} death signal, shutting down workers" in launch.stderr


# -- without a supervisor (each rank on its own, as on separate machines) -----------------------


def unsupervised(tmp_path: Path, nproc: int, mode: str) -> list[Any]:
    return run_workers(
        reliability_workers.train,
        nproc,
        args=(str(tmp_path), mode, nproc - 1, 3, TIMEOUT_S),
        timeout=90,
        allow_failures=True,
    )


@pytest.mark.parametrize(
    ("nproc", "mode"),
    [(3, "kill"), pytest.param(2, "stall", marks=pytest.mark.slow)],
)
def test_survivors_stop_on_their_own_with_an_error_naming_the_peer_failure(
    tmp_path: Path, nproc: int, mode: str
) -> None:
    results = unsupervised(tmp_path, nproc, mode)
    reports = read_reports(tmp_path)
    fault = fault_time(tmp_path)
    assert all(isinstance(r, WorkerFailed) for r in results)
    if mode == "kill":
        assert "killed by signal 9" in str(results[-1])
    for rank in range(nproc - 1):
        report = reports[rank]
        assert report["error"] is not None, f"rank {rank} did not stop: {report}"
        assert PEER_FAILED.search(report["error"]), report["error"]
        assert report["error_time"] - fault < TIMEOUT_S + MARGIN_S
        assert report["initialized_after"] is False  # the teardown destroyed the group
        assert "RuntimeError" in str(results[rank])
    assert wait_gone([r["pid"] for r in reports.values()], within=2.0) == []

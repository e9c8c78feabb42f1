"""The exit pause against the race it exists for, reproduced every time by real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from accelkw_core.testing import free_port

pytestmark = pytest.mark.multiprocess

WORKER = Path(__file__).with_name("exit_race_worker.py")
ABORT = "terminate called without an active exception"


def _launch(port: int, *flags: str) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), str(port), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]


def _finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"{process.args!r} did not exit within 120 s:\n{stderr}")
    return process.returncode, stderr


def test_a_run_ending_while_gloo_waits_for_the_gil_exits_cleanly_only_with_the_pause() -> None:
    # Both pairs at once: the spread of one launch is the test's cost.
    paused = _launch(free_port())
    unpaused = _launch(free_port(), "--without-pause")
    with_pause = [_finish(p) for p in paused]
    without_pause = [_finish(p) for p in unpaused]

    for rank, (code, stderr) in enumerate(with_pause):
        assert (code, ABORT in stderr) == (0, False), f"rank {rank} with the pause:\n{stderr}"
    # The control: the same run without the pause aborts, so the reproduction is live. Rank 0
    # is the rank the script makes deterministic (rank 1's handle may outlive its collective).
    # Python 3.14 parks such a thread instead of ending it (gh-87135): nothing to abort there.
    if sys.version_info >= (3, 14):
        return
    code, stderr = without_pause[0]
    assert code == -signal.SIGABRT, f"rank 0 without the pause exited {code}:\n{stderr}"
    assert ABORT in stderr

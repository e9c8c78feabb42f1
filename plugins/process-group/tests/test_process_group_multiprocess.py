"""InitProcessGroupKwargs in real two-process gloo groups (spawned by ``run_workers``)."""

from __future__ import annotations

import process_group_workers as workers
import pytest

from accelkw_core.testing import run_workers

pytestmark = pytest.mark.multiprocess

TIMEOUT_S = 5.0
# Scheduling slack on a loaded machine; the lower bound shows the timeout was not shortened.
MARGIN_S = 2.5


def test_an_explicit_timeout_bounds_a_collective_and_teardown_destroys_the_group() -> None:
    results = run_workers(workers.collective_timeout, 2, args=(TIMEOUT_S,), timeout=90)
    rank0 = results[0]
    assert rank0["error"] is not None, "the all_reduce should have failed"
    assert "timed out" in rank0["error"].lower()
    assert TIMEOUT_S - 1.0 < rank0["elapsed"] < TIMEOUT_S + MARGIN_S
    for result in results:
        assert result["backend"] == "gloo"
        assert result["teardown_failures"] == []
        assert result["initialised_after_teardown"] is False
        assert "destroyed the process group it created" in "\n".join(result["log"])
        initialised = [line for line in result["log"] if "initialise the process group" in line]
        assert len(initialised) == 1
        assert "timeout 5s (set explicitly)" in initialised[0]
        assert "backend 'gloo' (set explicitly)" in initialised[0]


def test_default_backend_falls_back_to_gloo_and_an_existing_group_is_reused() -> None:
    results = run_workers(workers.default_then_existing, 2, timeout=90)
    for rank, result in enumerate(results):
        assert result["backend"] == "gloo"
        assert result["sum"] == 3.0
        log = "\n".join(result["log"])
        assert "the default backend 'nccl' needs CUDA and this run is on CPU: using 'gloo'" in log
        assert f"initialise the process group: rank {rank} of 2" in log
        # The second handler met the group: it says which explicit settings it could not apply
        # (the backend matches, so it is not listed), registers no teardown, destroys nothing.
        second = "\n".join(result["second_log"])
        assert "using the existing process group (backend 'gloo', 2 processes)" in second
        assert (
            "could not apply to the existing process group: "
            "init_method='tcp://127.0.0.1:1', timeout=1800s" in second
        )
        assert "backend=" not in second
        assert result["second_teardowns"] == 0
        assert result["alive_after_second_teardown"] is True
        assert result["initialised_after_teardown"] is False


def test_a_second_accelerator_after_a_failed_apply_starts_its_group_every_time() -> None:
    # Each try: the group made, then undone when a later handler fails, then a new group on
    # the same rendezvous (MASTER_ADDR:MASTER_PORT). Three tries in one job.
    results = run_workers(workers.retries_after_failed_apply, 2, args=(3,), timeout=120)
    for tries in results:
        assert len(tries) == 3
        for found in tries:
            assert "fails_after_group" in found["failed"]
            assert found["group-after-failure"] is False
            assert found["sum"] == 3.0
            assert found["group-after-end"] is False


def test_a_destroyed_group_is_kept_until_the_next_group_is_created() -> None:
    # Its destructor joins gloo's worker threads: run where a user drops the last model holding
    # the group, it can wait forever for a worker that waits for the GIL (_exit_guard).
    results = run_workers(workers.retired_until_the_next_group, 2, timeout=90)
    for result in results:
        assert result == {
            "destroyed": True,
            "kept": True,
            "released": True,
            "sum": 3.0,
            "retired_after_second": 1,
        }

"""The Accelerator in real two-process gloo groups, with handlers written against the core."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime_helpers as rh

from accelkw_core.testing import run_workers

pytestmark = pytest.mark.multiprocess


def test_gather_reduce_barrier_prepare_and_teardown_across_two_processes() -> None:
    results = run_workers(rh.collectives_worker, 2, timeout=120)
    for rank, out in enumerate(results):
        assert out["gathered"] == [[0, 10], [1, 11]]
        assert out["scalar"] == [0.0, 1.0]
        assert out["nested"] == {"a": [0, 1], "b": [0, 2]}
        assert out["sum"] == [2.0, 1.0]
        assert out["mean"] == [2.0, 0.5]
        assert out["agreed"] == {
            "sum": 5.5,
            "mean": 2.75,
            "max": 4.0,
            "min": 1.5,
            "state_mean": 2.75,
            "flag": True,
        }
        assert out["wrapped"] == "DistributedDataParallel"
        assert out["unwrapped"] == "Linear"
        assert (out["process_index"], out["num_processes"]) == (rank, 2)
        assert out["is_main"] is (rank == 0)
        assert "process_group: gloo group" in out["log"]
        assert out["group_after_end"] is False  # end_training destroyed the group


def test_data_loaders_deal_batches_across_processes_and_reshuffle_per_epoch() -> None:
    r0, r1 = run_workers(rh.loader_worker, 2, timeout=120)
    assert r0["batch_size"] == 3  # per process, as the user built it
    for epoch in ("epoch0", "epoch1"):
        # Batch i to process i % 2; 16 samples in rounds of 2 x 3: the last round is completed
        # with the first 2 samples of the pass, so both processes get 3 full batches.
        assert [len(b) for b in r0[epoch]] == [len(b) for b in r1[epoch]] == [3, 3, 3]
        dealt = [i for pair in zip(r0[epoch], r1[epoch], strict=True) for b in pair for i in b]
        assert sorted(dealt[:16]) == list(range(16)) and dealt[16:] == dealt[:2]
    assert r0["epoch0"] != r0["epoch1"]  # a new order each pass, the same on both processes
    # Without shuffle the batches are dealt in order, as Accelerate deals them.
    assert [i for b in r0["ordered"] for i in b] == [0, 1, 2, 3, 8, 9, 10, 11]
    assert [i for b in r1["ordered"] for i in b] == [4, 5, 6, 7, 12, 13, 14, 15]


def test_a_group_without_a_model_wrapper_warns_that_gradients_are_not_synchronised() -> None:
    for messages in run_workers(rh.no_sync_worker, 2, timeout=120):
        assert len(messages) == 1, messages
        assert "gradients will not be synchronised" in messages[0]
        assert "pip install accelkw-ddp" in messages[0]

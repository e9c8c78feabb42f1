"""Gradient accumulation under DDP in real two-process gloo groups (spawned by ``run_workers``)."""

from __future__ import annotations

import grad_accum_workers as workers
import pytest
import torch

from accelkw_core.testing import run_workers

pytestmark = pytest.mark.multiprocess

NUM_STEPS = 4
# Each process gets every other micro-batch of 2 samples: 8 micro-steps per process, so two
# optimizer steps of 2 processes x 4 micro-batches x 2 samples = 16 samples each.
MICRO_STEPS = workers.SAMPLES // (2 * workers.MICRO)


@pytest.mark.parametrize("sync_each_batch", [False, True])
def test_two_processes_accumulate_to_the_large_batch_run(sync_each_batch: bool) -> None:
    results = run_workers(
        workers.ddp_accumulation_worker, 2, args=(NUM_STEPS, sync_each_batch), timeout=120
    )
    reference = workers.full_batch(2 * workers.MICRO * NUM_STEPS)
    for result in results:
        assert result["distributed"]
        assert result["syncs"] == [False, False, False, True] * 2
        for got, want in zip(result["params"], reference, strict=True):
            torch.testing.assert_close(torch.tensor(got), want, atol=1e-6, rtol=0)
    # One bucket for this small model: one all-reduce per backward that syncs. The micro-steps
    # that do not step run in DDP's no_sync, unless sync_each_batch asks for every one.
    expected = MICRO_STEPS if sync_each_batch else MICRO_STEPS // NUM_STEPS
    assert [r["all_reduces"] for r in results] == [expected, expected]

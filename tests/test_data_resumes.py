"""Resumes of streamed runs and at an epoch boundary end where the uninterrupted run ended.

``tests/data_resume_workers.py`` trains a model on a dispatched ``IterableDataset`` (under
``accumulate``), one on a stream every process reads, and one on a shuffled loader, evaluating
between epochs; the uninterrupted run saves after the first epoch's evaluation and in the
middle of each stream's second epoch. Resumed from each, on one process and on two (real gloo
groups), the final weights are bit-identical; the same launches check that a dispatched stream
that cannot be cut or read fails on every process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accelkw_core.testing import run_workers
from tests import data_resume_workers as workers


@pytest.mark.parametrize("world_size", [1, 2])
def test_stream_and_epoch_boundary_resumes_are_bit_identical(
    tmp_path: Path, world_size: int
) -> None:
    env = {"OMP_NUM_THREADS": "1"}
    folder = str(tmp_path)

    def run(resume: str | None) -> list[dict[str, object]]:
        return run_workers(workers.train, world_size, args=(folder, resume), env=env, timeout=180)

    whole = run(None)
    # The stream's last batch ends the accumulation whatever the count: 13 samples in batches
    # of 2 per process, so 4 batches on two processes and 7 on one.
    batches = 4 if world_size == 2 else 7
    expected = [i % 2 == 1 or i == batches - 1 for i in range(batches)]
    assert whole[0]["synced"] == [expected, expected]
    for resume in ("epoch_0", "mid", "mid_sharded"):
        resumed = run(resume)
        for rank in range(world_size):
            assert resumed[rank]["weights"] == whole[rank]["weights"], f"{resume}, rank {rank}"
        if resume == "mid":
            assert resumed[0]["synced"] == [expected[workers.MID :]]
    # A dispatched stream of strings cannot be cut, and one whose reading fails: every process
    # gets an error (none is left waiting for the main process's batch).
    for rank, (words, broken) in enumerate(item["refused"] for item in whole):
        if world_size == 1:
            assert "must hold tensors with a batch dimension" in words, words
            assert broken == "OSError: the shard went away"
            continue
        assert "must hold only tensors" in words and "holds ['str']" in words, words
        assert "dispatch_batches=False" in words
        if rank == 0:
            assert broken == "OSError: the shard went away"
        else:
            assert broken.startswith("AccelkwError: dispatch_batches: the main process failed")
            assert "OSError: the shard went away" in broken

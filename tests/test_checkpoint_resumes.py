"""Resumes of resumes: a run saved anywhere in a resumed pass continues as if never stopped.

Each case runs a shuffled, dropout-using training uninterrupted, then as a chain of runs, each
loading the checkpoint the previous one saved and skipping the current pass's done batches with
``skip_first_batches``: the chain sees the same batches, in order, and ends with the same weights,
bit for bit. On one process in this process, on two over gloo (one spawn for every case).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accelkw_core.testing import run_workers
from tests import checkpoint_workers as workers

# 12 batches a pass on one process: a stop inside the first pass, one inside the resumed pass
# (after skip_first_batches), one in the pass after it, then to the end of the third pass.
ONE = [
    {"generator": True, "seedable": False, "stops": [5, 9, 17]},
    {"generator": False, "seedable": False, "stops": [5, 12, 17]},
    {"generator": False, "seedable": True, "stops": [5, 9, 17]},
]
# 6 batches a pass on each of two processes.
TWO = [
    {"generator": False, "seedable": False, "stops": [2, 4, 9]},
    {"generator": True, "seedable": False, "stops": [2, 6, 9]},
    {"generator": False, "seedable": True, "stops": [2, 4, 9]},
]


def _check(results: list[dict[str, Any]], configs: list[dict[str, Any]]) -> None:
    for config, result in zip(configs, results, strict=True):
        chained = [batch for run in result["chain"] for batch in run]
        assert chained == result["whole"], config
        assert result["final"] == result["weights"], config


def test_a_chain_of_resumes_on_one_process_is_bit_identical(tmp_path: Path) -> None:
    _check(workers.resume_chain(0, str(tmp_path), ONE), ONE)


@pytest.mark.multiprocess
def test_a_chain_of_resumes_on_two_processes_is_bit_identical(tmp_path: Path) -> None:
    results = run_workers(
        workers.resume_chain,
        2,
        args=(str(tmp_path), TWO),
        timeout=240,
        env={"OMP_NUM_THREADS": "1"},
    )
    for rank_results in results:
        _check(rank_results, TWO)

"""The per-rank checkpoint example of docs/checkpoints.md runs as written: each rank's state is
saved to a file of its own and comes back to that rank (two gloo processes, one launch)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from accelkw_core.testing import run_workers
from tests.conftest import REPO

pytestmark = pytest.mark.multiprocess


def example() -> str:
    text = (REPO / "docs" / "checkpoints.md").read_text(encoding="utf-8")
    (block,) = [
        b
        for b in re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)
        if "class PerRankCounts" in b
    ]
    return block


def per_rank_worker(rank: int, folder: str, source: str) -> dict[str, Any]:
    import sys
    import types
    import warnings

    import torch

    from accelkw_core import Accelerator
    from tests import runtime_helpers as rh

    # A module of its own, as a plugin's would be (dataclasses look their module up).
    module = types.ModuleType("per_rank_example")
    sys.modules[module.__name__] = module
    exec(compile(source, "docs/checkpoints.md", "exec"), module.__dict__)
    namespace = module.__dict__
    counts_type = namespace["PerRankCounts"]
    warnings.simplefilter("ignore")  # no grad scaler etc. installed here: not under test
    with Accelerator(
        cpu=True, kwargs_handlers=[namespace["PerRankKwargs"]()], registry=rh.registry()
    ) as acc:
        acc.prepare(torch.nn.Linear(2, 1))
        counts = acc.extra("per_rank_counts", counts_type)
        counts.seen = {"batches": 10 + rank}
        acc.save_state(folder)
        counts.seen = {}
        acc.load_state(folder)
        files = sorted(p.name for p in (Path(folder) / "per_rank_counts").iterdir())
        return {"seen": counts.seen, "files": files}


def test_the_per_rank_example_keeps_each_ranks_state(tmp_path: Path) -> None:
    results = run_workers(per_rank_worker, 2, args=(str(tmp_path / "ckpt"), example()), timeout=120)
    assert [r["seen"] for r in results] == [{"batches": 10}, {"batches": 11}]
    assert results[0]["files"] == ["rank_0.pt", "rank_1.pt", "world.pt"]

"""The example plugins grad-clip and ema composed with ddp, grad-scaler (fp16) and autocast on two
real gloo processes, against a hand-written torch loop doing the same: bit-identical numbers.

The examples and the built-ins are imported directly: a broken install fails these tests.
"""

from __future__ import annotations

from typing import Any

import accelkw_ema
import accelkw_grad_clip
import pytest

from accelkw_core.testing import run_workers
from tests.example_workers import MAX_NORM, composed_examples_worker, ema_under_fsdp_worker

STEPS, INF_STEP = 6, 2

pytestmark = pytest.mark.multiprocess


def _run(*examples: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = run_workers(
        composed_examples_worker, 2, args=(examples, STEPS, INF_STEP), timeout=180
    )
    return results


def _check_common(results: list[dict[str, Any]]) -> None:
    skipped = [i == INF_STEP for i in range(STEPS)]
    for r in results:
        assert r["wrapped"] == "DistributedDataParallel"
        acc, ref = r["accelerated"], r["by_hand"]
        # The inf gradients of rank 0 reach rank 1 through DDP: both scalers skip that step.
        assert acc["skipped"] == ref["skipped"] == skipped
        assert acc["scale"] == ref["scale"] < 1024.0
        assert acc["weights"] == ref["weights"]
    assert results[0]["accelerated"]["weights"] == results[1]["accelerated"]["weights"]


def test_grad_clip_clips_unscaled_gradients_like_the_torch_recipe() -> None:
    results = _run("grad_clip")
    _check_common(results)
    for r in results:
        assert r["around_step"] == ["grad_scaler", "grad_clip"]  # nested inside the scaler
        acc, ref = r["accelerated"], r["by_hand"]
        assert acc["norms"] == ref["norms"]
        assert acc["clipped_steps"] == STEPS - 1  # not the skipped step
        assert all(n > MAX_NORM for n in acc["norms"]), (
            f"every step must be clipped: {acc['norms']}"
        )
    assert results[0]["accelerated"]["norms"] == results[1]["accelerated"]["norms"]
    assert accelkw_grad_clip.__all__ == ["GradClipKwargs", "grad_clip_of"]


def test_ema_averages_like_one_updated_by_hand() -> None:
    results = _run("ema")
    _check_common(results)
    for r in results:
        assert r["handlers"][-1] == "ema"  # after ddp: it records the broadcast weights
        acc, ref = r["accelerated"], r["by_hand"]
        assert acc["ema_steps"] == ref["ema_steps"] == STEPS - 1
        assert acc["average"] == ref["average"]
        assert acc["average"] != acc["weights"]
        assert acc["eval"] == ref["eval"]
        assert acc["weights_after_eval"] == acc["weights"]
    assert results[0]["accelerated"]["average"] == results[1]["accelerated"]["average"]
    assert accelkw_ema.__all__ == ["EmaKwargs", "ema_of"]


def test_both_examples_together() -> None:
    results = _run("grad_clip", "ema")
    _check_common(results)
    for r in results:
        acc, ref = r["accelerated"], r["by_hand"]
        assert (acc["norms"], acc["average"], acc["eval"]) == (
            ref["norms"],
            ref["average"],
            ref["eval"],
        )


def test_ema_follows_the_sharded_parameters_under_fsdp() -> None:
    for r in run_workers(ema_under_fsdp_worker, 2, args=(3,), timeout=180):
        assert r["order"] == ["process_group", "fsdp", "ema"]  # ema after fsdp: sharded weights
        assert r["sharded"] and r["steps"] == 3
        assert r["average"] == r["expected"]

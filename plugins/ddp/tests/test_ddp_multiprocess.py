"""DistributedDataParallelKwargs in real two-process gloo groups (spawned by ``run_workers``)."""

from __future__ import annotations

from typing import Any

import ddp_workers as workers
import pytest

from accelkw_core.testing import run_workers

pytestmark = pytest.mark.multiprocess

STEPS = 4

# PowerSGD options that make compression start at step 3 and, with a rank as large as the
# matrices, reproduce the gradients exactly up to float error (min_compression_rate=0 compresses
# even these tiny layers). With the reference defaults (start_powerSGD_iter=1000) a short test
# would only ever exercise PowerSGD's warm-up all-reduce.
EXACT_POWER_SGD = {
    "matrix_approximation_rank": 4,
    "start_powerSGD_iter": 2,
    "min_compression_rate": 0,
}

BF16_REASON = (
    "gloo/CPU: torch's bf16 compression hooks need CUDA with NCCL >= 2.10 (or XPU with XCCL); "
    "the handler raises ConfigError at apply"
)
BATCHED_REASON = (
    "torch 2.13's batched_powerSGD_hook fails once compression starts (a 2-D matrix reaches "
    "_orthogonalize, which requires a batch) on every backend; the handler raises ConfigError"
)

# (comm_hook, comm_wrapper, comm_state_option); wrappers only apply to the PowerSGD hooks.
SUPPORTED = [
    ("fp16", "no", {}),
    ("power_sgd", "no", EXACT_POWER_SGD),
    ("power_sgd", "fp16", EXACT_POWER_SGD),
]
UNSUPPORTED = [
    ("bf16", "no", BF16_REASON),
    ("power_sgd", "bf16", BF16_REASON),
    ("batched_power_sgd", "no", BATCHED_REASON),
    ("batched_power_sgd", "fp16", BATCHED_REASON),
    ("batched_power_sgd", "bf16", BATCHED_REASON),
]


@pytest.fixture(scope="module")
def hook_gradient_differences() -> dict[str, float]:
    # One two-process run covers every supported combination (process start-up dominates).
    return run_workers(workers.comm_hook_gradients, 2, args=(SUPPORTED, STEPS), timeout=120)[0]


@pytest.mark.parametrize(
    ("hook", "wrapper"),
    [(h, w) for h, w, _ in SUPPORTED]
    + [pytest.param(h, w, marks=pytest.mark.skip(reason=why)) for h, w, why in UNSUPPORTED],
)
def test_comm_hooks_give_the_gradients_of_plain_ddp(
    hook_gradient_differences: dict[str, float], hook: str, wrapper: str
) -> None:
    assert hook_gradient_differences[f"{hook}+{wrapper}"] < 1e-2


def test_settings_reach_the_wrapped_model_and_training_matches_one_process() -> None:
    results = run_workers(workers.wrap_and_train, 2, args=(STEPS,), timeout=120)
    for result in results:
        assert result["type"] == "DistributedDataParallel"
        assert result["bucket_bytes_cap"] == 1 * 1024 * 1024
        # The model has a layer forward never uses: without this, DDP fails at step 2.
        assert result["find_unused_parameters"] is True
        assert result["frozen_unwrapped"] is True
        field, message = result["power_sgd_find_unused_error"]
        assert field == "find_unused_parameters"
        assert "on the gloo backend" in message
        log = "\n".join(result["log"])
        assert "wrapped TwoLayer in DistributedDataParallel" in log
        assert "Linear has no parameter that requires grad: not wrapped" in log
    rank0, rank1 = results
    assert rank0["params"] == rank1["params"], "the ranks' parameters diverged"
    _assert_close(rank0["params"], rank0["reference"], 1e-5)


def test_composed_with_the_process_group_plugin() -> None:
    pytest.importorskip("accelkw_process_group")
    results = run_workers(workers.composed_run, 2, args=(STEPS,), timeout=120)
    for result in results:
        assert result["order"] == ["process_group", "ddp"]
        assert result["type"] == "DistributedDataParallel"
        assert result["bucket_bytes_cap"] == 1 * 1024 * 1024
        assert result["backend"] == "gloo"
        assert result["teardown_failures"] == []
        assert result["initialised_after_teardown"] is False
        log = "\n".join(result["log"])
        assert "process_group: initialise the process group" in log
        assert "ddp: models will be wrapped in DistributedDataParallel(" in log
        assert "process_group: destroyed the process group it created" in log
    assert results[0]["params"] == results[1]["params"]


def _assert_close(got: list[list[float]], want: list[list[float]], tol: float) -> None:
    assert len(got) == len(want)
    worst: Any = max(
        abs(a - b) for g, w in zip(got, want, strict=True) for a, b in zip(g, w, strict=True)
    )
    assert worst < tol, f"max parameter difference {worst:.3g} >= {tol}"

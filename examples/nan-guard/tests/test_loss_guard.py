"""LossGuardKwargs with real torch: it sees the loss (also under fp16) and skips on every rank.

The fp16 cases compose the built-ins accelkw-autocast and accelkw-grad-scaler; the two-process
case also accelkw-process-group (a gloo group), without DDP, so each rank's gradients are its
own: only the agreement the guard makes keeps the ranks stepping together.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import accelkw_autocast.plugin
import accelkw_grad_scaler.plugin
import loss_guard_workers as workers
import pytest
import torch
from accelkw_grad_scaler import GradScalerKwargs
from accelkw_loss_guard import LossGuard, LossGuardKwargs, loss_guard, plugin
from accelkw_loss_guard.guard import NonFiniteLossError

from accelkw_core import Accelerator, ConfigError
from accelkw_core.plugin import AROUND_STEP, LOSS
from accelkw_core.testing import HandlerContract, isolated_registry, make_state, run_workers

EXAMPLE = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No accelkw.toml or ACCELKW_* variable of the surroundings changes what is composed."""
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("ACCELKW_")]:
        monkeypatch.delenv(key)
    yield


def accelerator(*handlers: Any, mixed_precision: str = "no") -> Accelerator:
    if mixed_precision == "fp16":  # no fp16 gradient overflows: every skip is the guard's
        handlers = (*handlers, GradScalerKwargs(init_scale=256.0))
    registry = isolated_registry([plugin, accelkw_grad_scaler.plugin, accelkw_autocast.plugin])
    return Accelerator(
        mixed_precision=mixed_precision, cpu=True, kwargs_handlers=list(handlers), registry=registry
    )


def test_the_plan_watches_the_loss_and_guards_the_step_outside_the_scaler() -> None:
    plan = LossGuardKwargs().plan(make_state(mixed_precision="fp16"))
    assert [s.point for s in plan.steps] == ["loss", "around_step"]
    with accelerator(LossGuardKwargs(), mixed_precision="fp16") as acc:
        # Composed before the scaler: its around_step is outermost, run on every step().
        assert [c.handler for c in acc.state.contributions(AROUND_STEP)] == [
            "loss_guard",
            "grad_scaler",
        ]
        assert isinstance(loss_guard(acc), LossGuard)
        assert [type(v) for v in acc.state.values(LOSS)] == [LossGuard]
    with accelerator() as acc:  # opt-in: installed, not asked for, nothing happens
        assert loss_guard(acc) is None and acc.state.values(LOSS) == []


@pytest.mark.parametrize("mixed_precision", ["no", "fp16"])
def test_a_non_finite_loss_skips_the_step_and_the_next_one_runs(mixed_precision: str) -> None:
    with accelerator(LossGuardKwargs(), mixed_precision=mixed_precision) as acc:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
        guard = loss_guard(acc)
        assert guard is not None
        x, y = torch.randn(8, 4), torch.randn(8, 2)
        for bad in (False, True, False):
            before = [p.detach().clone() for p in model.parameters()]
            loss = torch.nn.functional.mse_loss(model(x), y)
            if bad:
                loss = loss * math.inf
            acc.backward(loss)
            acc.clip_grad_norm_(model.parameters(), 1.0)  # unscales under fp16
            opt.step()
            opt.zero_grad()
            moved = not all(
                torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)
            )
            assert opt.step_was_skipped == bad and moved != bad
            # The guard saw the loss itself, before the scaler multiplied it.
            assert guard.last_loss is not None and guard.last_loss.dtype == torch.float32
            assert math.isinf(guard.last_loss.item()) == bad
        assert (guard.losses_seen, guard.nonfinite_losses, guard.skipped_steps) == (3, 1, 1)
        assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_max_consecutive_skips_raises_naming_the_limit() -> None:
    with accelerator(LossGuardKwargs(max_consecutive_skips=2)) as acc:
        model = torch.nn.Linear(1, 1)
        model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
        acc.backward(model(torch.ones(1, 1)).sum() * math.nan)
        opt.step()
        acc.backward(model(torch.ones(1, 1)).sum() * math.nan)
        with pytest.raises(NonFiniteLossError, match="2 optimizer steps in a row"):
            opt.step()


def test_invalid_value_names_the_field() -> None:
    with pytest.raises(ConfigError, match="max_consecutive_skips"):
        LossGuardKwargs.from_mapping({"max_consecutive_skips": 0})


@pytest.mark.multiprocess
@pytest.mark.parametrize("clip", [False, True], ids=["plain", "clipped"])
def test_two_ranks_under_fp16_skip_together_when_one_rank_sees_nan(clip: bool) -> None:
    first, second = run_workers(workers.train, 2, args=(clip,), timeout=180)
    bad = workers.NAN_STEP
    for rank, out in enumerate((first, second)):
        assert out["around_step"] == ["loss_guard", "grad_scaler"]
        # It saw every loss, as the script computed it (NaN on rank 0 at the bad step).
        assert all(map(workers.same_nan, out["seen"], out["losses"])), (rank, out)
        assert math.isnan(out["seen"][bad]) == (rank == workers.NAN_RANK)
        # Both ranks skipped that step, and only that one; the rest moved the weights.
        assert out["skipped"] == [i == bad for i in range(workers.STEPS)], (rank, out)
        assert out["moved"] == [i != bad for i in range(workers.STEPS)], (rank, out)
        assert out["skipped_steps"] == 1 and out["finite_weights"]
    assert (first["nonfinite"], second["nonfinite"]) == (1, 0)
    # The step never reached the scaler on rank 1 (its gradients were finite): the scale holds.
    assert second["scale"][bad] == second["scale"][bad - 1]


class TestLossGuardContract(HandlerContract):
    handler_class = LossGuardKwargs
    plugin_module = "accelkw_loss_guard.plugin"
    examples: ClassVar = ({"max_consecutive_skips": 3},)
    pyproject = EXAMPLE / "pyproject.toml"

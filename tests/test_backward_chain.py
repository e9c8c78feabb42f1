"""A third party's backward contribution composes with the grad scaler under fp16.

The same fp16 training loop on CPU (autocast and a real ``torch.amp.GradScaler``) runs with the scaler alone,
with two third-party ``around_backward`` wrappers (one outside the scaler, one inside), and with a
plugin on the deprecated ``backward`` point: the loss scaling, the unscaling before clipping and
the step skipped on an inf gradient are the same in all three, to the bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import accelkw_autocast.plugin
import accelkw_grad_scaler.plugin
import pytest
import torch
from accelkw_grad_scaler import GradScalerKwargs

from accelkw_core import Accelerator
from accelkw_core.plugin import (
    AROUND_BACKWARD,
    ATTRIBUTE,
    BACKWARD,
    KwargsHandler,
    Plan,
    hookimpl,
)
from accelkw_core.testing import isolated_registry


def seen_by(name: str, at: list[float]) -> Callable[[torch.Tensor, Callable[[Any], None]], None]:
    def around(loss: torch.Tensor, proceed: Callable[[torch.Tensor], None]) -> None:
        at.append(float(loss.detach()))
        proceed(loss)

    return around


@dataclass
class OuterKwargs(KwargsHandler):
    """Wraps the backward outside the scaler: sees the true loss."""

    name: ClassVar[str] = "outer"
    before: ClassVar[tuple[str, ...]] = ("grad_scaler",)

    def plan(self, state: Any) -> Plan:
        seen: list[float] = []
        plan = Plan(self.name).contribute(AROUND_BACKWARD, seen_by(self.name, seen), "watch")
        return plan.contribute(ATTRIBUTE, seen, "losses seen", key="outer_seen")


@dataclass
class InnerKwargs(KwargsHandler):
    """Wraps the backward inside the scaler: sees the scaled loss."""

    name: ClassVar[str] = "inner"
    after: ClassVar[tuple[str, ...]] = ("grad_scaler",)

    def plan(self, state: Any) -> Plan:
        seen: list[float] = []
        plan = Plan(self.name).contribute(AROUND_BACKWARD, seen_by(self.name, seen), "watch")
        return plan.contribute(ATTRIBUTE, seen, "losses seen", key="inner_seen")


@dataclass
class OldBackwardKwargs(KwargsHandler):
    """A plugin written for the single-owner ``backward`` point (deprecated)."""

    name: ClassVar[str] = "old_backward"

    def plan(self, state: Any) -> Plan:
        calls: list[float] = []

        def backward(loss: torch.Tensor, **kwargs: Any) -> None:
            calls.append(float(loss.detach()))
            loss.backward(**kwargs)

        plan = Plan(self.name).contribute(BACKWARD, backward, "runs the backward")
        return plan.contribute(ATTRIBUTE, calls, "losses seen", key="old_seen")


class ThirdParty:
    @hookimpl
    def accelkw_register_handlers(self, register: Callable[[type[KwargsHandler]], None]) -> None:
        register(OuterKwargs)
        register(InnerKwargs)
        register(OldBackwardKwargs)


def train(extra: list[KwargsHandler]) -> dict[str, Any]:
    """Four fp16 steps with clipping; the third has an inf gradient and must be skipped."""
    registry = isolated_registry(
        [accelkw_autocast.plugin, accelkw_grad_scaler.plugin, ThirdParty()]
    )
    handlers: list[KwargsHandler] = [GradScalerKwargs(init_scale=1024.0, growth_interval=2)]
    acc = Accelerator(
        mixed_precision="fp16", cpu=True, kwargs_handlers=handlers + extra, registry=registry
    )
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    data = torch.randn(4, 4, 3)
    out: dict[str, Any] = {"norms": [], "scales": [], "skipped": [], "losses": []}
    for i in range(4):
        opt.zero_grad()
        loss = model(data[i]).float().pow(2).mean()
        out["losses"].append(float(loss.detach()))
        acc.backward(loss)
        if i == 2:
            weight = acc.unwrap_model(model).weight
            assert weight.grad is not None
            weight.grad[0, 0] = float("inf")
        out["norms"].append(float(acc.clip_grad_norm_(model.parameters(), 1e6)))
        opt.step()
        out["skipped"].append(opt.step_was_skipped)
        assert acc.scaler is not None
        out["scales"].append(acc.scaler.get_scale())
    out["params"] = [p.detach().clone() for p in model.parameters()]
    out["extras"] = {
        key: acc.extra(key, list)
        for key in ("outer_seen", "inner_seen", "old_seen")
        if key in acc.state.keyed(ATTRIBUTE)
    }
    acc.end_training()
    return out


def test_backward_wrappers_compose_with_the_grad_scaler_under_fp16() -> None:
    alone = train([])
    wrapped = train([OuterKwargs(), InnerKwargs()])
    with pytest.warns(DeprecationWarning, match="AROUND_BACKWARD"):
        old = train([OldBackwardKwargs()])

    # The scaler alone: the inf step skipped and the scale backed off, growth after 2 clean steps.
    assert alone["skipped"] == [False, False, True, False]
    assert alone["scales"] == [1024.0, 2048.0, 1024.0, 1024.0]
    # Clipping saw unscaled gradients: finite norms of true size on the clean steps.
    assert all(0 < n < 100 for i, n in enumerate(alone["norms"]) if i != 2)
    assert alone["norms"][2] == float("inf")
    for run in (wrapped, old):
        assert run["skipped"] == alone["skipped"]
        assert run["scales"] == alone["scales"]
        assert run["norms"] == alone["norms"]
        assert run["losses"] == alone["losses"]
        for mine, theirs in zip(run["params"], alone["params"], strict=True):
            assert torch.equal(mine, theirs)

    # The outer wrapper saw each true loss, the inner one that loss times the scale of the step.
    scales_before = [1024.0, 1024.0, 2048.0, 1024.0]
    assert wrapped["extras"]["outer_seen"] == pytest.approx(alone["losses"])
    assert wrapped["extras"]["inner_seen"] == pytest.approx(
        [loss * scale for loss, scale in zip(alone["losses"], scales_before, strict=True)]
    )
    # The deprecated point is the innermost call: it got the scaled loss too.
    assert old["extras"]["old_seen"] == pytest.approx(wrapped["extras"]["inner_seen"])

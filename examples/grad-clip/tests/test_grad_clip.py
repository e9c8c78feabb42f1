"""GradClipKwargs with real torch: the same numbers as a hand-written clipping loop.

The fp16 cases compose the built-ins accelkw-grad-scaler and accelkw-autocast (test dependencies
of this example; accelkw-grad-accum for accumulation): clipping must happen after the scaler unscales, and not on a step it skips.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import accelkw_autocast.plugin
import accelkw_grad_accum.plugin
import accelkw_grad_scaler.plugin
import pytest
import torch
from accelkw_grad_clip import GradClipKwargs, grad_clip_of, plugin
from accelkw_grad_scaler import GradScalerKwargs

from accelkw_core import Accelerator, ConfigError
from accelkw_core.plugin import AROUND_STEP
from accelkw_core.testing import HandlerContract, isolated_registry, make_state

EXAMPLE = Path(__file__).resolve().parent.parent
# A big target at step 1 overflows the fp16 backward (inf gradients): the scaler skips it.
INF_STEP = 1


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No accelkw.toml or ACCELKW_* variable of the surroundings changes what is composed."""
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("ACCELKW_")]:
        monkeypatch.delenv(key)
    yield


def accelerator(*handlers: Any, mixed_precision: str = "no", **keywords: Any) -> Accelerator:
    registry = isolated_registry(
        [plugin, accelkw_grad_scaler.plugin, accelkw_autocast.plugin, accelkw_grad_accum.plugin]
    )
    return Accelerator(
        mixed_precision=mixed_precision,
        cpu=True,
        kwargs_handlers=list(handlers),
        registry=registry,
        **keywords,
    )


def batches(steps: int, *, inf_step: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    out = []
    for i in range(steps):
        x, y = torch.randn(8, 4, generator=gen), torch.randn(8, 2, generator=gen) * 4
        out.append((x, y * 1e6 if i == inf_step else y))
    return out


def new_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def train_accelerated(
    acc: Accelerator, data: list[tuple[torch.Tensor, torch.Tensor]]
) -> tuple[torch.nn.Module, list[bool], list[Any]]:
    model = new_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, opt = acc.prepare(model, opt)
    skipped, norms = [], []
    for x, y in data:
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        skipped.append(opt.step_was_skipped)
        norms.append(grad_clip_of(acc).last_norm)
    return model, skipped, norms


def train_by_hand(
    data: list[tuple[torch.Tensor, torch.Tensor]],
    clip: Callable[[Any], Any],
    *,
    fp16: bool = False,
    init_scale: float = 1024.0,
) -> tuple[torch.nn.Module, list[bool], list[Any]]:
    """The loop torch's AMP recipe writes: scale, backward, unscale_, clip, step, update."""
    model = new_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, enabled=fp16)
    skipped, norms = [], []
    last = None
    for x, y in data:
        with torch.autocast("cpu", dtype=torch.float16, enabled=fp16):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = clip(model.parameters())
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        was_skipped = fp16 and scaler.get_scale() < scale  # the scaler backs off on inf
        # The plugin does not clip a skipped step: its last norm stays the previous one.
        last = last if was_skipped else norm
        skipped.append(was_skipped)
        norms.append(last)
    return model, skipped, norms


def clip_norm(max_norm: float, norm_type: float = 2.0) -> Callable[[Any], Any]:
    return lambda params: torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y), (x, y)


# -- fields and plan ---------------------------------------------------------------------------


def test_fields_defaults_and_ordering() -> None:
    assert [(f.name, f.default) for f in dataclasses.fields(GradClipKwargs)] == [
        ("max_norm", None),
        ("norm_type", 2.0),
        ("clip_value", None),
        ("error_if_nonfinite", False),
    ]
    assert GradClipKwargs.name == "grad_clip"
    assert GradClipKwargs.after == ("grad_scaler",)
    assert GradClipKwargs.opt_in


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"max_norm": 0}, "max_norm"),
        ({"max_norm": -1.0}, "max_norm"),
        ({"max_norm": math.inf}, "max_norm"),
        ({"max_norm": math.nan}, "max_norm"),
        ({"clip_value": math.inf}, "clip_value"),
        ({"clip_value": 0.0}, "clip_value"),
        ({"norm_type": 0}, "norm_type"),
        ({"norm_type": math.nan}, "norm_type"),
        ({"max_norm": 1.0, "clip_value": 0.5}, "clip_value"),
        ({"max_nrom": 1.0}, "max_nrom"),
    ],
)
def test_invalid_values_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        GradClipKwargs.from_mapping(data)
    assert (err.value.handler, err.value.field) == ("grad_clip", field)


def test_both_set_in_code_is_refused_with_what_would_work() -> None:
    with pytest.raises(ConfigError, match="clip the total norm or each value, not both"):
        GradClipKwargs(max_norm=1.0, clip_value=0.5)


def test_text_values_and_the_infinity_norm() -> None:
    handler = GradClipKwargs.from_mapping({"max_norm": "0.5", "norm_type": "inf"}, strings=True)
    assert (handler.max_norm, handler.norm_type) == (0.5, math.inf)


def test_nothing_set_contributes_nothing_and_says_why() -> None:
    plan = GradClipKwargs().plan(make_state(mixed_precision="fp16"))
    assert not plan.effective
    assert plan.summary() == "neither max_norm nor clip_value is set: gradients are not clipped"


def test_plan_contributes_the_clipper_around_the_step_and_as_an_attribute() -> None:
    plan = GradClipKwargs(max_norm=1.0).plan(make_state())
    assert [(s.point, s.key) for s in plan.steps] == [
        ("around_step", None),
        ("attribute", "grad_clip"),
    ]
    assert plan.steps[0].value is plan.steps[1].value
    assert plan.steps[0].message.startswith("clip_grad_norm_(max_norm=1, norm_type=2)")


def test_norm_only_settings_with_clip_value_are_reported() -> None:
    plan = GradClipKwargs(clip_value=0.5, norm_type=1.0, error_if_nonfinite=True).plan(make_state())
    assert plan.steps[0].message == (
        "norm_type and error_if_nonfinite: used only with max_norm, not with clip_value"
    )
    assert plan.steps[1].message.startswith("clip_grad_value_(clip_value=0.5)")


# -- composition -------------------------------------------------------------------------------


def test_opt_in_installed_is_not_composed_until_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    with accelerator() as acc:
        assert "grad_clip" not in acc.state.handlers
        assert acc.state.values(AROUND_STEP) == []
    monkeypatch.setenv("ACCELKW_GRAD_CLIP__MAX_NORM", "0.25")
    with accelerator() as acc:
        assert acc.state.handlers["grad_clip"] == GradClipKwargs(max_norm=0.25)
        assert grad_clip_of(acc).max_norm == 0.25


def test_nested_inside_the_scalers_step() -> None:
    with accelerator(GradClipKwargs(max_norm=1.0), mixed_precision="fp16") as acc:
        # The first around_step contribution is the outermost: the scaler's.
        assert [c.handler for c in acc.state.contributions(AROUND_STEP)] == [
            "grad_scaler",
            "grad_clip",
        ]


# -- numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_norm_clipping_matches_clip_grad_norm(norm_type: float) -> None:
    data = batches(4)
    with accelerator(GradClipKwargs(max_norm=0.3, norm_type=norm_type)) as acc:
        model, skipped, norms = train_accelerated(acc, data)
        assert grad_clip_of(acc).clipped_steps == 4 and grad_clip_of(acc).last_step == 3
    ref, ref_skipped, ref_norms = train_by_hand(data, clip_norm(0.3, norm_type))
    assert_same(weights(model), weights(ref))
    assert_same(norms, ref_norms)
    assert skipped == ref_skipped == [False] * 4
    assert all(float(n) > 0.3 for n in norms), "the test must actually clip"


def test_value_clipping_matches_clip_grad_value() -> None:
    data = batches(4)
    with accelerator(GradClipKwargs(clip_value=0.05)) as acc:
        model, _, norms = train_accelerated(acc, data)
    ref, _, _ = train_by_hand(data, lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.05))
    assert_same(weights(model), weights(ref))
    assert norms == [None] * 4
    unclipped, _, _ = train_by_hand(data, lambda ps: None)
    assert not all(torch.equal(a, b) for a, b in zip(weights(ref), weights(unclipped), strict=True))


def test_under_fp16_it_clips_unscaled_gradients_and_not_a_skipped_step() -> None:
    data = batches(5, inf_step=INF_STEP)
    handlers = (GradClipKwargs(max_norm=0.3), GradScalerKwargs(init_scale=1024.0))
    with accelerator(*handlers, mixed_precision="fp16") as acc:
        model, skipped, norms = train_accelerated(acc, data)
        assert grad_clip_of(acc).clipped_steps == 4
        assert grad_clip_of(acc).last_step == 4
    ref, ref_skipped, ref_norms = train_by_hand(data, clip_norm(0.3), fp16=True)
    assert skipped == ref_skipped == [i == INF_STEP for i in range(5)]
    assert_same(weights(model), weights(ref))
    assert_same(norms, ref_norms)
    # Unscaled: a norm of the scaled gradients would be about 1024 times larger.
    assert all(math.isfinite(float(n)) and float(n) < 100 for n in norms)


def test_error_if_nonfinite_raises_without_a_scaler_and_a_scaler_skips_first() -> None:
    (x, y), second = batches(2)
    data = [(x, torch.full_like(y, math.inf)), second]  # inf gradients, with or without fp16
    strict = GradClipKwargs(max_norm=0.3, error_if_nonfinite=True)
    with accelerator(strict) as acc, pytest.raises(RuntimeError, match="non-finite"):
        train_accelerated(acc, data[:1])
    handlers = (GradClipKwargs(max_norm=0.3, error_if_nonfinite=True), GradScalerKwargs())
    with accelerator(*handlers, mixed_precision="fp16") as acc:
        _, skipped, _ = train_accelerated(acc, data)
    assert skipped[0]


def test_a_closure_is_clipped_after_it_computes_the_gradients() -> None:
    data = batches(3)

    def run(step: Callable[[Any, Any], Any]) -> list[torch.Tensor]:
        model = new_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = step(model, opt)
        for x, y in data:

            def closure(model: Any = model, opt: Any = opt, x: Any = x, y: Any = y) -> Any:
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                return loss

            opt.step(closure)
        return weights(model)

    with accelerator(GradClipKwargs(max_norm=0.2)) as acc:
        got = run(lambda m, o: acc.prepare(m, o))
        assert grad_clip_of(acc).clipped_steps == 3

    def by_hand(model: Any, opt: Any) -> Any:
        step = opt.step

        def clipped_step(closure: Callable[[], Any]) -> Any:
            def wrapped() -> Any:
                loss = closure()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.2)
                return loss

            return step(wrapped)

        opt.step = clipped_step
        return model, opt

    assert_same(got, run(by_hand))


def test_micro_steps_of_gradient_accumulation_are_not_clipped() -> None:
    data = batches(6)
    with accelerator(GradClipKwargs(max_norm=0.3), gradient_accumulation_steps=3) as acc:
        model = new_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model, opt = acc.prepare(model, opt)
        for x, y in data:
            with acc.accumulate(model):
                acc.backward(torch.nn.functional.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
        assert grad_clip_of(acc).clipped_steps == 2  # the optimizer stepped twice, not six times
        norm = grad_clip_of(acc).last_norm
    ref = new_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for i, (x, y) in enumerate(data):
        (torch.nn.functional.mse_loss(ref(x), y) / 3).backward()
        if i % 3 == 2:
            ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.3)
            ref_opt.step()
            ref_opt.zero_grad()
    assert_same(weights(model), weights(ref))
    assert torch.equal(norm, ref_norm) and float(norm) > 0.3


def test_each_optimizer_clips_its_own_parameters() -> None:
    with accelerator(GradClipKwargs(max_norm=0.1)) as acc:
        first, second = new_model(), new_model()
        opt1 = acc.prepare(torch.optim.SGD(first.parameters(), lr=0.1))
        opt2 = acc.prepare(torch.optim.SGD(second.parameters(), lr=0.1))
        x, y = batches(1)[0]
        torch.nn.functional.mse_loss(first(x), y).backward()
        torch.nn.functional.mse_loss(second(x) * 3, y).backward()
        grads = [p.grad.clone() for p in second.parameters()]
        opt1.step()
        assert_same([p.grad for p in second.parameters()], grads)
        norm1 = grad_clip_of(acc).last_norm
        opt2.step()
        assert not torch.equal(grad_clip_of(acc).last_norm, norm1)
        assert grad_clip_of(acc).last_step == 0 and grad_clip_of(acc).clipped_steps == 2


# -- contract ----------------------------------------------------------------------------------


class TestGradClipContract(HandlerContract):
    handler_class = GradClipKwargs
    plugin_module = "accelkw_grad_clip.plugin"
    examples: ClassVar = (
        {"max_norm": 1.0},
        {"max_norm": 0.5, "norm_type": math.inf, "error_if_nonfinite": True},
        {"clip_value": 0.1},
        {"clip_value": 0.1, "norm_type": 1.0},
    )
    pyproject = EXAMPLE / "pyproject.toml"

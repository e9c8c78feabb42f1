"""GradScalerKwargs with real torch.amp.GradScaler steps on CPU, defaults, validation, plugin."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import accelkw_grad_scaler
import accelkw_grad_scaler.plugin
import pytest
import torch
from accelkw_grad_scaler import GradScalerKwargs

from accelkw_core import ConfigError
from accelkw_core.plugin import (
    AFTER_STEP,
    AROUND_BACKWARD,
    AROUND_STEP,
    ATTRIBUTE,
    CHECKPOINT,
    POINTS,
    AcceleratorState,
    StepContext,
)
from accelkw_core.runtime.composing.composition import compose
from accelkw_core.runtime.stepping.training_step import build_step, run_backward
from accelkw_core.testing import (
    HandlerContract,
    apply_handler,
    isolated_registry,
    make_state,
    modules_loaded_by,
)

# Accelerate's GradScalerKwargs: field names, defaults and order are a public contract.
REFERENCE_FIELDS = [
    ("init_scale", 65536.0),
    ("growth_factor", 2.0),
    ("backoff_factor", 0.5),
    ("growth_interval", 2000),
    ("enabled", True),
]


class TinyTrainer:
    """A two-output linear model and SGD, stepped through a state's points as the runtime does.

    ``accelerator.backward(loss)`` runs the ``around_backward`` chain; an optimizer step runs the
    ``around_step`` chain (built by the runtime's own :func:`build_step`).
    """

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(3, 2)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.steps = 0

    def step(
        self, state: AcceleratorState, inf_grad: bool = False, around: tuple[Any, ...] = ()
    ) -> bool:
        """One step through the state's points; returns whether the parameters changed."""
        self.opt.zero_grad()
        loss = self.model(torch.randn(4, 3)).pow(2).mean()
        run_backward(state.values(AROUND_BACKWARD), None, loss, {})
        if inf_grad:
            grad = self.model.weight.grad
            assert grad is not None
            grad[0, 0] = float("inf")
        before = [p.detach().clone() for p in self.model.parameters()]
        context = StepContext(self.opt, None, self.steps)
        build_step([*state.values(AROUND_STEP), *around], state.values(AFTER_STEP))(context)
        self.steps += 1
        after = self.model.parameters()
        changed = any(not torch.equal(b, p) for b, p in zip(before, after, strict=True))
        assert context.skipped is not changed  # what after-step contributions are told
        return changed


@pytest.fixture
def trainer() -> TinyTrainer:
    return TinyTrainer()


def fp16_state(handler: GradScalerKwargs) -> tuple[AcceleratorState, torch.amp.GradScaler]:
    state = apply_handler(handler, make_state(mixed_precision="fp16"))
    scaler = state.keyed(ATTRIBUTE)["scaler"]
    assert isinstance(scaler, torch.amp.GradScaler)
    return state, scaler


def test_apply_creates_a_scaler_with_every_field() -> None:
    handler = GradScalerKwargs(
        init_scale=1024.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=7
    )
    _, scaler = fp16_state(handler)
    assert scaler.is_enabled()
    assert scaler.get_scale() == 1024.0
    assert scaler.get_growth_factor() == 3.0
    assert scaler.get_backoff_factor() == 0.25
    assert scaler.get_growth_interval() == 7


def test_a_step_with_an_inf_gradient_is_skipped_and_the_scale_backs_off(
    trainer: TinyTrainer,
) -> None:
    state, scaler = fp16_state(GradScalerKwargs(init_scale=1024.0, backoff_factor=0.25))
    assert trainer.step(state, inf_grad=True) is False
    assert scaler.get_scale() == 1024.0 * 0.25
    assert trainer.step(state) is True  # a clean step after it updates the parameters again


def test_the_backward_contribution_scales_the_loss() -> None:
    state, scaler = fp16_state(GradScalerKwargs(init_scale=1024.0))
    x = torch.tensor(3.0, requires_grad=True)
    run_backward(state.values(AROUND_BACKWARD), None, x * 2.0, {})
    assert x.grad is not None and x.grad.item() == 2.0 * 1024.0
    assert scaler.get_scale() == 1024.0


def test_inner_around_step_contributions_see_unscaled_gradients_and_skip_with_the_scaler(
    trainer: TinyTrainer,
) -> None:
    # What a gradient-clipping handler composed after grad-scaler relies on.
    state, _ = fp16_state(GradScalerKwargs(init_scale=1024.0))
    seen: list[torch.Tensor] = []

    def inner(step: StepContext, proceed: Callable[[], Any]) -> Any:
        grad = trainer.model.weight.grad
        assert grad is not None
        seen.append(grad.detach().clone())
        return proceed()

    assert trainer.step(state, inf_grad=True, around=(inner,)) is False
    assert seen == []  # the scaler skipped the step: nothing inside it ran
    # The gradients of the same loss, unscaled, by hand.
    reference = torch.nn.Linear(3, 2)
    reference.load_state_dict(trainer.model.state_dict())
    torch.manual_seed(1)
    reference(torch.randn(4, 3)).pow(2).mean().backward()
    torch.manual_seed(1)
    assert trainer.step(state, around=(inner,)) is True
    (grad,) = seen
    torch.testing.assert_close(grad, reference.weight.grad)


def test_the_scale_grows_after_growth_interval_clean_steps(trainer: TinyTrainer) -> None:
    state, scaler = fp16_state(
        GradScalerKwargs(init_scale=8.0, growth_factor=4.0, growth_interval=3)
    )
    for _ in range(2):
        assert trainer.step(state) is True
        assert scaler.get_scale() == 8.0
    assert trainer.step(state) is True
    assert scaler.get_scale() == 32.0


def test_an_inf_step_resets_the_growth_count(trainer: TinyTrainer) -> None:
    state, scaler = fp16_state(GradScalerKwargs(init_scale=8.0, growth_interval=2))
    trainer.step(state)
    trainer.step(state, inf_grad=True)
    assert scaler.get_scale() == 4.0
    trainer.step(state)
    assert scaler.get_scale() == 4.0
    trainer.step(state)
    assert scaler.get_scale() == 8.0


def test_disabled_sets_a_pass_through_scaler_and_says_so(trainer: TinyTrainer) -> None:
    state, scaler = fp16_state(GradScalerKwargs(enabled=False))
    assert not scaler.is_enabled()
    loss = torch.tensor(2.0)
    assert scaler.scale(loss) is loss
    assert trainer.step(state) is True
    entry = state.log[0]
    assert "scaling is disabled" in entry.message
    assert all(e.applied for e in state.log)


@pytest.mark.parametrize("mode", ["bf16", "no"])
def test_no_scaler_without_fp16_and_the_log_says_why(mode: str) -> None:
    state = apply_handler(GradScalerKwargs(), make_state(mixed_precision=mode))
    assert {p: state.contributions(p) for p in POINTS} == {p: [] for p in POINTS}
    assert state.capabilities == {}
    (entry,) = state.log
    assert entry.applied is False
    assert entry.message == (
        f"mixed precision {mode!r}: no GradScaler created (loss scaling is only needed for fp16)"
    )


def test_explicit_settings_without_fp16_are_named_as_unused() -> None:
    state = apply_handler(GradScalerKwargs(init_scale=65536.0), make_state(mixed_precision="bf16"))
    (message,) = state.messages("grad_scaler")
    assert message.endswith("init_scale=65536.0 has no effect")


def test_the_plan_matches_apply_and_planning_contributes_nothing() -> None:
    handler = GradScalerKwargs(backoff_factor=0.25)
    state = make_state(mixed_precision="fp16")
    plan = handler.plan(state)
    assert {p: state.contributions(p) for p in POINTS} == {p: [] for p in POINTS}
    assert state.log == [] and state.capabilities == {}
    apply_handler(handler, state)
    assert state.messages("grad_scaler") == [s.message for s in plan.steps]
    assert handler.describe(make_state(mixed_precision="fp16")) == plan.summary()
    assert plan.steps[0].message == (
        "torch.amp.GradScaler('cpu', init_scale=65536, growth_factor=2, backoff_factor=0.25, "
        "growth_interval=2000)"
    )
    assert [(s.point, s.key) for s in plan.steps] == [
        ("around_backward", None),
        ("around_step", None),
        ("unscale_gradients", None),
        ("after_step", None),
        ("checkpoint", None),
        ("attribute", "scaler"),
    ]
    # One scaler behind every contribution: the one saved is the one that steps.
    scaler = state.keyed(ATTRIBUTE)["scaler"]
    assert state.keyed(CHECKPOINT) == {"grad_scaler": scaler}
    assert state.capabilities == {"loss_scaling": "grad_scaler"}


def test_the_checkpoint_contribution_saves_and_restores_the_scale(trainer: TinyTrainer) -> None:
    state, scaler = fp16_state(GradScalerKwargs(init_scale=8.0, growth_interval=1))
    trainer.step(state)
    (saved,) = state.keyed(CHECKPOINT).values()
    snapshot = saved.state_dict()
    assert snapshot["scale"] == 16.0
    other, fresh = fp16_state(GradScalerKwargs(init_scale=8.0, growth_interval=1))
    other.keyed(CHECKPOINT)["grad_scaler"].load_state_dict(snapshot)
    assert fresh.get_scale() == scaler.get_scale() == 16.0


def test_fields_defaults_and_order_match_the_reference() -> None:
    fields = [(f.name, f.default) for f in dataclasses.fields(GradScalerKwargs)]
    assert fields == REFERENCE_FIELDS
    assert GradScalerKwargs.name == "grad_scaler"
    assert GradScalerKwargs.after == ("autocast",)


def test_to_kwargs_keeps_the_reference_semantics() -> None:
    assert GradScalerKwargs(backoff_factor=0.25).to_kwargs() == {"backoff_factor": 0.25}
    assert GradScalerKwargs().to_kwargs() == {}
    assert GradScalerKwargs(init_scale=65536.0).explicit_kwargs() == {"init_scale": 65536.0}


def test_an_int_is_accepted_where_a_float_is_declared() -> None:
    handler = GradScalerKwargs(init_scale=1024)
    assert handler.init_scale == 1024.0 and isinstance(handler.init_scale, float)


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("init_scale", 0.0, "> 0"),
        ("init_scale", float("inf"), "a finite number"),
        ("growth_factor", 1.0, "> 1"),
        ("growth_factor", float("inf"), "a finite number"),
        ("backoff_factor", 1.0, "< 1"),
        ("backoff_factor", 0.0, "> 0"),
        ("growth_interval", 0, ">= 1"),
        ("growth_interval", 2.5, "an integer"),
        ("enabled", "yes", "a boolean"),
    ],
)
def test_out_of_range_values_name_the_field(field: str, value: object, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        GradScalerKwargs.from_mapping({field: value})
    assert err.value.handler == "grad_scaler"
    assert err.value.field == field
    assert fragment in str(err.value)


def test_from_mapping_suggests_a_close_field_name() -> None:
    with pytest.raises(ConfigError, match="did you mean 'backoff_factor'"):
        GradScalerKwargs.from_mapping({"backoff_filter": 0.25})


def test_from_mapping_accepts_text_forms() -> None:
    handler = GradScalerKwargs.from_mapping(
        {"init_scale": "1024", "growth_interval": "10", "enabled": "false"}, strings=True
    )
    assert handler == GradScalerKwargs(init_scale=1024.0, growth_interval=10, enabled=False)


def test_importing_the_plugin_does_not_import_torch() -> None:
    assert modules_loaded_by("import accelkw_grad_scaler, accelkw_grad_scaler.plugin") == []


def test_plugin_registers_through_an_isolated_registry() -> None:
    registry = isolated_registry([accelkw_grad_scaler.plugin])
    (record,) = registry.plugins()
    assert record.status == "loaded", record.error
    assert record.handlers == [GradScalerKwargs]
    assert registry.get("grad_scaler").cls is GradScalerKwargs
    assert accelkw_grad_scaler.GradScalerKwargs is GradScalerKwargs


def test_compose_fills_the_grad_scaler_slot() -> None:
    registry = isolated_registry([accelkw_grad_scaler.plugin])
    state = make_state(mixed_precision="fp16")
    (applied,) = compose(state, [GradScalerKwargs(growth_interval=5)], registry=registry)
    assert isinstance(applied, GradScalerKwargs)
    assert state.keyed(ATTRIBUTE)["scaler"].get_growth_interval() == 5
    (backward,) = state.contributions(AROUND_BACKWARD)
    assert backward.handler == "grad_scaler"


class TestGradScalerContract(HandlerContract):
    handler_class = GradScalerKwargs
    plugin_module = "accelkw_grad_scaler.plugin"
    examples: ClassVar = (
        {"enabled": False},
        {"init_scale": 1024.0, "growth_factor": 3.0, "backoff_factor": 0.25},
        {"growth_interval": 7, "init_scale": 65536.0},
    )

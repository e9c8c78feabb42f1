"""GradientAccumulationPlugin on one process: fields, keywords, plans, and training that matches
one batch ``num_steps`` times as large (fp32, and fp16 with the loss scaler)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import grad_accum_workers as workers
import pytest
import torch
from accelkw_grad_accum import GradientAccumulationPlugin
from accelkw_grad_accum.handler import AccumulationPolicy

from accelkw_core import Accelerator, ConfigError
from accelkw_core.plugin import ACCUMULATION
from accelkw_core.testing import HandlerContract, apply_handler, make_state, run_workers


def close(a: list[torch.Tensor], b: list[torch.Tensor], atol: float) -> bool:
    return all(torch.allclose(x, y, atol=atol, rtol=0) for x, y in zip(a, b, strict=True))


# -- the class ---------------------------------------------------------------------------------


def test_fields_follow_accelerate() -> None:
    fields = [(f.name, f.default) for f in dataclasses.fields(GradientAccumulationPlugin)]
    assert fields == [
        ("num_steps", None),
        ("adjust_scheduler", True),
        ("sync_with_dataloader", True),
        ("sync_each_batch", False),
    ]
    assert GradientAccumulationPlugin(4).to_kwargs() == {"num_steps": 4}
    assert GradientAccumulationPlugin(sync_each_batch=True).to_kwargs() == {"sync_each_batch": True}


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"num_steps": 0}, ">= 1"),
        ({"num_steps": -2}, ">= 1"),
        ({"num_steps": 2.5}, "integer"),
        ({"num_steps": True}, "integer"),
        ({"num_steps": "4"}, "integer"),
        ({"sync_each_batch": "yes"}, "bool"),
    ],
)
def test_values_that_cannot_apply_are_refused(kwargs: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as info:
        GradientAccumulationPlugin(**kwargs)
    assert info.value.handler == "grad_accum"


def test_accelerator_keywords_build_the_handler() -> None:
    registry = workers.registry()
    acc = Accelerator(cpu=True, registry=registry, gradient_accumulation_steps=4)
    assert acc.gradient_accumulation_steps == 4
    assert acc.state.handlers["grad_accum"] == GradientAccumulationPlugin(num_steps=4)
    plugin = GradientAccumulationPlugin(num_steps=3, sync_with_dataloader=False)
    acc = Accelerator(cpu=True, registry=registry, gradient_accumulation_plugin=plugin)
    assert acc.gradient_accumulation_steps == 3
    assert Accelerator(cpu=True, registry=registry).gradient_accumulation_steps == 1
    with pytest.raises(ConfigError, match="GradientAccumulationPlugin instance"):
        Accelerator(cpu=True, registry=registry, gradient_accumulation_plugin=4)


def test_the_step_count_can_change_during_the_run_and_is_checked() -> None:
    acc = Accelerator(cpu=True, registry=workers.registry())
    acc.gradient_accumulation_steps = 2
    assert acc.gradient_accumulation_steps == 2
    syncs = []
    for _ in range(4):
        with acc.accumulate():
            syncs.append(acc.sync_gradients)
    assert syncs == [False, True, False, True]
    with pytest.raises(ConfigError, match=r"grad_accum\.num_steps: got 0"):
        acc.gradient_accumulation_steps = 0


def test_plan_says_what_accumulation_does() -> None:
    plan = GradientAccumulationPlugin(num_steps=4).plan(make_state(world_size=2))
    text = plan.summary()
    assert "every 4th" in text and "divides the loss by 4" in text
    assert "last batch" in text and "no_sync" in text
    assert "no accumulation" in GradientAccumulationPlugin().plan(make_state()).summary()
    single = GradientAccumulationPlugin(num_steps=2, sync_each_batch=True).plan(make_state())
    assert "no effect on one process" in single.summary()
    state = apply_handler(GradientAccumulationPlugin(num_steps=4), make_state())
    (policy,) = state.values(ACCUMULATION)
    assert isinstance(policy, AccumulationPolicy) and policy.num_steps == 4


class TestGradAccumContract(HandlerContract):
    handler_class = GradientAccumulationPlugin
    plugin_module = "accelkw_grad_accum.plugin"
    examples: ClassVar = (
        {"num_steps": 4},
        {"num_steps": 2, "adjust_scheduler": False, "sync_with_dataloader": False},
        {"num_steps": 8, "sync_each_batch": True},
    )


# -- training ----------------------------------------------------------------------------------


@pytest.mark.parametrize("num_steps", [2, 4])
def test_micro_batches_give_the_parameters_of_one_larger_batch(num_steps: int) -> None:
    acc = Accelerator(cpu=True, registry=workers.registry(), gradient_accumulation_steps=num_steps)
    trained, syncs, _ = workers.accumulated(acc)
    reference = workers.full_batch(workers.MICRO * num_steps)
    assert close(trained, reference, atol=1e-6)
    assert syncs.count(True) == workers.SAMPLES // (workers.MICRO * num_steps)
    # Not accumulating would differ: the test can tell the two apart.
    assert not close(workers.full_batch(workers.MICRO), reference, atol=1e-3)


def test_the_last_batch_of_a_data_loader_forces_a_sync() -> None:
    # 16 micro-batches, 3 per step: syncs after 3, 6, 9, 12, 15, and on the 16th, the last.
    acc = Accelerator(cpu=True, registry=workers.registry(), gradient_accumulation_steps=3)
    _, syncs, _ = workers.accumulated(acc)
    assert [i + 1 for i, s in enumerate(syncs) if s] == [3, 6, 9, 12, 15, 16]
    assert acc.step == 0  # the count starts again after the last batch
    plugin = GradientAccumulationPlugin(num_steps=3, sync_with_dataloader=False)
    acc = Accelerator(cpu=True, registry=workers.registry(), gradient_accumulation_plugin=plugin)
    _, syncs, _ = workers.accumulated(acc)
    assert [i + 1 for i, s in enumerate(syncs) if s] == [3, 6, 9, 12, 15]
    assert acc.step == 16


def test_fp16_with_the_scaler_matches_a_hand_written_torch_loop() -> None:
    # In a fresh process: fp16 numerics on CPU are sensitive to process-wide state that other
    # suites running earlier in the same interpreter may leave behind.
    (result,) = run_workers(workers.fp16_against_torch, world_size=1, timeout=120)
    trained, by_hand, reference = (
        [torch.tensor(t) for t in result[k]] for k in ("trained", "by_hand", "reference")
    )
    assert result["scaler_present"]
    assert close(trained, by_hand, atol=1e-3)
    assert result["scale"] == result["scale_by_hand"]
    # And both are the fp32 large-batch run, to fp16 precision.
    assert close(trained, reference, atol=1e-2)


def test_the_scheduler_steps_only_with_the_optimizer_and_is_adjusted() -> None:
    for adjust in (True, False):
        plugin = GradientAccumulationPlugin(num_steps=4, adjust_scheduler=adjust)
        acc = Accelerator(
            cpu=True, registry=workers.registry(), gradient_accumulation_plugin=plugin
        )
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        inner = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        model, optimizer, scheduler = acc.prepare(model, optimizer, inner)
        for _ in range(8):
            with acc.accumulate(model):
                acc.backward(model(torch.ones(1, 1)).sum())
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
        assert scheduler.get_last_lr() == [0.25]  # two real steps halve it twice
        # Created at 1; +2 real steps; +6 counted micro-steps when adjusted.
        assert inner._step_count == (9 if adjust else 3)

"""Gradient accumulation: one training loop under Accelerate 1.15.0 and under accelkw.

Both run ``accumulate`` over a prepared data loader with a prepared scheduler, on one process;
the micro-steps that sync, ``accelerator.step``, the learning rates and the parameters agree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import torch

from tests.conformance.differences import listed

NUM_STEPS = 3
SAMPLES = 32  # 16 micro-batches of 2: syncs after 3, 6, 9, 12, 15 and on the last one


@pytest.fixture
def fresh_accelerate(accelerate: ModuleType) -> Iterator[ModuleType]:
    """Accelerate with its process-wide singletons cleared before and after the test."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    try:
        yield accelerate
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


def loop(accelerator: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    generator = torch.Generator().manual_seed(7)
    data = torch.utils.data.TensorDataset(
        torch.randn(SAMPLES, 4, generator=generator), torch.randn(SAMPLES, 2, generator=generator)
    )
    loader = torch.utils.data.DataLoader(data, batch_size=2)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    syncs, steps = [], []
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            syncs.append(accelerator.sync_gradients)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            steps.append(accelerator.step)
    return {
        "syncs": syncs,
        "steps": steps,
        "lr": scheduler.get_last_lr(),
        "step_count": scheduler.scheduler._step_count,
        "params": [p.detach().clone() for p in accelerator.unwrap_model(model).parameters()],
        "accumulation_steps": accelerator.gradient_accumulation_steps,
    }


def theirs(adjust_scheduler: bool) -> dict[str, Any]:
    from accelerate import Accelerator
    from accelerate.utils import GradientAccumulationPlugin

    plugin = GradientAccumulationPlugin(num_steps=NUM_STEPS, adjust_scheduler=adjust_scheduler)
    return loop(Accelerator(cpu=True, gradient_accumulation_plugin=plugin))


def ours(adjust_scheduler: bool) -> dict[str, Any]:
    import accelkw_grad_accum.plugin
    from accelkw_grad_accum import GradientAccumulationPlugin

    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry

    plugin = GradientAccumulationPlugin(num_steps=NUM_STEPS, adjust_scheduler=adjust_scheduler)
    registry = isolated_registry([accelkw_grad_accum.plugin])
    with Accelerator(cpu=True, registry=registry, gradient_accumulation_plugin=plugin) as acc:
        return loop(acc)


@pytest.mark.parametrize("adjust_scheduler", [False, True])
def test_the_same_loop_gives_the_same_run(
    fresh_accelerate: ModuleType, adjust_scheduler: bool
) -> None:
    a, b = theirs(adjust_scheduler), ours(adjust_scheduler)
    assert a["syncs"] == b["syncs"]
    assert [i + 1 for i, s in enumerate(b["syncs"]) if s] == [3, 6, 9, 12, 15, 16]
    assert a["steps"] == b["steps"]
    assert a["lr"] == b["lr"]
    assert a["accumulation_steps"] == b["accumulation_steps"] == NUM_STEPS
    for x, y in zip(a["params"], b["params"], strict=True):
        torch.testing.assert_close(x, y, atol=1e-6, rtol=0)
    if adjust_scheduler:
        # Accelerate reads the plugin through to_kwargs(), which drops the default True, and
        # then treats adjust_scheduler as False: the micro-steps are never counted.
        assert (a["step_count"], b["step_count"]) == (1 + 6, 1 + 16)
        listed("grad-accum-adjust-scheduler")
    else:
        assert a["step_count"] == b["step_count"] == 1 + 6


def test_field_defaults_match(fresh_accelerate: ModuleType) -> None:
    from accelerate.utils import GradientAccumulationPlugin as Theirs
    from accelkw_grad_accum import GradientAccumulationPlugin as Ours

    def fields(cls: type) -> list[tuple[str, Any]]:
        return [(f.name, f.default) for f in dataclasses.fields(cls) if f.init]

    assert fields(Ours) == fields(Theirs)
    assert Ours(num_steps=4).to_kwargs() == Theirs(num_steps=4).to_kwargs()


def test_a_step_count_below_one_is_refused(fresh_accelerate: ModuleType) -> None:
    from accelerate.utils import GradientAccumulationPlugin as Theirs
    from accelkw_grad_accum import GradientAccumulationPlugin as Ours

    from accelkw_core import ConfigError

    assert Theirs(num_steps=0).num_steps == 0  # accepted; the first micro-step divides by 0
    with pytest.raises(ConfigError, match=">= 1"):
        Ours(num_steps=0)
    listed("grad-accum-steps-checked")

"""EmaKwargs with real torch: the same averages as an EMA updated by hand, for evaluation and saved.

The fp16 case composes the built-ins accelkw-grad-scaler and accelkw-autocast (test dependencies
of this example; accelkw-grad-accum for accumulation): a step the scaler skips must not move the average.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import accelkw_autocast.plugin
import accelkw_grad_accum.plugin
import accelkw_grad_scaler.plugin
import pytest
import torch
from accelkw_ema import EmaKwargs, ema_of, plugin
from accelkw_ema.average import ExponentialMovingAverage
from accelkw_grad_scaler import GradScalerKwargs

from accelkw_core import Accelerator, ConfigError
from accelkw_core.plugin import CHECKPOINT
from accelkw_core.testing import HandlerContract, isolated_registry, make_state

EXAMPLE = Path(__file__).resolve().parent.parent


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
    gen = torch.Generator().manual_seed(5)
    out = []
    for i in range(steps):
        x, y = torch.randn(8, 4, generator=gen), torch.randn(8, 2, generator=gen)
        out.append((x, y * 1e6 if i == inf_step else y))
    return out


def new_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def train(acc: Accelerator, model: Any, opt: Any, data: list[Any]) -> list[bool]:
    skipped = []
    for x, y in data:
        acc.backward(torch.nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
        skipped.append(opt.step_was_skipped)
    return skipped


def by_hand(
    data: list[Any],
    decay: float,
    *,
    update_after_step: int = 0,
    update_every: int = 1,
    fp16: bool = False,
) -> tuple[torch.nn.Module, list[torch.Tensor], list[bool]]:
    """A loop with an EMA written out: copy for the first steps, then lerp every N steps."""
    model = new_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=fp16)
    average = [p.detach().clone() for p in model.parameters()]
    steps, skipped = 0, []
    for x, y in data:
        with torch.autocast("cpu", dtype=torch.float16, enabled=fp16):
            out = model(x)
        scaler.scale(torch.nn.functional.mse_loss(out.float(), y)).backward()
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        skipped.append(fp16 and scaler.get_scale() < scale)
        if skipped[-1]:
            continue
        steps += 1
        with torch.no_grad():
            for a, p in zip(average, model.parameters(), strict=True):
                if steps <= update_after_step:
                    a.copy_(p)
                elif (steps - update_after_step) % update_every == 0:
                    a.lerp_(p, 1 - decay)
    return model, average, skipped


def prepared(acc: Accelerator, seed: int = 0) -> tuple[Any, Any]:
    model = new_model(seed)
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    return model, opt


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y), (x, y)


# -- fields and plan ---------------------------------------------------------------------------


def test_fields_defaults_and_ordering() -> None:
    assert [(f.name, f.default) for f in dataclasses.fields(EmaKwargs)] == [
        ("decay", 0.999),
        ("update_after_step", 0),
        ("update_every", 1),
    ]
    assert (EmaKwargs.name, EmaKwargs.after, EmaKwargs.opt_in) == ("ema", ("ddp", "fsdp"), True)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"decay": 0}, "decay"),
        ({"decay": 1}, "decay"),
        ({"decay": 1.5}, "decay"),
        ({"decay": math.nan}, "decay"),
        ({"decay": math.inf}, "decay"),
        ({"update_after_step": -1}, "update_after_step"),
        ({"update_every": 0}, "update_every"),
        ({"update_every": 1.5}, "update_every"),
        ({"dacay": 0.9}, "dacay"),
    ],
)
def test_invalid_values_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        EmaKwargs.from_mapping(data)
    assert (err.value.handler, err.value.field) == ("ema", field)


def test_plan_contributes_one_object_to_four_points() -> None:
    plan = EmaKwargs(decay=0.99, update_after_step=10, update_every=2).plan(make_state())
    assert [(s.point, s.key) for s in plan.steps] == [
        ("model_wrapper", None),
        ("after_step", None),
        ("checkpoint", None),
        ("attribute", "ema"),
    ]
    average = plan.steps[2].value
    assert isinstance(average, ExponentialMovingAverage)
    assert plan.steps[3].value is average
    assert plan.steps[0].value == average.track and plan.steps[1].value == average.after_step
    assert plan.steps[1].message == (
        "after each optimizer step that was not skipped, copying the weights for the first 10 "
        "steps, averaging every 2 steps: average = 0.99 * average + 0.01 * weight, for the "
        "parameters that optimizer trains"
    )


def test_opt_in_installed_is_not_composed_until_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    with accelerator() as acc:
        assert "ema" not in acc.state.handlers
        assert acc.state.keyed(CHECKPOINT) == {}
    monkeypatch.setenv("ACCELKW_EMA__DECAY", "0.9")
    with accelerator() as acc:
        assert acc.state.handlers["ema"] == EmaKwargs(decay=0.9)
        assert ema_of(acc).decay == 0.9


# -- numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("after", "every"),
    [(0, 1), (2, 1), (1, 3)],
)
def test_the_average_matches_one_updated_by_hand(after: int, every: int) -> None:
    data = batches(7)
    with accelerator(EmaKwargs(decay=0.8, update_after_step=after, update_every=every)) as acc:
        model, opt = prepared(acc)
        train(acc, model, opt, data)
        got = list(ema_of(acc).averages().values())
        assert ema_of(acc).models == [model]
        assert ema_of(acc).state_dict()["models"][0]["steps"] == 7
    ref, average, _ = by_hand(data, 0.8, update_after_step=after, update_every=every)
    assert_same([p.detach() for p in model.parameters()], [p.detach() for p in ref.parameters()])
    assert_same(got, average)
    assert not torch.equal(got[0], next(model.parameters()))


def test_a_step_the_scaler_skips_does_not_move_or_count() -> None:
    data = batches(5, inf_step=2)
    handlers = (EmaKwargs(decay=0.5, update_every=2), GradScalerKwargs(init_scale=1024.0))
    with accelerator(*handlers, mixed_precision="fp16") as acc:
        model, opt = prepared(acc)
        skipped = train(acc, model, opt, data)
        got = list(ema_of(acc).averages().values())
        assert ema_of(acc).state_dict()["models"][0]["steps"] == 4
    ref, average, ref_skipped = by_hand(data, 0.5, update_every=2, fp16=True)
    assert skipped == ref_skipped == [False, False, True, False, False]
    assert_same([p.detach() for p in model.parameters()], [p.detach() for p in ref.parameters()])
    assert_same(got, average)


def test_micro_steps_of_gradient_accumulation_do_not_average() -> None:
    data = batches(6)
    with accelerator(EmaKwargs(decay=0.5), gradient_accumulation_steps=3) as acc:
        model, opt = prepared(acc)
        for x, y in data:
            with acc.accumulate(model):
                acc.backward(torch.nn.functional.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
        assert ema_of(acc).state_dict()["models"][0]["steps"] == 2
        got = list(ema_of(acc).averages().values())
    ref = new_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    average = [p.detach().clone() for p in ref.parameters()]
    for i, (x, y) in enumerate(data):
        (torch.nn.functional.mse_loss(ref(x), y) / 3).backward()
        if i % 3 == 2:
            ref_opt.step()
            ref_opt.zero_grad()
            with torch.no_grad():
                for a, p in zip(average, ref.parameters(), strict=True):
                    a.lerp_(p, 0.5)
    assert_same(got, average)


def test_average_parameters_swaps_in_for_evaluation_and_back() -> None:
    x = torch.randn(3, 4)
    with accelerator(EmaKwargs(decay=0.5)) as acc:
        model, opt = prepared(acc)
        train(acc, model, opt, batches(3))
        trained = [p.detach().clone() for p in model.parameters()]
        averages = [a.clone() for a in ema_of(acc).averages().values()]
        with ema_of(acc).average_parameters():
            assert_same([p.detach() for p in model.parameters()], averages)
            evaluated = model(x)
        assert_same([p.detach() for p in model.parameters()], trained)
        with torch.no_grad():
            expected = torch.func.functional_call(
                model, dict(zip(ema_of(acc).averages(), averages, strict=True)), (x,)
            )
        assert torch.equal(evaluated, expected)
        # Training goes on from the trained weights, not the averages.
        train(acc, model, opt, batches(1))
        ema_of(acc).copy_to()
        assert_same([p.detach() for p in model.parameters()], list(ema_of(acc).averages().values()))


def test_weights_come_back_when_evaluation_raises() -> None:
    with accelerator(EmaKwargs(decay=0.5)) as acc:
        model, opt = prepared(acc)
        train(acc, model, opt, batches(2))
        trained = [p.detach().clone() for p in model.parameters()]
        with pytest.raises(ZeroDivisionError), ema_of(acc).average_parameters():
            _ = 1 / 0
        assert_same([p.detach() for p in model.parameters()], trained)


def test_each_optimizer_updates_the_averages_of_what_it_trains() -> None:
    with accelerator(EmaKwargs(decay=0.5)) as acc:
        first, opt1 = prepared(acc, 0)
        second, opt2 = prepared(acc, 1)
        frozen = first[0].weight
        frozen.requires_grad_(False)
        opt1.param_groups[0]["params"] = [p for p in first.parameters() if p.requires_grad]
        start = [a.clone() for a in ema_of(acc).averages(1).values()]
        train(acc, first, opt1, batches(2))
        assert_same(list(ema_of(acc).averages(1).values()), start)  # opt2 never stepped
        assert torch.equal(ema_of(acc).averages(0)["0.weight"], frozen)
        assert not torch.equal(ema_of(acc).averages(0)["2.weight"], first[2].weight)
        assert [m["steps"] for m in ema_of(acc).state_dict()["models"]] == [2, 0]
        train(acc, second, opt2, batches(1))
        assert [m["steps"] for m in ema_of(acc).state_dict()["models"]] == [2, 1]


def test_preparing_a_model_twice_tracks_it_once() -> None:
    with accelerator(EmaKwargs()) as acc:
        model = acc.prepare(new_model())
        acc.prepare(model)
        assert ema_of(acc).models == [model]


# -- checkpoint --------------------------------------------------------------------------------


def test_saved_and_loaded_through_the_checkpoint_point_resumes_exactly() -> None:
    data = batches(6)
    with accelerator(EmaKwargs(decay=0.7, update_every=2)) as acc:
        assert acc.state.keyed(CHECKPOINT)["ema"] is ema_of(acc)
        model, opt = prepared(acc)
        train(acc, model, opt, data[:3])
        buffer = io.BytesIO()
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                **{k: v.state_dict() for k, v in acc.state.keyed(CHECKPOINT).items()},
            },
            buffer,
        )
        train(acc, model, opt, data[3:])
        straight = [a.clone() for a in ema_of(acc).averages().values()]
    with accelerator(EmaKwargs(decay=0.7, update_every=2)) as acc:
        model, opt = prepared(acc, seed=9)
        buffer.seek(0)
        saved = torch.load(buffer, weights_only=True)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        acc.state.keyed(CHECKPOINT)["ema"].load_state_dict(saved["ema"])
        assert ema_of(acc).state_dict()["models"][0]["steps"] == 3
        train(acc, model, opt, data[3:])
        assert_same(list(ema_of(acc).averages().values()), straight)


def test_save_state_and_load_state_carry_the_average(tmp_path: Path) -> None:
    data = batches(6)
    with accelerator(EmaKwargs(decay=0.7, update_every=2)) as acc:
        model, opt = prepared(acc)
        train(acc, model, opt, data[:3])
        folder = Path(acc.save_state(tmp_path / "checkpoint"))
        assert (folder / "ema.pt").is_file()  # keyed by the handler's name
        train(acc, model, opt, data[3:])
        straight = [a.clone() for a in ema_of(acc).averages().values()]
    with accelerator(EmaKwargs(decay=0.7, update_every=2)) as acc:
        model, opt = prepared(acc, seed=9)
        acc.load_state(folder)
        assert ema_of(acc).state_dict()["models"][0]["steps"] == 3
        train(acc, model, opt, data[3:])
        assert_same(list(ema_of(acc).averages().values()), straight)


def test_a_checkpoint_saved_without_the_average_starts_it_from_the_loaded_weights(
    tmp_path: Path,
) -> None:
    from accelkw_core.errors import CheckpointWarning

    data = batches(4)
    with accelerator() as acc:  # no EMA when this checkpoint was saved
        model, opt = prepared(acc)
        train(acc, model, opt, data)
        folder = Path(acc.save_state(tmp_path / "checkpoint"))
        saved = [p.detach().clone() for p in acc.unwrap_model(model).parameters()]
    with accelerator(EmaKwargs(decay=0.7)) as acc:
        model, opt = prepared(acc, seed=9)  # its average starts from these weights
        with pytest.warns(CheckpointWarning, match="handler 'ema' has no state"):
            acc.load_state(folder)
        assert_same(list(ema_of(acc).averages().values()), saved)
        assert ema_of(acc).state_dict()["models"][0]["steps"] == 0


def test_loading_into_other_models_says_what_differs() -> None:
    with accelerator(EmaKwargs()) as acc:
        prepared(acc)
        state = ema_of(acc).state_dict()
    with accelerator(EmaKwargs()) as acc:
        with pytest.raises(ValueError, match=r"averages of 1 model\(s\) but this run prepared 0"):
            ema_of(acc).load_state_dict(state)
        acc.prepare(torch.nn.Linear(4, 2))
        with pytest.raises(
            ValueError, match=r"missing \['bias', 'weight'\], unexpected \['0.bias'"
        ):
            ema_of(acc).load_state_dict(state)


# -- contract ----------------------------------------------------------------------------------


class TestEmaContract(HandlerContract):
    handler_class = EmaKwargs
    plugin_module = "accelkw_ema.plugin"
    examples: ClassVar = (
        {"decay": 0.9},
        {"decay": 0.5, "update_after_step": 100, "update_every": 10},
    )
    pyproject = EXAMPLE / "pyproject.toml"

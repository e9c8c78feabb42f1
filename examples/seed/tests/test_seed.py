"""SeedKwargs with real torch: repeatable draws, per-rank seeds, deterministic mode and its undo."""

from __future__ import annotations

import dataclasses
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import accelkw_seed
import pytest
import torch
from accelkw_seed import Seeded, SeedKwargs, plugin

from accelkw_core import ConfigError, RunState
from accelkw_core.plugin import ATTRIBUTE
from accelkw_core.runtime.composing.composition import compose
from accelkw_core.testing import (
    HandlerContract,
    applied,
    apply_handler,
    isolated_registry,
    make_state,
    modules_loaded_by,
    run_workers,
)

EXAMPLE = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _keep_global_generators() -> Iterator[None]:
    """Seeding is process-wide: give the other tests their generators back untouched."""
    py_state, torch_state = random.getstate(), torch.get_rng_state()
    np = _numpy()
    np_state = np.random.get_state() if np is not None else None
    yield
    random.setstate(py_state)
    torch.set_rng_state(torch_state)
    if np is not None:
        np.random.set_state(np_state)


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def draws() -> tuple[list[float], float]:
    values: list[float] = torch.randn(4).tolist()
    return values, random.random()


def test_fields_and_defaults() -> None:
    fields = [(f.name, f.default) for f in dataclasses.fields(SeedKwargs)]
    assert fields == [
        ("seed", 42),
        ("per_rank", True),
        ("deterministic", False),
        ("warn_only", True),
    ]
    assert SeedKwargs.name == "seed"


def test_same_seed_gives_identical_draws() -> None:
    with applied(SeedKwargs(seed=7)):
        first = draws()
    with applied(SeedKwargs(seed=7)):
        second = draws()
    with applied(SeedKwargs(seed=8)):
        other = draws()
    assert first == second
    assert other[0] != first[0] and other[1] != first[1]


def test_numpy_is_seeded_when_installed() -> None:
    np = pytest.importorskip("numpy")
    state = apply_handler(SeedKwargs(seed=7))
    a = np.random.rand(3).tolist()
    apply_handler(SeedKwargs(seed=7))
    assert np.random.rand(3).tolist() == a
    assert state.messages("seed") == ["seed random, numpy, torch with 7 (seed 7 + rank 0)"]


def test_without_numpy_the_others_are_seeded_and_the_log_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "numpy", None)  # what an environment without NumPy sees
    state = apply_handler(SeedKwargs(seed=7))
    first = draws()
    apply_handler(SeedKwargs(seed=7))
    assert draws() == first
    assert [(e.message, e.applied) for e in state.log] == [
        ("numpy is not installed: not seeded", False),
        ("seed random, torch with 7 (seed 7 + rank 0)", True),
    ]
    assert state.keyed(ATTRIBUTE)["seed"] == Seeded(7, ("random", "torch"))


def test_per_rank_seeds_differ_between_ranks_and_repeat_within_a_rank() -> None:
    per_rank: dict[int, list[tuple[list[float], float]]] = {}
    for rank in (0, 1, 0):
        state = apply_handler(SeedKwargs(seed=100), make_state(world_size=2, rank=rank))
        per_rank.setdefault(rank, []).append(draws())
        assert state.keyed(ATTRIBUTE)["seed"].seed == 100 + rank
    assert per_rank[0][0] == per_rank[0][1]
    assert per_rank[0][0] != per_rank[1][0]


def test_same_seed_on_every_rank_without_per_rank() -> None:
    results = []
    for rank in (0, 1):
        state = apply_handler(
            SeedKwargs(seed=100, per_rank=False), make_state(world_size=2, rank=rank)
        )
        results.append(draws())
        assert state.messages("seed")[-1].endswith("(seed 100, the same on every rank)")
    assert results[0] == results[1]


def test_effective_seed_stays_in_numpys_range() -> None:
    state = make_state(world_size=4, rank=3)
    assert SeedKwargs(seed=2**32 - 1).effective_seed(state) == 2
    apply_handler(SeedKwargs(seed=2**32 - 1), state)  # NumPy would raise on 2**32 + 2


def test_deterministic_mode_takes_effect_and_is_undone() -> None:
    assert not torch.are_deterministic_algorithms_enabled()
    with applied(SeedKwargs(deterministic=True, warn_only=False)) as state:
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        # A real effect on CPU: deterministic mode fills uninitialised memory with NaN.
        assert torch.isnan(torch.empty(8)).all()
        assert "deterministic algorithms on (raise on a nondeterministic op)" in " ".join(
            state.messages("seed")
        )
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic


def test_teardown_restores_the_users_previous_setting() -> None:
    torch.use_deterministic_algorithms(True, warn_only=False)
    try:
        with applied(SeedKwargs(deterministic=True, warn_only=True)):
            assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_warn_only_without_deterministic_is_reported_not_ignored() -> None:
    state = apply_handler(SeedKwargs(warn_only=False))
    assert not torch.are_deterministic_algorithms_enabled()
    assert ("warn_only is not used: deterministic=False", False) in [
        (e.message, e.applied) for e in state.log
    ]
    assert state.teardowns == []


def test_planning_touches_no_generator() -> None:
    py_before, torch_before = random.getstate(), torch.get_rng_state()
    state = make_state(world_size=2, rank=1)
    handler = SeedKwargs(seed=5, deterministic=True)
    plan = handler.plan(state)
    text = handler.describe(state)
    assert random.getstate() == py_before and torch.equal(torch.get_rng_state(), torch_before)
    assert not torch.are_deterministic_algorithms_enabled() and state.log == []
    assert state.keyed(ATTRIBUTE) == {} and state.teardowns == []
    assert text == plan.summary()
    assert "with 6 (seed 5 + rank 1)" in text and "deterministic algorithms on (warn" in text
    # What `accelkw plan` prints is what the run records.
    apply_handler(handler, state)
    try:
        assert state.messages("seed") == [s.message for s in plan.steps]
    finally:
        state.run_teardowns()


def test_on_cuda_the_cublas_workspace_is_set_and_unset_unless_the_user_set_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Planned and applied on a CUDA state's facts; nothing here needs a GPU.
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    handler = SeedKwargs(deterministic=True)
    with applied(handler, state=make_state(device_type="cuda")) as state:
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert any(
            m.startswith("set CUBLAS_WORKSPACE_CONFIG=:4096:8") for m in state.messages("seed")
        )
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    with applied(handler, state=make_state(device_type="cuda")) as state:
        assert "CUBLAS_WORKSPACE_CONFIG=:16:8 kept (set by the user)" in state.messages("seed")
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    plan = handler.plan(make_state())  # on CPU, cuBLAS is not mentioned
    assert not any("CUBLAS" in s.message for s in plan.steps)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"seed": "x"}, "seed"),
        ({"sed": 1}, "sed"),
    ],
)
def test_invalid_values_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        SeedKwargs.from_mapping(data)
    assert err.value.field == field and err.value.handler == "seed"


def test_text_values_from_the_environment() -> None:
    handler = SeedKwargs.from_mapping({"seed": "7", "deterministic": "true"}, strings=True)
    assert (handler.seed, handler.deterministic) == (7, True)


def test_plugin_registers_the_handler() -> None:
    info = isolated_registry([plugin]).get("seed")
    assert info.cls is SeedKwargs


class TestSeedContract(HandlerContract):
    handler_class = SeedKwargs
    plugin_module = "accelkw_seed.plugin"
    examples: ClassVar = (
        {"seed": 7},
        {"seed": 0, "deterministic": True},
        {"seed": 2**32 - 1, "per_rank": False, "deterministic": True, "warn_only": False},
        {"warn_only": False},
    )
    # Tested from its source tree (see conftest.py); the kit checks the installed entry point
    # too once the example is installed.
    pyproject = EXAMPLE / "pyproject.toml"


def test_a_seeded_training_step_repeats_exactly() -> None:
    def step() -> list[float]:
        with applied(SeedKwargs(seed=3), plugins=[plugin]):
            model = torch.nn.Linear(4, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            x, y = torch.randn(8, 4), torch.randn(8, 2)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            weights: list[float] = model.weight.flatten().tolist()
            return weights

    assert step() == step()


def test_importing_the_plugin_does_not_import_torch() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE), *sys.path])}
    assert modules_loaded_by("import accelkw_seed, accelkw_seed.plugin", env=env) == []
    assert accelkw_seed.__all__ == ["SeedKwargs", "Seeded"]


def seeded_draw(rank: int) -> list[float]:
    # The facts come from the variables torchrun sets (RANK, WORLD_SIZE), as in a real launch.
    state = RunState.from_env(cpu=True)
    compose(state, [SeedKwargs(seed=11)], registry=isolated_registry([plugin]))
    values: list[float] = torch.randn(3).tolist()
    return values


@pytest.mark.multiprocess
def test_ranks_of_a_real_launch_draw_different_repeatable_numbers() -> None:
    first = run_workers(seeded_draw, 2, timeout=120)
    assert first[0] != first[1]
    with applied(SeedKwargs(seed=11), state=make_state(world_size=2, rank=1)):
        assert torch.randn(3).tolist() == first[1]


def test_installed_it_changes_no_number_until_a_run_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    # The case: seed 1234, then an Accelerator with the plugin installed; the next draw
    # must be seed 1234's, not the plugin's default seed's.
    from accelkw_core import Accelerator

    monkeypatch.delenv("ACCELKW_SEED__SEED", raising=False)
    torch.manual_seed(1234)
    expected = torch.rand(1)
    torch.manual_seed(1234)
    with Accelerator(cpu=True, registry=isolated_registry([plugin])) as acc:
        assert "seed" not in acc.state.handlers
        assert torch.equal(torch.rand(1), expected)
    monkeypatch.setenv("ACCELKW_SEED__SEED", "42")  # asked for: seeded
    with Accelerator(cpu=True, registry=isolated_registry([plugin])) as acc:
        assert acc.state.handlers["seed"] == SeedKwargs(seed=42)
        torch.manual_seed(42)
        assert not torch.equal(torch.rand(1), expected)

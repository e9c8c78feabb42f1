"""ProfileKwargs with the real torch profiler on CPU: schedules, traces, ranks, validation, plugin."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

import accelkw_profile
import accelkw_profile.plugin
import pytest
import torch
from accelkw_profile import NoOpProfiler, ProfileKwargs

from accelkw_core import ConfigError
from accelkw_core.plugin import PROFILER, AcceleratorState
from accelkw_core.runtime.composing.composition import compose
from accelkw_core.testing import (
    HandlerContract,
    apply_handler,
    isolated_registry,
    make_state,
    modules_loaded_by,
)

# Accelerate's ProfileKwargs fields, in order, then accelkw's one addition at the end.
REFERENCE_FIELDS = [
    ("activities", None),
    ("schedule_option", None),
    ("on_trace_ready", None),
    ("record_shapes", False),
    ("profile_memory", False),
    ("with_stack", False),
    ("with_flops", False),
    ("with_modules", False),
    ("output_trace_dir", None),
]
EXTRA_FIELDS = [("profile_ranks", None)]


def event_names(path: Path) -> set[str]:
    data = json.loads(path.read_text())
    return {e.get("name", "") for e in data["traceEvents"]}


def profiler_of(state: AcceleratorState) -> Any:
    """The one ``profiler`` contribution: what ``accelerator.profile()`` enters."""
    (factory,) = state.values(PROFILER)
    return factory


def trace_ready(prof: Any) -> None:
    """A module-level ``on_trace_ready`` (a handler holding it can be pickled)."""


def run_model(prof: Any = None) -> None:
    model = torch.nn.Linear(8, 4)
    model(torch.randn(2, 8)).sum()
    if prof is not None:
        prof.step()


# The reference's own check: over 100 steps, on_trace_ready fires once per completed cycle,
# at most `repeat` times (repeat 0 = unlimited).
SCHEDULES = [
    {"wait": 1, "warmup": 1, "active": 2, "repeat": 1},
    {"wait": 2, "warmup": 2, "active": 2, "repeat": 2},
    {"wait": 0, "warmup": 1, "active": 3, "repeat": 3, "skip_first": 1},
    {"wait": 3, "warmup": 2, "active": 1, "repeat": 1, "skip_first": 2},
    {"wait": 1, "warmup": 0, "active": 1, "repeat": 5},
    {"wait": 1, "warmup": 1, "active": 2, "repeat": 0},
    {"wait": 0, "warmup": 0, "active": 2, "repeat": 3},
]


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
@pytest.mark.parametrize(
    "option", SCHEDULES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items())
)
def test_on_trace_ready_fires_once_per_cycle_up_to_repeat(option: dict[str, int]) -> None:
    total_steps = 100
    cycle = option.get("wait", 0) + option.get("warmup", 0) + option["active"]
    cycles = (total_steps - option.get("skip_first", 0)) // cycle
    expected = min(cycles, option["repeat"]) if option["repeat"] else cycles
    calls: list[object] = []
    handler = ProfileKwargs(activities=["cpu"], schedule_option=option, on_trace_ready=calls.append)
    state = apply_handler(handler, make_state())
    with profiler_of(state)() as prof:
        for _ in range(total_steps):
            prof.step()
            torch.tensor([1, 2, 3, 4, 5])
    assert len(calls) == expected


def test_the_exported_trace_is_json_holding_the_model_ops(tmp_path: Path) -> None:
    out = tmp_path / "traces" / "nested"
    handler = ProfileKwargs(activities=["cpu"], record_shapes=True, output_trace_dir=str(out))
    with handler.context(make_state()) as prof:
        run_model(prof)
    names = event_names(out / "profile_0.json")
    assert {"aten::addmm", "aten::linear"} & names
    assert list(out.iterdir()) == [out / "profile_0.json"]  # no temporary file left behind


def test_an_earlier_trace_is_replaced(tmp_path: Path) -> None:
    handler = ProfileKwargs(activities=["cpu"], output_trace_dir=str(tmp_path))
    (tmp_path / "profile_0.json").write_text('{"traceEvents": []}')
    with handler.context(make_state()):
        run_model()
    assert "aten::linear" in event_names(tmp_path / "profile_0.json")


@pytest.mark.parametrize("content", ["not json at all", '{"results": [1, 2]}', "[1, 2, 3]"])
def test_a_file_that_is_not_a_trace_is_never_overwritten(tmp_path: Path, content: str) -> None:
    victim = tmp_path / "profile_0.json"
    victim.write_text(content)
    handler = ProfileKwargs(activities=["cpu"], output_trace_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="not overwritten"), handler.context(make_state()):
        pytest.fail("profiling must not start when its trace cannot be written")
    assert victim.read_text() == content


def test_output_trace_dir_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    handler = ProfileKwargs(activities=["cpu"], output_trace_dir=str(blocker))
    with pytest.raises(ConfigError, match="output_trace_dir"), handler.context(make_state()):
        pass


def test_an_error_in_the_block_propagates_and_writes_no_trace(tmp_path: Path) -> None:
    handler = ProfileKwargs(activities=["cpu"], output_trace_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="boom"), handler.context(make_state()):
        raise RuntimeError("boom")
    assert not (tmp_path / "profile_0.json").exists()


def test_a_schedule_that_never_records_warns_instead_of_crashing(tmp_path: Path) -> None:
    handler = ProfileKwargs(
        activities=["cpu"],
        schedule_option={"wait": 50, "warmup": 1, "active": 1},
        output_trace_dir=str(tmp_path),
    )
    with pytest.warns(RuntimeWarning, match="recorded no step"), handler.context(make_state()) as p:
        run_model(p)
    assert not (tmp_path / "profile_0.json").exists()


def test_build_passes_every_flag() -> None:
    handler = ProfileKwargs(
        activities=["cpu"],
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
        with_flops=True,
        with_modules=True,
    )
    prof = handler.build()
    assert isinstance(prof, torch.profiler.profile)
    assert prof.activities == {torch.profiler.ProfilerActivity.CPU}
    assert prof.record_shapes and prof.profile_memory and prof.with_stack
    assert prof.with_flops and prof.with_modules


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_an_activity_this_machine_lacks_is_a_clear_error_when_built() -> None:
    handler = ProfileKwargs(
        activities=["cpu", "cuda"]
    )  # valid to construct: another machine may run it
    with pytest.raises(ConfigError) as err:
        handler.build()
    assert err.value.field == "activities"
    assert err.value.value == "cuda"
    assert "supports: 'cpu'" in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "field", "fragment"),
    [
        ({"activities": ["gpu"]}, "activities[0]", "one of 'cpu'"),
        ({"activities": ["cpu", "cpu"]}, "activities", "at most once"),
        ({"schedule_option": {"wiat": 1, "active": 1}}, "schedule_option['wiat']", "did you mean 'wait'"),
        ({"schedule_option": {"skip_first_wait": 1, "active": 1}}, "schedule_option['skip_first_wait']", "skip_first"),
        ({"schedule_option": {"wait": -1, "warmup": 0, "active": 1}}, "schedule_option['wait']", ">= 0"),
        ({"schedule_option": {"wait": 0, "warmup": 0, "active": 0}}, "schedule_option['active']", ">= 1"),
        ({"schedule_option": {"active": 2}}, "schedule_option", "missing: wait, warmup"),
        ({"schedule_option": {"wait": 1, "warmup": 1}}, "schedule_option", "'active'"),
        ({"schedule_option": {"active": "2"}}, "schedule_option['active']", "an integer"),
        ({"profile_ranks": [0, -1]}, "profile_ranks[1]", ">= 0"),
        ({"output_trace_dir": ""}, "output_trace_dir", "a path"),
    ],
)  # fmt: skip
def test_bad_values_are_config_errors_that_name_the_key(
    kwargs: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as err:
        ProfileKwargs(**kwargs)
    assert err.value.handler == "profile"
    assert err.value.field == field
    assert fragment in str(err.value)
    with pytest.raises(ConfigError):
        ProfileKwargs.from_mapping(kwargs)


def test_unknown_schedule_key_error_lists_the_allowed_keys() -> None:
    with pytest.raises(ConfigError, match="wait, warmup, active, repeat, skip_first"):
        ProfileKwargs(schedule_option={"cycles": 3, "wait": 0, "warmup": 0, "active": 1})


def test_from_mapping_reads_text_forms_and_never_imports_a_callable() -> None:
    handler = ProfileKwargs.from_mapping(
        {
            "activities": "cpu",
            "schedule_option": '{"wait": 0, "warmup": 0, "active": 2}',
            "profile_ranks": "[0, 1]",
        },
        strings=True,
    )
    assert handler == ProfileKwargs(
        activities=["cpu"],
        schedule_option={"wait": 0, "warmup": 0, "active": 2},
        profile_ranks=[0, 1],
    )
    with pytest.raises(ConfigError, match="on_trace_ready"):
        ProfileKwargs.from_mapping({"on_trace_ready": "os:system"})


def test_an_unselected_rank_gets_a_no_op_profiler_and_writes_nothing(tmp_path: Path) -> None:
    handler = ProfileKwargs(activities=["cpu"], output_trace_dir=str(tmp_path), profile_ranks=[0])
    state = apply_handler(handler, make_state(rank=1, world_size=2))
    with profiler_of(state)() as prof:
        assert isinstance(prof, NoOpProfiler)
        run_model(prof)
    assert list(tmp_path.iterdir()) == []
    (entry,) = state.log
    assert entry.message == (
        "rank 0 profiles in profile(); rank 1 is not in profile_ranks [0], "
        "so its profile() yields a no-op profiler"
    )
    # The no-op profiler is a contribution (so profile() on this rank neither profiles nor
    # warns that no profiler is configured), hence a step that changes the run.
    assert entry.applied is True


def test_a_selected_rank_writes_its_own_trace(tmp_path: Path) -> None:
    handler = ProfileKwargs(activities=["cpu"], output_trace_dir=str(tmp_path), profile_ranks=[1])
    state = apply_handler(handler, make_state(rank=1, world_size=2))
    with profiler_of(state)() as prof:
        assert isinstance(prof, torch.profiler.profile)
        run_model(prof)
    assert [p.name for p in tmp_path.iterdir()] == ["profile_1.json"]
    assert state.log[0].applied is True


def test_every_rank_profiles_by_default() -> None:
    handler = ProfileKwargs()
    assert all(handler.selects(rank) for rank in range(8))
    assert ProfileKwargs(profile_ranks=[]).selects(0) is False


def test_the_plan_matches_the_record_and_notes_ranks_outside_the_world(tmp_path: Path) -> None:
    handler = ProfileKwargs(
        activities=["cpu"], with_flops=True, output_trace_dir=str(tmp_path), profile_ranks=[0, 5]
    )
    state = make_state(world_size=2)
    plan = handler.plan(state)
    assert state.values(PROFILER) == [] and state.log == []  # planning changes nothing
    assert [s.point for s in plan.steps] == ["profiler"]
    text = plan.summary()
    assert handler.describe(state) == text
    apply_handler(handler, state)
    assert state.messages("profile") == [text]
    assert text == (
        f"rank 0 profiles in profile(): activities ['cpu']; with_flops; Chrome trace to "
        f"{tmp_path / 'profile_0.json'} (profile_ranks [5] name no rank of world size 2)"
    )


def test_fields_defaults_and_order_match_the_reference() -> None:
    fields = [(f.name, f.default) for f in dataclasses.fields(ProfileKwargs)]
    assert fields == REFERENCE_FIELDS + EXTRA_FIELDS
    assert ProfileKwargs.name == "profile"


def test_to_kwargs_keeps_the_reference_semantics() -> None:
    assert ProfileKwargs().to_kwargs() == {}
    assert ProfileKwargs(activities=["cpu"], record_shapes=True).to_kwargs() == {
        "activities": ["cpu"],
        "record_shapes": True,
    }
    assert ProfileKwargs(profile_ranks=None).explicit_kwargs() == {"profile_ranks": None}


def test_importing_the_plugin_does_not_import_torch() -> None:
    assert modules_loaded_by("import accelkw_profile, accelkw_profile.plugin") == []


def test_plugin_registers_through_an_isolated_registry() -> None:
    registry = isolated_registry([accelkw_profile.plugin])
    (record,) = registry.plugins()
    assert record.status == "loaded", record.error
    assert record.handlers == [ProfileKwargs]
    assert registry.get("profile").cls is ProfileKwargs
    assert accelkw_profile.ProfileKwargs is ProfileKwargs


def test_compose_contributes_the_profiler() -> None:
    registry = isolated_registry([accelkw_profile.plugin])
    state = make_state()
    (applied,) = compose(state, [], registry=registry)
    assert isinstance(applied, ProfileKwargs)
    (contribution,) = state.contributions(PROFILER)
    assert contribution.handler == "profile"
    with contribution.value() as prof:
        assert isinstance(prof, torch.profiler.profile)
        run_model(prof)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_describe_shows_an_activity_this_machine_lacks() -> None:
    text = ProfileKwargs(activities=["cpu", "cuda"]).describe(make_state())
    assert text.startswith("would fail when profile() is entered: profile.activities: got 'cuda'")
    assert "an activity this machine supports: 'cpu'" in text
    assert ProfileKwargs(activities=["cpu"]).describe(make_state()).startswith("rank 0 profiles")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_an_activity_this_machine_lacks_fails_when_profile_is_entered() -> None:
    # As in Accelerate: the run is set up, and profile() raises, rather than running unprofiled.
    state = apply_handler(ProfileKwargs(activities=["cpu", "cuda"]), make_state())
    factory = profiler_of(state)
    with pytest.raises(ConfigError, match="an activity this machine supports"), factory():
        pytest.fail("profiling must not start with an activity this machine lacks")
    # An unselected rank never builds a profiler, so it does not fail.
    other = apply_handler(
        ProfileKwargs(activities=["cuda"], profile_ranks=[0]), make_state(rank=1, world_size=2)
    )
    with profiler_of(other)() as prof:
        assert isinstance(prof, NoOpProfiler)


class TestProfileContract(HandlerContract):
    handler_class = ProfileKwargs
    plugin_module = "accelkw_profile.plugin"
    examples: ClassVar = (
        {"activities": ["cpu"], "record_shapes": True, "with_flops": True},
        {"schedule_option": {"wait": 1, "warmup": 1, "active": 2, "repeat": 1}},
        {"profile_ranks": [0], "on_trace_ready": trace_ready},
        {"profile_ranks": [1], "output_trace_dir": "traces"},
        {"profile_ranks": None, "with_modules": False},
    )


def test_the_plan_says_which_ranks_profile_not_only_this_one(tmp_path: Path) -> None:
    every = ProfileKwargs(output_trace_dir=str(tmp_path)).describe(make_state(world_size=2))
    assert every.startswith("every rank (0-1) profiles in profile()")
    assert f"Chrome traces to {tmp_path} (profile_0.json, profile_1.json)" in every
    one = ProfileKwargs(output_trace_dir=str(tmp_path), profile_ranks=[1])
    text = one.describe(make_state(world_size=2, rank=0))
    assert text.startswith("rank 1 profiles in profile(); rank 0 is not in profile_ranks [1]")
    assert one.describe(make_state(world_size=2, rank=1)).endswith(
        f"Chrome trace to {tmp_path / 'profile_1.json'}"
    )

"""InitProcessGroupKwargs without a process group: fields, validation, plans and descriptions."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import typing
from datetime import timedelta
from typing import ClassVar

import accelkw_process_group.plugin
import pytest
from accelkw_process_group import InitProcessGroupKwargs

from accelkw_core import ConfigError, Registry, RunState
from accelkw_core.runtime.composing.planning import plan_handler
from accelkw_core.testing import (
    HandlerContract,
    apply_handler,
    isolated_registry,
    make_state,
    modules_loaded_by,
)


@pytest.fixture
def rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29555")


@pytest.fixture
def no_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)


def test_fields_types_defaults_and_order_match_the_reference() -> None:
    hints = typing.get_type_hints(InitProcessGroupKwargs)
    fields = [
        (f.name, hints[f.name], f.default) for f in dataclasses.fields(InitProcessGroupKwargs)
    ]
    assert fields == [
        ("backend", str | None, "nccl"),
        ("init_method", str | None, None),
        ("timeout", timedelta | None, None),
    ]
    assert InitProcessGroupKwargs.name == "process_group"


def test_to_kwargs_keeps_reference_semantics_and_explicit_kwargs_keeps_what_was_set() -> None:
    assert InitProcessGroupKwargs().to_kwargs() == {}
    assert InitProcessGroupKwargs(backend="gloo").to_kwargs() == {"backend": "gloo"}
    # Equal to the default: dropped by to_kwargs (reference), kept as explicit.
    handler = InitProcessGroupKwargs(backend="nccl", timeout=timedelta(minutes=30))
    assert handler.to_kwargs() == {"timeout": timedelta(minutes=30)}
    assert handler.explicit_kwargs() == {"backend": "nccl", "timeout": timedelta(minutes=30)}


@pytest.mark.parametrize(
    "backend", ["gloo", "nccl", "mpi", "ucc", "xccl", "GLOO", "cpu:gloo,cuda:nccl", None]
)
def test_valid_backends_are_accepted(backend: str | None) -> None:
    assert InitProcessGroupKwargs(backend=backend).backend == backend


@pytest.mark.parametrize(
    ("backend", "suggestion"),
    [("glo", "gloo"), ("ncl", "nccl"), ("", None), ("cpu:", None), ("cpu:gloo,", None)],
)
def test_bad_backends_are_config_errors(backend: str, suggestion: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        InitProcessGroupKwargs(backend=backend)
    err = info.value
    assert (err.handler, err.field, err.value) == ("process_group", "backend", backend)
    assert err.suggestion == suggestion
    assert "cpu:gloo,cuda:nccl" in str(err)


def test_from_mapping_reads_strings_and_names_the_bad_field() -> None:
    handler = InitProcessGroupKwargs.from_mapping(
        {"backend": "gloo", "timeout": "90s", "init_method": "tcp://10.0.0.1:29500"},
        strings=True,
    )
    assert handler.timeout == timedelta(seconds=90)
    assert handler.explicit_fields() == {"backend", "timeout", "init_method"}
    with pytest.raises(ConfigError) as info:
        InitProcessGroupKwargs.from_mapping({"timeout": "soon"}, strings=True)
    assert info.value.field == "timeout"
    with pytest.raises(ConfigError) as info:
        InitProcessGroupKwargs.from_mapping({"init_method": "10.0.0.1:29500"})
    assert info.value.field == "init_method"
    assert "tcp://HOST:PORT" in str(info.value)
    with pytest.raises(ConfigError) as info:
        InitProcessGroupKwargs.from_mapping({"timout": 5})
    assert info.value.suggestion == "timeout"


def test_world_size_one_records_that_there_is_no_group() -> None:
    state = apply_handler(InitProcessGroupKwargs(backend="nccl"))
    assert [(e.message, e.applied) for e in state.log] == [
        ("world size 1: no process group", False)
    ]
    assert state.teardowns == []
    assert InitProcessGroupKwargs().describe(make_state()) == "world size 1: no process group"


@pytest.mark.usefixtures("rendezvous")
def test_default_nccl_becomes_gloo_without_cuda() -> None:
    plan = InitProcessGroupKwargs().group_plan(make_state(world_size=2))
    assert plan.backend == "gloo"
    assert plan.fallback is not None
    assert "'nccl' needs CUDA" in plan.fallback
    assert "'gloo'" in plan.fallback
    assert plan.init_kwargs(0, 2) == {"backend": "gloo", "rank": 0, "world_size": 2}
    # The handler's plan says so first, then initialises the group as its one effective step.
    steps = InitProcessGroupKwargs().plan(make_state(world_size=2)).steps
    assert [(s.message, s.effective) for s in steps[:1]] == [(plan.fallback, False)]
    assert steps[1].action is not None and steps[1].provides == ("process_group",)
    assert steps[1].message.startswith("initialise the process group: rank 0 of 2")


@pytest.mark.usefixtures("rendezvous")
@pytest.mark.parametrize(
    "derive",
    [
        lambda h: h.replace(timeout=timedelta(seconds=9)),
        copy.copy,
        copy.deepcopy,
        lambda h: pickle.loads(pickle.dumps(h)),
    ],
    ids=["replace", "copy", "deepcopy", "pickle"],
)
def test_a_derived_handler_keeps_the_default_backend_a_default(derive: typing.Any) -> None:
    # Marking every field explicit would turn "gloo in place of the default nccl" into an
    # error for an explicit 'nccl' on this 2-rank CPU run.
    handler = derive(InitProcessGroupKwargs(timeout=timedelta(seconds=5)))
    assert handler.explicit_fields() == {"timeout"}
    plan = handler.group_plan(make_state(world_size=2))
    assert plan.backend == "gloo" and plan.fallback is not None


@pytest.mark.usefixtures("rendezvous")
def test_dataclasses_replace_makes_the_default_backend_explicit() -> None:
    # The documented semantics: dataclasses.replace passes every field to the constructor, so
    # its 'nccl' is a choice, which this 2-rank CPU run refuses by name; replace() keeps it a
    # default.
    handler = InitProcessGroupKwargs(timeout=timedelta(seconds=5))
    replaced = dataclasses.replace(handler, timeout=timedelta(seconds=9))
    assert replaced.explicit_fields() == {"backend", "init_method", "timeout"}
    with pytest.raises(ConfigError) as info:
        replaced.group_plan(make_state(world_size=2))
    assert (info.value.field, info.value.value) == ("backend", "nccl")
    plan = handler.replace(timeout=timedelta(seconds=9)).group_plan(make_state(world_size=2))
    assert plan.backend == "gloo"


@pytest.mark.usefixtures("rendezvous")
def test_default_nccl_on_a_cuda_state_without_cuda_also_falls_back() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here, so 'nccl' is kept")
    plan = InitProcessGroupKwargs().group_plan(make_state(world_size=2, device_type="cuda"))
    assert plan.backend == "gloo"
    assert plan.fallback is not None
    assert "CUDA is not available" in plan.fallback


@pytest.mark.usefixtures("rendezvous")
def test_explicit_nccl_without_cuda_is_a_clear_error() -> None:
    import torch.distributed as dist

    handler = InitProcessGroupKwargs(backend="nccl")
    state = make_state(world_size=2)
    with pytest.raises(ConfigError) as info:
        handler.apply(state)
    err = info.value
    assert (err.field, err.value) == ("backend", "nccl")
    assert "needs CUDA" in str(err)
    assert "backend='gloo'" in str(err)
    assert not dist.is_initialized()
    assert state.teardowns == [] and state.log == []
    with pytest.raises(ConfigError, match="needs CUDA"):
        handler.plan(state)
    # What `accelkw plan` prints for it.
    assert plan_handler("process_group", handler, state).summary.startswith(
        "would fail: process_group.backend"
    )


@pytest.mark.usefixtures("rendezvous")
def test_a_backend_this_build_lacks_is_an_error_naming_the_available_ones() -> None:
    import torch.distributed as dist

    if dist.is_mpi_available():
        pytest.skip("this torch build has MPI")
    with pytest.raises(ConfigError) as info:
        InitProcessGroupKwargs(backend="mpi").group_plan(make_state(world_size=2))
    assert info.value.field == "backend"
    assert "'mpi' is not built in" in str(info.value)
    assert "gloo" in info.value.expected


@pytest.mark.usefixtures("rendezvous")
def test_an_explicit_timeout_is_passed_even_when_equal_to_a_default() -> None:
    state = make_state(world_size=2)
    half_hour = timedelta(minutes=30)  # torch's own default for gloo
    plan = InitProcessGroupKwargs(backend="gloo", timeout=half_hour).group_plan(state)
    assert plan.init_kwargs(1, 2)["timeout"] == half_hour
    assert "timeout 1800s (set explicitly)" in plan.notes
    default = InitProcessGroupKwargs(backend="gloo").group_plan(state)
    assert "timeout" not in default.init_kwargs(1, 2)


@pytest.mark.usefixtures("rendezvous")
def test_backend_none_leaves_the_choice_to_torch() -> None:
    plan = InitProcessGroupKwargs(backend=None).group_plan(make_state(world_size=2))
    assert plan.init_kwargs(0, 2)["backend"] is None
    assert plan.fallback is None


@pytest.mark.usefixtures("rendezvous")
def test_init_method_defaults_to_env_and_an_explicit_one_is_passed() -> None:
    state = make_state(world_size=2)
    plan = InitProcessGroupKwargs(backend="gloo").group_plan(state)
    assert "init_method" not in plan.init_kwargs(0, 2)
    assert "init_method env:// (MASTER_ADDR=127.0.0.1, MASTER_PORT=29555)" in plan.notes
    url = "tcp://10.1.2.3:4000"
    plan = InitProcessGroupKwargs(backend="gloo", init_method=url).group_plan(state)
    assert plan.init_kwargs(0, 2)["init_method"] == url


@pytest.mark.usefixtures("no_rendezvous")
def test_without_master_env_the_states_address_or_an_error_names_init_method() -> None:
    state = RunState(cpu=True, rank=1, world_size=2, master_addr="10.0.0.7", master_port=29400)
    plan = InitProcessGroupKwargs(backend="gloo").group_plan(state)
    assert plan.init_method == "tcp://10.0.0.7:29400"
    with pytest.raises(ConfigError) as info:
        InitProcessGroupKwargs(backend="gloo").plan(make_state(world_size=2))
    assert info.value.field == "init_method"
    assert "MASTER_ADDR" in str(info.value)


@pytest.mark.usefixtures("rendezvous")
def test_the_plan_says_what_would_happen_without_creating_a_group() -> None:
    import torch.distributed as dist

    handler = InitProcessGroupKwargs(timeout=timedelta(seconds=5))
    state = make_state(world_size=2, rank=1)
    plan = handler.plan(state)
    (init,) = [s for s in plan.steps if s.effective]
    assert init.message.startswith("initialise the process group: rank 1 of 2")
    assert "backend 'gloo'" in init.message
    assert "timeout 5s (set explicitly)" in init.message
    assert handler.describe(state) == plan.summary()
    assert init.message in plan.summary()
    assert not dist.is_initialized()
    assert state.log == [] and state.teardowns == [] and state.capabilities == {}


def test_registered_through_the_plugin_hook_and_the_installed_entry_point() -> None:
    registry = isolated_registry([accelkw_process_group.plugin])
    assert registry.get("process_group").cls is InitProcessGroupKwargs
    info = Registry(autoload=True, allow=None, deny=(), env={}).handlers().get("process_group")
    assert info is not None, "accelkw-process-group is not installed (pip install -e)"
    assert info.distribution == "accelkw-process-group"


def test_importing_the_plugin_and_building_a_handler_does_not_import_torch() -> None:
    code = (
        "import accelkw_process_group.plugin\n"
        "from accelkw_process_group import InitProcessGroupKwargs\n"
        "h = InitProcessGroupKwargs(backend='cpu:gloo,cuda:nccl', timeout=5)\n"
        "h.to_kwargs(); h.explicit_kwargs()\n"
    )
    assert modules_loaded_by(code) == []


def test_the_exit_pause_is_registered_once_per_process() -> None:
    import atexit

    from accelkw_process_group import _exit_guard

    before = atexit._ncallbacks()
    _exit_guard.settle_workers_at_exit()
    _exit_guard.settle_workers_at_exit()
    assert atexit._ncallbacks() - before in (0, 1)  # 0 when an earlier test created a group
    assert _exit_guard._registered is True


class TestProcessGroupContract(HandlerContract):
    handler_class = InitProcessGroupKwargs
    plugin_module = "accelkw_process_group.plugin"
    examples: ClassVar = (
        {"backend": "gloo"},
        {"backend": None, "timeout": timedelta(seconds=5)},
        {"backend": "gloo", "init_method": "tcp://127.0.0.1:29500"},
        {"backend": "cpu:gloo,cuda:nccl", "timeout": timedelta(minutes=30)},
        {"backend": "nccl"},
    )

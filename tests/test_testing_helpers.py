"""The helpers plugin authors test with: states, one-handler application, isolated composition,
and real worker processes (no mocks: a real gloo group when a test asks for one)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from accelkw_core import ConfigError, HandlerApplyError, KwargsHandler, RunState
from accelkw_core.contract.points import POINTS
from accelkw_core.plugin import TEARDOWN, Plan, handler_field, hookimpl
from accelkw_core.testing import (
    HandlerContract,
    WorkerFailed,
    applied,
    apply_handler,
    compose_handlers,
    free_port,
    isolated_registry,
    make_state,
    run_workers,
)

# -- inline handlers and plugins --------------------------------------------------------------

# What the handlers below changed, as a process-wide setting would be; teardowns undo it.
GLOBAL_SETTINGS: dict[str, Any] = {}


@dataclass
class FirstKwargs(KwargsHandler):
    """Sets a process-wide value and registers its undo."""

    name: ClassVar[str] = "first"

    value: int = handler_field(1, doc="what to set", ge=0)

    def apply(self, state: RunState) -> None:
        GLOBAL_SETTINGS["first"] = self.value
        state.contribute(TEARDOWN, self.name, lambda: GLOBAL_SETTINGS.pop("first", None))
        state.record(self.name, f"set first={self.value}")


@dataclass
class SecondKwargs(KwargsHandler):
    """Must run after ``first`` and reads what it set."""

    name: ClassVar[str] = "second"
    after: ClassVar[tuple[str, ...]] = ("first",)

    fail: bool = handler_field(False, doc="raise in apply")

    def apply(self, state: RunState) -> None:
        if self.fail:
            raise RuntimeError("second failed on purpose")
        state.record(self.name, f"saw first={GLOBAL_SETTINGS.get('first')}")


class BothPlugin:
    """A plugin object contributing both handlers and watching the state become ready."""

    ready: ClassVar[list[RunState]] = []

    @hookimpl
    def accelkw_register_handlers(self, register: Callable[[type[KwargsHandler]], None]) -> None:
        register(SecondKwargs)
        register(FirstKwargs)

    @hookimpl
    def accelkw_state_ready(self, state: RunState) -> None:
        self.ready.append(state)


@pytest.fixture(autouse=True)
def _clean_settings() -> Any:
    GLOBAL_SETTINGS.clear()
    BothPlugin.ready.clear()
    yield
    assert GLOBAL_SETTINGS == {}, "a test left a handler's setting behind"


# -- make_state ---------------------------------------------------------------------------------


def test_make_state_holds_the_given_facts_and_no_slots() -> None:
    state = make_state(world_size=4, rank=3, mixed_precision="bf16")
    assert (state.rank, state.local_rank, state.world_size, state.local_world_size) == (3, 3, 4, 4)
    assert state.distributed and not state.is_main_process
    assert state.mixed_precision == "bf16" and state.device_type == "cpu" and state.cpu
    assert all(state.contributions(p) == [] for p in POINTS) and state.log == []


def test_make_state_local_facts_for_several_machines() -> None:
    state = make_state(world_size=8, rank=5, local_rank=1, local_world_size=4)
    assert (state.rank, state.local_rank, state.local_world_size) == (5, 1, 4)


def test_make_state_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert (make_state().rank, make_state().world_size) == (0, 1)


def test_make_state_rejects_impossible_facts() -> None:
    with pytest.raises(ConfigError, match=r"rank: got 2, expected an integer in \[0, 2\)"):
        make_state(world_size=2, rank=2)


# -- apply_handler ------------------------------------------------------------------------------


def test_apply_handler_returns_the_state_with_what_the_handler_did() -> None:
    state = apply_handler(FirstKwargs(value=7))
    assert state.messages("first") == ["set first=7"]
    assert isinstance(state.handlers["first"], FirstKwargs)
    assert GLOBAL_SETTINGS == {"first": 7}
    assert state.run_teardowns() == []


def test_apply_handler_uses_the_given_state_and_only_that_handler() -> None:
    state = make_state(world_size=2, rank=1)
    assert apply_handler(SecondKwargs(), state) is state
    # ``first`` is not applied: apply_handler runs one handler, not a composition.
    assert state.messages("second") == ["saw first=None"]
    assert list(state.handlers) == ["second"]


def test_apply_handler_lets_the_handlers_own_error_through() -> None:
    with pytest.raises(RuntimeError, match="on purpose"):
        apply_handler(SecondKwargs(fail=True))


# -- isolated_registry ----------------------------------------------------------------------------


def test_isolated_registry_reads_no_entry_points() -> None:
    # Whatever is installed in this environment (built-in plugins, examples), none of it appears.
    registry = isolated_registry()
    assert registry.handlers() == {}
    assert registry.plugins() == []


def test_isolated_registry_holds_exactly_the_given_plugins() -> None:
    registry = isolated_registry([BothPlugin()])
    assert list(registry.handlers()) == ["first", "second"]
    info = registry.get("second")
    assert info.cls is SecondKwargs and info.distribution is None


# -- compose_handlers and applied ---------------------------------------------------------------


def test_compose_handlers_adds_plugin_defaults_orders_and_runs_hooks() -> None:
    state = compose_handlers([SecondKwargs()], plugins=[BothPlugin()])
    # ``first`` joined with its defaults and ran before ``second`` (its ``after``).
    assert list(state.handlers) == ["first", "second"]
    assert [str(e) for e in state.log] == ["first: set first=1", "second: saw first=1"]
    assert BothPlugin.ready == [state]
    state.run_teardowns()


def test_compose_handlers_without_defaults_applies_only_the_given_ones() -> None:
    state = compose_handlers([SecondKwargs()], plugins=[BothPlugin()], include_defaults=False)
    assert list(state.handlers) == ["second"]


def test_compose_handlers_rolls_back_and_names_the_failing_handler() -> None:
    with pytest.raises(HandlerApplyError, match="handler 'second'") as err:
        compose_handlers([FirstKwargs(value=3), SecondKwargs(fail=True)])
    assert isinstance(err.value.cause, RuntimeError)
    # The teardown of ``first``, applied before the failure, already ran (checked by the fixture).


def test_applied_undoes_everything_on_exit() -> None:
    with applied(FirstKwargs(value=5), SecondKwargs()) as state:
        assert GLOBAL_SETTINGS == {"first": 5}
        assert state.messages("second") == ["saw first=5"]
    assert GLOBAL_SETTINGS == {}


def test_applied_undoes_everything_when_the_block_raises() -> None:
    with pytest.raises(KeyError), applied(FirstKwargs()):
        raise KeyError("boom")
    assert GLOBAL_SETTINGS == {}


def test_applied_reports_a_failing_teardown() -> None:
    @dataclass
    class BadUndo(KwargsHandler):
        name: ClassVar[str] = "bad_undo"

        def apply(self, state: RunState) -> None:
            state.contribute(TEARDOWN, self.name, lambda: 1 / 0)

    with pytest.raises(AssertionError, match="bad_undo: ZeroDivisionError"), applied(BadUndo()):
        pass


# -- free_port and run_workers ------------------------------------------------------------------


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))


def report_env(rank: int, key: str) -> dict[str, Any]:
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", key)
    return {"rank": rank, **{n: os.environ.get(n) for n in names}}


def test_run_workers_sets_torchrun_variables_and_returns_in_rank_order() -> None:
    out = run_workers(report_env, 2, args=("EXTRA",), env={"EXTRA": "yes", "RANK": "99"})
    assert [o["rank"] for o in out] == [0, 1]
    assert [o["RANK"] for o in out] == ["0", "1"]  # torchrun's variables win over ``env``
    assert {o["WORLD_SIZE"] for o in out} == {"2"}
    assert {o["MASTER_ADDR"] for o in out} == {"127.0.0.1"}
    assert {o["EXTRA"] for o in out} == {"yes"}


def all_reduce_ranks(rank: int) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=30))
    try:
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        return float(t.item())
    finally:
        dist.destroy_process_group()


@pytest.mark.multiprocess
def test_run_workers_forms_a_real_gloo_group() -> None:
    assert run_workers(all_reduce_ranks, 2, timeout=120) == [3.0, 3.0]


def misbehave(rank: int) -> str:
    if rank == 1:
        raise ValueError("rank one is broken")
    if rank == 2:
        os._exit(3)
    return "ok"


def test_run_workers_reports_each_failure_with_its_cause() -> None:
    out = run_workers(misbehave, 3, allow_failures=True, timeout=60)
    assert out[0] == "ok"
    assert isinstance(out[1], WorkerFailed)
    assert "rank 1 failed" in str(out[1]) and "ValueError: rank one is broken" in str(out[1])
    assert isinstance(out[2], WorkerFailed) and "exited with code 3" in str(out[2])
    with pytest.raises(WorkerFailed, match="rank 1 failed"):
        run_workers(misbehave, 2, timeout=60)


def sleep_forever(rank: int) -> None:
    time.sleep(600)


def test_run_workers_kills_workers_that_outlive_the_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match="did not finish within 3s") as caught:
        run_workers(sleep_forever, 1, timeout=3)
    assert time.monotonic() - start < 30
    # The failure says where the worker hung: its stack when it was found, the call it was in.
    assert "where it was:" in str(caught.value) and "sleep_forever" in str(caught.value)


def test_modules_loaded_by_reports_what_a_fresh_interpreter_imported() -> None:
    from accelkw_core.testing import modules_loaded_by

    assert modules_loaded_by("import accelkw_core.discovery.registry") == []
    assert modules_loaded_by("import json", prefix="json")[:1] == ["json"]
    with pytest.raises(AssertionError, match="ZeroDivisionError"):
        modules_loaded_by("1 / 0")


# -- the contract kit fails a handler that refuses everywhere, unless it says so ---------------


@dataclass
class AlwaysRefuses(KwargsHandler):
    """Refuses every state: the kit's apply and teardown checks would check nothing."""

    name: ClassVar[str] = "always_refuses"

    def plan(self, state: Any) -> Plan:
        raise ConfigError(self.name, "world_size", state.world_size, "a GPU cluster")


@dataclass
class Applies(KwargsHandler):
    name: ClassVar[str] = "applies"

    def plan(self, state: Any) -> Plan:
        return Plan(self.name).note("nothing to do")


def kit_for(cls: type[KwargsHandler], declared: bool) -> HandlerContract:
    class Kit(HandlerContract):
        handler_class = cls
        plugin_module = __name__
        refuses_everywhere = declared

    return Kit()


@pytest.mark.parametrize(
    "check", ["test_apply_carries_out_the_plan_through_public_points", "test_teardown_undoes_apply"]
)
def test_the_contract_kit_fails_a_handler_that_refuses_everywhere_unless_declared(
    check: str,
) -> None:
    with pytest.raises(AssertionError, match="AlwaysRefuses refused every state the kit tried"):
        getattr(kit_for(AlwaysRefuses, declared=False), check)()
    getattr(kit_for(AlwaysRefuses, declared=True), check)()  # said so: passes
    getattr(kit_for(Applies, declared=False), check)()
    with pytest.raises(AssertionError, match="declares `refuses_everywhere = True` but applied"):
        getattr(kit_for(Applies, declared=True), check)()

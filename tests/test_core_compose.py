"""Composition: defaults, duplicates, custom handlers, ordering, cycles and rollback."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from accelkw_core import ComposeError, HandlerApplyError, KwargsHandler, RunState
from accelkw_core.config.selection import order_handlers, resolve_handlers
from accelkw_core.plugin import ATTRIBUTE, MODEL_WRAPPER, TEARDOWN, hookimpl
from accelkw_core.runtime.composing.composition import compose
from accelkw_core.testing import plugin_of


def handler(name: str, after: tuple[str, ...] = (), fail: bool = False) -> type[KwargsHandler]:
    def apply(self: Any, state: RunState) -> None:
        if fail:
            raise RuntimeError(f"{name} cannot apply")
        state.contribute(ATTRIBUTE, name, self.value)
        state.contribute(MODEL_WRAPPER, name, lambda m: m)
        state.record(name, f"value {self.value}")
        state.contribute(TEARDOWN, name, lambda: None)

    cls = type(
        f"{name.title()}Kwargs", (KwargsHandler,), {"name": name, "after": after, "apply": apply}
    )
    cls.__annotations__ = {"value": int}
    cls.value = 0
    return dataclass(cls)


def test_defaults_fill_in_every_enabled_installed_handler(fresh_registry: Any) -> None:
    A, B = handler("alpha"), handler("beta")
    reg = fresh_registry(plugin_of(A, B))
    state = RunState(cpu=True)
    applied = compose(state, [A(value=3)], registry=reg)
    assert [type(h) for h in applied] == [A, B]
    assert state.keyed(ATTRIBUTE) == {"alpha": 3, "beta": 0}
    assert state.summary() == ["alpha: value 3", "beta: value 0"]
    assert set(state.handlers) == {"alpha", "beta"}
    assert [type(h) for h in resolve_handlers([], registry=reg, disabled=["beta"])] == [A]
    assert resolve_handlers([], registry=reg, include_defaults=False) == []


def test_two_of_one_class_is_a_value_error(fresh_registry: Any) -> None:
    A = handler("alpha")
    with pytest.raises(
        ValueError, match=r"You can only pass one `AlphaKwargs` in `kwargs_handlers`\."
    ):
        resolve_handlers([A(), A(value=2)], registry=fresh_registry())


def test_two_classes_claiming_one_name_are_rejected(fresh_registry: Any) -> None:
    A = handler("alpha")

    @dataclass
    class Other(KwargsHandler):
        name = "alpha"

    with pytest.raises(ComposeError, match="both configure 'alpha'"):
        resolve_handlers([A(), Other()], registry=fresh_registry())


def test_non_handlers_are_rejected_with_position(fresh_registry: Any) -> None:
    A = handler("alpha")
    with pytest.raises(
        ComposeError,
        match=r"kwargs_handlers\[1\]: got \{'x': 1\} \(dict\), expected a KwargsHandler",
    ):
        resolve_handlers([A(), {"x": 1}], registry=fresh_registry())


def test_unregistered_custom_handler_is_first_class(fresh_registry: Any) -> None:
    A = handler("alpha")
    Custom = handler("custom", after=("alpha",))
    reg = fresh_registry(plugin_of(A))
    state = RunState(cpu=True)
    applied = compose(state, [Custom(value=9)], registry=reg)
    assert [h.name for h in applied] == ["alpha", "custom"]
    assert state.keyed(ATTRIBUTE)["custom"] == 9


def test_subclass_of_a_registered_handler_replaces_its_default(fresh_registry: Any) -> None:
    A = handler("alpha")
    Sub = dataclass(type("SubAlpha", (A,), {}))
    reg = fresh_registry(plugin_of(A))
    applied = resolve_handlers([Sub(value=1)], registry=reg)
    assert [type(h) for h in applied] == [Sub]


def test_order_is_topological_and_deterministic() -> None:
    classes = [
        handler("d", after=("b", "c")),
        handler("c", after=("a",)),
        handler("b", after=("a",)),
        handler("a"),
    ]
    for perm in (classes, classes[::-1], classes[1:] + classes[:1]):
        assert [h.name for h in order_handlers([c() for c in perm])] == ["a", "b", "c", "d"]
    # Constraints naming absent handlers are ignored.
    assert [h.name for h in order_handlers([handler("z", after=("missing",))()])] == ["z"]


def test_cycles_are_reported_with_their_members() -> None:
    hs = [
        handler("x", after=("y",))(),
        handler("y", after=("z",))(),
        handler("z", after=("x",))(),
        handler("free")(),
    ]
    with pytest.raises(
        ComposeError,
        match=r"cycle among: x \(after \['y'\]\), y \(after \['z'\]\), z \(after \['x'\]\)",
    ):
        order_handlers(hs)


def test_a_failing_apply_undoes_everything_before_it(fresh_registry: Any) -> None:
    A, B, C = (
        handler("alpha"),
        handler("beta", after=("alpha",)),
        handler("gamma", after=("beta",), fail=True),
    )
    reg = fresh_registry(plugin_of(A, B, C))
    state = RunState(cpu=True)
    undone: list[str] = []
    state.contribute(TEARDOWN, "outside", lambda: undone.append("outside"))
    with pytest.raises(HandlerApplyError) as info:
        compose(state, [], registry=reg)
    err = info.value
    assert err.handler == "gamma" and err.distribution is None
    assert isinstance(err.cause, RuntimeError)
    assert (
        "handler 'gamma'" in str(err) and "gamma cannot apply" in str(err) and "undone" in str(err)
    )
    assert state.contributions(MODEL_WRAPPER) == [] and state.keyed(ATTRIBUTE) == {}
    assert state.handlers == {}
    assert undone == ["outside"]
    assert state.teardowns == []


def test_a_failing_teardown_does_not_stop_the_others(fresh_registry: Any) -> None:
    state = RunState(cpu=True)
    ran: list[str] = []
    state.contribute(TEARDOWN, "first", lambda: ran.append("first"))

    def broken() -> None:
        raise OSError("disk gone")

    state.contribute(TEARDOWN, "second", broken)
    failures = state.run_teardowns()
    assert ran == ["first"]
    assert [(n, str(e)) for n, e in failures] == [("second", "disk gone")]
    assert "second: teardown failed: OSError: disk gone" in state.summary()


def test_state_ready_hook_sees_the_composed_state(fresh_registry: Any) -> None:
    A = handler("alpha")
    seen: list[int] = []

    class Watcher:
        @hookimpl
        def accelkw_state_ready(self, state: RunState) -> None:
            seen.append(state.keyed(ATTRIBUTE)["alpha"])

    reg = fresh_registry(plugin_of(A), Watcher())
    compose(RunState(cpu=True), [A(value=5)], registry=reg)
    assert seen == [5]

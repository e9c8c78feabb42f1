"""The open runtime: extension points, plan-then-apply, ordering, hooks through pluggy, and a core
that names no built-in. Every handler here is written against ``accelkw_core.plugin`` only."""

from __future__ import annotations

import ast
import contextlib
import copy
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from accelkw_core import Accelerator, ComposeError
from accelkw_core.config.selection import order_handlers
from accelkw_core.discovery.catalog import BUILTINS
from accelkw_core.plugin import (
    ACCUMULATION,
    AFTER_STEP,
    AROUND_STEP,
    ATTRIBUTE,
    BACKWARD,
    CHECKPOINT,
    FORWARD_CONTEXT,
    FORWARD_OUTPUT,
    LOSS,
    MODEL_WRAPPER,
    NO_SYNC,
    OPTIMIZER_WRAPPER,
    POINTS,
    PROFILER,
    TEARDOWN,
    ExtensionPoint,
    KwargsHandler,
    Plan,
    PointConflictError,
    StepContext,
    handler_field,
    hookimpl,
)
from accelkw_core.runtime.composing.composition import compose
from accelkw_core.testing import isolated_registry, make_state, plugin_of

REPO = Path(__file__).resolve().parent.parent


def contributing(
    name: str, point: ExtensionPoint[Any], value: Any = None, **attrs: Any
) -> type[KwargsHandler]:
    """A handler class named ``name`` that contributes ``value`` to ``point``."""

    def plan(self: Any, state: Any) -> Plan:
        return Plan(self.name).contribute(point, value, f"{name} contributes to {point}")

    return dataclass(
        type(f"{name.title()}Kwargs", (KwargsHandler,), {"name": name, "plan": plan, **attrs})
    )


# -- cardinality -------------------------------------------------------------------------------


def test_two_contributions_to_a_point_of_cardinality_one_fail_naming_both() -> None:
    first = contributing("first_scaler", BACKWARD, lambda loss, **kw: None)
    second = contributing("second_scaler", BACKWARD, lambda loss, **kw: None)
    registry = isolated_registry([plugin_of(first, second)])
    state = make_state()
    with pytest.raises(PointConflictError) as info:
        compose(state, [], registry=registry)
    message = str(info.value)
    assert "extension point 'backward' takes one contribution" in message
    assert "'first_scaler'" in message and "'second_scaler'" in message
    assert "code passed directly, no distribution" in message  # both registered in code
    assert info.value.first[0] == "first_scaler" and info.value.second[0] == "second_scaler"
    assert state.contributions(BACKWARD) == [] and state.handlers == {}  # rolled back


@pytest.mark.parametrize("point", [p for p in POINTS.values() if p.cardinality == "one"])
def test_every_point_of_cardinality_one_refuses_a_second_contribution_whatever_its_key(
    point: ExtensionPoint[Any],
) -> None:
    # Keys mean nothing to a point of cardinality one: the runtime reads one value, so a second
    # under another key would be ignored in silence. Both plugins are named.
    state = make_state()
    state.distributions.update({"first": "acme-first", "second": "acme-second"})
    state.contribute(point, "first", object(), key="a")
    with pytest.raises(PointConflictError) as info:
        state.contribute(point, "second", object(), key="b")
    assert info.value.first == ("first", "acme-first")
    assert info.value.second == ("second", "acme-second")
    assert f"extension point {point.name!r} takes one contribution" in str(info.value)
    assert "'first' (acme-first) and 'second' (acme-second)" in str(info.value)
    assert len(state.contributions(point)) == 1


def test_teardown_is_a_point_like_the_others() -> None:
    state = make_state()
    ran: list[str] = []
    plan = Plan("undoer").contribute(TEARDOWN, lambda: ran.append("planned"), "undo it")
    plan.carry_out(state)
    state.contribute(TEARDOWN, "undoer", lambda: ran.append("from an action"))
    assert [c.handler for c in state.contributions(TEARDOWN)] == ["undoer", "undoer"]
    assert len(state.values(TEARDOWN)) == 2 and len(state.teardowns) == 2
    assert state.run_teardowns() == []
    assert ran == ["from an action", "planned"]  # a stack: the last contributed runs first
    assert state.contributions(TEARDOWN) == [] and not hasattr(state, "add_teardown")
    assert not hasattr(state, "extras")


def test_a_conflict_names_the_distributions_of_installed_handlers() -> None:
    state = make_state()
    state.distributions.update({"a": "dist-a", "b": "dist-b"})
    state.contribute(PROFILER, "a", object())
    with pytest.raises(PointConflictError, match=r"'a' \(dist-a\) and 'b' \(dist-b\)"):
        state.contribute(PROFILER, "b", object())


def test_keyed_points_take_one_contribution_per_key() -> None:
    state = make_state()
    state.contribute(ATTRIBUTE, "one", 1, key="scaler")
    state.contribute(ATTRIBUTE, "two", 2, key="other")
    state.contribute(CHECKPOINT, "one", {"a": 1})
    state.contribute(CHECKPOINT, "two", {"b": 2})
    assert state.keyed(ATTRIBUTE) == {"scaler": 1, "other": 2}
    assert set(state.keyed(CHECKPOINT)) == {"one", "two"}
    with pytest.raises(PointConflictError, match="key 'scaler'"):
        state.contribute(ATTRIBUTE, "three", 3, key="scaler")


def test_an_unknown_point_lists_the_points() -> None:
    with pytest.raises(ValueError, match=r"unknown extension point 'forward'.*forward_context"):
        make_state().contribute("forward", "x", None)


def test_the_state_still_takes_a_point_by_name_at_run_time() -> None:
    # Untyped (the protocol takes a constant), but code that passed a name keeps running.
    state = make_state()
    state.contribute("model_wrapper", "old", lambda m: m)  # type: ignore[arg-type]
    state.contribute("checkpoint", "old", {"a": 1}, key="kept")  # type: ignore[arg-type]
    assert [c.handler for c in state.contributions(MODEL_WRAPPER)] == ["old"]
    assert list(state.keyed(CHECKPOINT)) == ["kept"]


def test_a_point_given_by_name_still_works_with_a_warning_naming_the_constant() -> None:
    with pytest.warns(DeprecationWarning, match="from accelkw_core.plugin import MODEL_WRAPPER"):
        plan = Plan("old").contribute("model_wrapper", lambda m: m, "old style")
    with pytest.warns(DeprecationWarning, match="stop working in accelkw 0.4"):
        Plan("old").contribute("around_step", lambda s, p: p(), "old style")
    state = make_state()
    plan.carry_out(state)
    assert [c.handler for c in state.contributions(MODEL_WRAPPER)] == ["old"]
    assert plan.steps[0].point == "model_wrapper"


def test_the_points_are_typed_constants_exported_for_plugins() -> None:
    import accelkw_core.plugin as tier

    for point in POINTS.values():
        assert getattr(tier, point.name.upper()) is point, point.name
        assert point.role in ("precision", "distribution", "shared", "loop", "checkpoint")
        assert point.ranks
    assert "data_loader_wrapper" not in POINTS  # nothing contributed to it: dropped
    assert make_state().values(LOSS) == []


def test_every_point_is_documented_with_a_cardinality() -> None:
    for point in POINTS.values():
        assert point.cardinality in ("one", "many", "keyed", "stack")
        assert point.contribution and point.used


# -- the runtime reads the points --------------------------------------------------------------


@dataclass
class Tracer(KwargsHandler):
    """Contributes to every point a training loop touches, recording the calls."""

    name: ClassVar[str] = "tracer"
    tag: str = handler_field("t", doc="a label for the calls")

    def plan(self, state: Any) -> Plan:
        calls: list[str] = []
        tag = self.tag

        class Context:
            def __enter__(self) -> None:
                calls.append(f"{tag}:enter")

            def __exit__(self, *exc: object) -> None:
                calls.append(f"{tag}:exit")

        def around(step: StepContext, proceed: Callable[[], Any]) -> Any:
            calls.append(f"{tag}:before-step")
            result = proceed()
            calls.append(f"{tag}:after-proceed")
            return result

        plan = Plan(self.name)
        plan.contribute(FORWARD_CONTEXT, Context, "a context around forwards")
        plan.contribute(FORWARD_OUTPUT, lambda out: out * 2, "outputs doubled")
        plan.contribute(OPTIMIZER_WRAPPER, lambda o: calls.append("wrap-opt") or o, "opt")
        plan.contribute(AROUND_STEP, around, "around the step")
        plan.contribute(AFTER_STEP, lambda s: calls.append(f"after:{s.index}"), "after")
        return plan.contribute(
            ATTRIBUTE, calls, "accelerator.extra('calls', list): the calls", key="calls"
        )


def test_the_runtime_reads_every_point_generically() -> None:
    registry = isolated_registry([plugin_of(Tracer)])
    acc = Accelerator(cpu=True, registry=registry)
    calls = acc.extra("calls", list)
    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.ones_(model.weight)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)))
    model, opt, loader = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)
    assert calls == ["wrap-opt"]
    out = model(torch.ones(1, 2))
    assert out.item() == 4.0  # 2, doubled by the forward_output contribution
    assert calls[-2:] == ["t:enter", "t:exit"]
    acc.backward(out.sum())
    opt.step()
    opt.step()
    assert calls[-6:] == [
        "t:before-step",
        "t:after-proceed",
        "after:0",
        "t:before-step",
        "t:after-proceed",
        "after:1",
    ]
    with acc.autocast():
        assert calls[-1] == "t:enter"
    acc.unwrap_model(model, keep_fp32_wrapper=False)
    assert model(torch.ones(1, 2)).item() != out.item()  # original forward back
    acc.end_training()


def test_an_around_step_that_does_not_proceed_skips_the_step() -> None:
    def skip(step: StepContext, proceed: Callable[[], Any]) -> None:
        return None

    registry = isolated_registry([plugin_of(contributing("skipper", AROUND_STEP, skip))])
    acc = Accelerator(cpu=True, registry=registry)
    model = torch.nn.Linear(2, 1)
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    before = [p.clone() for p in model.parameters()]
    acc.backward(model(torch.ones(1, 2)).sum())
    opt.step()
    assert opt.step_was_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_loss_contributions_run_in_order_before_the_backward_contribution() -> None:
    seen: list[str] = []

    def observe(loss: torch.Tensor) -> torch.Tensor:
        seen.append(f"observe {loss.item():g}")
        return loss

    def double(loss: torch.Tensor) -> torch.Tensor:
        seen.append(f"double {loss.item():g}")
        return loss * 2

    def backward(loss: torch.Tensor, **kwargs: Any) -> None:
        seen.append(f"backward {loss.item():g}")
        loss.backward(**kwargs)

    observer = contributing("observer", LOSS, observe)
    doubler = contributing("doubler", LOSS, double, after=("observer",))
    owner = contributing("owner", BACKWARD, backward)
    registry = isolated_registry([plugin_of(doubler, observer, owner)])
    acc = Accelerator(cpu=True, registry=registry)
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.ones_(model.weight)
    model = acc.prepare(model)
    acc.backward(model(torch.full((1, 1), 3.0)).sum())
    assert seen == ["observe 3", "double 3", "backward 6"]
    assert model.weight.grad is not None and model.weight.grad.item() == 6.0


def test_agree_is_the_flag_itself_on_one_process() -> None:
    state = make_state()
    step = StepContext(None, None, 0, state)
    assert step.agree(True) is True and step.agree(False) is False
    assert step.agree(True, how="all") is True
    assert StepContext(None, None, 0).agree(True)  # a context built by hand: no run
    # step.agree is the state's agree, which code holding the state calls the same way
    assert state.agree(True) is True and state.agree(False, how="all") is False
    with pytest.raises(ValueError, match="expected 'any' or 'all'"):
        from accelkw_core.runtime.collectives import agree

        agree(True, make_state(), "most")


def test_several_around_steps_nest_in_composition_order_set_by_before_and_after() -> None:
    calls: list[str] = []

    def tracer(tag: str) -> Callable[[StepContext, Callable[[], Any]], Any]:
        def around(step: StepContext, proceed: Callable[[], Any]) -> Any:
            calls.append(f"{tag}>")
            result = proceed()
            calls.append(f"<{tag}")
            return result

        return around

    # The names sort the other way: the declared order wins, not the alphabet.
    outer = contributing("zz_outer", AROUND_STEP, tracer("outer"), before=("aa_inner",))
    inner = contributing("aa_inner", AROUND_STEP, tracer("inner"))
    acc = Accelerator(cpu=True, registry=isolated_registry([plugin_of(inner, outer)]))
    assert [c.handler for c in acc.state.contributions(AROUND_STEP)] == ["zz_outer", "aa_inner"]
    model = torch.nn.Linear(1, 1)
    _, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    opt.step()
    assert calls == ["outer>", "inner>", "<inner", "<outer"]


def test_wrappers_follow_before_and_after_on_every_point_not_the_names() -> None:
    """The order at each order-sensitive point is the composition order, which follows the
    declared ``before``/``after``: swapping the declaration swaps the order, whatever the names."""
    for first, second, declared in (
        ("zeta", "alpha", {"before": ("alpha",)}),
        ("alpha", "zeta", {}),
    ):
        seen: list[str] = []

        def tagging(tag: str, seen: list[str] = seen) -> Callable[[Any], Any]:
            def wrap(obj: Any) -> Any:
                seen.append(tag)
                return obj

            return wrap

        a = contributing(first, MODEL_WRAPPER, tagging(first), **declared)
        b = contributing(second, MODEL_WRAPPER, tagging(second))
        acc = Accelerator(cpu=True, registry=isolated_registry([plugin_of(b, a)]))
        acc.prepare(torch.nn.Linear(1, 1))
        assert seen == [first, second], declared
        acc.end_training()


def test_model_wrappers_nest_so_the_last_composed_is_outermost() -> None:
    class Box(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module, tag: str) -> None:
            super().__init__()
            self.module, self.tag = inner, tag

        def forward(self, x: Any) -> Any:
            return self.module(x)

    first = contributing("first", MODEL_WRAPPER, lambda m: Box(m, "first"))
    second = contributing("second", MODEL_WRAPPER, lambda m: Box(m, "second"), after=("first",))
    acc = Accelerator(cpu=True, registry=isolated_registry([plugin_of(second, first)]))
    model = torch.nn.Linear(1, 1)
    wrapped = acc.prepare(model)
    assert wrapped.tag == "second" and wrapped.module.tag == "first"
    assert acc.unwrap_model(wrapped) is model


def test_empty_points_leave_the_optimizer_step_direct() -> None:
    acc = Accelerator(cpu=True, registry=isolated_registry())
    model = torch.nn.Linear(1, 1)
    _, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert opt._chain is None  # no contribution: step() calls the optimizer directly


def test_contributed_attributes_are_read_through_extras_not_attributes() -> None:
    marker = object()
    registry = isolated_registry([plugin_of(contributing("exposer", ATTRIBUTE, marker))])
    acc = Accelerator(cpu=True, registry=registry)
    assert acc.extras["exposer"] is marker  # keyed by handler name when no key is given
    assert acc.extra("exposer", object) is marker
    assert acc.scaler is None  # Accelerate's attribute, None when nothing exposes a scaler
    with pytest.raises(AttributeError, match="no attribute 'exposer'"):
        _ = acc.exposer  # type: ignore[attr-defined]


# -- plan, then apply --------------------------------------------------------------------------


def test_plan_is_what_apply_carries_out_and_has_no_side_effects() -> None:
    state = make_state()
    plan = Tracer().plan(make_state())
    Tracer().apply(state)
    assert [e.message for e in state.log] == [s.message for s in plan.steps]
    assert [p for p in POINTS if state.contributions(p)] == [s.point for s in plan.steps if s.point]
    planned_only = make_state()
    before = {p: planned_only.contributions(p) for p in POINTS}
    Tracer().plan(planned_only)
    assert {p: planned_only.contributions(p) for p in POINTS} == before
    assert planned_only.log == []


def test_a_handler_written_before_plans_still_applies_and_plans_show_its_describe() -> None:
    from accelkw_core.runtime.composing.planning import plan_handler

    @dataclass
    class Legacy(KwargsHandler):
        name: ClassVar[str] = "legacy"

        def apply(self, state: Any) -> None:
            state.contribute(ATTRIBUTE, self.name, True)
            state.record(self.name, "did it")

        def describe(self, state: Any) -> str:
            return "would do it"

    state = make_state()
    compose(state, [Legacy()], registry=isolated_registry(), include_defaults=False)
    assert state.keyed(ATTRIBUTE)["legacy"] and state.messages("legacy") == ["did it"]
    assert plan_handler("legacy", Legacy(), make_state()).summary == "would do it"


# -- ordering ----------------------------------------------------------------------------------


def _named(name: str, **attrs: Any) -> KwargsHandler:
    return dataclass(type(name.title(), (KwargsHandler,), {"name": name, **attrs}))()


def test_before_after_order_and_ties_by_name() -> None:
    handlers = [
        _named("c"),
        _named("b", before=("a",)),
        _named("a", after=("d",)),
        _named("d"),
    ]
    assert [h.name for h in order_handlers(handlers)] == ["b", "c", "d", "a"]


def test_a_missing_requirement_names_it_and_the_pip_line() -> None:
    with pytest.raises(
        ComposeError,
        match=r"'clip' requires handler 'grad_scaler'.*pip install accelkw-grad-scaler",
    ):
        order_handlers([_named("clip", requires=("grad_scaler",))])
    with pytest.raises(
        ComposeError, match=r"requires handler 'thing'.*provides the 'thing' handler"
    ):
        order_handlers([_named("clip", requires=("thing",))])
    assert [h.name for h in order_handlers([_named("x", requires=("y",)), _named("y")])] == [
        "x",
        "y",
    ]


def test_conflicting_handlers_name_both() -> None:
    with pytest.raises(
        ComposeError, match=r"handlers 'fsdp' and 'ddp' cannot be composed together"
    ):
        order_handlers([_named("ddp"), _named("fsdp", conflicts=("ddp",))])


def test_a_cycle_through_before_and_after_is_reported() -> None:
    with pytest.raises(
        ComposeError, match=r"cycle among: a \(before \['b'\]\), b \(before \['a'\]\)"
    ):
        order_handlers([_named("a", before=("b",)), _named("b", before=("a",))])


# -- hooks through pluggy ----------------------------------------------------------------------


@dataclass
class Quiet(KwargsHandler):
    name: ClassVar[str] = "quiet"


def test_a_hook_implementation_may_take_no_arguments() -> None:
    class NoArgs:
        @hookimpl
        def accelkw_register_handlers(self) -> None:
            pass

        @hookimpl
        def accelkw_env_info(self) -> None:
            pass

    registry = isolated_registry([NoArgs()])
    (record,) = registry.plugins()
    assert record.status == "loaded", record.reason


def test_state_ready_fires_only_for_plugins_whose_handlers_were_composed(tmp_path: Path) -> None:
    heard: list[str] = []

    def listening(tag: str, cls: type[KwargsHandler] | None) -> object:
        class Plugin:
            @hookimpl
            def accelkw_register_handlers(self, register: Callable[[type], None]) -> None:
                if cls is not None:
                    register(cls)

            @hookimpl
            def accelkw_state_ready(self) -> None:
                heard.append(tag)

        return Plugin()

    Loud = contributing("loud", AFTER_STEP, lambda s: None)
    registry = isolated_registry(
        [listening("quiet", Quiet), listening("loud", Loud), listening("logger", None)]
    )
    (tmp_path / "accelkw.toml").write_text('[plugins]\ndisable = ["quiet"]\n')
    acc = Accelerator(cpu=True, registry=registry, config=tmp_path / "accelkw.toml")
    assert sorted(heard) == ["logger", "loud"]
    acc.end_training()


def test_an_accelerator_never_ended_runs_its_teardowns_at_exit(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        from dataclasses import dataclass
        from typing import ClassVar
        from accelkw_core import Accelerator
        from accelkw_core.plugin import TEARDOWN, KwargsHandler, Plan, hookimpl
        from accelkw_core.testing import isolated_registry

        @dataclass
        class Noisy(KwargsHandler):
            name: ClassVar[str] = "noisy"

            def plan(self, state):
                return Plan(self.name).contribute(
                    TEARDOWN, lambda: print("teardown ran", flush=True), "says goodbye"
                )

        class P:
            @hookimpl
            def accelkw_register_handlers(self, register):
                register(Noisy)

        acc = Accelerator(cpu=True, registry=isolated_registry([P()]))
        print("end of script", flush=True)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["end of script", "teardown ran"]


# -- the handler contract ----------------------------------------------------------------------


def test_explicit_fields_survive_replace_copy_and_pickle() -> None:
    from accelkw_process_group import InitProcessGroupKwargs

    handler = InitProcessGroupKwargs(timeout=timedelta(seconds=5))
    replaced = handler.replace(timeout=timedelta(seconds=9))
    assert replaced.explicit_fields() == {"timeout"} and replaced.timeout.total_seconds() == 9
    assert handler.replace(backend="gloo").explicit_fields() == {"timeout", "backend"}
    for other in (copy.copy(handler), copy.deepcopy(handler), pickle.loads(pickle.dumps(handler))):
        assert other.explicit_fields() == {"timeout"}
    # The review's case: a 2-rank CPU plan keeps "gloo in place of the default nccl".
    state = make_state(world_size=2)
    state.master_addr, state.master_port = "127.0.0.1", 29500
    assert "in place of the default 'nccl'" in replaced.describe(state)


# -- the core names no built-in ----------------------------------------------------------------

# Reviewed literals equal to a built-in's name: Accelerate's method names in messages.
ALLOWED = {("runtime/stepping/training_step.py", "autocast"), ("runtime/profiling.py", "profile")}
SLOT_NAMES = {
    "grad_scaler",
    "autocast_factory",
    "profiler_factory",
    "model_wrappers",
    "scaler_kwargs",
}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            ids.add(id(first.value))
    return ids


def test_the_core_names_no_built_in_outside_the_catalog_and_utils() -> None:
    names = {b.name for b in BUILTINS if b.name != "process_group"}  # also torch's own term
    names |= {b.cls for b in BUILTINS} | {b.module for b in BUILTINS}
    names |= {b.distribution for b in BUILTINS} | {n for b in BUILTINS for n in b.extra_names}
    core = REPO / "accelkw_core"
    found = []
    for path in sorted(core.rglob("*.py")):
        rel = path.relative_to(core).as_posix()
        if rel in ("discovery/catalog.py", "utils.py", "tools/scaffold_templates.py"):
            continue  # the catalog, the reference names, and the scaffold's template text
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if (
                    node.value in names
                    and id(node) not in docs
                    and (rel, node.value) not in ALLOWED
                ):
                    found.append(f"{rel}:{node.lineno}: literal {node.value!r}")
            elif isinstance(node, ast.Attribute) and node.attr in SLOT_NAMES:
                found.append(f"{rel}:{node.lineno}: attribute .{node.attr}")
            elif isinstance(node, ast.Name) and node.id in SLOT_NAMES:
                found.append(f"{rel}:{node.lineno}: name {node.id}")
    assert found == []


# -- Accelerator keywords that handlers claim ----------------------------------------------------


@dataclass
class Accumulate(KwargsHandler):
    name: ClassVar[str] = "accumulate"
    accelerator_keywords: ClassVar[dict[str, str]] = {
        "gradient_accumulation_steps": "num_steps",
        "gradient_accumulation_plugin": "*",
    }
    num_steps: int = handler_field(1, doc="micro-steps per optimizer step", ge=1)


def test_accelerator_keywords_become_the_claiming_handler() -> None:
    registry = isolated_registry([plugin_of(Accumulate)])
    acc = Accelerator(cpu=True, registry=registry, gradient_accumulation_steps=4)
    assert acc.state.handlers["accumulate"].num_steps == 4
    acc = Accelerator(cpu=True, registry=registry, gradient_accumulation_plugin=Accumulate(3))
    assert acc.state.handlers["accumulate"].num_steps == 3
    with pytest.raises(ComposeError, match="got both gradient_accumulation_plugin= and"):
        Accelerator(
            cpu=True,
            registry=registry,
            gradient_accumulation_plugin=Accumulate(3),
            gradient_accumulation_steps=2,
        )
    with pytest.raises(ComposeError, match="passed in kwargs_handlers and set through"):
        Accelerator(
            cpu=True,
            registry=registry,
            kwargs_handlers=[Accumulate()],
            gradient_accumulation_steps=2,
        )


def test_an_unclaimed_keyword_names_the_plugin_and_a_default_asks_for_nothing() -> None:
    from accelkw_core import ConfigError

    registry = isolated_registry()
    Accelerator(cpu=True, registry=registry, gradient_accumulation_steps=1, fsdp_plugin=None)
    with pytest.raises(
        ConfigError,
        match=r"gradient_accumulation_steps: got 4.*(accelkw-grad-accum|'grad_accum' handler)",
    ):
        Accelerator(cpu=True, registry=registry, gradient_accumulation_steps=4)
    with pytest.raises(ConfigError, match="accelkw has no handler for it"):
        Accelerator(cpu=True, registry=registry, deepspeed_plugin=object())
    with pytest.raises(TypeError, match="unexpected keyword argument 'gradient_accumulation'"):
        Accelerator(cpu=True, registry=registry, gradient_accumulation=4)


# -- accumulation: which micro-steps sync, asked of a contributed policy -------------------------


class EverySecond:
    """A third party's accumulation policy: every second micro-step syncs."""

    num_steps = 2
    adjust_scheduler = False
    sync_each_batch = False

    def advance(self, step: int, end_of_dataloader: bool) -> tuple[int, bool]:
        return step + 1, (step + 1) % 2 == 0


def test_the_accumulation_point_decides_which_micro_steps_sync_and_step() -> None:
    held: list[str] = []

    @contextlib.contextmanager
    def suspend(model: Any) -> Iterator[None]:
        held.append("held")
        yield

    policy = contributing("pairs", ACCUMULATION, EverySecond())
    holder = contributing("holder", NO_SYNC, suspend)
    acc = Accelerator(cpu=True, registry=isolated_registry([plugin_of(policy, holder)]))
    assert acc.gradient_accumulation_steps == 2
    model = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.ones_(model.weight)
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    seen = []
    for _ in range(2):
        with acc.accumulate(model):
            acc.backward(model(torch.ones(1, 1)).sum())  # d/dw of w/2: 0.5 per micro-step
            opt.step()
            opt.zero_grad()
            seen.append((acc.sync_gradients, model.weight.item(), len(held)))
    # The first micro-step neither steps nor clears the gradient, and holds back the sync.
    assert seen == [(False, 1.0, 1), (True, 0.0, 1)]
    assert acc.step == 2
    with acc.no_sync(model):
        assert len(held) == 2


def test_without_an_accumulation_policy_every_micro_step_syncs() -> None:
    from accelkw_core import ConfigError

    acc = Accelerator(cpu=True, registry=isolated_registry())
    model = torch.nn.Linear(1, 1)
    model = acc.prepare(model)
    with acc.accumulate(model), acc.no_sync(model):  # one process: nothing to hold back
        assert acc.sync_gradients and acc.gradient_accumulation_steps == 1
    acc.gradient_accumulation_steps = 1
    with pytest.raises(ConfigError, match=r"gradient_accumulation_steps: got 4.*grad-accum"):
        acc.gradient_accumulation_steps = 4


def test_check_values_may_ask_which_fields_were_set() -> None:
    # Building the default instance runs check_values, which asks explicit_fields(), which
    # needs the default instance: answered from the declared defaults, not by recursing.
    @dataclass
    class Careful(KwargsHandler):
        name: ClassVar[str] = "careful"
        level: int = handler_field(1, doc="a level")

        def check_values(self) -> None:
            assert "level" not in self.explicit_fields() or self.level >= 0

    assert Careful(level=3).explicit_fields() == {"level"}
    assert Careful().explicit_fields() == frozenset()


def test_every_exception_class_of_the_core_lives_in_errors_py() -> None:
    found = []
    for path in sorted((REPO / "accelkw_core").rglob("*.py")):
        if path.name == "errors.py" and path.parent.name == "accelkw_core":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                if bases & {"Exception", "AssertionError", "UserWarning", "ValueError"} or any(
                    b.endswith(("Error", "Warning")) for b in bases
                ):
                    found.append(f"{path.relative_to(REPO)}: {node.name}")
    assert found == []


def test_step_index_counts_step_calls_and_taken_counts_steps_that_moved() -> None:
    """``index``: the step() calls that ran the chain, skipped ones included; ``taken``: the
    ones that changed the parameters; a non-syncing step() under accumulation counts in
    neither."""
    seen: list[tuple[int, int, bool]] = []

    def skip_odd(step: StepContext, proceed: Callable[[], Any]) -> Any:
        return None if step.index % 2 else proceed()  # skip the 2nd, 4th, ... call

    def record(step: StepContext) -> None:
        seen.append((step.index, step.taken, step.skipped))

    skipper = contributing("skipper", AROUND_STEP, skip_odd)
    recorder = contributing("recorder", AFTER_STEP, record)
    pacer = contributing("pacer", ACCUMULATION, EverySecond())  # no built-in needed
    registry = isolated_registry([plugin_of(skipper, recorder, pacer)])
    acc = Accelerator(cpu=True, registry=registry)
    model = torch.nn.Linear(2, 1)
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(10):  # 10 micro-batches, 5 syncing steps
        with acc.accumulate(model):
            acc.backward(model(torch.ones(1, 2)).sum())
            opt.step()
            opt.zero_grad()
    assert seen == [(0, 0, False), (1, 1, True), (2, 1, False), (3, 2, True), (4, 2, False)]
    acc.end_training()
    assert repr(StepContext(None, None, 3)) == "StepContext(index=3, taken=3, skipped=True)"

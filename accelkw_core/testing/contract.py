"""``HandlerContract`` and ``TrackerContract``: the checks every handler plugin and every tracker
plugin passes, as reusable pytest classes.

Subclass it in a plugin's tests, name the class ``Test...`` and set three attributes::

    from accelkw_core.testing import HandlerContract
    from accelkw_seed import SeedKwargs


    class TestSeedContract(HandlerContract):
        handler_class = SeedKwargs
        plugin_module = "accelkw_seed.plugin"
        examples = ({"seed": 7}, {"seed": 0, "deterministic": True})
        pyproject = "../pyproject.toml"  # only when the plugin is not installed

pytest then runs every ``test_*`` method below against the plugin: registration, entry-point
discovery, no torch at import, planning without side effects, documented fields, explicit
fields that survive ``handler.replace``/``copy``/``pickle`` (``dataclasses.replace`` marks
every field explicit), teardowns that undo ``apply``, and contributions made only through the
public extension points. A handler may refuse (an ``AccelkwError``) some of the states the kit
tries; one that refuses all of them fails the apply and teardown checks, which would otherwise
check nothing, unless it sets ``refuses_everywhere = True``.

A relative :attr:`HandlerContract.pyproject` is read from the folder of the test module that
sets it, so the tests pass from any working directory (``pytest tests``, ``pytest .``, an IDE).

A tracker plugin's tests do the same with :class:`TrackerContract`::

    class TestTensorBoardContract(TrackerContract):
        tracker_class = TensorBoardTracker
        plugin_module = "accelkw_tensorboard.plugin"

which checks registration under the tracker's name, the entry point, no torch at import,
Accelerate's ``GeneralTracker`` contract (``name``, ``requires_logging_directory``,
``tracker``), documented constructor options and methods, and that a process other than the
main one writes nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import os
import pickle
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, cast

from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.contract.points import POINTS
from accelkw_core.contract.tracker import GeneralTracker
from accelkw_core.contract.validation import field_specs
from accelkw_core.errors import AccelkwError
from accelkw_core.runtime.run_state import RunState
from accelkw_core.testing.helpers import (
    free_port,
    isolated_registry,
    make_state,
    modules_loaded_by,
)

__all__ = ["HandlerContract", "TrackerContract"]

# The single-process states a handler is planned and applied on (no process group needed).
_SINGLE: tuple[dict[str, Any], ...] = (
    {"mixed_precision": "no"},
    {"mixed_precision": "bf16"},
    {"mixed_precision": "fp16"},
)
# Planned only: applying on two ranks would need a real process group. The master address
# lets a handler that would create a group plan one (and the test checks it creates none).
_MULTI: tuple[dict[str, Any], ...] = (
    {"world_size": 2, "rank": 1, "mixed_precision": "fp16", "master_addr": "127.0.0.1"},
)
# Variables torch sets for itself the first time a feature is used (turning deterministic
# algorithms on sets TORCHINDUCTOR_CACHE_DIR): not a handler's change to undo.
_TORCH_SETS = ("TORCHINDUCTOR_",)


def _state(facts: Mapping[str, Any]) -> RunState:
    facts = dict(facts)
    addr = facts.pop("master_addr", None)
    if addr is None:
        return make_state(**facts)
    state = make_state(**facts)
    state.master_addr, state.master_port = addr, free_port()
    return state


def _dist_initialized() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def _facts(state: RunState) -> dict[str, Any]:
    # ``version`` counts contributions: it is bookkeeping that apply() moves, not a fact.
    return {
        k: v
        for k, v in vars(state).items()
        if isinstance(v, str | int | bool | float | None) and k != "version"
    }


def _snapshot(state: RunState) -> dict[str, Any]:
    return {
        "attributes": sorted(vars(state)),
        "facts": _facts(state),
        "handlers": dict(state.handlers),
        "log": list(state.log),
        "points": {p: len(state.contributions(p)) for p in POINTS},
        "capabilities": dict(state.capabilities),
    }


def _dataclasses_replace(handler: KwargsHandler, **changes: Any) -> KwargsHandler:
    new: KwargsHandler = dataclasses.replace(cast(Any, handler), **changes)
    return new


def _entry_point_values(pyproject: Path) -> list[str]:
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    table = data.get("project", {}).get("entry-points", {}).get("accelkw", {})
    return [str(v) for v in table.values()]


def resolve_pyproject(contract: object) -> Path | None:
    """A contract class's ``pyproject``: an absolute path as it is, a relative one against the
    folder of the module that defines the class setting it; ``None`` when unset.

    A class defined where no source file exists (``exec``, a REPL) resolves a relative path
    against the working directory.
    """
    value = getattr(contract, "pyproject", None)
    if value is None:
        return None
    path = Path(value)
    if path.is_absolute():
        return path
    owner = next(c for c in type(contract).__mro__ if "pyproject" in vars(c))
    module_file = getattr(sys.modules.get(owner.__module__), "__file__", None)
    base = Path(module_file).resolve().parent if module_file else Path.cwd()
    return Path(os.path.normpath(base / path))


def _check_entry_point(
    plugin_module: str, pyproject: Path | None, given: object, installed: bool | None
) -> None:
    """The source tree's and the installed entry points name ``plugin_module``."""
    if pyproject is not None:
        if not pyproject.is_file():
            raise AssertionError(
                f"pyproject = {str(given)!r}: no file {pyproject} (a relative path is read "
                "from the folder of the test module that sets it)"
            )
        values = _entry_point_values(pyproject)
        assert plugin_module in values, (
            f"{pyproject}: no [project.entry-points.accelkw] entry names "
            f"{plugin_module!r}; found {values}"
        )
    if installed is None:
        installed = pyproject is None or _is_installed(pyproject)
    if not installed:
        return
    import importlib_metadata

    values = [ep.value for ep in importlib_metadata.entry_points(group="accelkw")]
    assert plugin_module in values, (
        f"no installed 'accelkw' entry point names {plugin_module!r}; found {values}"
    )


def _check_no_torch(module: str, plugin_module: str) -> None:
    """Importing the package of ``module`` and ``plugin_module`` in a fresh interpreter loads no torch."""
    root = module.split(".")[0]
    # The child imports what this process imports (a source tree put on sys.path too).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    loaded = modules_loaded_by(f"import {root}, {plugin_module}", env=env)
    assert loaded == [], f"importing the plugin imported {loaded}"


def _is_installed(pyproject: Path) -> bool:
    import importlib.metadata

    name = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"]
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


class HandlerContract:
    """Contract tests for one handler class; see the module docstring for how to use it."""

    #: The handler class under test.
    handler_class: ClassVar[type[KwargsHandler]]
    #: The module the ``accelkw`` entry point names (it implements the hooks).
    plugin_module: ClassVar[str]
    #: Keyword arguments of valid instances, besides the default one.
    examples: ClassVar[Sequence[Mapping[str, Any]]] = ()
    #: Whether an installed distribution's entry point must name :attr:`plugin_module`
    #: (``False`` for a handler registered only in code). ``None``: yes, unless
    #: :attr:`pyproject` is set, then only when that distribution is installed.
    installed: ClassVar[bool | None] = None
    #: For a distribution tested from its source tree, perhaps not installed: its
    #: ``pyproject.toml``, whose ``[project.entry-points.accelkw]`` table must name
    #: :attr:`plugin_module`. Absolute, or relative to the folder of the module that defines
    #: the class setting it (your test file), never to the working directory:
    #: ``"../pyproject.toml"`` from ``tests/test_x.py``.
    pyproject: ClassVar[str | os.PathLike[str] | None] = None
    #: Whether the handler refuses (raises an ``AccelkwError`` from ``plan``/``apply``) on
    #: every single-process state the kit tries, for :meth:`instances`: then the apply and
    #: teardown checks have nothing to check, and they fail unless this says it is meant (a
    #: handler that needs several processes or a GPU, tested by its own suite there). Set, it
    #: is checked too: a handler that applies somewhere fails until the declaration goes.
    refuses_everywhere: ClassVar[bool] = False

    def pyproject_path(self) -> Path | None:
        """:attr:`pyproject` resolved (see :func:`resolve_pyproject`); ``None`` when unset."""
        return resolve_pyproject(self)

    def instances(self) -> list[KwargsHandler]:
        """The default instance and one per example."""
        return [self.handler_class(), *(self.handler_class(**kw) for kw in self.examples)]

    def process_state(self) -> dict[str, Any]:
        """Process-wide settings ``apply`` may change and its teardowns must put back.

        Extend it (``{**super().process_state(), ...}``) when a handler changes other ones.
        """
        import torch

        cudnn = torch.backends.cudnn
        return {
            "process_group": _dist_initialized(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cudnn": (cudnn.deterministic, cudnn.benchmark, cudnn.enabled),
            "default_dtype": torch.get_default_dtype(),
            "grad_enabled": torch.is_grad_enabled(),
            "autocast_cpu": torch.is_autocast_enabled("cpu"),
            "environ": {k: v for k, v in os.environ.items() if not k.startswith(_TORCH_SETS)},
        }

    # -- discovery -----------------------------------------------------------------------------

    def test_registers_under_its_name(self) -> None:
        module = importlib.import_module(self.plugin_module)
        registry = isolated_registry([module])
        (record,) = registry.plugins()
        assert record.status == "loaded", record.error
        assert self.handler_class in record.handlers
        info = registry.get(self.handler_class.name)
        assert info.cls is self.handler_class

    def test_entry_point_names_the_plugin_module(self) -> None:
        _check_entry_point(
            self.plugin_module, resolve_pyproject(self), self.pyproject, self.installed
        )

    def test_importing_the_plugin_runs_no_torch(self) -> None:
        _check_no_torch(self.handler_class.__module__, self.plugin_module)

    # -- fields --------------------------------------------------------------------------------

    def test_every_field_is_documented(self) -> None:
        missing = [n for n, spec in field_specs(self.handler_class).items() if not spec.doc]
        assert missing == [], f"fields without doc=: {missing}"

    def test_explicit_fields_survive_replace_copy_and_pickle(self) -> None:
        for handler in self.instances():
            explicit = handler.explicit_fields()
            kwargs = handler.to_kwargs()
            for other in (
                copy.copy(handler),
                copy.deepcopy(handler),
                pickle.loads(pickle.dumps(handler)),
                handler.replace(),
            ):
                assert other == handler, type(other)
                assert other.explicit_fields() == explicit, type(other)
                assert other.to_kwargs() == kwargs
        # A field replace() sets is explicit in the copy, even set to the value it had, and the
        # source's explicit fields stay.
        for example in self.examples:
            self._check_replace(self.handler_class(), example)
        for handler in self.instances():
            for name in handler.field_values():
                self._check_replace(handler, {name: getattr(handler, name)})

    def test_dataclasses_replace_marks_every_field_explicit(self) -> None:
        # The documented semantics on every Python: dataclasses.replace (and copy.replace,
        # which is the same function on 3.13+) passes every field to the constructor.
        for handler in self.instances():
            every = frozenset(handler.field_values())
            other = _dataclasses_replace(handler)
            assert other == handler
            assert other.explicit_fields() == every, sorted(other.explicit_fields())
            assert other.to_kwargs() == handler.to_kwargs()
            if sys.version_info >= (3, 13):
                replaced = copy.replace(handler)
                assert replaced.explicit_fields() == every

    @staticmethod
    def _check_replace(handler: KwargsHandler, changes: Mapping[str, Any]) -> None:
        before = handler.explicit_fields()
        changed = handler.replace(**changes)
        got = changed.explicit_fields()
        assert got == before | set(changes), (
            f"replace({changes}): explicit {sorted(got)}, from {sorted(before)}"
        )
        # The values are what the constructor makes of them (normalised, checked).
        assert changed == type(handler)(**{**handler.field_values(), **changes})

    # -- planning and applying -----------------------------------------------------------------

    def test_planning_has_no_side_effects(self) -> None:
        group_before = _dist_initialized()
        for handler in self.instances():
            for facts in (*_SINGLE, *_MULTI):
                state = _state(facts)
                before = _snapshot(state)
                try:
                    plan = handler.plan(state)
                except AccelkwError:
                    assert _snapshot(state) == before, f"plan() changed the state on {facts}"
                    continue  # refusing to plan is allowed; changing the state is not
                assert _snapshot(state) == before, f"plan() changed the state on {facts}"
                assert state.teardowns == []
                assert plan.steps, "a plan says what it does, or why it does nothing"
                for step in plan.steps:
                    assert step.point is None or step.point in POINTS, step
                # Planning again gives the same plan, and describe() is the plan's summary.
                assert [s.message for s in handler.plan(state).steps] == [
                    s.message for s in plan.steps
                ]
                assert handler.describe(state) == plan.summary()
        assert _dist_initialized() == group_before, "plan() created or destroyed a process group"

    def test_apply_carries_out_the_plan_through_public_points(self) -> None:
        refused: list[str] = []
        for handler in self.instances():
            for facts in _SINGLE:
                state = make_state(**facts)
                attributes = sorted(vars(state))
                known = _facts(state)
                try:
                    plan = handler.plan(make_state(**facts))
                except AccelkwError as exc:
                    refused.append(f"{handler!r} on {dict(facts)}: {exc}")
                    continue
                before = self.process_state()
                handler.apply(state)
                try:
                    assert sorted(vars(state)) == attributes, "apply() added state attributes"
                    assert _facts(state) == known, "apply() changed the run's facts"
                    assert [e.message for e in state.log if e.handler == handler.name] == [
                        s.message for s in plan.steps
                    ]
                    for point in POINTS:
                        assert {c.handler for c in state.contributions(point)} <= {handler.name}
                finally:
                    failures = state.run_teardowns()
                assert failures == []
                # Checked here too: a setting left changed would hide from the next test.
                self._assert_restored(before, handler, facts)
        self._assert_refusals_declared(refused)

    def test_teardown_undoes_apply(self) -> None:
        refused: list[str] = []
        for handler in self.instances():
            for facts in _SINGLE:
                before = self.process_state()
                state = make_state(**facts)
                try:
                    handler.apply(state)
                except AccelkwError as exc:
                    refused.append(f"{handler!r} on {dict(facts)}: {exc}")
                    continue
                assert state.run_teardowns() == []
                assert state.teardowns == []
                self._assert_restored(before, handler, facts)
        self._assert_refusals_declared(refused)

    def _assert_refusals_declared(self, refused: Sequence[str]) -> None:
        # Refusing some states is a handler's right; refusing all of them leaves the check
        # above empty, so it passes only when the handler says that is what it does.
        tried = len(self.instances()) * len(_SINGLE)
        everywhere = len(refused) == tried
        if everywhere and not self.refuses_everywhere:
            raise AssertionError(
                f"{self.handler_class.__name__} refused every state the kit tried, so nothing "
                "was applied or undone: give `examples` that apply, or set "
                "`refuses_everywhere = True` if that is what it does. Refusals:\n"
                + "\n".join(refused)
            )
        if self.refuses_everywhere and not everywhere:
            raise AssertionError(
                f"{self.handler_class.__name__} declares `refuses_everywhere = True` but applied "
                f"on {tried - len(refused)} of the {tried} states tried: remove the declaration"
            )

    def _assert_restored(
        self, before: Mapping[str, Any], handler: KwargsHandler, facts: Mapping[str, Any]
    ) -> None:
        after = self.process_state()
        changed = sorted(k for k in before if after.get(k) != before[k])
        assert changed == [], f"{handler!r} on {dict(facts)}: teardown left {changed} changed"


# The parameters every tracker's constructor takes first (Accelerate's contract): the project
# name, and the logging folder for one that requires it. Documented by the base class.
_TRACKER_LEADING = 2
_TRACKER_METHODS = ("start", "store_init_configuration", "log", "finish")


class TrackerContract:
    """Contract tests for one tracker class; see the module docstring for how to use it."""

    #: The tracker class under test.
    tracker_class: ClassVar[type[GeneralTracker]]
    #: The module the ``accelkw`` entry point names (it implements ``accelkw_register_trackers``).
    plugin_module: ClassVar[str]
    #: As :attr:`HandlerContract.installed`.
    installed: ClassVar[bool | None] = None
    #: As :attr:`HandlerContract.pyproject`.
    pyproject: ClassVar[str | os.PathLike[str] | None] = None
    #: Keyword arguments ``init_trackers`` would pass from ``init_kwargs`` (none by default).
    init_kwargs: ClassVar[Mapping[str, Any]] = {}

    def build(self, project_name: str, logging_dir: str) -> GeneralTracker:
        """The tracker as ``init_trackers`` builds it for ``project_name`` under ``logging_dir``."""
        make: Any = self.tracker_class
        kwargs = dict(self.init_kwargs)
        if self.tracker_class.accepts_logging_directory:
            kwargs.setdefault("logging_dir", logging_dir)
        if self.tracker_class.requires_logging_directory:
            return cast(GeneralTracker, make(project_name, logging_dir, **kwargs))
        return cast(GeneralTracker, make(project_name, **kwargs))

    # -- discovery -----------------------------------------------------------------------------

    def test_registers_under_its_name(self) -> None:
        module = importlib.import_module(self.plugin_module)
        registry = isolated_registry([module])
        (record,) = registry.plugins()
        assert record.status == "loaded", record.error
        assert self.tracker_class in record.trackers
        assert record.kinds == ["tracker"] or "tracker" in record.kinds
        assert registry.trackers()[self.tracker_class.name].cls is self.tracker_class

    def test_entry_point_names_the_plugin_module(self) -> None:
        _check_entry_point(
            self.plugin_module, resolve_pyproject(self), self.pyproject, self.installed
        )

    def test_importing_the_plugin_runs_no_torch(self) -> None:
        _check_no_torch(self.tracker_class.__module__, self.plugin_module)

    # -- Accelerate's contract and the documentation -------------------------------------------

    def test_has_accelerates_tracker_attributes(self, tmp_path: Path) -> None:
        from accelkw_core.discovery.records import check_tracker_class

        assert check_tracker_class(self.tracker_class) is None
        tracker = self.build("contract", str(tmp_path))  # GeneralTracker.__init__ checks too
        assert tracker.name == self.tracker_class.name

    def test_options_and_methods_are_documented(self) -> None:
        import inspect

        cls = self.tracker_class
        doc = inspect.getdoc(cls) or ""
        assert doc, f"{cls.__name__} has no docstring"
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        options = [
            p.name
            for p in params[_TRACKER_LEADING:]
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        init_doc = inspect.getdoc(cls.__init__) or ""
        undocumented = [o for o in options if f"``{o}``" not in doc + init_doc]
        assert undocumented == [], (
            f"{cls.__name__}: constructor options not named (as ``option``) in its docstring: "
            f"{undocumented}"
        )
        for method in _TRACKER_METHODS:
            own = getattr(cls, method)
            assert inspect.getdoc(own), f"{cls.__name__}.{method} has no docstring"

    def test_only_the_main_process_writes(self, tmp_path: Path) -> None:
        """On rank 1 of a run (``RANK=1``, no process group) nothing is written anywhere."""
        if not self.tracker_class.main_process_only:
            return
        saved = os.environ.get("RANK")
        os.environ["RANK"] = "1"
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            logs = tmp_path / "logs"
            tracker = self.build("contract", str(logs))
            tracker.start()
            tracker.store_init_configuration({"lr": 0.1, "epochs": 2})
            tracker.log({"loss": 1.5}, step=0)
            tracker.finish()
        finally:
            os.chdir(cwd)
            if saved is None:
                del os.environ["RANK"]
            else:
                os.environ["RANK"] = saved
        assert sorted(p.name for p in tmp_path.iterdir()) == [], "rank 1 wrote files"

"""The broken-plugin matrix: every way a plugin can be broken, and what each command does.

For each kind a real distribution (``*.dist-info`` with an ``accelkw`` entry point) is installed
beside a good plugin whose ``apply`` changes a process-wide value and registers its undo. Then:

- ``accelkw plugins list`` exits 0 and shows the plugin's status; ``--strict`` exits 1 exactly
  when a plugin failed or conflicts;
- ``Accelerator(cpu=True)`` either composes every other handler (built-ins and the good one) or
  raises one error that names the handler and its distribution;
- nothing is left behind: the good plugin's change is undone, no process group exists, a state
  composed the same way has empty slots and no pending teardown.

A failing ``apply`` after a real process group was created (2 processes, gloo) is checked with
``run_workers``: the group is destroyed and no model wrapper remains.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from accelkw_core.plugin import MODEL_WRAPPER
from accelkw_core.testing import free_port, run_workers
from tests.conftest import good_plugin, run_accelkw, run_python, write_dist

# A good plugin whose apply sets an environment variable (a process-wide change) and whose
# teardown removes it: after a failed composition the variable must be gone.
STICKY = """
    import os
    from dataclasses import dataclass
    from accelkw_core.plugin import TEARDOWN, KwargsHandler, handler_field, hookimpl

    @dataclass
    class StickyKwargs(KwargsHandler):
        name = "sticky"
        value: str = handler_field("set", doc="what to set")

        def apply(self, state):
            os.environ["ACCELKW_TEST_STICKY"] = self.value
            state.contribute(
                TEARDOWN, self.name, lambda: os.environ.pop("ACCELKW_TEST_STICKY", None)
            )
            state.record(self.name, "set ACCELKW_TEST_STICKY")

    @hookimpl
    def accelkw_register_handlers(register):
        register(StickyKwargs)
"""

HANDLER_HEAD = """
    from dataclasses import dataclass
    from accelkw_core.plugin import TEARDOWN, KwargsHandler, handler_field, hookimpl
"""


def registering(body: str, cls: str) -> dict[str, str]:
    """A module ``bad_mod`` that defines ``body`` and registers class ``cls``."""
    source = (
        HANDLER_HEAD
        + body
        + f"""
    @hookimpl
    def accelkw_register_handlers(register):
        register({cls})
"""
    )
    return {"bad_mod.py": source}


@dataclass(frozen=True)
class Kind:
    """One way to be broken and the outcome expected of each command."""

    modules: dict[str, str]
    target: str = "bad_mod"
    status: str = "failed"  # in `plugins list`
    error_type: str | None = None  # the recorded error's type
    fragment: str = ""  # in the recorded reason, or in the Accelerator's error
    accelerator: str = "composes"  # "composes", "apply_error", "teardown_warning"
    extra_dist: tuple[str, str, dict[str, str]] | None = None  # another distribution to install


KINDS: dict[str, Kind] = {
    "import_error": Kind(
        {"bad_mod.py": "import no_such_module_xyz\n"},
        error_type="ModuleNotFoundError",
        fragment="no_such_module_xyz",
    ),
    "exception_at_import": Kind(
        {"bad_mod.py": "raise RuntimeError('kaboom at import')\n"},
        error_type="RuntimeError",
        fragment="kaboom at import",
    ),
    "syntax_error": Kind(
        {"bad_mod.py": "def broken(:\n"}, error_type="SyntaxError", fragment="bad_mod.py, line 1"
    ),
    "missing_attribute": Kind(
        {"bad_mod.py": "x = 1\n"},
        target="bad_mod:nothing_here",
        error_type="AttributeError",
        fragment="nothing_here",
    ),
    "invalid_hook_signature": Kind(
        {
            "bad_mod.py": """
            from accelkw_core.plugin import hookimpl
            @hookimpl
            def accelkw_register_handlers(register, surprise):
                pass
            """
        },
        error_type="PluginValidationError",
        fragment="surprise",
    ),
    "hook_raises": Kind(
        {
            "bad_mod.py": """
            from accelkw_core.plugin import hookimpl
            @hookimpl
            def accelkw_register_handlers(register):
                raise ValueError("cannot register today")
            """
        },
        error_type="ValueError",
        fragment="accelkw_register_handlers raised: cannot register today",
    ),
    "handler_not_a_dataclass": Kind(
        registering(
            """
    class Plain(KwargsHandler):
        name = "plain"
""",
            "Plain",
        ),
        error_type="InvalidHandler",
        fragment="Plain is not a dataclass (decorate it with @dataclass)",
    ),
    "handler_lacks_defaults": Kind(
        registering(
            """
    @dataclass
    class NoDefault(KwargsHandler):
        name = "nodefault"
        size: int
""",
            "NoDefault",
        ),
        error_type="InvalidHandler",
        fragment="NoDefault.size has no default (every handler field needs one)",
    ),
    "handler_lacks_name": Kind(
        registering(
            """
    @dataclass
    class Nameless(KwargsHandler):
        size: int = 1
""",
            "Nameless",
        ),
        error_type="InvalidHandler",
        fragment="Nameless has no valid registry name (got ''",
    ),
    "handler_name_clash": Kind(
        {"bad_mod.py": good_plugin("gizmo", "OtherGizmoKwargs")},
        status="conflict",
        error_type="HandlerNameConflict",
        fragment="handler name 'gizmo' is claimed by",
        extra_dist=("acme-gizmo", "gizmo", {"acme_gizmo.py": good_plugin("gizmo")}),
    ),
    "apply_raises": Kind(
        registering(
            """
    @dataclass
    class Exploding(KwargsHandler):
        name = "broken"
        after = ("sticky",)
        size: int = handler_field(1, doc="size")

        def apply(self, state):
            state.contribute(TEARDOWN, self.name, lambda: None)
            raise RuntimeError("apply exploded")
""",
            "Exploding",
        ),
        status="loaded",
        fragment=(
            "handler 'broken' (from acme-broken) failed in apply(): RuntimeError: apply exploded; "
            "the handlers applied before it were undone"
        ),
        accelerator="apply_error",
    ),
    "teardown_raises": Kind(
        registering(
            """
    @dataclass
    class BadTeardown(KwargsHandler):
        name = "broken"
        after = ("sticky",)
        size: int = handler_field(1, doc="size")

        def apply(self, state):
            def fail():
                raise RuntimeError("teardown exploded")
            state.contribute(TEARDOWN, self.name, fail)
            state.record(self.name, "applied")
""",
            "BadTeardown",
        ),
        status="loaded",
        fragment="teardown of handler 'broken' failed: RuntimeError: teardown exploded",
        accelerator="teardown_warning",
    ),
}

# In a fresh interpreter: build an Accelerator, then compose a bare state the same way, and
# report what each did and what is left in the process.
ACCELERATOR_CHECK = """
    import json, os, sys, warnings
    from accelkw_core import Accelerator, RunState
    from accelkw_core.runtime.composing.composition import compose

    out = {"error": None, "handlers": None, "warnings": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            accelerator = Accelerator(cpu=True)
        except Exception as exc:
            out["error"] = {
                "type": type(exc).__name__,
                "message": str(exc),
                "handler": getattr(exc, "handler", None),
                "distribution": getattr(exc, "distribution", None),
            }
        else:
            out["handlers"] = list(accelerator.state.handlers)
            out["sticky_while_running"] = os.environ.get("ACCELKW_TEST_STICKY")
            accelerator.end_training()
    out["warnings"] = [str(w.message) for w in caught]
    out["sticky_after"] = os.environ.get("ACCELKW_TEST_STICKY")

    state = RunState(cpu=True)
    try:
        compose(state, [])
    except Exception as exc:
        out["compose_error"] = type(exc).__name__
        from accelkw_core.contract.points import POINTS

        out["slots"] = {
            "contributions": sum(len(state.contributions(p)) for p in POINTS),
            "capabilities": len(state.capabilities),
            "handlers": len(state.handlers),
            "teardowns": len(state.teardowns),
        }
    else:
        state.run_teardowns()
    dist = sys.modules.get("torch.distributed")
    out["process_group"] = bool(dist is not None and dist.is_available() and dist.is_initialized())
    print(json.dumps(out))
"""

EMPTY_SLOTS = {
    "contributions": 0,
    "capabilities": 0,
    "handlers": 0,
    "teardowns": 0,
}


def install(site: Path, kind: Kind) -> None:
    write_dist(site, "acme-broken", {"broken": kind.target}, kind.modules)
    write_dist(site, "acme-sticky", {"sticky": "acme_sticky"}, {"acme_sticky.py": STICKY})
    if kind.extra_dist is not None:
        dist, ep, modules = kind.extra_dist
        write_dist(site, dist, {ep: dist.replace("-", "_")}, modules)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_broken_plugin_matrix(site: Path, name: str) -> None:
    kind = KINDS[name]
    install(site, kind)

    # plugins list: always exit 0, the plugin's status and reason, one warning line per failure.
    listed = run_accelkw(["plugins", "list", "--json"], site=site)
    assert listed.returncode == 0, listed.stderr
    plugins = {p["name"]: p for p in listed.json()}
    broken = plugins["broken"]
    assert broken["status"] == kind.status
    assert broken["distribution"] == "acme-broken"
    assert plugins["sticky"]["status"] == "loaded"
    bad = kind.status != "loaded"
    if bad:
        assert broken["error"]["type"] == kind.error_type
        assert kind.fragment in broken["error"]["message"]
        assert f"plugin 'broken' {kind.status}:" in listed.stderr
    else:
        assert broken["error"] is None and listed.stderr == ""
    assert "Traceback" not in listed.stderr
    table = run_accelkw(["plugins", "list"], site=site)
    assert table.returncode == 0
    row = next(line for line in table.stdout.splitlines() if " broken " in line)
    assert kind.status in row.split()

    # --strict: exit 1 exactly when a plugin failed or conflicts.
    assert run_accelkw(["plugins", "list", "--strict"], site=site).returncode == (1 if bad else 0)

    # Accelerator: composes the rest, or one clear error; nothing left behind either way.
    ran = run_python(ACCELERATOR_CHECK, site=site)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert out["sticky_after"] is None
    assert out["process_group"] is False
    if kind.accelerator == "apply_error":
        assert out["error"] == {
            "type": "HandlerApplyError",
            "message": kind.fragment,
            "handler": "broken",
            "distribution": "acme-broken",
        }
        assert out["compose_error"] == "HandlerApplyError"
        assert out["slots"] == EMPTY_SLOTS
        return
    assert out["error"] is None, out["error"]
    assert out["sticky_while_running"] == "set"
    assert "sticky" in out["handlers"]
    # By handler name: a plugin may register several handlers under names of its own (fp8).
    builtins = {
        h["name"]
        for p in plugins.values()
        if p["distribution"].startswith("accelkw-") and "handler" in p["kinds"]
        for h in p["handlers"]
    }
    assert builtins - _opt_in() <= set(out["handlers"])  # opt-in handlers compose on request
    if kind.accelerator == "teardown_warning":
        assert "broken" in out["handlers"]
        assert out["warnings"] == [kind.fragment]
    else:
        assert "broken" not in out["handlers"]
        # The run goes on without it, and says so once per plugin, naming the distribution
        # and the fix (issue 14: a broken or conflicting plugin never disappears silently).
        assert out["warnings"], "the run went without a broken plugin silently"
        for warning in out["warnings"]:
            assert "so this run goes without it" in warning and "(acme-" in warning, warning
            assert "ACCELKW_DISABLE_PLUGINS=" in warning
    if name == "handler_name_clash":
        assert "gizmo" not in out["handlers"]  # neither claimant wins silently
        assert plugins["gizmo"]["status"] == "conflict"
        for dist in ("acme-broken", "acme-gizmo"):
            assert dist in broken["error"]["message"]


def test_a_clash_with_a_built_in_name_is_a_conflict_not_an_override(site: Path) -> None:
    import accelkw_autocast  # noqa: F401  (integration: a broken install fails, never skips)

    write_dist(
        site, "acme-autocast", {"fake": "acme_fake"}, {"acme_fake.py": good_plugin("autocast")}
    )
    plugins = {p["name"]: p for p in run_accelkw(["plugins", "list", "--json"], site=site).json()}
    for name in ("fake", "autocast"):
        assert plugins[name]["status"] == "conflict"
        message = plugins[name]["error"]["message"]
        assert "handler name 'autocast' is claimed by" in message
        assert "acme-autocast" in message and "accelkw-autocast" in message
    assert run_accelkw(["plugins", "list", "--strict"], site=site).returncode == 1
    out = json.loads(run_python(ACCELERATOR_CHECK, site=site).stdout)
    assert out["error"] is None
    assert "autocast" not in out["handlers"]


# -- a failing apply after a real process group was created ------------------------------------


def group_then_explode(rank: int, site: str, second_port: int) -> dict[str, Any]:
    """Compose a 2-process run whose last handler raises; report what is left afterwards.

    It rendezvouses twice; the second time on ``second_port``: a second store on the first
    port can meet the first one still closing (a TCPStore error, then a 30 s timeout).
    """
    import os
    import sys
    from datetime import timedelta

    sys.path.insert(0, site)
    import torch.distributed as dist
    from accelkw_process_group import InitProcessGroupKwargs

    from accelkw_core import Accelerator, HandlerApplyError

    handler = InitProcessGroupKwargs(backend="gloo", timeout=timedelta(seconds=30))
    try:
        Accelerator(cpu=True, kwargs_handlers=[handler])
    except HandlerApplyError as exc:
        error = {"handler": exc.handler, "distribution": exc.distribution, "message": str(exc)}
    else:  # pragma: no cover - reported as a failure by the test
        error = None
    from accelkw_core import RunState
    from accelkw_core.runtime.composing.composition import compose

    os.environ["MASTER_PORT"] = str(second_port)
    state = RunState.from_env(cpu=True)
    try:
        compose(state, [handler])
    except HandlerApplyError as exc:
        compose_error = exc.handler
    else:  # pragma: no cover - reported as a failure by the test
        compose_error = None
    return {
        "error": error,
        "compose_error": compose_error,
        "initialized": dist.is_initialized(),
        "model_wrappers": len(state.contributions(MODEL_WRAPPER)),
        "teardowns": len(state.teardowns),
        "handlers": list(state.handlers),
        "log": state.summary(),
    }


# Runs after process_group and ddp (when installed): both have done their work when it fails.
LATE_EXPLODER = (
    HANDLER_HEAD
    + """
    @dataclass
    class LateKwargs(KwargsHandler):
        name = "late"
        after = ("process_group", "ddp")
        size: int = handler_field(1, doc="size")

        def apply(self, state):
            import torch.distributed as dist
            assert dist.is_initialized(), "process_group should have run first"
            raise RuntimeError("late apply exploded")

    @hookimpl
    def accelkw_register_handlers(register):
        register(LateKwargs)
"""
)


@pytest.mark.multiprocess
def test_apply_error_after_the_group_was_created_destroys_it(site: Path) -> None:
    import accelkw_process_group  # noqa: F401  (integration: a broken install fails, never skips)

    write_dist(site, "acme-late", {"late": "acme_late"}, {"acme_late.py": LATE_EXPLODER})
    results = run_workers(group_then_explode, 2, args=(str(site), free_port()), timeout=120)
    ddp_installed = importlib.util.find_spec("accelkw_ddp") is not None
    for result in results:
        assert result["error"] is not None
        assert result["error"]["handler"] == "late"
        assert result["error"]["distribution"] == "acme-late"
        assert "RuntimeError: late apply exploded" in result["error"]["message"]
        assert result["compose_error"] == "late"
        assert result["initialized"] is False
        assert result["model_wrappers"] == 0 and result["teardowns"] == 0
        assert result["handlers"] == []
        assert any("destroyed the process group it created" in line for line in result["log"])
        if ddp_installed:  # a wrapper was registered before the failure, and is gone after
            assert any(line.startswith("ddp: models will be wrapped") for line in result["log"])


def _opt_in() -> set[str]:
    """The installed handlers that compose only when a run asks for them (fsdp, compile, ...)."""
    from accelkw_core.discovery.registry import Registry

    return {name for name, info in Registry().handlers().items() if info.cls.opt_in}

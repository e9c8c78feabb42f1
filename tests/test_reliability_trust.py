"""The trust model: accelkw runs only the code a user chose to run, and writes only where told.

- A denied plugin's module never executes, whatever the command (a marker file proves it).
- Entry-point autoloading can be turned off completely; code-passed handlers still compose.
- Configuration (files and environment) never imports or evaluates code, unless the person
  running sets ``ACCELKW_ALLOW_IMPORTS=1``; a config file cannot opt itself in. No ``eval``,
  ``exec`` or unpickling anywhere in the shipped code (checked on its syntax tree).
- The profiler's trace directory is created safely and a file that is not an earlier trace is
  never overwritten, nor written through a symbolic link.
- ``[plugins] required`` fails fast, before any handler applies, naming every unmet requirement.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from accelkw_core.config.settings import resolve_settings
from accelkw_core.contract.validation import build_handler
from accelkw_core.plugin import ConfigError, KwargsHandler, handler_field, hookimpl
from accelkw_core.testing import isolated_registry
from tests.conftest import REPO, good_plugin, run_accelkw, run_python, write_dist

# A plugin that leaves a trace of every line of it that runs.
SPY = """
import os, pathlib
from dataclasses import dataclass
from accelkw_core.plugin import KwargsHandler, handler_field, hookimpl

pathlib.Path(os.environ["MARKER"]).write_text("imported")

@dataclass
class SpyKwargs(KwargsHandler):
    name = "spy"
    level: int = handler_field(1, doc="how much")

    def apply(self, state):
        pathlib.Path(os.environ["MARKER"]).write_text("applied")
        state.record(self.name, "applied")

@hookimpl
def accelkw_register_handlers(register):
    register(SpyKwargs)
"""

COMPOSED = """
    import json
    from accelkw_core import Accelerator
    accelerator = Accelerator(cpu=True)
    print(json.dumps(list(accelerator.state.handlers)))
"""


@pytest.fixture
def spy_site(site: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    write_dist(site, "acme-spy", {"spy": "acme_spy"}, {"acme_spy.py": SPY})
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": good_plugin("gizmo")})
    return site, {"MARKER": str(tmp_path / "marker")}


def handler_names(plan_json: dict[str, Any]) -> list[str]:
    return [h["name"] for h in plan_json["handlers"]]


# -- denied plugins ----------------------------------------------------------------------------

DENIALS = {
    "deny_by_plugin": {"ACCELKW_DISABLE_PLUGINS": "spy"},
    "deny_by_distribution": {"ACCELKW_DISABLE_PLUGINS": "acme-spy"},
    "allow_list_without_it": {"ACCELKW_PLUGINS": "gizmo"},
}


# `plan` imports torch to detect the device (a second or two), so it runs with one denial.
CASES = [
    (command, denial)
    for command in ("accelerator", "config_check", "plugins_show")
    for denial in sorted(DENIALS)
] + [("plan", "deny_by_plugin")]


@pytest.mark.parametrize(("command", "denial"), CASES)
def test_a_denied_plugin_module_never_executes(
    spy_site: tuple[Path, dict[str, str]], denial: str, command: str
) -> None:
    site, env = spy_site
    env = {**env, **DENIALS[denial]}
    marker = Path(env["MARKER"])
    if command == "accelerator":
        ran = run_python(COMPOSED, site=site, env=env)
        assert ran.returncode == 0, ran.stderr
        assert "spy" not in json.loads(ran.stdout) and "gizmo" in json.loads(ran.stdout)
    elif command == "plan":
        ran = run_accelkw(["plan", "--json"], site=site, env=env)
        assert ran.returncode == 0, ran.stderr
        names = handler_names(ran.json())
        assert "spy" not in names and "gizmo" in names
    elif command == "config_check":
        ran = run_accelkw(["config", "check", "--json"], site=site, env=env)
        assert ran.returncode == 0, ran.stderr
        assert "spy" not in handler_names(ran.json())
    else:
        ran = run_accelkw(["plugins", "show", "spy"], site=site, env=env)
        assert ran.returncode == 1
        assert "no handler named 'spy' is installed" in ran.stderr
    assert not marker.exists()


def test_the_spy_is_seen_when_not_denied(spy_site: tuple[Path, dict[str, str]]) -> None:
    # The control: without a deny-list the same module runs and its handler applies.
    site, env = spy_site
    ran = run_python(COMPOSED, site=site, env=env)
    assert "spy" in json.loads(ran.stdout)
    assert Path(env["MARKER"]).read_text() == "applied"


# -- autoload off ------------------------------------------------------------------------------

AUTOLOAD_OFF = """
    import json, sys
    from dataclasses import dataclass
    from accelkw_core import Accelerator, KwargsHandler
    from accelkw_core.plugin import handler_field

    @dataclass
    class InlineKwargs(KwargsHandler):
        name = "inline"
        level: int = handler_field(1, doc="how much")

        def apply(self, state):
            state.record(self.name, f"level {self.level}")

    accelerator = Accelerator(cpu=True, kwargs_handlers=[InlineKwargs(level=3)])
    plugin_modules = sorted(
        m for m in sys.modules
        if m.startswith(("accelkw_", "acme_")) and m.partition(".")[0] != "accelkw_core"
    )
    print(json.dumps({
        "handlers": list(accelerator.state.handlers),
        "log": accelerator.state.summary(),
        "plugin_modules": plugin_modules,
    }))
"""


def test_autoload_off_imports_no_plugin_and_composes_only_code_handlers(
    spy_site: tuple[Path, dict[str, str]],
) -> None:
    site, env = spy_site
    env = {**env, "ACCELKW_DISABLE_PLUGIN_AUTOLOAD": "1"}
    ran = run_python(AUTOLOAD_OFF, site=site, env=env)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert out["handlers"] == ["inline"]
    assert out["log"] == ["inline: level 3"]
    assert out["plugin_modules"] == []  # neither the built-ins nor the spy were imported
    plan = run_accelkw(["plan", "--json"], site=site, env=env)
    assert plan.returncode == 0 and handler_names(plan.json()) == []
    listing = run_accelkw(["plugins", "list", "--json"], site=site, env=env)
    assert listing.json() == []
    assert not Path(env["MARKER"]).exists()


# -- configuration never runs code ---------------------------------------------------------------


@dataclass
class HookedKwargs(KwargsHandler):
    """A handler with a callable field, as ``ProfileKwargs.on_trace_ready`` is."""

    name: ClassVar[str] = "hooked"
    hook: Callable[..., Any] | None = handler_field(None, doc="called back")


class HookedPlugin:
    @hookimpl
    def accelkw_register_handlers(self, register: Any) -> None:
        register(HookedKwargs)


@pytest.fixture
def evil_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """An importable module that writes a marker file when imported: ``(name, marker)``."""
    name = f"evil_{os.getpid()}_{abs(hash(tmp_path)) % 10**8}"
    marker = tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
        "def hook(*args):\n    return 'called'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, marker
    sys.modules.pop(name, None)


def settings_for(tmp_path: Path, toml: str = "", env: dict[str, str] | None = None) -> Any:
    config = tmp_path / "accelkw.toml"
    config.write_text(textwrap.dedent(toml))
    return resolve_settings(
        config=config, env=env or {}, registry=isolated_registry([HookedPlugin()]), cwd=tmp_path
    )


NO_IMPORT = (
    "a callable set in code (configuration never imports code; opt in with "
    "ACCELKW_ALLOW_IMPORTS=1 to name one as 'package.module:function') or None"
)


@pytest.mark.parametrize("where", ["file", "environment"])
def test_a_callable_named_in_configuration_is_an_error_and_imports_nothing(
    tmp_path: Path, evil_module: tuple[str, Path], where: str
) -> None:
    name, marker = evil_module
    value = f"{name}:hook"
    with pytest.raises(ConfigError) as info:
        if where == "file":
            settings_for(tmp_path, f'[handlers.hooked]\nhook = "{value}"\n')
        else:
            settings_for(tmp_path, env={"ACCELKW_HOOKED__HOOK": value})
    err = info.value
    assert (err.handler, err.field, err.value, err.expected) == ("hooked", "hook", value, NO_IMPORT)
    expected_source = (
        f"{tmp_path / 'accelkw.toml'} [handlers.hooked]"
        if where == "file"
        else "environment variable ACCELKW_HOOKED__HOOK"
    )
    assert err.source == expected_source
    assert not marker.exists() and name not in sys.modules


@pytest.mark.parametrize("where", ["file", "environment"])
def test_allow_imports_is_the_explicit_opt_in(
    tmp_path: Path, evil_module: tuple[str, Path], where: str
) -> None:
    name, marker = evil_module
    value = f"{name}:hook"
    env = {"ACCELKW_ALLOW_IMPORTS": "1"}
    if where == "file":
        out = settings_for(tmp_path, f'[handlers.hooked]\nhook = "{value}"\n', env)
    else:
        out = settings_for(tmp_path, env={**env, "ACCELKW_HOOKED__HOOK": value})
    hooked = out.handler("hooked")
    assert hooked.handler.hook is sys.modules[name].hook
    assert hooked.handler.hook() == "called"
    assert marker.read_text() == "imported"


def test_a_config_file_cannot_opt_itself_in(tmp_path: Path, evil_module: tuple[str, Path]) -> None:
    name, marker = evil_module
    with pytest.raises(ConfigError) as info:
        settings_for(
            tmp_path,
            f'[accelerator]\nallow_imports = true\n[handlers.hooked]\nhook = "{name}:hook"\n',
        )
    assert (info.value.handler, info.value.field) == ("accelerator", "allow_imports")
    assert info.value.expected == "one of the keys mixed_precision, cpu"
    assert not marker.exists()


def test_the_opt_in_switch_itself_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        settings_for(tmp_path, env={"ACCELKW_ALLOW_IMPORTS": "maybe"})
    assert str(info.value) == (
        "environment variable ACCELKW_ALLOW_IMPORTS: accelerator.allow_imports: got 'maybe', "
        "expected a boolean (true/false, 1/0, yes/no, on/off)"
    )


def test_build_handler_imports_only_with_import_callables(evil_module: tuple[str, Path]) -> None:
    name, marker = evil_module
    with pytest.raises(ConfigError, match="configuration never imports code"):
        build_handler(HookedKwargs, {"hook": f"{name}:hook"})
    assert not marker.exists()
    built = build_handler(HookedKwargs, {"hook": f"{name}:hook"}, import_callables=True)
    assert built.hook is sys.modules[name].hook
    with pytest.raises(ConfigError, match="an importable 'module:attribute'"):
        build_handler(HookedKwargs, {"hook": f"{name}:missing"}, import_callables=True)


def test_profile_on_trace_ready_os_system_is_a_config_error(tmp_path: Path) -> None:
    import accelkw_profile.plugin as profile  # integration: a broken install fails, never skips

    config = tmp_path / "accelkw.toml"
    config.write_text('[handlers.profile]\non_trace_ready = "os:system"\n')
    with pytest.raises(ConfigError) as info:
        resolve_settings(config=config, env={}, registry=isolated_registry([profile]), cwd=tmp_path)
    assert (info.value.handler, info.value.field, info.value.value) == (
        "profile",
        "on_trace_ready",
        "os:system",
    )
    assert info.value.expected == NO_IMPORT


# Calls that run code from data, and what may call the import and process machinery.
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "execfile"}
FORBIDDEN_ATTRS = {
    ("pickle", "load"),
    ("pickle", "loads"),
    ("marshal", "load"),
    ("marshal", "loads"),
    ("yaml", "load"),
    ("os", "system"),
    ("os", "popen"),
    ("runpy", "run_path"),
    ("runpy", "run_module"),
}
# Reviewed uses: each imports a fixed module table, an entry point after the allow/deny check,
# or a callable only behind the explicit opt-in.
IMPORT_SITES = {
    "accelkw_core/__init__.py",  # lazy re-exports from a constant table
    "accelkw_core/cli/main.py",  # the command modules, a constant tuple
    "accelkw_core/utils.py",  # reference class names, a constant table
    "accelkw_core/discovery/cache.py",  # entry points, after the allow/deny check
    "accelkw_core/contract/coercion.py",  # callables, only with import_callables=True
    "accelkw_core/testing/contract.py",  # the plugin module a test class names, in tests only
}
# pickle may only read back bytes this process's own code just made, never a file's.
PICKLE_SITES = {
    "accelkw_core/testing/contract.py",  # the contract kit's round trip, in the same call
    # the generators' states a prepared loader's own worker processes send with each batch,
    # kept in memory as bytes (the DataLoader's pipe had unpickled the batch they came with)
    "accelkw_core/runtime/data/worker_draws.py",
}
# runpy may run only what the command line named, never a value from config data or a variable.
RUNPY_SITES = {
    "accelkw_core/cli/worker.py",  # each worker of `accelkw launch` runs the SCRIPT it was given
}
PROCESS_SITES = {
    "accelkw_core/cli/launch_cmd.py",  # runs the user's script
    "accelkw_core/testing/helpers.py",  # modules_loaded_by: runs the test's own code in a fresh interpreter
}


def shipped_sources() -> list[Path]:
    roots = [REPO / "accelkw_core", *sorted((REPO / "plugins").glob("*/accelkw_*"))]
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def calls(tree: ast.AST) -> Iterator[tuple[str | None, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                yield None, func.id
            elif isinstance(func, ast.Attribute):
                owner = func.value.id if isinstance(func.value, ast.Name) else None
                yield owner, func.attr


def test_no_shipped_code_evaluates_or_imports_from_data() -> None:
    sources = shipped_sources()
    assert len(sources) > 20
    found: list[str] = []
    for path in sources:
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        for owner, name in calls(tree):
            if owner is None and name in FORBIDDEN_CALLS:
                found.append(f"{rel}: {name}()")
            reviewed = (owner == "runpy" and rel in RUNPY_SITES) or (
                owner == "pickle" and rel in PICKLE_SITES
            )
            if (owner, name) in FORBIDDEN_ATTRS and not reviewed:
                found.append(f"{rel}: {owner}.{name}()")
            if name == "import_module" and rel not in IMPORT_SITES:
                found.append(f"{rel}: import_module() (review it, then list it in IMPORT_SITES)")
            if owner == "subprocess" and rel not in PROCESS_SITES:
                found.append(f"{rel}: subprocess.{name}() (review it, then list it)")
    assert found == []


# -- trace output paths ------------------------------------------------------------------------


@pytest.fixture
def profiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], str]:
    """Profile one tiny step through an Accelerator writing traces to ``output_trace_dir``.

    Returns ``"ran"`` when the block ran and its trace was written, else the ConfigError text.
    """
    from accelkw_profile import ProfileKwargs  # integration: a broken install fails, never skips

    from accelkw_core import Accelerator

    for var in [v for v in os.environ if v.startswith("ACCELKW_")]:
        monkeypatch.delenv(var)
    monkeypatch.chdir(tmp_path)

    def run(output_trace_dir: str) -> str:
        import torch

        handler = ProfileKwargs(activities=["cpu"], output_trace_dir=output_trace_dir)
        ran = False
        with Accelerator(cpu=True, kwargs_handlers=[handler], registry=isolated_registry()) as acc:
            try:
                with acc.profile() as prof:
                    ran = True
                    torch.ones(4).add_(1)
                    prof.step()
            except ConfigError as exc:
                assert not ran, "the path must be refused before profiling starts"
                assert exc.field == "output_trace_dir"
                return str(exc)
        return "ran"

    return run


def is_trace(path: Path) -> bool:
    return "traceEvents" in json.loads(path.read_text())


def test_the_trace_directory_is_created_with_its_parents(profiled: Any, tmp_path: Path) -> None:
    assert profiled(str(tmp_path / "runs" / "a" / "b")) == "ran"
    assert is_trace(tmp_path / "runs" / "a" / "b" / "profile_0.json")
    assert sorted(p.name for p in (tmp_path / "runs" / "a" / "b").iterdir()) == ["profile_0.json"]


def test_an_earlier_trace_is_replaced(profiled: Any, tmp_path: Path) -> None:
    old = tmp_path / "profile_0.json"
    old.write_text(json.dumps({"traceEvents": [], "old": True}))
    assert profiled(str(tmp_path)) == "ran"
    assert is_trace(old) and "old" not in json.loads(old.read_text())


@pytest.mark.parametrize(
    "content",
    ["my notes\n", '{"not": "a trace"}', "", "\xff\xfe"],
    ids=["text", "other-json", "empty", "binary"],
)
def test_a_file_that_is_not_a_trace_is_never_overwritten(
    profiled: Any, tmp_path: Path, content: str
) -> None:
    precious = tmp_path / "profile_0.json"
    precious.write_text(content, encoding="latin-1")
    message = profiled(str(tmp_path))
    assert f"{precious} exists and is not one, so it is not overwritten" in message
    assert precious.read_text(encoding="latin-1") == content


def test_a_link_to_a_file_that_is_not_a_trace_is_refused(profiled: Any, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "profile_0.json").symlink_to(target)
    assert "is not one, so it is not overwritten" in profiled(str(out))
    assert target.read_text() == "precious"


def test_a_link_to_an_earlier_trace_is_replaced_not_written_through(
    profiled: Any, tmp_path: Path
) -> None:
    target = tmp_path / "kept.json"
    target.write_text(json.dumps({"traceEvents": [], "kept": True}))
    out = tmp_path / "out"
    out.mkdir()
    (out / "profile_0.json").symlink_to(target)
    assert profiled(str(out)) == "ran"
    assert not (out / "profile_0.json").is_symlink() and is_trace(out / "profile_0.json")
    assert json.loads(target.read_text())["kept"] is True


def test_a_file_where_the_directory_should_be_is_an_error(profiled: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "traces"
    blocker.write_text("a file, not a directory")
    assert "expected a directory that can be created" in profiled(str(blocker / "sub"))
    assert "expected a directory that can be created" in profiled(str(blocker))
    assert blocker.read_text() == "a file, not a directory"


def test_a_nul_byte_in_the_trace_directory_is_a_config_error() -> None:
    import accelkw_profile as profile  # integration: a broken install fails, never skips

    with pytest.raises(ConfigError) as info:
        profile.ProfileKwargs.from_mapping({"output_trace_dir": "runs\x00/x"})
    assert info.value.field == "output_trace_dir"
    assert info.value.expected == "a path (no NUL characters)"


# -- required plugins --------------------------------------------------------------------------

STICKY_APPLY = """
    import os, pathlib
    from dataclasses import dataclass
    from accelkw_core.plugin import KwargsHandler, handler_field, hookimpl

    @dataclass
    class StickyKwargs(KwargsHandler):
        name = "sticky"
        level: int = handler_field(1, doc="how much")

        def apply(self, state):
            pathlib.Path(os.environ["MARKER"]).write_text("applied")

    @hookimpl
    def accelkw_register_handlers(register):
        register(StickyKwargs)
"""


@pytest.fixture
def required_site(site: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    write_dist(
        site,
        "acme-gizmo",
        {"gizmo": "acme_gizmo"},
        {"acme_gizmo.py": good_plugin("gizmo")},
        "0.5.0",
    )
    write_dist(site, "acme-sticky", {"sticky": "acme_sticky"}, {"acme_sticky.py": STICKY_APPLY})
    write_dist(site, "acme-broken", {"broken": "bad_mod"}, {"bad_mod.py": "import no_such_xyz\n"})
    write_dist(site, "acme-spy", {"spy": "acme_spy"}, {"acme_spy.py": SPY})
    for n in ("one", "two"):
        write_dist(site, f"acme-{n}", {n: f"acme_{n}"}, {f"acme_{n}.py": good_plugin("clash")})
    env = {"MARKER": str(tmp_path / "marker"), "ACCELKW_DISABLE_PLUGINS": "spy"}
    return site, env


REQUIRED = {
    "satisfied": (
        ["gizmo>=0.1", "acme-gizmo==0.5.*", "Acme_Gizmo", "sticky", "GIZMO>0.4,<1"],
        None,
    ),
    "wrong_version": (
        ["gizmo>=1.0"],
        "'gizmo>=1.0': acme-gizmo 0.5.0 is installed (pip install 'acme-gizmo>=1.0')",
    ),
    # A name no test environment installs (examples/seed is installed in CI, so not "seed").
    "missing": (
        ["nowhere"],
        "'nowhere': no installed plugin provides it (install the plugin that provides the "
        "'nowhere' handler)",
    ),
    "failed_to_load": (
        ["broken"],
        "'broken': plugin 'broken' from acme-broken failed to load: No module named 'no_such_xyz'",
    ),
    "denied": (
        ["spy"],
        "'spy': plugin 'spy' from acme-spy is disabled: in the deny-list ACCELKW_DISABLE_PLUGINS",
    ),
    "conflict": (
        ["clash"],
        "'clash': plugin 'one' from acme-one is in conflict: handler name 'clash' is claimed by "
        "acme-one (plugin 'one', class ClashKwargs) and acme-two (plugin 'two', class ClashKwargs)",
    ),
    "several": (
        ["gizmo<0.5", "sticky", "nowhere>=1"],
        "'gizmo<0.5': acme-gizmo 0.5.0 is installed (pip install 'acme-gizmo<0.5'); "
        "'nowhere>=1': no installed plugin provides it (install the plugin that provides the "
        "'nowhere' handler)",
    ),
}


@pytest.mark.parametrize("case", sorted(REQUIRED))
def test_required_plugins_fail_fast_naming_what_is_missing(
    required_site: tuple[Path, dict[str, str]], tmp_path: Path, case: str
) -> None:
    site, env = required_site
    required, problem = REQUIRED[case]
    config = tmp_path / "accelkw.toml"
    config.write_text(f"[plugins]\nrequired = {json.dumps(required)}\n")
    checked = run_accelkw(["config", "check", str(config)], site=site, env=env)
    planned = run_accelkw(["plan", "--config", str(config)], site=site, env=env)
    if problem is None:
        assert checked.returncode == 0, checked.stderr
        assert planned.returncode == 0, planned.stderr
        return
    message = f"{config} [plugins]: required plugins not satisfied: {problem}"
    assert checked.returncode == 1 and message in checked.stderr
    assert planned.returncode == 1 and f"accelkw: error: {message}" in planned.stderr


ACCELERATOR_WITH_CONFIG = """
    import json, sys
    from accelkw_core import Accelerator
    try:
        Accelerator(cpu=True, config=sys.argv[1] if len(sys.argv) > 1 else {config!r})
    except Exception as exc:
        print(json.dumps({{"type": type(exc).__name__, "message": str(exc)}}))
    else:
        print(json.dumps(None))
"""


def test_a_required_plugin_missing_stops_the_accelerator_before_any_handler_applies(
    required_site: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    site, env = required_site
    config = tmp_path / "accelkw.toml"
    config.write_text('[plugins]\nrequired = ["sticky", "gizmo>=2"]\n')
    ran = run_python(ACCELERATOR_WITH_CONFIG.format(config=str(config)), site=site, env=env)
    assert json.loads(ran.stdout) == {
        "type": "RequirementError",
        "message": f"{config} [plugins]: required plugins not satisfied: 'gizmo>=2': "
        "acme-gizmo 0.5.0 is installed (pip install 'acme-gizmo>=2')",
    }
    assert not Path(env["MARKER"]).exists()  # sticky's apply never ran
    config.write_text('[plugins]\nrequired = ["sticky", "gizmo>=0.5"]\n')
    ran = run_python(ACCELERATOR_WITH_CONFIG.format(config=str(config)), site=site, env=env)
    assert json.loads(ran.stdout) is None
    assert Path(env["MARKER"]).read_text() == "applied"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('["gizmo>>1"]', "(Invalid specifier: '>>1')"),
        ('["gizmo 1.0"]', "such as 'ddp' or 'ddp>=0.1,<1'"),
        ('[""]', "such as 'ddp' or 'ddp>=0.1,<1'"),
        ("[1]", "such as 'ddp' or 'ddp>=0.1,<1'"),
        ('"gizmo"', "a list, each a plugin name"),
    ],
    ids=["bad-operator", "no-operator", "empty-name", "not-a-string", "not-a-list"],
)
def test_a_malformed_requirement_is_a_config_error(
    tmp_path: Path, value: str, expected: str
) -> None:
    config = tmp_path / "accelkw.toml"
    config.write_text(f"[plugins]\nrequired = {value}\n")
    with pytest.raises(ConfigError) as info:
        resolve_settings(config=config, env={}, registry=isolated_registry(), cwd=tmp_path)
    assert (info.value.handler, info.value.field) == ("plugins", "required")
    assert info.value.source == f"{config} [plugins]"
    assert expected in info.value.expected

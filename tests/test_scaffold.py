"""``accelkw plugins new``: name checks, target folder checks, and a generated plugin whose own
tests pass once its distribution metadata is on the path (the pip round trip is in
``test_install_venv.py``)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

from accelkw_core import __version__
from accelkw_core.cli.main import main
from accelkw_core.plugin import KwargsHandler
from accelkw_core.testing import isolated_registry
from accelkw_core.tools.scaffold import (
    PluginNames,
    ScaffoldError,
    check_available,
    render,
    scaffold_plugin,
)
from tests.conftest import REPO, good_plugin, run_accelkw, run_python, write_dist

EXPECTED_FILES = [
    "pyproject.toml",
    "README.md",
    "accelkw_my_seed/__init__.py",
    "accelkw_my_seed/handler.py",
    "accelkw_my_seed/plugin.py",
    "accelkw_my_seed/py.typed",
    "tests/test_my_seed.py",
]


def test_names_derive_from_the_registry_name() -> None:
    names = PluginNames.from_name("my_seed")
    assert names == PluginNames("my_seed", "accelkw-my-seed", "accelkw_my_seed", "MySeedKwargs")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("my-plugin", "did you mean 'my_plugin'?"),
        ("MyPlugin", "did you mean 'my_plugin'?"),
        ("2fast", "did you mean 'plugin_2fast'?"),
        ("_private", "did you mean 'private'?"),
        ("", "expected a lowercase Python identifier"),
        ("with space", "did you mean 'with_space'?"),
        ("class", "'class' is a Python keyword"),
        ("core", "accelkw_core would be the core's own"),
        ("accelkw_seed", "without the accelkw_ prefix"),
        ("accelkw-seed", "did you mean 'seed'?"),
    ],
)
def test_invalid_names_say_what_is_expected(bad: str, message: str) -> None:
    with pytest.raises(ScaffoldError) as err:
        scaffold_plugin(bad, opt_in=True, check_installed=False)
    text = str(err.value)
    assert text.startswith(f"invalid plugin name {bad!r}: ")
    assert message in text


def test_a_name_an_installed_plugin_or_handler_uses_is_refused() -> None:
    from tests.test_testing_helpers import BothPlugin

    registry = isolated_registry([BothPlugin()])
    with pytest.raises(ScaffoldError, match=r"handler 'second' \(.*SecondKwargs\) comes from code"):
        check_available(PluginNames.from_name("second"), registry)
    with pytest.raises(ScaffoldError, match="the installed plugin 'BothPlugin'"):
        check_available(PluginNames("BothPlugin", "x", "x", "X"), registry)
    check_available(PluginNames.from_name("third"), registry)


def test_an_installed_module_of_the_same_package_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "accelkw_shadow").mkdir()
    (tmp_path / "accelkw_shadow" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScaffoldError, match="a module accelkw_shadow is already importable"):
        check_available(PluginNames.from_name("shadow"), isolated_registry())


def test_cli_names_the_distribution_that_has_the_name(site: Path, tmp_path: Path) -> None:
    write_dist(
        site, "accelkw-other", {"other": "other_mod"}, {"other_mod.py": good_plugin("taken")}
    )
    result = run_accelkw(
        ["plugins", "new", "taken", "--opt-in", "--dir", str(tmp_path / "t")], site
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "accelkw: error: the name 'taken' is taken: handler 'taken' (other_mod.TakenKwargs) "
        "comes from accelkw-other 1.0.0 (plugin 'other'); choose another name"
    ]
    assert not (tmp_path / "t").exists()
    result = run_accelkw(
        ["plugins", "new", "other", "--opt-in", "--dir", str(tmp_path / "t")], site
    )
    assert "the installed plugin 'other' comes from accelkw-other 1.0.0" in result.stderr


def test_the_target_folder_must_be_new_or_empty(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(ScaffoldError, match="exists and is not empty"):
        scaffold_plugin("my_seed", tmp_path / "full", opt_in=True, check_installed=False)
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    (tmp_path / "file").write_text("")
    with pytest.raises(ScaffoldError, match="it is a file"):
        scaffold_plugin("my_seed", tmp_path / "file", opt_in=True, check_installed=False)
    (tmp_path / "empty").mkdir()
    assert scaffold_plugin("my_seed", tmp_path / "empty", opt_in=True, check_installed=False)


def test_default_folder_is_the_distribution_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    files = scaffold_plugin("my_seed", opt_in=True, check_installed=False)
    root = tmp_path / "accelkw-my-seed"
    assert [p.relative_to(root).as_posix() for p in files] == EXPECTED_FILES


def test_generated_pyproject_declares_the_entry_point_and_core_dependency() -> None:
    data = tomllib.loads(render(PluginNames.from_name("my_seed"), opt_in=False)["pyproject.toml"])
    project = data["project"]
    assert project["name"] == "accelkw-my-seed"
    assert project["entry-points"]["accelkw"] == {"my_seed": "accelkw_my_seed.plugin"}
    # The range of the core that generated it: this minor release, pre-1.0 (docs/versioning.md).
    core = Version(__version__)
    assert project["dependencies"][0] == f"accelkw-core>={core.major}.{core.minor},<" + (
        f"{core.major}.{core.minor + 1}" if core.major == 0 else f"{core.major + 1}"
    )
    assert project["dependencies"][1] == "torch>=2.1"  # the handler's types come from torch
    assert set(data["tool"]) == {"setuptools", "mypy"}
    assert data["tool"]["mypy"]["strict"] is True  # as its users' type checkers run
    # Packaged as the built-ins are: an editable install is a path entry type checkers follow.
    builtin = tomllib.loads((REPO / "plugins" / "grad-scaler" / "pyproject.toml").read_text())
    assert data["tool"]["setuptools"]["package-dir"] == builtin["tool"]["setuptools"]["package-dir"]


def test_generated_sources_are_valid_python_with_no_torch_import() -> None:
    for path, text in render(PluginNames.from_name("my_seed"), opt_in=False).items():
        if path.endswith(".py"):
            tree = ast.parse(text, filename=path)
            imported = {
                alias.name.split(".")[0]
                for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom)
                for alias in (
                    node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
                )
            }
            assert "torch" not in imported, path


@pytest.mark.parametrize("opt_in", [True, False])
def test_the_template_states_the_rule_and_the_authors_choice(opt_in: bool) -> None:
    files = render(PluginNames.from_name("my_seed"), opt_in=opt_in)
    handler = files["accelkw_my_seed/handler.py"]
    assert f"    opt_in: ClassVar[bool] = {opt_in}\n" in handler
    assert "must be opt-in" in handler  # the rule, next to the choice
    assert ("--opt-in" in handler) is opt_in and ("--on-by-default" in handler) is not opt_in
    readme = files["README.md"]
    assert ("is opt-in (`opt_in = True`)" in readme) is opt_in
    assert ("applied to every run" in readme) is not opt_in
    namespace: dict[str, object] = {}
    exec(compile(handler, "handler.py", "exec"), namespace)  # the template is valid code
    cls = namespace["MySeedKwargs"]
    assert isinstance(cls, type) and issubclass(cls, KwargsHandler)
    assert cls.opt_in is opt_in


def test_class_name_names_the_handler_everywhere() -> None:
    names = PluginNames.from_name("my_seed", "SeedHandler")
    assert names.class_name == "SeedHandler"
    files = render(names, opt_in=True)
    assert "class SeedHandler(KwargsHandler):" in files["accelkw_my_seed/handler.py"]
    assert "from accelkw_my_seed.handler import SeedHandler" in files["accelkw_my_seed/__init__.py"]
    assert "class TestSeedHandlerContract(HandlerContract):" in files["tests/test_my_seed.py"]
    assert "MySeedKwargs" not in "".join(files.values())


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("my-handler", "expected a Python class name"),
        ("2Fast", "expected a Python class name"),
        ("", "expected a Python class name"),
        ("Café", "expected a Python class name"),
        ("class", "'class' is a Python keyword"),
        ("None", "'None' is a Python keyword"),
        ("StepCounter", "already uses the name 'StepCounter'"),
        ("Plan", "already uses the name 'Plan'"),
    ],
)
def test_invalid_class_names_say_what_is_expected(bad: str, message: str) -> None:
    with pytest.raises(ScaffoldError) as err:
        scaffold_plugin("my_seed", opt_in=True, class_name=bad, check_installed=False)
    text = str(err.value)
    assert text.startswith(f"invalid --class-name {bad!r}: ")
    assert message in text


def test_cli_requires_the_opt_in_choice(tmp_path: Path) -> None:
    target = tmp_path / "t"
    none = run_accelkw(["plugins", "new", "my_seed", "--dir", str(target)])
    assert none.returncode == 2
    assert "one of the arguments --opt-in --on-by-default is required" in none.stderr
    both = run_accelkw(["plugins", "new", "my_seed", "--opt-in", "--on-by-default"])
    assert both.returncode == 2
    assert "argument --on-by-default: not allowed with argument --opt-in" in both.stderr
    bad = run_accelkw(["plugins", "new", "my_seed", "--opt-in", "--class-name", "my-cls"])
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        "accelkw: error: invalid --class-name 'my-cls': expected a Python class name: an ASCII "
        "letter or underscore, then letters, digits or underscores (e.g. 'SeedKwargs')"
    )
    assert not target.exists()
    help_text = " ".join(run_accelkw(["plugins", "new", "--help"]).stdout.split())
    assert "--class-name NAME" in help_text
    assert "changes numbers or random state on its own" in help_text


def test_cli_creates_the_plugin_and_says_what_to_do_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "out"
    assert main(["plugins", "new", "zz_scaffold_cli", "--on-by-default", "--dir", str(target)]) == 0
    out = capsys.readouterr().out
    assert (
        "created plugin 'zz_scaffold_cli' (distribution accelkw-zz-scaffold-cli, "
        "handler ZzScaffoldCliKwargs, on by default) in " in out
    )
    handler = (target / "accelkw_zz_scaffold_cli" / "handler.py").read_text()
    assert "opt_in: ClassVar[bool] = False" in handler
    assert "  accelkw_zz_scaffold_cli/handler.py" in out
    assert f"pip install -e {target}" in out
    assert (target / "accelkw_zz_scaffold_cli" / "py.typed").exists()


@pytest.mark.needs_torch
@pytest.mark.parametrize(
    ("opt_in", "class_name", "expected"),
    [(True, None, "MySeedKwargs"), (False, "Seeder", "Seeder")],
)
def test_generated_tests_pass_with_the_distribution_on_the_path(
    tmp_path: Path, opt_in: bool, class_name: str | None, expected: str
) -> None:
    """The generated test suite, in a fresh interpreter, with a dist-info for its entry point;
    then whether an ``Accelerator`` composes the installed handler unasked is the author's
    choice, and the class has the name given."""
    root = tmp_path / "accelkw-my-seed"
    scaffold_plugin("my_seed", root, opt_in=opt_in, class_name=class_name, check_installed=False)
    site = tmp_path / "site"
    write_dist(site, "accelkw-my-seed", {"my_seed": "accelkw_my_seed.plugin"}, version="0.1.0")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(site)])
    env["ACCELKW_NO_CACHE"] = "1"
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-config")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "16 passed" in proc.stdout
    check = (
        "import json, accelkw_my_seed\n"
        "from accelkw_core import Accelerator\n"
        "acc = Accelerator(cpu=True)\n"
        f"cls = accelkw_my_seed.{expected}\n"
        "print(json.dumps([cls.opt_in, cls.__name__, 'my_seed' in acc.state.handlers]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", check],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == [opt_in, expected, not opt_in]


@pytest.mark.needs_torch
def test_a_generated_tracker_plugin_passes_its_tests(tmp_path: Path) -> None:
    """``plugins new --kind tracker``: the generated suite (TrackerContract and a run read back)."""
    root = tmp_path / "accelkw-my-log"
    assert main(["plugins", "new", "my_log", "--kind", "tracker", "--dir", str(root)]) == 0
    assert (root / "accelkw_my_log" / "tracker.py").is_file()
    data = tomllib.loads((root / "pyproject.toml").read_text())
    assert data["project"]["entry-points"]["accelkw"] == {"my_log": "accelkw_my_log.plugin"}
    site = tmp_path / "site"
    write_dist(site, "accelkw-my-log", {"my_log": "accelkw_my_log.plugin"}, version="0.1.0")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(site)])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "7 passed" in proc.stdout
    listed = run_python(
        "from accelkw_core.discovery.registry import Registry\n"
        "print(sorted(Registry(allow=['my_log']).trackers()))",
        env={"PYTHONPATH": env["PYTHONPATH"]},
    )
    assert listed.stdout.strip() == "['my_log']", listed.stderr


def test_an_unknown_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScaffoldError, match="invalid plugin kind 'logger'"):
        scaffold_plugin("x_log", tmp_path / "x", kind="logger", check_installed=False)
    assert not (tmp_path / "x").exists()

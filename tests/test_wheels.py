"""Wheels, installed as users get them: every distribution of this checkout is built into a wheel
(``python -m build --wheel``) and installed, non-editable, into a fresh virtual environment.

- The venv is ``python -m venv --without-pip`` (never ``--system-site-packages``). Its third-party
  dependencies (torch and the rest of the core's and the plugins' dependency closure) are
  *shared* as in :mod:`tests.test_install_venv`: a ``.pth`` file adds a folder of symbolic links
  to this interpreter's distributions, which pip sees as installed and checks every wheel's
  requirements against. Nothing of accelkw is in that folder: accelkw's own distributions come
  only from the freshly built wheels (``--no-index --find-links``), so a missing file in a wheel
  cannot be papered over by the checkout. ``ACCELKW_INSTALL_TEST_TORCH=wheel`` installs torch
  and the core's dependencies for real instead (20-85 s more).
- The first case checks what a user of the wheels sees: every built-in ``loaded``, a 2-process
  ``accelkw demo`` that composes them all, ``accelkw plugins new`` writing its template (package
  data present), ``py.typed`` in each wheel and in the installed packages.
- The second case upgrades the core under a plugin built for the old core: a tiny plugin wheel
  requiring the minor release before this one (``accelkw-core>=0.1,<0.2`` for core 0.2) is
  installed with ``--no-deps`` (the state pip leaves after upgrading the core under it), and
  ``accelkw plugins list`` must report it ``incompatible`` without importing it.

Every command runs from a scratch folder with ``PYTHONPATH`` and ``ACCELKW_*`` removed (the
:class:`tests.test_install_venv.Venv` helper), and ``accelkw_core`` must come from the venv.
Marked ``wheels`` (and ``multiprocess``): ``-m "not wheels"`` leaves them out of a quick run.
The module takes ~35 s on the shared 2-core machine; the timings of every step are printed at
the end of the module (``-s`` shows them).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from accelkw_core import __version__
from tests.test_install_venv import (
    FULL_TORCH,
    REPO,
    Venv,
    builtin_plugins,
    copy_source,
    dependency_closure,
    entry_point_names,
    link_distributions,
    plugin_dependencies,
)

pytestmark = [pytest.mark.wheels, pytest.mark.multiprocess]

EXAMPLES = sorted(p for p in (REPO / "examples").glob("*") if (p / "pyproject.toml").is_file())


@dataclass
class Built:
    """The venv, and the wheel each distribution was built into."""

    venv: Venv
    wheels: dict[str, Path]  # distribution name -> wheel file
    dist_dir: Path


def project_name(project: Path) -> str:
    return tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"]


def core_source(dest: Path) -> Path:
    """The core's project (root files and the package) without the plugins and docs."""
    dest.mkdir(parents=True)
    for item in REPO.iterdir():
        if item.is_file():
            shutil.copy2(item, dest / item.name)
    copy_source(REPO / "accelkw_core", dest / "accelkw_core")
    return dest


def build_wheel(venv: Venv, label: str, project: Path, out: Path) -> Path:
    before = set(out.glob("*.whl"))
    # --no-isolation: the build backend (setuptools) is this interpreter's; isolation would
    # fetch it from an index for every project.
    venv.run(
        f"build {label}",
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out),
            str(project),
        ],
    )
    (wheel,) = set(out.glob("*.whl")) - before
    return wheel


def install_dependencies(venv: Venv) -> None:
    """torch (exactly this interpreter's), NumPy and the core's other requirements, by pip."""
    core_deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    deps = [d for d in core_deps if not d.startswith("torch")]
    torch_pin = f"torch=={metadata.version('torch').split('+')[0]}"
    venv.run(
        "install torch and dependencies",
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv.python),
            "install",
            "-q",
            torch_pin,
            "numpy",
            *deps,
        ],
        timeout=600,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """Every distribution built into a wheel and installed from it into a fresh venv."""
    pytest.importorskip("build", reason="tests/test_wheels.py needs `build` (requirements-dev.txt)")
    pip_version = tuple(int(p) for p in metadata.version("pip").split(".")[:2])
    if pip_version < (22, 3):
        pytest.skip(f"pip {metadata.version('pip')} has no --python option (pip >= 22.3 does)")
    base = tmp_path_factory.mktemp("wheels")
    venv = Venv(root=base / "venv", work=base / "work")
    venv.work.mkdir()
    venv.run("create venv", [sys.executable, "-m", "venv", "--without-pip", str(venv.root)])
    # The plugins' own dependencies (tensorboard, mlflow-skinny, ...) and, unless torch is to be
    # installed for real, the core's (torch included), shared from this interpreter so the
    # offline install below finds them installed.
    core_deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    shared = [*plugin_dependencies(), *([] if FULL_TORCH else [*core_deps, "numpy"])]
    link_distributions(dependency_closure(shared), base / "shared")
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv.root)})
    Path(purelib, "_shared_dependencies.pth").write_text(f"{base / 'shared'}\n")
    if FULL_TORCH:
        install_dependencies(venv)

    src, dist_dir = base / "src", base / "dist"
    dist_dir.mkdir()
    projects = {"accelkw-core": core_source(src / "core")}
    for project in [*builtin_plugins(), *EXAMPLES]:
        projects[project_name(project)] = copy_source(project, src / project.name)
    wheels = {name: build_wheel(venv, name, path, dist_dir) for name, path in projects.items()}
    venv.run(
        "install the wheels",
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv.python),
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(dist_dir),
            *wheels,
        ],
    )
    yield Built(venv, wheels, dist_dir)
    print("\n".join(f"{label:<40} {secs:6.1f} s" for label, secs in venv.timings))


def test_wheels_ship_py_typed_and_install_non_editable(built: Built) -> None:
    for name, wheel in built.wheels.items():
        assert wheel.name.startswith(name.replace("-", "_") + "-"), wheel.name
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
        package = name.replace("-", "_")
        assert f"{package}/py.typed" in names, f"{wheel.name} ships no py.typed"
        assert not any(n.startswith(("tests/", f"{package}/tests/")) for n in names), wheel.name
    core = built.wheels["accelkw-core"]
    with zipfile.ZipFile(core) as zf:
        names = zf.namelist()
    assert "accelkw_core/tools/scaffold_templates.py" in names
    assert not any("__editable__" in n or n.endswith(".pth") for n in names)

    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(built.venv.root)}))
    examples = [project_name(p).replace("-", "_") for p in EXAMPLES]
    where = json.loads(
        built.venv.python_code(
            "where",
            f"""
            import json, importlib
            from accelkw_core.discovery.catalog import BUILTINS
            mods = ["accelkw_core", *(b.module for b in BUILTINS), *{examples!r}]
            print(json.dumps({{m: importlib.import_module(m).__file__ for m in mods}}))
            """,
        )
    )
    for module, path in where.items():
        assert Path(path).is_relative_to(purelib), f"{module} imported from {path}"
        assert (Path(path).parent / "py.typed").is_file(), f"{module}: py.typed not installed"
    assert not list(purelib.glob("__editable__*")), "an editable install crept in"


def test_listing_shows_every_builtin_loaded_for_this_core(built: Built) -> None:
    listed = built.venv.listing("plugins list")
    expected = entry_point_names([*builtin_plugins(), *EXAMPLES])
    assert set(listed) == expected
    for name, plugin in listed.items():
        assert plugin["status"] == "loaded", (name, plugin["error"])
        assert plugin["version"] == __version__
        compat = plugin["compat"]
        assert compat["core_version"] == __version__ and compat["fix"] is None, compat
        assert compat["note"] is None, f"{name} declares no accelkw-core range"
    built.venv.accelkw("plugins list --strict", "plugins", "list", "--strict")


def test_a_two_process_run_composes_every_builtin(built: Built) -> None:
    out = built.venv.run(
        "demo (2 processes)",
        [
            str(built.venv.root / "bin" / "accelkw"),
            "demo",
            "--steps",
            "3",
            "--json",
            "--trace-dir",
            str(built.venv.work / "traces"),
        ],
        timeout=240,
    )
    lines = out.splitlines()  # the JSON, after any progress lines an older demo printed
    summary = json.loads("\n".join(lines[next(i for i, x in enumerate(lines) if x == "{") :]))
    assert summary["world_size"] == 2
    installed = {h["name"] for p in built.venv.listing("list").values() for h in p["handlers"]}
    opt_in = json.loads(
        built.venv.python_code(
            "opt-in handlers",
            """
            import json
            from accelkw_core import get_registry
            handlers = get_registry().handlers().items()
            print(json.dumps([name for name, info in handlers if info.cls.opt_in]))
            """,
        )
    )
    assert set(summary["handlers"]) == installed - set(opt_in)  # opt-in ones compose on request
    assert summary["param_spread"] == 0.0, "DDP did not keep the ranks' parameters identical"


def test_plugins_new_writes_its_template_from_the_installed_core(built: Built) -> None:
    target = built.venv.work / "accelkw-wheel-check"
    built.venv.accelkw(
        "plugins new", "plugins", "new", "wheel_check", "--on-by-default", "--dir", str(target)
    )
    files = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    assert {"pyproject.toml", "README.md", "accelkw_wheel_check/py.typed"} <= files
    project = tomllib.loads((target / "pyproject.toml").read_text())["project"]
    core = Version(__version__)
    assert f"accelkw-core>={core.major}.{core.minor}," in project["dependencies"][0]


OLD_PLUGIN = """
    from dataclasses import dataclass
    from accelkw_core.plugin import KwargsHandler, hookimpl

    @dataclass
    class OldKwargs(KwargsHandler):
        name = "old"

        def apply(self, state):
            pass

    @hookimpl
    def accelkw_register_handlers(register):
        register(OldKwargs)

    raise RuntimeError("a plugin built for another core was imported")
"""


def test_upgrading_the_core_under_a_plugin_built_for_the_old_one(
    built: Built, tmp_path: Path
) -> None:
    core = Version(__version__)
    if core.minor == 0:
        pytest.skip("no earlier minor release of this core to have built a plugin for")
    old_range = f">={core.major}.{core.minor - 1},<{core.major}.{core.minor}"
    project = tmp_path / "accelkw-old"
    (project / "accelkw_old").mkdir(parents=True)
    (project / "accelkw_old" / "__init__.py").write_text(textwrap.dedent(OLD_PLUGIN))
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "accelkw-old"
            version = "0.1.0"
            dependencies = ["accelkw-core{old_range}"]

            [project.entry-points.accelkw]
            old = "accelkw_old"
            """
        )
    )
    wheel = build_wheel(built.venv, "accelkw-old", project, tmp_path / "dist")
    # What a user ends up with after upgrading the core: pip warns about the broken requirement
    # but installs; --no-deps (or the order of two installs) gets the same state quietly.
    built.venv.run(
        "install the old plugin",
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(built.venv.python),
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            str(wheel),
        ],
    )
    try:
        old = built.venv.listing("list with the old plugin")["old"]
        assert old["status"] == "incompatible", old
        assert old["compat"]["core_range"] == old_range
        assert old["compat"]["core_version"] == __version__
        assert old["compat"]["fix"] == "pip install -U accelkw-old"
        assert f"accelkw-core {__version__} is installed" in old["error"]["message"]
        assert old["handlers"] == []  # never imported: its import would have raised

        result = subprocess.run(
            [str(built.venv.root / "bin" / "accelkw"), "plugins", "list", "--strict"],
            cwd=built.venv.work,
            env=built.venv.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1
        assert "plugin 'old' incompatible" in result.stderr
    finally:
        built.venv.run(
            "uninstall the old plugin",
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(built.venv.python),
                "uninstall",
                "-q",
                "-y",
                "accelkw-old",
            ],
        )

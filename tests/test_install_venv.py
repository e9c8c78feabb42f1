"""A real install, end to end: pip installs the core, the built-in plugins, the third-party example
(examples/seed) and a plugin written by ``accelkw plugins new`` into a throwaway virtual
environment, and the installed ``accelkw`` command and ``Accelerator`` see exactly what pip put
there.

How the environment is built, and why:

- ``python -m venv --without-pip``: a clean venv with its own empty site-packages and no access
  to this interpreter's packages; pip is run as ``python -m pip --python <venv>`` (pip >= 22.3),
  which installs into the venv exactly as the venv's own pip would, without ~4 s of ensurepip.
- Third-party dependencies are *shared, not installed*: a ``.pth`` file in the venv adds one
  folder of symbolic links to the distributions this interpreter already has for the closure of
  the core's dependencies (torch, pluggy, importlib-metadata and theirs), the build backend
  (setuptools) and pytest, each with its ``.dist-info``. pip sees them as installed, checks the
  requirements of everything it installs against them, and never touches them. Nothing from
  accelkw is in that folder. Installing torch from the local wheel instead costs 22-40 s and
  ~900 MB per run (measured on the 2-core development machine: 22 s alone, 37 s inside this
  test, 54 s for the whole module against 18 s with the shared folder), and fetching pluggy &
  co. would need an index; with the shared folder the test needs no network and no index at
  all (``--no-index``).
- Our distributions are installed for real: built by setuptools from copies of their source
  folders (so no ``build/`` or ``*.egg-info`` lands in the repository), regular installs for the
  core, the built-ins and the example, an editable one for the scaffolded plugin (what its README
  tells authors to do); pip writes their files, metadata, entry points and console script into
  the venv, and ``pip uninstall`` removes them.
- Every command runs from a scratch folder with ``PYTHONPATH`` and ``ACCELKW_*`` removed, and the
  scripts check that ``accelkw_core`` is imported from the venv, not from this checkout.

``ACCELKW_INSTALL_TEST_TORCH=wheel`` replaces the shared folder with a full install of torch
(the exact installed version, from the configured indexes and find-links) and the other
dependencies: slower, and it needs the wheels to be reachable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import time
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
FULL_TORCH = os.environ.get("ACCELKW_INSTALL_TEST_TORCH", "") == "wheel"
COPY_IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache", ".mypy_cache", ".ruff_cache"
)


def dependency_closure(roots: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions ``roots`` need, recursively (extras not followed)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        req = Requirement(todo.pop())
        key = req.name.lower().replace("_", "-")
        if key in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        dist = metadata.distribution(req.name)
        seen[key] = dist
        todo.extend(dist.requires or [])
    return list(seen.values())


def link_distributions(dists: Iterable[metadata.Distribution], layer: Path) -> None:
    """Symlink each distribution's top-level files (packages, modules, dist-info) into ``layer``."""
    layer.mkdir()
    for dist in dists:
        name = dist.metadata["Name"]
        assert not name.lower().startswith("accelkw"), f"{name} must be installed, not shared"
        if dist.files is None:
            pytest.skip(f"{name} has no RECORD, so its files cannot be shared with the venv")
        tops = {f.parts[0] for f in dist.files} - {"..", "__pycache__"}
        for top in sorted(tops):
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not top.endswith(".pth") and not (layer / top).exists():
                (layer / top).symlink_to(source)


@dataclass
class Venv:
    """A throwaway environment and the commands that run in it."""

    root: Path
    work: Path
    timings: list[tuple[str, float]] = field(default_factory=list)

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def env(self) -> dict[str, str]:
        drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")
        env = {
            k: v for k, v in os.environ.items() if k not in drop and not k.startswith("ACCELKW_")
        }
        env["VIRTUAL_ENV"] = str(self.root)
        env["PATH"] = os.pathsep.join([str(self.root / "bin"), env.get("PATH", "")])
        return env

    def run(self, label: str, args: list[str], timeout: float = 180) -> str:
        start = time.perf_counter()
        proc = subprocess.run(
            args, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        self.timings.append((label, time.perf_counter() - start))
        assert proc.returncode == 0, (
            f"{label} failed ({proc.returncode}): {' '.join(map(str, args))}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
        return proc.stdout

    def pip(self, label: str, *args: str) -> str:
        offline = [] if FULL_TORCH else ["--no-index"]
        base = [sys.executable, "-m", "pip", "--python", str(self.python), "-q"]
        if args[0] == "install":
            args = ("install", *offline, "--no-build-isolation", *args[1:])
        return self.run(label, [*base, *args])

    def accelkw(self, label: str, *args: str) -> str:
        return self.run(label, [str(self.root / "bin" / "accelkw"), *args], timeout=60)

    def python_code(self, label: str, code: str) -> str:
        return self.run(label, [str(self.python), "-c", textwrap.dedent(code)])

    def listing(self, label: str) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in json.loads(self.accelkw(label, "plugins", "list", "--json"))}


def copy_source(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest, ignore=COPY_IGNORE)
    return dest


def builtin_plugins() -> list[Path]:
    return sorted(p for p in (REPO / "plugins").glob("*") if (p / "pyproject.toml").is_file())


def plugin_dependencies() -> list[str]:
    """The built-in plugins' own third-party requirements (tensorboard, mlflow-skinny, ...).

    Not accelkw's distributions nor torch: the venvs get those their own way. The tests share
    these from this interpreter, as they share the core's, so nothing is downloaded.
    """
    reqs: list[str] = []
    for project in builtin_plugins():
        data = tomllib.loads((project / "pyproject.toml").read_text())
        for req in data["project"].get("dependencies", []):
            name = Requirement(req).name.lower()
            if not name.startswith("accelkw") and name != "torch" and req not in reqs:
                reqs.append(req)
    return reqs


def entry_point_names(projects: Iterable[Path]) -> set[str]:
    names: set[str] = set()
    for project in projects:
        data = tomllib.loads((project / "pyproject.toml").read_text())
        names.update(data["project"].get("entry-points", {}).get("accelkw", {}))
    return names


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    """A venv with the core and every built-in plugin of this checkout installed."""
    pip_version = tuple(int(p) for p in metadata.version("pip").split(".")[:2])
    if pip_version < (22, 3):
        pytest.skip(f"pip {metadata.version('pip')} has no --python option (pip >= 22.3 does)")
    base = tmp_path_factory.mktemp("install")
    env = Venv(root=base / "venv", work=base / "work")
    env.work.mkdir()
    env.run("create venv", [sys.executable, "-m", "venv", "--without-pip", str(env.root)])
    core_deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    if FULL_TORCH:
        torch_pin = f"torch=={metadata.version('torch')}"
        env.pip(
            "install torch and tools",
            "install",
            torch_pin,
            "setuptools>=68",
            "pytest",
            *plugin_dependencies(),
        )
    else:
        dists = dependency_closure([*core_deps, "setuptools", "pytest", *plugin_dependencies()])
        link_distributions(dists, base / "shared")
        purelib = sysconfig.get_path("purelib", vars={"base": str(env.root)})
        Path(purelib, "_shared_dependencies.pth").write_text(f"{base / 'shared'}\n")
    src = base / "src"
    core = src / "core"
    core.mkdir(parents=True)
    for item in REPO.iterdir():
        if item.is_file():
            shutil.copy2(item, core / item.name)
    copy_source(REPO / "accelkw_core", core / "accelkw_core")
    plugins = [copy_source(p, src / p.name) for p in builtin_plugins()]
    env.pip("install core + built-ins", "install", str(core), *map(str, plugins))
    yield env
    print("\n".join(f"{label:<40} {secs:6.1f} s" for label, secs in env.timings))


TRAINING_STEP = """
    import json, warnings
    import torch
    import accelkw_core
    from accelkw_core import Accelerator
    from accelkw_seed import SeedKwargs

    warnings.simplefilter("ignore")  # a missing optional plugin may warn; not under test here

    def step():
        handler = SeedKwargs(seed=7, deterministic=True)
        with Accelerator(cpu=True, mixed_precision="bf16", kwargs_handlers=[handler]) as acc:
            model = torch.nn.Sequential(torch.nn.Linear(4, 2))
            seen = {}
            # On the inner layer: the prepared model's own output is converted back to float32.
            model[0].register_forward_hook(lambda m, i, o: seen.update(dtype=str(o.dtype)))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model, opt = acc.prepare(model, opt)
            x, y = torch.randn(8, 4), torch.randn(8, 2)
            out = model(x)  # a prepared model autocasts its own forward
            loss = torch.nn.functional.mse_loss(out, y)
            acc.backward(loss)
            opt.step()
            during = torch.are_deterministic_algorithms_enabled()
            return {
                "handlers": list(acc.state.handlers),
                "log": [str(e) for e in acc.state.log],
                "dtype": seen["dtype"],
                "opt_in": [
                    n for n, i in accelkw_core.get_registry().handlers().items() if i.cls.opt_in
                ],
                "weights": acc.unwrap_model(model)[0].weight.flatten().tolist(),
                "deterministic_during": during,
            }

    first, second = step(), step()
    import importlib.util
    print(json.dumps({
        "core": accelkw_core.__file__,
        "modules": [m for m in ("numpy",) if importlib.util.find_spec(m) is not None],
        "first": first,
        "same": first["weights"] == second["weights"],
        "deterministic_after": torch.are_deterministic_algorithms_enabled(),
    }))
"""


def test_example_plugin_installs_lists_composes_and_uninstalls(venv: Venv, tmp_path: Path) -> None:
    before = venv.listing("list before")
    # Exactly what pip installed here: nothing leaks in from the environment running the tests.
    assert set(before) == entry_point_names(builtin_plugins())
    seed_src = copy_source(REPO / "examples" / "seed", tmp_path / "seed")
    venv.pip("install accelkw-seed", "install", str(seed_src))

    listed = venv.listing("list with seed")
    seed = listed["seed"]
    assert (seed["distribution"], seed["version"], seed["status"]) == (
        "accelkw-seed",
        "0.2.0",
        "loaded",
    )
    assert [h["name"] for h in seed["handlers"]] == ["seed"]
    assert seed["handlers"][0]["class"] == "accelkw_seed.handler.SeedKwargs"
    assert all(p["status"] == "loaded" for p in listed.values()), listed
    handler_names = {h["name"] for p in listed.values() for h in p["handlers"]}

    result = json.loads(venv.python_code("training step", TRAINING_STEP))
    assert result["core"].startswith(str(venv.root)), "the checkout's core was imported"
    first = result["first"]
    # Every installed built-in but those composed only on request (fsdp, ...), and the seed
    # example, opt-in too, which the code asks for.
    assert "seed" in first["opt_in"]
    assert set(first["handlers"]) == (handler_names - set(first["opt_in"])) | {"seed"}
    # NumPy is in this venv only as a tracker plugin's dependency (tensorboard's).
    if "numpy" in result["modules"]:
        assert "seed: seed random, numpy, torch with 7 (seed 7 + rank 0)" in first["log"]
    else:
        assert "seed: seed random, torch with 7 (seed 7 + rank 0)" in first["log"]
        assert "seed: numpy is not installed: not seeded" in first["log"]
    assert first["deterministic_during"] and not result["deterministic_after"]
    assert result["same"], "two seeded steps gave different weights"
    if (REPO / "plugins" / "autocast" / "pyproject.toml").is_file():
        assert "autocast" in first["handlers"]
        assert first["dtype"] == "torch.bfloat16"  # the installed autocast plugin applied

    venv.pip("uninstall accelkw-seed", "uninstall", "-y", "accelkw-seed")
    after = venv.listing("list after uninstall")
    assert set(after) == set(before)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv.root)}))
    assert not list(purelib.glob("accelkw_seed*")), "pip uninstall left files behind"


def test_scaffolded_plugin_installs_passes_its_tests_lists_and_uninstalls(venv: Venv) -> None:
    target = venv.work / "accelkw-demo-plugin"
    venv.accelkw("plugins new", "plugins", "new", "demo_plugin", "--opt-in", "--dir", str(target))
    venv.pip("install -e demo", "install", "-e", str(target))

    out = venv.run(
        "generated tests",
        [str(venv.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(target / "tests")],
    )
    assert "16 passed" in out

    # The editable install is visible to a type checker run from another folder, as the
    # built-ins' are (a path entry, not an import hook): the plugin's own modules are read and
    # checked; accelkw-core and torch are left out to keep this quick (test_typed_install.py
    # checks against them).
    elsewhere = venv.work / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mypy.ini").write_text(
        "[mypy]\nstrict = True\nfollow_imports = skip\n"
        "[mypy-accelkw_demo_plugin.*]\nfollow_imports = normal\n"
    )
    (elsewhere / "use.py").write_text(
        "from accelkw_demo_plugin import DemoPluginKwargs\n\n"
        "handler = DemoPluginKwargs(level='high')\n"
    )
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", str(venv.python), "use.py"],
        cwd=elsewhere,
        env=venv.env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    report = checked.stdout + checked.stderr
    assert "import-not-found" not in report and "import-untyped" not in report, report
    # The plugin's field types were read: a str for its int field is caught, naming it.
    assert 'Argument "level" to "DemoPluginKwargs" has incompatible type "str"' in report, report

    demo = venv.listing("list with demo")["demo_plugin"]
    assert (demo["distribution"], demo["version"], demo["status"]) == (
        "accelkw-demo-plugin",
        "0.1.0",
        "loaded",
    )
    shown = json.loads(venv.accelkw("plugins show", "plugins", "show", "demo_plugin", "--json"))
    assert [f["name"] for f in shown["fields"]] == ["enabled", "level"]

    venv.pip("uninstall demo", "uninstall", "-y", "accelkw-demo-plugin")
    assert "demo_plugin" not in venv.listing("list after demo uninstall")

"""Shared fixtures: synthetic installed distributions and a runner for the accelkw CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


def write_dist(
    site: Path,
    dist: str,
    entry_points: Mapping[str, str],
    modules: Mapping[str, str] = {},
    version: str = "1.0.0",
    requires: Sequence[str] = (),
) -> None:
    """Write a distribution as pip would install it: modules plus a ``*.dist-info`` folder.

    ``requires`` are its ``Requires-Dist`` lines (``"accelkw-core>=0.2,<0.3"``).
    """
    site.mkdir(parents=True, exist_ok=True)
    for rel, source in modules.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {req}\n" for req in requires)
    )
    eps = "[accelkw]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    info.joinpath("entry_points.txt").write_text(eps)
    info.joinpath("RECORD").write_text("")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_accelkw(
    args: list[str],
    site: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> Result:
    """Run ``python -m accelkw_core ARGS`` in a fresh interpreter with ``site`` on the path."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    if site is not None:
        full_env["PYTHONPATH"] = os.pathsep.join([str(site), full_env.get("PYTHONPATH", "")])
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "accelkw_core", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_python(code: str, site: Path | None = None, env: Mapping[str, str] | None = None) -> Result:
    """Run ``code`` in a fresh interpreter with ``site`` on the path."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    if site is not None:
        full_env["PYTHONPATH"] = os.pathsep.join([str(site), full_env.get("PYTHONPATH", "")])
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


GOOD_PLUGIN = """
    from dataclasses import dataclass
    from accelkw_core.plugin import KwargsHandler, handler_field, hookimpl

    @dataclass
    class {cls}(KwargsHandler):
        \"\"\"A handler used by the tests.\"\"\"
        name = "{name}"
        level: int = handler_field(1, doc="how much", ge=0)

        def apply(self, state):
            state.record(self.name, f"level {{self.level}}")

    @hookimpl
    def accelkw_register_handlers(register):
        register({cls})
"""


def good_plugin(name: str, cls: str | None = None) -> str:
    return GOOD_PLUGIN.format(name=name, cls=cls or name.title().replace("_", "") + "Kwargs")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """An empty folder that plays the role of site-packages for a subprocess."""
    path = tmp_path / "site"
    path.mkdir()
    return path


@pytest.fixture
def fresh_registry() -> Callable[..., Any]:
    """Build isolated registries (no entry points) and restore the global one afterwards."""
    from accelkw_core.discovery.default_registry import set_registry
    from accelkw_core.discovery.registry import Registry

    undo = set_registry(None)

    def make(*plugins: object, **kwargs: Any) -> Registry:
        reg = Registry(autoload=False, **kwargs)
        for p in plugins:
            reg.register_plugin(p)
        return reg

    yield make
    undo()


@pytest.fixture(scope="session")
def mypy_cache_dir() -> Path:
    """The cache every test's mypy run shares (they run on one xdist worker: group ``mypy``).

    ``MYPY_CACHE_DIR`` when set (``.ci/run`` keeps it outside the clone, keyed on torch's
    version, as mypy itself reads that variable), else the repository's ``.mypy_cache``: mypy
    follows torch, which takes minutes to read cold and seconds warm.
    """
    return Path(os.environ.get("MYPY_CACHE_DIR") or REPO / ".mypy_cache")


@pytest.fixture(autouse=True, scope="session")
def _private_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Keep the entry-point cache of every test process out of the user's ~/.cache."""
    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if previous is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = previous

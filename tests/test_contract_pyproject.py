"""``HandlerContract.pyproject``: a relative path is read from the folder of the test module that
sets it, not from the working directory; an absolute path is used as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PLUGIN = """\
from dataclasses import dataclass
from typing import ClassVar

from accelkw_core.plugin import KwargsHandler, Plan, hookimpl


@dataclass
class RelKwargs(KwargsHandler):
    \"\"\"A handler that contributes nothing.\"\"\"

    name: ClassVar[str] = "rel_contract"

    def plan(self, state: object) -> Plan:
        return Plan(self.name).note("nothing to do")


@hookimpl
def accelkw_register_handlers(register):
    register(RelKwargs)
"""

PYPROJECT = """\
[project]
name = "accelkw-rel-contract-never-installed"
version = "0.1.0"

[project.entry-points.accelkw]
rel_contract = "{module}"
"""

TEST = """\
from accelkw_core.testing import HandlerContract
from rel_contract_plugin import RelKwargs


class TestRelContract(HandlerContract):
    handler_class = RelKwargs
    plugin_module = "rel_contract_plugin"
    pyproject = {pyproject!r}
"""


def _write(root: Path, pyproject: str, module: str = "rel_contract_plugin") -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "rel_contract_plugin.py").write_text(PLUGIN, encoding="utf-8")
    (root / "pyproject.toml").write_text(PYPROJECT.format(module=module), encoding="utf-8")
    (root / "tests").mkdir()
    test = root / "tests" / "test_rel_contract.py"
    test.write_text(TEST.format(pyproject=pyproject), encoding="utf-8")
    return test


def _pytest(test: Path, cwd: Path, root: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(REPO)])
    env["ACCELKW_NO_CACHE"] = "1"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(root),
            str(test),
            "-k",
            "entry_point_names_the_plugin_module",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.parametrize("where", ["elsewhere", "root", "tests"])
def test_a_relative_pyproject_is_read_from_the_test_modules_folder(
    tmp_path: Path, where: str
) -> None:
    root = tmp_path / "accelkw-rel-contract"
    test = _write(root, "../pyproject.toml")
    cwd = {"elsewhere": tmp_path / "elsewhere", "root": root, "tests": root / "tests"}[where]
    cwd.mkdir(exist_ok=True)
    proc = _pytest(test, cwd, root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_the_check_still_reads_the_file_and_names_the_path_it_tried(tmp_path: Path) -> None:
    root = tmp_path / "accelkw-rel-contract"
    test = _write(root, "../pyproject.toml", module="some_other_module")
    proc = _pytest(test, tmp_path, root)
    assert proc.returncode == 1
    assert "no [project.entry-points.accelkw] entry names 'rel_contract_plugin'" in proc.stdout
    assert str(root / "pyproject.toml") in proc.stdout

    (root / "tests" / "test_rel_contract.py").unlink()
    (root / "src" / "rel_contract_plugin.py").unlink()
    (root / "tests").rmdir()
    (root / "src").rmdir()
    test = _write(root, "pyproject.toml")  # read from tests/, where there is none
    proc = _pytest(test, root, root)  # even from the folder that has one
    assert proc.returncode == 1
    assert f"no file {root / 'tests' / 'pyproject.toml'}" in proc.stdout


def test_an_absolute_pyproject_is_used_as_it_is(tmp_path: Path) -> None:
    root = tmp_path / "accelkw-rel-contract"
    test = _write(root, str(tmp_path / "accelkw-rel-contract" / "pyproject.toml"))
    proc = _pytest(test, tmp_path, root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout

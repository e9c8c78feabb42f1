"""A plugin author's ``mypy --strict`` follows the installed core, as the README installs it.

The README's editable installs are path entries (a ``.pth`` line naming the source folder), which
type checkers follow; an import hook would leave ``accelkw_core`` unfound and every core type
``Any``. A scratch plugin from ``accelkw plugins new``, checked in its own folder with the
``[tool.mypy]`` block the scaffold ships (strict, following accelkw-core and torch), passes; a
wrong contribution is reported against the point's own type.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.xdist_group("mypy")

WRONG = """
from __future__ import annotations

from accelkw_core.plugin import AFTER_STEP, MODEL_WRAPPER, TEARDOWN, AcceleratorState, Plan, StepContext


def to_text(count: int) -> str:
    return str(count)


def after(step: StepContext) -> None:
    print(step.index)


def plan() -> Plan:
    plan = Plan("typed_scratch")
    plan.contribute(AFTER_STEP, after, "right: an AfterStep")
    return plan.contribute(MODEL_WRAPPER, to_text, "wrong: int -> str is no model wrapper")


def action(state: AcceleratorState) -> None:
    state.contribute(TEARDOWN, "typed_scratch", lambda: None)
    state.contribute(TEARDOWN, "typed_scratch", 3)
"""


def test_the_editable_install_of_the_core_is_a_path_entry() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    (pth,) = site.glob("__editable__.accelkw_core-*.pth")
    assert [Path(line) for line in pth.read_text().splitlines()] == [REPO]
    assert not list(site.glob("__editable___accelkw_*_finder.py")), "an import hook is installed"


def mypy(folder: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "MYPY"))}
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--no-error-summary"],
        cwd=folder,  # the plugin's pyproject.toml: its [tool.mypy] block, not the repository's
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_scratch_plugin_type_checks_against_the_installed_core(
    tmp_path: Path, mypy_cache_dir: Path
) -> None:
    folder = tmp_path / "accelkw-typed-scratch"
    new = ["plugins", "new", "typed_scratch", "--opt-in", "--dir", str(folder)]
    made = subprocess.run(
        [sys.executable, "-m", "accelkw_core", *new],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")},
    )
    assert made.returncode == 0, made.stderr

    clean = mypy(folder, mypy_cache_dir)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    wrong = folder / "accelkw_typed_scratch" / "wrong.py"
    wrong.write_text(textwrap.dedent(WRONG), encoding="utf-8")
    caught = mypy(folder, mypy_cache_dir)
    errors = [line for line in caught.stdout.splitlines() if ": error:" in line]
    line = 1 + WRONG.splitlines().index(
        '    return plan.contribute(MODEL_WRAPPER, to_text, "wrong: int -> str is no model wrapper")'
    )
    assert caught.returncode == 1 and len(errors) == 2, caught.stdout + caught.stderr
    planned, direct = errors
    assert planned.startswith(f"accelkw_typed_scratch/wrong.py:{line}: error: "), planned
    assert (
        'Argument 2 to "contribute" of "Plan" has incompatible type "Callable[[int], str]"; '
        'expected "Callable[[Module], Module]"  [arg-type]'
    ) in planned
    # The state's own contribute binds the type from the point alone too.
    line = 1 + WRONG.splitlines().index('    state.contribute(TEARDOWN, "typed_scratch", 3)')
    assert direct.startswith(f"accelkw_typed_scratch/wrong.py:{line}: error: "), direct
    assert (
        'Argument 3 to "contribute" of "AcceleratorState" has incompatible type "int"; '
        'expected "Callable[[], None]"  [arg-type]'
    ) in direct

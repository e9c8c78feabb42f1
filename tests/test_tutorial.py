"""Every code block of docs/plugin-tutorial.md runs, in a fresh interpreter, in the order shown.

A block whose first line is ``# PATH`` (``# PATH (continued)`` appends) is a file of the
tutorial's distribution and is written to a scratch folder; the other Python blocks are scripts
run there one after the other; the distribution's own tests (a ``HandlerContract``) run with
pytest; and the ``accelkw plan`` excerpt is checked against what ``accelkw plan`` prints with the
tutorial's plugin registered. Nothing is installed: the scratch folder is put on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

TUTORIAL = REPO / "docs" / "plugin-tutorial.md"
FILE_HEADER = re.compile(r"#\s+(\S+\.(?:py|toml))(\s+\(continued\))?\s*$")
TIMEOUT = 240


def blocks(language: str) -> list[str]:
    text = TUTORIAL.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.S | re.M)


def write_files(root: Path) -> tuple[list[Path], list[str], list[str]]:
    """Write the tutorial's files under ``root``; return them, the Python scripts and the
    configuration snippets (the TOML blocks that are not a file of the distribution)."""
    written: list[Path] = []
    scripts: list[str] = []
    configs: list[str] = []
    for language in ("python", "toml"):
        for block in blocks(language):
            first, _, rest = block.partition("\n")
            header = FILE_HEADER.fullmatch(first)
            if header is None:
                (scripts if language == "python" else configs).append(block)
                continue
            path = root / header.group(1)
            if header.group(2):
                assert path in written, f"{path.name} is continued before it starts"
                path.write_text(path.read_text(encoding="utf-8") + rest, encoding="utf-8")
            else:
                assert path not in written, f"{header.group(1)} is written twice"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(rest, encoding="utf-8")
                written.append(path)
    return written, scripts, configs


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env["PYTHONPATH"] = str(root)
    env["ACCELKW_NO_CACHE"] = "1"
    env["XDG_CONFIG_HOME"] = str(root / "no-config")
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("accelkw-nan-guard")
    files, scripts, configs = write_files(root)
    names = {p.relative_to(root).as_posix() for p in files}
    assert {"pyproject.toml", "accelkw_nan_guard/handler.py", "tests/test_nan_guard.py"} <= names
    # Each configuration snippet builds the tutorial's handler through the validated path.
    checks = "\n".join(
        f"for name, values in tomllib.loads({config!r})['handlers'].items():\n"
        "    assert name == NanGuardKwargs.name\n"
        "    NanGuardKwargs.from_mapping(values)\n"
        for config in configs
    )
    header = "import tomllib\nfrom accelkw_nan_guard import NanGuardKwargs\n"
    return root, [*scripts, header + checks]


def test_every_script_runs_in_order(tutorial: tuple[Path, list[str]]) -> None:
    root, scripts = tutorial
    assert len(scripts) >= 2, "the tutorial shows a plan and a composed Accelerator run"
    for i, script in enumerate(scripts):
        path = root / f"tutorial_script_{i}.py"
        path.write_text(script, encoding="utf-8")
        out = run(root, str(path)).stdout
        # A comment line of its own, after a print(...), is what the script prints.
        for expected in re.findall(r"^# (\S.*)$", script, flags=re.M):
            assert expected in out, f"script {i}: {expected!r} not printed:\n{out}"


def test_the_plugins_own_tests_pass(tutorial: tuple[Path, list[str]]) -> None:
    root, _ = tutorial
    out = run(root, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests").stdout
    shown = re.search(r"(\d+) passed", "\n".join(blocks("console")))
    assert shown is not None
    assert f"{shown.group(1)} passed" in out, out[-3000:]


def test_the_scaffold_excerpt_is_what_plugins_new_prints(tmp_path: Path) -> None:
    (excerpt,) = [b for b in blocks("console") if b.startswith("$ accelkw plugins new ")]
    command, *expected = excerpt.splitlines()
    args = command.removeprefix("$ accelkw ").split()
    # Run where the tutorial runs it: the folder is created under the working directory.
    script = f"from accelkw_core.cli.main import main\nraise SystemExit(main({args!r}))\n"
    printed = run(tmp_path, "-c", script).stdout.splitlines()
    assert printed == expected


def test_the_plan_excerpt_is_what_accelkw_plan_prints(tutorial: tuple[Path, list[str]]) -> None:
    root, _ = tutorial
    (excerpt,) = [b for b in blocks("console") if " accelkw plan\n" in b.split("\n", 1)[0] + "\n"]
    # The handler is opt-in: the command asks for it with a variable, set here the same way.
    asked = re.fullmatch(r"\$ (?:(\w+)=(\S+) )?accelkw plan", excerpt.splitlines()[0])
    assert asked is not None, excerpt.splitlines()[0]
    script = root / "print_plan.py"
    script.write_text(
        (f"import os\nos.environ[{asked[1]!r}] = {asked[2]!r}\n" if asked[1] else "")
        + "import accelkw_nan_guard.plugin\n"
        "from accelkw_core import get_registry\n"
        "from accelkw_core.cli.main import main\n"
        "get_registry().register_plugin(accelkw_nan_guard.plugin)\n"
        "raise SystemExit(main(['plan']))\n",
        encoding="utf-8",
    )
    printed = run(root, str(script)).stdout.splitlines()
    for line in excerpt.splitlines()[1:]:
        if line == "...":
            continue
        entry = re.fullmatch(r"  \d+\. (\w+)  \((\w+), accelkw-nan-guard 0\.1\.0\)", line)
        if entry is not None:  # registered in code here, so its distribution reads "code"
            pattern = rf"  \d+\. {entry.group(1)}  \({entry.group(2)}, code\)"
            assert any(re.fullmatch(pattern, p) for p in printed), (line, printed)
            continue
        assert line in printed, f"{line!r} is not in what accelkw plan prints:\n" + "\n".join(
            printed
        )


def test_the_worked_example_of_the_extension_points_page_runs(tmp_path: Path) -> None:
    text = (REPO / "docs" / "extension-points.md").read_text(encoding="utf-8")
    (example,) = [
        b
        for b in re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)
        if "compose_handlers" in b
    ]
    script = tmp_path / "worked_example.py"
    script.write_text(example, encoding="utf-8")
    out = run(tmp_path, str(script)).stdout
    for expected in re.findall(r"^# (\S.*)$", example, flags=re.M):
        assert expected in out, f"{expected!r} not printed:\n{out}"

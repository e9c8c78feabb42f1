"""The README's two set-up commands exist, and CI runs the test command verbatim."""

from __future__ import annotations

import re
import sys

import pytest

from tests.conftest import REPO


def setup_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_setup_commands() -> None:
    commands = setup_commands()
    assert len(commands) == 2
    main_job, tests = commands
    assert "\n" not in main_job and "\n" not in tests
    assert main_job.endswith("accelkw demo")
    assert "pytest" in tests
    for command in commands:
        assert "python3 -m venv .venv" in command and "requirements" in command


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert setup_commands()[1] in ci.splitlines()


def test_one_test_file_runs_with_the_readmes_command_without_xdist() -> None:
    """The README's way to run one file works as written, with pytest-xdist switched off: the
    configuration (addopts, markers) assumes no xdist."""
    import shlex
    import subprocess

    text = (REPO / "README.md").read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"`(\.venv/bin/python -m pytest -q tests/[\w./]+\.py)`", section)
    assert found is not None, "the README names no command for one test file"
    words = shlex.split(found.group(1))
    command = [sys.executable, *words[1:], "-p", "no:xdist", "-p", "no:cacheprovider"]
    proc = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


def test_torch_is_pinned_wherever_it_is_installed() -> None:
    requirements = (REPO / "requirements.txt").read_text().splitlines()
    assert "torch==2.13.0" in requirements
    assert not [line for line in requirements if line.strip() == "torch"]


def test_the_handler_table_is_the_builtin_catalog() -> None:
    """The README's table lists every built-in of ``BUILTINS``, in its order, as it says."""
    from accelkw_core.discovery.catalog import BUILTINS

    text = (REPO / "README.md").read_text()
    header = "| handler (config key) | class | distribution |"
    assert header in text, "the README's handler table is gone"
    table = text.split(header, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    expected = [f"| `{b.name}` | `{b.cls}` | `{b.distribution}` |" for b in BUILTINS]
    assert table == expected, "update README.md's handler table to:\n" + "\n".join(expected)


def test_the_ten_line_plugin_plans_and_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import ModuleType

    from accelkw_core.testing import compose_handlers, make_state

    text = (REPO / "README.md").read_text()
    section = text.split("## Write a plugin in ten lines", 1)[1]
    code = re.search(r"```python\n(# accelkw_seed\.py\n.*?)\n```", section, flags=re.S)
    assert code is not None
    module = ModuleType("accelkw_readme_seed")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look it up
    exec(compile(code.group(1), "README.md", "exec"), vars(module))
    import torch

    with torch.random.fork_rng():  # the plugin seeds torch: leave the suite's generator alone
        state = compose_handlers(plugins=[module], state=make_state(world_size=2, rank=1))
    assert state.messages("seed") == ["seed torch with 43"]
    state.run_teardowns()


def _installs(name: str) -> list[str]:
    lines = (REPO / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_the_main_job_installs_no_tracker_and_the_tests_install_both() -> None:
    """The README's first command stays light: tensorboard and mlflow (and their ~80
    dependencies) come with the test requirements, or when asked."""
    main, dev = _installs("requirements.txt"), _installs("requirements-dev.txt")
    trackers = ["-e ./plugins/tensorboard", "-e ./plugins/mlflow"]
    assert not set(trackers) & set(main)
    assert "-r requirements.txt" in dev and set(trackers) <= set(dev)
    # Every built-in handler plugin is in the main job's install: the demo composes them.
    from accelkw_core.discovery.catalog import BUILTINS

    assert {f"-e ./plugins/{b.folder}" for b in BUILTINS} <= set(main)

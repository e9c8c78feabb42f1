"""The README's two set-up commands exist, and CI runs the test command verbatim."""

from __future__ import annotations

import re

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


def test_torch_is_pinned_wherever_it_is_installed() -> None:
    requirements = (REPO / "requirements.txt").read_text().splitlines()
    assert "torch==2.13.0" in requirements
    assert not [line for line in requirements if line.strip() == "torch"]

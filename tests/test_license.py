"""The tree's license: Apache-2.0 at the root, named by every distribution, and no other
project's copyright notice in any file the repository tracks."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from string import Template

import pytest

from accelkw_core.tools.scaffold_templates import PYPROJECT

ROOT = Path(__file__).resolve().parents[1]
LICENSE = "Apache-2.0"
# A notice: the word, then (c), the sign or a year.
NOTICE = re.compile(r"copyright\s+(?:\(c\)|©|\d{4})", re.IGNORECASE)
# The how-to-apply appendix of the license text is a template, not anyone's notice (and not a
# match for NOTICE, which wants a year).
TEMPLATE_LINE = "Copyright [yyyy] [name of copyright owner]"


def _tracked() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def _distributions() -> list[Path]:
    found = [ROOT / "pyproject.toml"]
    found += sorted(ROOT.glob("plugins/*/pyproject.toml"))
    found += sorted(ROOT.glob("examples/*/pyproject.toml"))
    return found


def test_the_license_is_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert [line for line in text.splitlines() if NOTICE.search(line)] == []
    assert [line.strip() for line in text.splitlines() if "[yyyy]" in line] == [TEMPLATE_LINE]


@pytest.mark.parametrize("pyproject", _distributions(), ids=lambda p: p.parent.name or "core")
def test_every_distribution_names_the_license(pyproject: Path) -> None:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    assert project.get("license") in ({"text": LICENSE}, LICENSE), pyproject


def test_a_scaffolded_plugin_names_the_license() -> None:
    names = {"dist": "accelkw-x", "kind": "handler", "name": "x", "cls": "XKwargs"}
    names |= {"core_req": "accelkw-core", "package": "accelkw_x"}
    project = tomllib.loads(Template(PYPROJECT).substitute(names))["project"]
    assert project["license"] == {"text": LICENSE}


def test_no_tracked_file_carries_another_projects_copyright_notice() -> None:
    files = _tracked()
    assert len(files) > 100, "git ls-files found too little: is this a checkout?"
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary: images, fonts
        for number, line in enumerate(text.splitlines(), 1):
            if NOTICE.search(line) or re.search(r"copyright.*hugging\s*face", line, re.I):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)

"""Which Hugging Face example scripts ``port_imports`` ports: the survey behind issue 33.

Reads the example scripts that import Accelerate in snapshots of transformers
(``examples/pytorch/**/*_no_trainer.py``), diffusers (``examples/**/*.py``) and peft
(``examples/**/*.py``), each a git directory read with ``git show`` (no work tree needed), and
prints how many ``port_imports`` accepts, with what blocks the rest. ``--write`` records, per
script, the Accelerate names it imports and the ``accelerator.<member>`` names it uses (names and
counts only, none of the scripts' code) in ``tests/conformance/hf_scripts/survey.json``, which
``tests/conformance/test_hf_survey.py`` ports again as synthetic files.

    python bench/hf_script_survey.py --transformers GITDIR --diffusers GITDIR --peft GITDIR [--write]
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import subprocess
import sys
from pathlib import Path

from accelkw_core.errors import PortError
from accelkw_core.tools.porting import ACCELERATOR_MEMBERS, port_imports

SURVEY = Path(__file__).resolve().parent.parent / "tests/conformance/hf_scripts/survey.json"


def _git(gitdir: str, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={gitdir}", *args], capture_output=True, text=True, check=True
    ).stdout


def _picked(repo: str, path: str) -> bool:
    if not path.startswith("examples/") or not path.endswith(".py"):
        return False
    return repo != "transformers" or path.endswith("_no_trainer.py")


def names_used(source: str) -> tuple[list[str], list[str]]:
    """The Accelerate names ``source`` imports and the ``accelerator.<member>`` it uses."""
    tree = ast.parse(source)
    imports: set[str] = set()
    members: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "accelerate" or node.module.startswith("accelerate."):
                imports.update(f"{node.module}:{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            imports.update(
                f"import {a.name}" for a in node.names if a.name.split(".")[0] == "accelerate"
            )
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "accelerator"
            and node.attr in ACCELERATOR_MEMBERS
        ):
            members.add(node.attr)
    return sorted(imports), sorted(members)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for repo in ("transformers", "diffusers", "peft"):
        parser.add_argument(f"--{repo}", required=True, help=f"{repo}'s git directory")
    parser.add_argument("--write", action="store_true", help=f"write {SURVEY}")
    args = parser.parse_args()
    scripts = []
    refused: collections.Counter[str] = collections.Counter()
    accepted = 0
    for repo in ("transformers", "diffusers", "peft"):
        gitdir = getattr(args, repo)
        commit = _git(gitdir, "rev-parse", "HEAD").strip()
        for path in _git(gitdir, "ls-tree", "-r", "--name-only", "HEAD").split():
            if not _picked(repo, path):
                continue
            source = _git(gitdir, "show", f"HEAD:{path}")
            try:
                imports, members = names_used(source)
            except SyntaxError:
                continue
            if not imports:
                continue
            scripts.append(
                {
                    "repo": repo,
                    "commit": commit,
                    "path": path,
                    "imports": imports,
                    "members": members,
                }
            )
            try:
                port_imports(source)
                accepted += 1
            except PortError as exc:
                for line in str(exc).splitlines()[1:]:
                    refused[line.split(": ", 2)[1]] += 1
    total = len(scripts)
    by_repo = collections.Counter(s["repo"] for s in scripts)
    print(f"scripts that import Accelerate: {total} ({dict(by_repo)})")
    print(f"port_imports accepts {accepted} of {total} ({100 * accepted / total:.1f}%)")
    for name, count in refused.most_common():
        print(f"  refused for {name}: {count} scripts")
    if args.write:
        text = json.dumps({"scripts": scripts}, indent=1, sort_keys=True) + "\n"
        SURVEY.write_text(text, encoding="utf-8")
        print(f"wrote {SURVEY}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

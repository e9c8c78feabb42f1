"""The docs follow their own rules for plugins (issue 42, item 5): a plugin example imports no
torch at module level (it may for type checking only), and the tutorial's command for checking a
plugin with mypy from another folder works as written, on the installed example plugin that the
tutorial builds (examples/nan-guard, package ``accelkw_loss_guard``)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PAGES = ["extension-points.md", "hooks.md", "plugin-tutorial.md", "trackers.md", "checkpoints.md"]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)\n```", page.read_text(), flags=re.S)


def defines_a_handler(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.ClassDef)
        and any(isinstance(b, ast.Name) and b.id == "KwargsHandler" for b in node.bases)
        for node in tree.body
    )


def module_level_torch(tree: ast.Module) -> list[int]:
    lines = []
    for node in tree.body:  # only the module's own statements: `if TYPE_CHECKING:` is allowed
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        if any(n == "torch" or n.startswith("torch.") for n in names):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("page", [p for p in PAGES if (REPO / "docs" / p).exists()])
def test_no_plugin_example_imports_torch_at_module_level(page: str) -> None:
    for lang in ("docs", "docs/ar"):
        for block in python_blocks(REPO / lang / page):
            try:
                tree = ast.parse(block)
            except SyntaxError:  # a hook's signature heading, not a module
                continue
            if defines_a_handler(tree):
                assert not module_level_torch(tree), f"{lang}/{page}:\n{block[:300]}"


@pytest.mark.xdist_group("mypy")
def test_the_tutorials_mypy_command_checks_a_plugin_from_another_folder(
    tmp_path: Path, mypy_cache_dir: Path
) -> None:
    text = (REPO / "docs" / "plugin-tutorial.md").read_text()
    found = re.search(r"\$ (mypy --strict -p accelkw_nan_guard)\n", text)
    assert found is not None, "the tutorial gives no mypy command for another folder"
    words = found.group(1).split()
    words[-1] = "accelkw_loss_guard"  # the tutorial's plugin, as examples/nan-guard ships it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "MYPY"))}
    proc = subprocess.run(
        [sys.executable, "-m", *words, "--cache-dir", str(mypy_cache_dir)],
        cwd=tmp_path,  # another folder: no pyproject.toml of the plugin's here
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout

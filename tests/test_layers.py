"""The core is layered: a lower layer never imports a higher one at module level.

Bottom to top: errors and the version; run facts and environment parsing (``facts``, ``logs``);
``handlers`` (the handler and tracker contracts); ``discovery``; ``config`` and ``tracking``
(which trackers a run uses); ``runtime``; and the tiers over them (``cli``,
``tools``, ``testing``, ``plugin``, ``utils``, ``local_sgd``). An import inside a function (done lazily, when
the code runs) or under ``TYPE_CHECKING`` is not a layering edge. No module imports another
module's private (``_``-prefixed) name, at any depth.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import accelkw_core

CORE = Path(accelkw_core.__file__).parent
LAYERS = [
    {"errors", "_version"},
    {"facts", "logs"},
    {"handlers"},
    {"discovery"},
    {"config", "tracking"},
    {"runtime"},
    {"cli", "tools", "testing", "plugin", "utils", "local_sgd", "__init__", "__main__"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _unit(path: Path) -> str:
    rel = path.relative_to(CORE).parts
    return rel[0] if len(rel) > 1 else path.stem


def _module_level_imports(tree: ast.Module) -> list[ast.ImportFrom | ast.Import]:
    found: list[ast.ImportFrom | ast.Import] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.Try):
            found += [n for n in node.body if isinstance(n, ast.Import | ast.ImportFrom)]
    return found


def _targets(node: ast.ImportFrom | ast.Import) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return [node.module] if node.module else []
    return [alias.name for alias in node.names]


def test_every_module_of_the_core_belongs_to_a_layer() -> None:
    units = {_unit(p) for p in CORE.rglob("*.py")}
    assert units <= set(RANK), sorted(units - set(RANK))


def test_no_layer_imports_a_higher_one_at_module_level() -> None:
    upward = []
    for path in sorted(CORE.rglob("*.py")):
        unit = _unit(path)
        for node in _module_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(node):
                parts = target.split(".")
                if parts[0] != "accelkw_core" or len(parts) < 2:
                    continue
                if RANK[parts[1]] > RANK[unit]:
                    upward.append(f"{path.relative_to(CORE)}:{node.lineno} imports {target}")
    assert not upward, "a lower layer imports a higher one:\n" + "\n".join(upward)


def test_no_private_name_is_imported_across_modules() -> None:
    private = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("accelkw_core"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        private.append(f"{path.relative_to(CORE)}:{node.lineno} {alias.name}")
    assert not private, "private names imported across modules:\n" + "\n".join(private)


def test_the_plugin_api_pulls_in_no_machinery_a_listing_does_not_run() -> None:
    # Every plugin imports accelkw_core.plugin, so the first listing after an install pays for
    # whatever it imports: a save's thread pool and the libc lookup (ctypes.util starts
    # subprocess) belong to the save, imported when it runs.
    code = (
        "import sys, accelkw_core.plugin; "
        "print(sorted(m for m in ('concurrent.futures', 'ctypes', 'subprocess', 'torch') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "[]"

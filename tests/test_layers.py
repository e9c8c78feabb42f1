"""The core is layered: no module imports a module of a higher layer, however it imports it.

Bottom to top: errors and the version; ``contract`` (what a plugin codes against: the handler
and tracker contracts, ``Plan``, the extension points and their contribution types, the state
as a handler sees it, the checkpoint writer and reader it is handed); run facts and environment
parsing (``facts``, ``log_setup``); ``discovery``; ``config`` and ``tracking`` (which trackers a run
uses); the runtime, in three: the state and the collectives, then ``runtime.checkpoints`` (one
subpackage, its own layer), then the rest of ``runtime``; ``accelerator`` (the ``Accelerator``, over the runtime's collaborators); and
the tiers over them (``cli``, ``tools``, ``testing``, ``plugin``, ``utils``, ``local_sgd``).

Every import counts, wherever it is written: at module level, under ``if TYPE_CHECKING:``,
inside a function or a method (done lazily, when the code runs), relative or absolute, and
``importlib.import_module`` of a literal name, a bare ``import accelkw_core`` (the package: the
top tier) or ``import accelkw_core.runtime`` (that package's ``__init__``), and an import of a
package's ``__init__`` (a circle through one is a circle). A hidden upward edge is still an upward edge: it
ties the lower layer to the higher one for a reader, a type checker and a refactoring alike.
No module imports another module's private (``_``-prefixed) name, at any depth.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import accelkw_core

CORE = Path(accelkw_core.__file__).parent
# A unit is a top-level module or package of the core, or a subpackage or module named here by
# its dotted path: ``runtime.checkpoints`` is a layer of its own, over the two runtime modules it
# uses (the state it reads and the collectives it agrees through) and under the rest of the
# runtime (which saves and loads through it).
LAYERS = [
    {"errors", "_version"},
    {"contract"},
    {"facts", "log_setup"},
    {"discovery"},
    {"config", "tracking"},
    # The run's facts (the state, and the kind of run it describes itself with) and the
    # collectives: what checkpoints build on.
    {"runtime.run_state", "runtime.kinds", "runtime.collectives"},
    {"runtime.checkpoints"},
    {"runtime"},
    {"accelerator"},
    {
        "cli",
        "tools",
        "testing",
        "plugin",
        "utils",
        "local_sgd",
        "logging",
        "state",
        "as_accelerate",
        "__init__",
        "__main__",
    },
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def unit_of(dotted: str) -> str | None:
    """The layer unit of a module of the core given by its path under ``accelkw_core``
    (``runtime.checkpoints.save`` -> ``runtime.checkpoints``; ``""``, the package itself, ->
    ``__init__``); ``None`` for a name no layer holds."""
    if not dotted:
        return "__init__"
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name in RANK:
            return name
    return None


def _dotted(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _unit(path: Path, root: Path = CORE) -> str:
    return unit_of(_dotted(path, root)) or path.relative_to(root).parts[0]


def _package(path: Path, root: Path = CORE) -> list[str]:
    """The dotted package ``path`` is in (what a relative import is relative to)."""
    return ["accelkw_core", *path.relative_to(root).parts[:-1]]


def imports_of(path: Path, package: list[str] | None = None) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports, with the line: every node of the tree, at any depth.

    ``package``: the dotted package the file is in, as parts (default: its place in the core).
    A bare ``import accelkw_core`` is an import of the package (its ``__init__``, the top tier).
    """
    package = _package(path) if package is None else package
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if not module.startswith("accelkw_core"):
                yield node.lineno, module
                continue
            # ``from accelkw_core.runtime import checkpoints`` imports the subpackage;
            # ``from accelkw_core import Accelerator``, the package itself (the top tier).
            for alias in node.names:
                inner = f"{module}.{alias.name}".removeprefix("accelkw_core").lstrip(".")
                named = unit_of(inner) == inner  # the name is a unit of its own
                yield node.lineno, f"{module}.{alias.name}" if named else module
        elif isinstance(node, ast.Call) and _is_import_call(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def _is_import_call(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in {"import_module", "__import__"}
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def target_unit(target: str) -> str | None:
    """The unit an import target of the core belongs to (``None``: not the core's)."""
    if target != "accelkw_core" and not target.startswith("accelkw_core."):
        return None
    return unit_of(target.removeprefix("accelkw_core").lstrip("."))


def upward_edges(root: Path = CORE) -> list[str]:
    """``file:line imports module`` for every import of a higher layer in the core at ``root``."""
    upward = []
    for path in sorted(root.rglob("*.py")):
        unit = _unit(path, root)
        for line, target in imports_of(path, _package(path, root)):
            to = target_unit(target)
            if to is not None and RANK[to] > RANK[unit]:
                upward.append(f"{path.relative_to(root)}:{line} imports {target} ({to})")
    return upward


def layer_problems(root: Path = CORE) -> list[str]:
    """Every upward edge and every circle of modules in the core at ``root``: what the tests
    below require to be empty, and what the probes require to find each kind of hidden edge."""
    cycles = import_cycles(import_graph(root))
    return upward_edges(root) + [f"modules in a circle: {', '.join(c)}" for c in cycles]


def test_every_module_of_the_core_belongs_to_a_layer() -> None:
    units = {_unit(p) for p in CORE.rglob("*.py")}
    assert units <= set(RANK), sorted(units - set(RANK))
    # The named subunits exist: a rename would otherwise leave them ranking nothing.
    assert {"runtime.checkpoints", "runtime.run_state", "runtime.collectives"} <= units


def test_every_import_target_of_the_core_is_a_known_layer() -> None:
    # An import of ``accelkw_core.<name>`` for a name no layer holds would escape the check below.
    unknown = [
        f"{path.relative_to(CORE)}:{line} imports {target}"
        for path in sorted(CORE.rglob("*.py"))
        for line, target in imports_of(path)
        if target.startswith("accelkw_core") and target_unit(target) is None
    ]
    assert not unknown, "\n".join(unknown)


def test_no_layer_imports_a_higher_one_anywhere() -> None:
    problems = layer_problems(CORE)
    assert not problems, "a lower layer imports a higher one:\n" + "\n".join(problems)


def test_the_contract_imports_nothing_of_accelkw_but_the_errors() -> None:
    found = [
        f"{path.relative_to(CORE)}:{line} imports {target}"
        for path in sorted((CORE / "contract").rglob("*.py"))
        for line, target in imports_of(path)
        if target.startswith("accelkw_core")
        and not target.startswith(("accelkw_core.contract", "accelkw_core.errors"))
    ]
    assert not found, "\n".join(found)


def test_hidden_edges_are_found(tmp_path: Path) -> None:
    # The walk sees an import however it is hidden: under TYPE_CHECKING, inside a function or a
    # method, relative, or through importlib with a literal name.
    source = (
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n"
        "    from accelkw_core.runtime.run_state import AcceleratorState\n"
        "def f():\n"
        "    from accelkw_core.cli import main\n"
        "class C:\n"
        "    def m(self):\n"
        "        from ..runtime import composition\n"
        "        return importlib.import_module('accelkw_core.tools.demo')\n"
    )
    module = tmp_path / "probe.py"
    module.write_text(source, encoding="utf-8")
    found = {target for _, target in imports_of(module, ["accelkw_core", "discovery"])}
    assert {
        "accelkw_core.runtime.run_state",
        "accelkw_core.cli",
        "accelkw_core.tools.demo",
    } <= found
    assert "accelkw_core.runtime" in found  # the relative one


# -- negative probes: each kind of hidden edge makes the check fail ---------------------------

FAKE_CORE = {
    "__init__.py": "from accelkw_core.accelerator.accelerator import Accelerator\n",
    "errors.py": "",
    "contract/__init__.py": "",
    "contract/points.py": "from accelkw_core.errors import *\n",
    "discovery/__init__.py": "",
    "discovery/registry.py": "from accelkw_core.contract import points\n",
    "runtime/__init__.py": "",
    "runtime/run_state.py": "from accelkw_core.contract.points import *\n",
    "runtime/collectives.py": "",
    "runtime/checkpoints/__init__.py": "from accelkw_core.runtime.checkpoints.save import save\n",
    "runtime/checkpoints/save.py": "from accelkw_core.runtime import run_state, collectives\n",
    "runtime/composition.py": "from accelkw_core.runtime.checkpoints import save\n",
    "accelerator/__init__.py": "",
    "accelerator/accelerator.py": "from accelkw_core.runtime import composition\nAccelerator = 1\n",
    "cli/__init__.py": "",
    "cli/main.py": "import accelkw_core\nimport accelkw_core.runtime\n",
}

PROBES = {
    "bare import of the package": {"discovery/probe.py": "import accelkw_core\n"},
    "bare import of a subpackage": {"discovery/probe.py": "import accelkw_core.runtime\n"},
    "from the package, a name it re-exports": {
        "discovery/probe.py": "from accelkw_core import Accelerator\n"
    },
    "inside a function": {
        "discovery/probe.py": "def f():\n    from accelkw_core.runtime import composition\n"
    },
    "under TYPE_CHECKING": {
        "discovery/probe.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from accelkw_core.cli.main import x\n"
        )
    },
    "relative": {"discovery/probe.py": "from ..runtime import composition\n"},
    "through importlib": {
        "discovery/probe.py": "import importlib\nimportlib.import_module('accelkw_core.cli')\n"
    },
    "checkpoints reaching into the runtime above it": {
        "runtime/checkpoints/probe.py": "from accelkw_core.runtime.composition import x\n"
    },
    "through an __init__ cycle": {
        "runtime/__init__.py": "from accelkw_core.runtime.composition import compose\n",
        "runtime/composition.py": "from accelkw_core.runtime import compose as again\n",
    },
}


def fake_core(root: Path, files: dict[str, str]) -> Path:
    core = root / "accelkw_core"
    for rel, text in files.items():
        path = core / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return core


def test_the_fake_core_of_the_probes_passes(tmp_path: Path) -> None:
    # The probes below fail for their one added edge, not for the tree they are added to.
    assert layer_problems(fake_core(tmp_path, FAKE_CORE)) == []


@pytest.mark.parametrize("kind", sorted(PROBES))
def test_each_kind_of_hidden_edge_fails_the_check(tmp_path: Path, kind: str) -> None:
    core = fake_core(tmp_path, {**FAKE_CORE, **PROBES[kind]})
    problems = layer_problems(core)
    assert problems, f"{kind}: not caught"
    if kind == "through an __init__ cycle":
        assert problems == [
            "modules in a circle: accelkw_core.runtime, accelkw_core.runtime.composition"
        ]
    else:
        (probe,) = [p for p in problems if "probe.py" in p]
        assert probe.startswith(str(Path(*next(iter(PROBES[kind])).split("/")))), probe


def test_a_bare_import_of_the_package_from_discovery_names_the_top_tier(tmp_path: Path) -> None:
    core = fake_core(tmp_path, {**FAKE_CORE, **PROBES["bare import of the package"]})
    assert layer_problems(core) == [
        f"{Path('discovery', 'probe.py')}:1 imports accelkw_core (__init__)"
    ]


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


def test_the_plugin_api_is_the_contract_without_the_runtime() -> None:
    # A plugin module imports accelkw_core.plugin when it is listed: that loads the contract and
    # the hook markers, never the runtime, the configuration or the registry.
    code = (
        "import sys, accelkw_core.plugin; "
        "print(sorted(m for m in sys.modules if m.startswith('accelkw_core.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    outside = {m for m in ast.literal_eval(out.stdout) if not m.startswith("accelkw_core.contract")}
    assert outside == {
        "accelkw_core._version",
        "accelkw_core.discovery",
        "accelkw_core.discovery.hookspecs",
        "accelkw_core.errors",
        "accelkw_core.plugin",
    }, outside


def _module_name(path: Path, root: Path = CORE) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["accelkw_core", *parts])


def import_graph(root: Path = CORE) -> dict[str, set[str]]:
    """Module -> the modules of the core it imports, every import counted as above.

    ``from package import name`` counts as an import of ``package.name`` when that is a module,
    else of the package; a bare ``import package`` as an import of the package. An import of a
    package is an edge into its ``__init__``, kept like any other: a circle through an
    ``__init__`` that re-exports is a circle.
    """
    modules = {_module_name(path, root): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                package = _package(path, root)
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1])
                    module = f"{base}.{node.module}" if node.module else base
                else:
                    module = node.module or ""
                found = [
                    f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                    for alias in node.names
                ]
            for target in found:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_modules_of_the_core_import_each_other_in_a_circle() -> None:
    # Within a layer too: a circle of modules (even through TYPE_CHECKING or a function-level
    # import) is one unit a reader cannot take apart, and breaks when one import moves up.
    cycles = import_cycles(import_graph())
    assert not cycles, "modules in a circle of imports:\n" + "\n".join(map(str, cycles))


def test_the_circle_check_finds_a_hidden_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


# -- the Accelerator delegates: no mixins, no reflection on its own class -----------------------


def test_the_accelerator_has_no_base_but_object() -> None:
    from accelkw_core.accelerator import Accelerator

    assert Accelerator.__bases__ == (object,)


def _reflects_on_its_own_class(node: ast.AST) -> bool:
    # ``getattr(type(self), ...)`` / ``hasattr(type(self), ...)``: a class asking which class
    # it was mixed into.
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"getattr", "hasattr"}
        and bool(node.args)
        and ast.unparse(node.args[0]) == "type(self)"
    )


def test_no_module_of_the_core_reflects_on_its_own_class() -> None:
    found = [
        f"{path.relative_to(CORE)}:{node.lineno} {ast.unparse(node)}"
        for path in sorted(CORE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _reflects_on_its_own_class(node)
    ]
    assert not found, "\n".join(found)


def test_the_reflection_probe_sees_both_spellings(tmp_path: Path) -> None:
    source = "class C:\n    def m(self):\n        return getattr(type(self), 'x'), hasattr(type(self), 'y')\n"
    hits = [node for node in ast.walk(ast.parse(source)) if _reflects_on_its_own_class(node)]
    assert len(hits) == 2


def test_no_class_of_the_runtime_or_the_accelerator_declares_stubs_under_type_checking() -> None:
    # Methods declared under ``if TYPE_CHECKING:`` in a class body are how mixins borrow each
    # other's private methods; a collaborator is handed what it needs instead.
    found = [
        f"{path.relative_to(CORE)}:{stmt.lineno} class {node.name}"
        for package in ("runtime", "accelerator")
        for path in sorted((CORE / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        for stmt in node.body
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "TYPE_CHECKING"
    ]
    assert not found, "\n".join(found)


def test_the_runtime_never_imports_the_accelerator() -> None:
    # The collaborators are handed the state, the gradient state and the record of what was
    # prepared; none reaches back to the class that holds them.
    found = [
        f"{path.relative_to(CORE)}:{line} imports {target}"
        for path in sorted((CORE / "runtime").rglob("*.py"))
        for line, target in imports_of(path)
        if target == "accelkw_core.accelerator" or target.startswith("accelkw_core.accelerator.")
    ]
    assert not found, "\n".join(found)

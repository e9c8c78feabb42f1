"""The torch-free part of the suite (tests/torch_free.txt) and the Python versions it runs on.

``.ci/torch-free`` runs the listed modules on Python 3.12 and 3.13 in venvs without torch; these
checks keep the list honest on the main interpreter, where torch is installed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIST = REPO / "tests" / "torch_free.txt"
SCRIPT = REPO / ".ci" / "torch-free"


def listed() -> list[str]:
    lines = (line.strip() for line in LIST.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_every_listed_module_is_a_test_module_listed_once() -> None:
    paths = listed()
    assert paths, "tests/torch_free.txt lists no module"
    assert len(paths) == len(set(paths)), "a module is listed twice"
    for rel in paths:
        path = REPO / rel
        assert path.is_file(), f"tests/torch_free.txt lists {rel}, which does not exist"
        assert re.fullmatch(r"test_\w+\.py", path.name), f"{rel} is not a test module"
    assert "tests/test_torch_free.py" in paths


# Imports every listed module (and the conftest files pytest loads with them) with torch made
# unimportable, as it is in the torch-free venvs, and prints what failed or pulled torch in.
_IMPORT_ALL = """
import importlib.util, sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "accelerate"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
sys.path.insert(0, ".")
failed = []
for rel in ["conftest.py", "tests/conftest.py", *sys.argv[1:]]:
    name = "_torch_free_" + rel.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, rel)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        failed.append(f"{rel}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def test_listed_modules_import_no_torch() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, *listed()],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", (
        "these modules of tests/torch_free.txt import torch (or fail) without it; import it "
        "inside the tests that need it and mark them @pytest.mark.needs_torch:\n" + out.stdout
    )


def test_the_torch_free_script_runs_the_list_without_the_marked_tests() -> None:
    script = SCRIPT.read_text(encoding="utf-8")
    assert "tests/torch_free.txt" in script
    assert "not needs_torch" in script


def test_requires_python_and_the_classifiers_say_what_is_tested() -> None:
    # 3.11 in the main run, the others in .ci/torch-free's PYTHONS.
    match = re.search(r'^PYTHONS="\$\{ACCELKW_CI_PYTHONS:-([\d. ]+)\}"$', SCRIPT.read_text(), re.M)
    assert match, ".ci/torch-free no longer sets PYTHONS"
    tested = ["3.11", *match.group(1).split()]
    expected = [f"Programming Language :: Python :: {v}" for v in tested]
    projects = [REPO / "pyproject.toml", *sorted(REPO.glob("plugins/*/pyproject.toml"))]
    projects += sorted(REPO.glob("examples/*/pyproject.toml"))
    for path in projects:
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        assert project["requires-python"] == ">=3.11", path
        versions = [c for c in project.get("classifiers", []) if re.fullmatch(r".*:: 3\.\d+", c)]
        assert versions == expected, f"{path}: classifiers {versions}, expected {expected}"

"""``accelkw_core.tools.porting``: the table of Accelerate names and the import port.

The table in docs/migrating.md is generated from ``NAMES``; it must match the committed page
(``python docs/refgen.py --write-names`` rewrites it), and every place it names must import.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from accelkw_core.tools.porting import NAMES, PortError, lookup, port_imports

REPO = Path(__file__).resolve().parent.parent


def _refgen() -> ModuleType:
    """``docs/refgen.py`` (docs/ is not a package), as tests/test_docs.py loads it."""
    name = "accelkw_docs_refgen"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "docs" / "refgen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_import_table_is_the_generated_one() -> None:
    refgen = _refgen()
    page = refgen.MIGRATING.read_text(encoding="utf-8")
    assert refgen.with_names_table(page) == page, (
        "docs/migrating.md's import table is stale: run python docs/refgen.py --write-names"
    )


@pytest.mark.parametrize("row", [n for n in NAMES if n.accelkw], ids=lambda n: f"{n.name}")
def test_every_place_in_the_table_imports(row: object) -> None:
    module, name = row.accelkw, row.name  # type: ignore[attr-defined]
    assert hasattr(importlib.import_module(module), name), f"{module}.{name}"


def test_every_name_not_provided_says_why_and_rows_are_unique() -> None:
    assert all(n.note for n in NAMES if n.accelkw is None)
    places = [(n.accelerate, n.name) for n in NAMES]
    assert len(places) == len(set(places))


def test_the_port_rewrites_accelerate_imports_only() -> None:
    source = textwrap.dedent(
        """\
        import accelerator_tools
        from accelerate import (
            Accelerator,
            AutocastKwargs as AK,
        )
        from accelerate.utils.dataclasses import DataLoaderConfiguration
        from accelerate.local_sgd import LocalSGD


        def main():
            from accelerate.utils import set_seed, gather
            return Accelerator
        """
    )
    assert port_imports(source) == textwrap.dedent(
        """\
        import accelerator_tools
        from accelkw_core import Accelerator
        from accelkw_core.utils import AutocastKwargs as AK
        from accelkw_core.utils import DataLoaderConfiguration
        from accelkw_core.local_sgd import LocalSGD


        def main():
            from accelkw_core.utils import set_seed, gather
            return Accelerator
        """
    )
    assert lookup("accelerate.utils.operations", "gather") == lookup("accelerate.utils", "gather")
    assert lookup("accelerate.utils", "clear_device_cache") is not None


def test_a_name_accelkw_does_not_provide_fails_the_port_with_the_reason() -> None:
    source = "from accelerate import Accelerator, init_empty_weights\nfrom accelerate import nope\n"
    with pytest.raises(PortError) as err:
        port_imports(source)
    assert "line 1: accelerate.init_empty_weights: big-model inference" in str(err.value)
    assert "line 2: accelerate.nope: not in accelkw's table" in str(err.value)

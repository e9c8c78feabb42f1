"""The table of Accelerate names (``accelkw_core.tools.porting.NAMES``) against Accelerate 1.15.

Every public name of the ``accelerate`` package itself has a row, and every row names something
Accelerate exports where the row says.
"""

from __future__ import annotations

import importlib
import types
from types import ModuleType

from accelkw_core.tools.porting import NAMES, lookup


def test_every_name_of_the_accelerate_package_has_a_row(accelerate: ModuleType) -> None:
    public = {
        name
        for name in dir(accelerate)
        if not name.startswith("_") and not isinstance(getattr(accelerate, name), types.ModuleType)
    }
    missing = sorted(n for n in public if lookup("accelerate", n) is None)
    assert not missing, f"add rows to accelkw_core.tools.porting.NAMES for: {missing}"


def test_every_row_names_what_accelerate_exports_there(accelerate: ModuleType) -> None:
    absent = [
        f"{row.accelerate}.{row.name}"
        for row in NAMES
        if not hasattr(importlib.import_module(row.accelerate), row.name)
    ]
    assert not absent, absent

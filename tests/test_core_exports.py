"""The package's lazy exports: every name resolves to the object, never to a submodule."""

from __future__ import annotations

import importlib
import pkgutil
import types

import accelkw_core


def test_every_export_is_the_object_even_after_importing_every_submodule() -> None:
    for info in pkgutil.walk_packages(accelkw_core.__path__, "accelkw_core."):
        if info.name != "accelkw_core.__main__":
            importlib.import_module(info.name)
    for name in accelkw_core.__all__:
        value = getattr(accelkw_core, name)
        assert not isinstance(value, types.ModuleType), name
    assert callable(accelkw_core.compose)


def test_all_lists_exactly_the_exports() -> None:
    assert set(accelkw_core.__all__) == {*accelkw_core._EXPORTS, "__version__"}
    assert sorted(dir(accelkw_core)) == sorted(accelkw_core.__all__)

"""The package's lazy exports: every name resolves to the object, never to a submodule."""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

import accelkw_core


@pytest.mark.needs_torch
def test_every_export_is_the_object_even_after_importing_every_submodule() -> None:
    for info in pkgutil.walk_packages(accelkw_core.__path__, "accelkw_core."):
        if info.name != "accelkw_core.__main__":
            importlib.import_module(info.name)
    for name in accelkw_core.__all__:
        value = getattr(accelkw_core, name)
        assert not isinstance(value, types.ModuleType), name


def test_names_moved_to_another_tier_still_work_with_a_deprecation_warning() -> None:
    from accelkw_core.plugin import hookimpl
    from accelkw_core.runtime.composing.composition import compose

    with pytest.warns(
        DeprecationWarning,
        match=r"accelkw_core.hookimpl is deprecated since 0.2.*accelkw_core.plugin",
    ):
        assert accelkw_core.hookimpl is hookimpl
    with pytest.warns(DeprecationWarning, match="accelkw_core.runtime.composing.composition"):
        assert accelkw_core.compose is compose
    assert "hookimpl" not in accelkw_core.__all__


def test_the_plugin_tier_exports_what_plugins_need() -> None:
    import accelkw_core.plugin as tier

    for name in tier.__all__:
        # Bound in the module itself (imported there), not made up by a module __getattr__.
        assert name in vars(tier), name
    assert {"KwargsHandler", "Plan", "hookimpl", "handler_field", "ConfigError", "suggest"} <= set(
        tier.__all__
    )


def test_all_lists_exactly_the_exports() -> None:
    assert set(accelkw_core.__all__) == {*accelkw_core._EXPORTS, "__version__"}
    # dir() lists the exports, resolved or not yet, and no helper of the package module.
    assert {"TYPE_CHECKING", "importlib", "warnings", "_lazy"}.isdisjoint(dir(accelkw_core))


@pytest.mark.needs_torch  # resolving every export imports the runtime, which imports torch
def test_each_lazy_name_is_the_object_of_the_module_its_table_names() -> None:
    for name, module in accelkw_core._EXPORTS.items():
        assert getattr(accelkw_core, name) is getattr(importlib.import_module(module), name), name


def test_the_old_name_of_the_run_state_still_works_with_a_deprecation_warning() -> None:
    from accelkw_core.runtime.run_state import RunState

    old = "AcceleratorState"  # the name 0.1 exported; accelkw_core.RunState now
    with pytest.warns(DeprecationWarning, match=rf"accelkw_core\.{old} is deprecated"):
        assert getattr(accelkw_core, old) is RunState
    assert old not in accelkw_core.__all__
    assert accelkw_core.RunState is RunState

"""Every hook is called through pluggy: ``accelkw_register_handlers`` as a historic hook (each
plugin's implementation once, as it registers), the others through ``pm.hook``. A plugin whose
hooks are invalid is recorded ``failed`` with the reason; the others keep working."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.discovery.hookspecs import hookimpl
from accelkw_core.discovery.registry import Registry
from accelkw_core.testing import isolated_registry, plugin_of
from tests.conftest import run_accelkw, write_dist


@dataclass
class Alpha(KwargsHandler):
    name: ClassVar[str] = "alpha"


@dataclass
class Beta(KwargsHandler):
    name: ClassVar[str] = "beta"


def test_register_handlers_is_historic_so_a_late_plugin_is_called_as_it_registers() -> None:
    registry = isolated_registry([plugin_of(Alpha)])
    assert list(registry.handlers()) == ["alpha"]
    assert registry.pm.hook.accelkw_register_handlers.spec is not None
    assert registry.pm.hook.accelkw_register_handlers.spec.opts["historic"] is True
    late = registry.register_plugin(plugin_of(Beta), name="late")
    assert late.status == "loaded" and late.handlers == [Beta]
    assert list(registry.handlers()) == ["alpha", "beta"]


def test_each_plugin_is_credited_with_its_own_classes() -> None:
    registry = isolated_registry([plugin_of(Alpha), plugin_of(Alpha, Beta)])
    first, second = registry.plugins()
    assert first.handlers == [Alpha] and second.handlers == [Alpha, Beta]


def test_a_wrapper_implementation_of_the_historic_hook_is_refused_by_pluggy() -> None:
    class Wrapping:
        @hookimpl(wrapper=True)
        def accelkw_register_handlers(self, register: Callable[[type], None]) -> Iterator[None]:
            register(Alpha)
            yield

    registry = isolated_registry([Wrapping(), plugin_of(Beta)])
    bad, good = sorted(registry.plugins(), key=lambda r: r.name != "Wrapping")
    assert bad.status == "failed" and bad.error is not None
    assert bad.error["type"] == "PluginValidationError"
    assert "historic incompatible" in bad.reason
    assert bad.handlers == [] and not registry.pm.is_registered(bad.plugin)
    assert good.status == "loaded" and list(registry.handlers()) == ["beta"]


def test_register_called_after_the_hook_returned_is_an_error() -> None:
    kept: list[Callable[[type], None]] = []

    class Hoarder:
        @hookimpl
        def accelkw_register_handlers(self, register: Callable[[type], None]) -> None:
            kept.append(register)

    registry = isolated_registry([Hoarder()])
    assert registry.plugins()[0].status == "loaded"
    try:
        kept[0](Alpha)
    except Exception as exc:
        assert "outside accelkw_register_handlers" in str(exc)
    else:
        raise AssertionError("register() outside the hook was accepted")
    assert registry.handlers() == {}


def test_an_unknown_hook_fails_the_plugin_and_withdraws_its_handlers() -> None:
    class Misspelt:
        @hookimpl
        def accelkw_register_handlers(self, register: Callable[[type], None]) -> None:
            register(Alpha)

        @hookimpl
        def accelkw_state_redy(self) -> None:
            pass

    registry = isolated_registry([Misspelt(), plugin_of(Beta)])
    records = {r.name: r for r in registry.plugins()}
    bad = records["Misspelt"]
    assert bad.status == "failed" and bad.error is not None
    assert bad.error["type"] == "UnknownHook" and "accelkw_state_redy" in bad.reason
    assert bad.handlers == [] and list(registry.handlers()) == ["beta"]


def test_an_optional_implementation_of_a_hook_this_core_lacks_is_accepted() -> None:
    class Newer:
        @hookimpl
        def accelkw_register_handlers(self, register: Callable[[type], None]) -> None:
            register(Alpha)

        @hookimpl(optionalhook=True)
        def accelkw_from_a_later_core(self) -> None:
            pass

    (record,) = isolated_registry([Newer()]).plugins()
    assert record.status == "loaded", record.reason
    assert record.handlers == [Alpha]


def test_a_hook_that_raises_fails_only_its_plugin() -> None:
    class Raising:
        @hookimpl
        def accelkw_register_handlers(self, register: Callable[[type], None]) -> None:
            register(Alpha)
            raise RuntimeError("no handlers today")

    registry = Registry(autoload=False)
    bad = registry.register_plugin(Raising())
    good = registry.register_plugin(plugin_of(Beta))
    assert bad.status == "failed" and bad.error is not None
    assert bad.error["type"] == "RuntimeError"
    assert bad.reason == "accelkw_register_handlers raised: no handlers today"
    assert bad.handlers == [] and not registry.pm.is_registered(bad.plugin)
    assert good.status == "loaded" and list(registry.handlers()) == ["beta"]


ENV_PLUGIN = """
    from accelkw_core.plugin import hookimpl

    @hookimpl
    def accelkw_env_info(info):
        info["gizmo backend"] = "carrier pigeon"
"""


def test_env_info_lines_reach_accelkw_env(site: Path) -> None:
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": ENV_PLUGIN})
    result = run_accelkw(["env", "--json"], site=site)
    assert result.returncode == 0, result.stderr
    info: dict[str, Any] = json.loads(result.stdout)
    # Beside the installed built-ins' own lines (accelkw-fp8 names torchao's version).
    assert info["from plugins"]["gizmo backend"] == "carrier pigeon"
    assert {"name": "gizmo", "status": "loaded"}.items() <= next(
        p for p in info["plugins"] if p["name"] == "gizmo"
    ).items()

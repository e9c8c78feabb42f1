"""Opt-in handlers (``opt_in = True``) and default handlers that give way to a requested one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from accelkw_core import ComposeError
from accelkw_core.config.selection import resolve_handlers
from accelkw_core.config.settings import resolve_settings
from accelkw_core.plugin import KwargsHandler, Plan, hookimpl
from accelkw_core.testing import isolated_registry


@dataclass
class Wrap(KwargsHandler):
    name: ClassVar[str] = "wrap"

    def plan(self, state: Any) -> Plan:
        return Plan(self.name).note("nothing")


@dataclass
class Shard(KwargsHandler):
    name: ClassVar[str] = "shard"
    opt_in: ClassVar[bool] = True
    conflicts: ClassVar[tuple[str, ...]] = ("wrap",)
    size: int = 1

    def plan(self, state: Any) -> Plan:
        return Plan(self.name).note("nothing")


class _Plugin:
    @hookimpl
    def accelkw_register_handlers(self, register: Callable[[type[KwargsHandler]], None]) -> None:
        register(Wrap)
        register(Shard)


def _names(**kwargs: Any) -> tuple[list[str], dict[str, str]]:
    kwargs.setdefault("env", {})
    settings = resolve_settings(registry=isolated_registry([_Plugin()]), **kwargs)
    return [h.name for h in settings.handlers], settings.disabled


def test_an_opt_in_handler_is_not_composed_unless_requested(tmp_path: Path) -> None:
    names, disabled = _names(cwd=tmp_path)
    assert names == ["wrap"]
    assert disabled["shard"].startswith("opt-in: applied only when requested (Shard in code")


@pytest.mark.parametrize("how", ["code", "env", "file"])
def test_requesting_it_composes_it_and_leaves_out_the_default_it_conflicts_with(
    tmp_path: Path, how: str
) -> None:
    kwargs: dict[str, Any] = {"cwd": tmp_path}
    if how == "code":
        kwargs["handlers"] = [Shard()]
    elif how == "env":
        kwargs["env"] = {"ACCELKW_SHARD__SIZE": "2"}
    else:
        (tmp_path / "accelkw.toml").write_text("[handlers.shard]\nsize = 2\n")
    names, disabled = _names(**kwargs)
    assert names == ["shard"]
    assert disabled["wrap"] == "left out: the requested handler 'shard' conflicts with it"


def test_two_requested_handlers_that_conflict_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(ComposeError, match="handlers 'shard' and 'wrap' cannot be composed"):
        _names(handlers=[Shard(), Wrap()], cwd=tmp_path)


def test_resolve_handlers_skips_opt_in_defaults_the_same_way() -> None:
    registry = isolated_registry([_Plugin()])
    assert [h.name for h in resolve_handlers(registry=registry)] == ["wrap"]
    assert [h.name for h in resolve_handlers([Shard()], registry=registry)] == ["shard"]

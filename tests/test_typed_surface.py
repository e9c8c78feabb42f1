"""The Accelerator's attributes are typed: no catch-all attribute lookup, typed plugin extras."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from mypy import api as mypy_api

from accelkw_core import Accelerator, AccelkwError, ComposeError
from accelkw_core.plugin import KwargsHandler, Plan
from accelkw_core.testing import isolated_registry, plugin_of


class Meter:
    def __init__(self) -> None:
        self.reads = 0


@dataclass
class MeterKwargs(KwargsHandler):
    name: ClassVar[str] = "meter"
    key: str = "meter"

    def plan(self, state: Any) -> Plan:
        return Plan(self.name).contribute("attribute", Meter(), "a meter", key=self.key)


def make(*handlers: KwargsHandler) -> Accelerator:
    return Accelerator(
        cpu=True,
        kwargs_handlers=list(handlers),
        registry=isolated_registry([plugin_of(MeterKwargs)]),
    )


def test_a_contribution_is_read_through_extras_and_extra_typed() -> None:
    with make() as acc:
        meter = acc.extra("meter", Meter)
        assert isinstance(meter, Meter) and acc.extras["meter"] is meter
        with pytest.raises(TypeError, match=r"extra\('meter'\) is a Meter, not a int"):
            acc.extra("meter", int)
        with pytest.raises(AccelkwError, match="no handler of this run contributes 'ema'"):
            acc.extra("ema", Meter)
        with pytest.raises(AttributeError):
            acc.meter  # type: ignore[attr-defined]  # noqa: B018
        assert acc.scaler is None


def test_a_contribution_named_like_an_accelerator_attribute_is_an_error_naming_both() -> None:
    with pytest.raises(
        ComposeError, match=r"handler 'meter' .* 'device', which is already Accelerator\.device"
    ):
        make(MeterKwargs(key="device"))


def test_mypy_strict_catches_a_misspelt_accelerator_attribute(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            from accelkw_core import Accelerator

            accelerator = Accelerator()
            print(accelerator.num_processes)
            print(accelerator.num_proceses)
            """
        )
    )
    out, _, status = mypy_api.run(
        ["--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"), str(script)]
    )
    assert status == 1
    assert out.count("error:") == 1, out
    assert '"Accelerator" has no attribute "num_proceses"' in out

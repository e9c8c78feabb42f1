"""The Accelerator's attributes are typed: no catch-all attribute lookup, typed plugin extras."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from mypy import api as mypy_api

from accelkw_core import Accelerator, AccelkwError
from accelkw_core.plugin import ATTRIBUTE, KwargsHandler, Plan
from accelkw_core.testing import isolated_registry, plugin_of


class Meter:
    def __init__(self) -> None:
        self.reads = 0


@dataclass
class MeterKwargs(KwargsHandler):
    name: ClassVar[str] = "meter"
    key: str = "meter"

    def plan(self, state: Any) -> Plan:
        return Plan(self.name).contribute(ATTRIBUTE, Meter(), "a meter", key=self.key)


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


def test_a_contribution_named_like_an_accelerator_attribute_shadows_nothing() -> None:
    # Contributions are reached through extra()/extras only, never as attributes, so a key
    # that is also an Accelerator attribute is reachable and leaves the attribute as it was.
    with make(MeterKwargs(key="device")) as acc:
        assert isinstance(acc.extra("device", Meter), Meter)
        assert str(acc.device) == "cpu"


@pytest.mark.xdist_group("mypy")
def test_mypy_strict_catches_a_misspelt_accelerator_attribute(
    tmp_path: Path, mypy_cache_dir: Path
) -> None:
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
        ["--strict", "--no-error-summary", "--cache-dir", str(mypy_cache_dir), str(script)]
    )
    assert status == 1
    assert out.count("error:") == 1, out
    assert '"Accelerator" has no attribute "num_proceses"' in out


@pytest.mark.xdist_group("mypy")
def test_mypy_strict_catches_misspelt_names_from_the_core_and_types_the_reference_classes(
    tmp_path: Path, mypy_cache_dir: Path
) -> None:
    # Both modules look names up lazily at run time; type checkers see their imports instead,
    # so a misspelt name is an error and a handler class from accelkw_core.utils is its class.
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import accelkw_core
            from accelkw_core import Acelerator, Accelerator
            from accelkw_core.utils import AutocastKwargs, ProfileKwargs, set_sed

            Accelerator(kwargs_handlers=[AutocastKwargs(enabled=True), ProfileKwargs()])
            AutocastKwargs(enabeld=True)
            accelkw_core.ProjectConfiguraton
            """
        )
    )
    out, _, status = mypy_api.run(
        ["--strict", "--no-error-summary", "--cache-dir", str(mypy_cache_dir), str(script)]
    )
    assert status == 1
    assert out.count("error:") == 4, out
    assert 'Module "accelkw_core" has no attribute "Acelerator"' in out
    assert 'Module "accelkw_core.utils" has no attribute "set_sed"' in out
    assert 'Unexpected keyword argument "enabeld" for "AutocastKwargs"' in out
    assert 'Module has no attribute "ProjectConfiguraton"' in out


def test_the_typed_imports_of_accelkw_core_utils_are_the_catalogs_reference_names() -> None:
    import ast

    import accelkw_core.utils
    from accelkw_core.discovery.catalog import REFERENCE_NAMES

    tree = ast.parse(Path(accelkw_core.utils.__file__).read_text())
    typed = {
        alias.asname or alias.name: node.module
        for block in tree.body
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in block.body
        if isinstance(node, ast.ImportFrom) and not (node.module or "").startswith("accelkw_core")
        for alias in node.names
    }
    assert typed == {name: module for name, (module, _) in REFERENCE_NAMES.items()}

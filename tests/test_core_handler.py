"""The KwargsHandler contract and the validated constructor, with handlers written inline."""

from __future__ import annotations

import enum
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

import pytest

from accelkw_core.contract.validation import build_handler, parse_duration
from accelkw_core.plugin import ConfigError, KwargsHandler, handler_field


class Mode(str, enum.Enum):
    NO = "no"
    FAST = "fast"


@dataclass
class Sample(KwargsHandler):
    name = "sample"
    a: int = 1
    ratio: float = handler_field(0.5, gt=0, lt=1, doc="a fraction")
    flag: bool = True
    label: str | None = None
    mode: Mode = Mode.NO
    kind: Literal["x", "y"] = "x"
    wrap: Literal[Mode.NO, Mode.FAST] = Mode.NO
    timeout: timedelta | None = None
    tags: list[Literal["cpu", "cuda"]] | None = None
    options: dict[str, int] = field(default_factory=dict)
    anything: dict = field(default_factory=dict)
    hook: Any = None


def test_to_kwargs_reference_semantics() -> None:
    assert Sample().to_kwargs() == {}
    assert Sample(a=2).to_kwargs() == {"a": 2}
    # Factory defaults compare by value.
    assert Sample(options={}).to_kwargs() == {}
    assert Sample(options={"k": 1}).to_kwargs() == {"options": {"k": 1}}


def test_explicit_values_equal_to_default_are_kept() -> None:
    h = Sample(a=1, flag=True)
    assert h.to_kwargs() == {}
    assert h.explicit_kwargs() == {"a": 1, "flag": True}
    assert Sample(1).explicit_fields() == {"a"}
    h.label = "changed later"
    assert h.explicit_fields() == {"a", "flag", "label"}


def test_code_values_are_normalised_and_checked() -> None:
    h = Sample(mode="fast", wrap="fast", ratio=0.25)
    assert h.mode is Mode.FAST and h.wrap is Mode.FAST
    assert isinstance(Sample(ratio=1 - 0.5).ratio, float)
    with pytest.raises(
        ConfigError, match=r"sample\.mode: got 'slow', expected one of 'no', 'fast'"
    ):
        Sample(mode="slow")


@pytest.mark.parametrize(
    ("data", "field_name", "value", "expected"),
    [
        ({"a": "three"}, "a", "three", "an integer"),
        ({"a": True}, "a", True, "an integer"),
        ({"ratio": 2}, "ratio", 2.0, "a number > 0 and < 1"),
        ({"ratio": "half"}, "ratio", "half", "a number"),
        ({"flag": "yes"}, "flag", "yes", "a boolean"),
        ({"label": 3}, "label", 3, "a string or None"),
        ({"mode": "slow"}, "mode", "slow", "one of 'no', 'fast'"),
        ({"kind": "z"}, "kind", "z", "one of 'x', 'y'"),
        ({"timeout": "soon"}, "timeout", "soon", "a duration"),
        ({"timeout": -5}, "timeout", -5, "a positive duration"),
        ({"tags": ["cpu", "tpu"]}, "tags[1]", "tpu", "one of 'cpu', 'cuda'"),
        ({"tags": "cpu"}, "tags", "cpu", "a list"),
        ({"options": {"k": "v"}}, "options['k']", "v", "an integer"),
        ({"options": [1]}, "options", [1], "a table"),
    ],
)
def test_from_mapping_rejects_bad_values_naming_all_four(
    data: dict[str, Any], field_name: str, value: Any, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Sample.from_mapping(data)
    err = info.value
    assert (err.handler, err.field, err.value) == ("sample", field_name, value)
    assert expected in err.expected
    assert str(err).startswith(f"sample.{field_name}: got {value!r}, expected ")
    assert "\n" not in str(err)


def test_unknown_field_suggests_a_close_match() -> None:
    with pytest.raises(ConfigError) as info:
        Sample.from_mapping({"ratoi": 0.3})
    assert info.value.suggestion == "ratio"
    assert "did you mean 'ratio'?" in str(info.value)
    assert "a known field: a, ratio, flag" in str(info.value)


def test_from_mapping_accepts_every_supported_form() -> None:
    h = Sample.from_mapping(
        {
            "a": 3,
            "ratio": 0.1,
            "mode": Mode.FAST,
            "wrap": "fast",
            "timeout": "1h30m",
            "tags": ["cpu"],
            "options": {"wait": 1},
        }
    )
    assert h.a == 3 and h.mode is Mode.FAST and h.wrap is Mode.FAST
    assert h.timeout == timedelta(hours=1, minutes=30)
    assert Sample.from_mapping({"timeout": 90}).timeout == timedelta(seconds=90)
    assert Sample.from_mapping({"timeout": timedelta(seconds=5)}).timeout == timedelta(seconds=5)


def test_string_forms_from_the_environment() -> None:
    h = Sample.from_mapping(
        {
            "a": "7",
            "ratio": "0.2",
            "flag": "false",
            "tags": "cpu,cuda",
            "options": '{"x": 2}',
            "label": "none",
        },
        strings=True,
    )
    assert (h.a, h.ratio, h.flag, h.tags, h.options, h.label) == (
        7,
        0.2,
        False,
        ["cpu", "cuda"],
        {"x": 2},
        None,
    )


def test_callables_never_come_from_config_unless_opted_in() -> None:
    @dataclass
    class WithHook(KwargsHandler):
        name = "withhook"
        cb: Callable[..., Any] | None = None

    with pytest.raises(ConfigError, match="configuration never imports code"):
        WithHook.from_mapping({"cb": "os:getcwd"})
    assert build_handler(WithHook, {"cb": "os:getcwd"}, import_callables=True).cb is os.getcwd
    assert WithHook(cb=print).cb is print


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("10m", 600),
        ("1h", 3600),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("250ms", 0.25),
        ("2d", 172800),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "h", "1h junk"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_check_values_runs_after_construction() -> None:
    @dataclass
    class Pair(KwargsHandler):
        name = "pair"
        low: int = 0
        high: int = 1

        def check_values(self) -> None:
            if self.low > self.high:
                raise ConfigError(self.name, "low", self.low, f"a value <= high ({self.high})")

    with pytest.raises(ConfigError, match=r"pair\.low: got 5, expected a value <= high \(1\)"):
        Pair.from_mapping({"low": 5})
    with pytest.raises(ConfigError):
        Pair(low=5)

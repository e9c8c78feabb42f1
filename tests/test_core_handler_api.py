"""Accelerate's handler API on the base class: to_dict(), copying to_kwargs(), NumPy scalars."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pytest

from accelkw_core.plugin import ConfigError, KwargsHandler, handler_field


@dataclass
class Sample(KwargsHandler):
    name = "sample_api"
    count: int = handler_field(1, ge=0)
    ratio: float = 0.5
    flag: bool = True
    tags: list[Literal["cpu", "cuda"]] | None = None
    sizes: list[int] = field(default_factory=list)
    options: dict[str, int] = field(default_factory=dict)


def test_to_dict_is_every_field_in_order_as_a_deep_copy() -> None:
    handler = Sample(options={"a": 1}, sizes=[1, 2])
    out = handler.to_dict()
    assert list(out) == ["count", "ratio", "flag", "tags", "sizes", "options"]
    assert out["options"] == {"a": 1} and out["options"] is not handler.options
    out["options"]["b"] = 2
    out["sizes"].append(3)
    assert handler.options == {"a": 1} and handler.sizes == [1, 2]


def test_to_kwargs_returns_copies_the_handler_never_sees_changed() -> None:
    handler = Sample(options={"a": 1}, tags=["cpu"])
    out = handler.to_kwargs()
    assert out == {"tags": ["cpu"], "options": {"a": 1}}
    out["options"]["a"] = 5
    out["tags"].append("cuda")
    assert handler.options == {"a": 1} and handler.tags == ["cpu"]


def test_a_tuple_stays_a_tuple() -> None:
    handler = Sample(tags=("cpu", "cuda"), sizes=(1, 2))  # type: ignore[arg-type]
    assert handler.tags == ("cpu", "cuda") and handler.to_kwargs()["tags"] == ("cpu", "cuda")
    assert handler.to_dict()["sizes"] == (1, 2)


def test_a_list_whose_items_need_no_conversion_is_the_callers_own() -> None:
    sizes = [1, 2]
    assert Sample(sizes=sizes).sizes is sizes


@pytest.mark.parametrize(
    ("field_name", "value", "expected"),
    [
        ("count", np.int64(3), 3),
        ("count", np.int32(3), 3),
        ("count", np.uint8(3), 3),
        ("ratio", np.float32(0.25), 0.25),
        ("ratio", np.float64(0.25), 0.25),
        ("ratio", np.int64(2), 2.0),
        ("flag", np.bool_(False), False),
        ("flag", np.True_, True),
    ],
)
def test_numpy_scalars_become_python_numbers(
    field_name: str, value: object, expected: object
) -> None:
    stored = getattr(Sample(**{field_name: value}), field_name)  # type: ignore[arg-type]
    assert stored == expected and type(stored) is type(expected)
    built = getattr(Sample.from_mapping({field_name: value}), field_name)
    assert built == expected and type(built) is type(expected)


def test_numpy_scalars_inside_containers() -> None:
    handler = Sample(sizes=[np.int64(4)], options={"a": np.int32(2)})  # type: ignore[list-item,dict-item]
    assert handler.sizes == [4] and type(handler.sizes[0]) is int
    assert handler.options == {"a": 2} and type(handler.options["a"]) is int


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("count", np.float32(3.0)),
        ("count", np.bool_(True)),
        ("flag", np.int64(1)),
        ("count", np.int64(-1)),
    ],
)
def test_numpy_scalars_follow_the_rules_of_the_number_they_are(
    field_name: str, value: object
) -> None:
    with pytest.raises(ConfigError, match=field_name):
        Sample(**{field_name: value})  # type: ignore[arg-type]

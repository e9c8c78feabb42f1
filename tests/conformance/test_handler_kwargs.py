"""``to_kwargs()`` and ``to_dict()`` on random valid values, under both frameworks.

Each listed difference that changes these results is applied to Accelerate's outcome by an
*adjustment* named after its row; what remains must be identical (exact types included).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.conformance.differences import listed
from tests.conformance.handlers import NAMES, ours, run, same, theirs
from tests.conformance.strategies import STRATEGIES, build

FLOAT_FIELDS = {"grad_scaler": ("init_scale", "growth_factor", "backoff_factor")}
Outcome = dict[str, Any]


def numpy_as_python(name: str, kwargs: Outcome, out: Outcome, method: str) -> Outcome:
    return {k: v.item() if isinstance(v, np.generic) else v for k, v in out.items()}


def int_as_float(name: str, kwargs: Outcome, out: Outcome, method: str) -> Outcome:
    floats = FLOAT_FIELDS.get(name, ())
    return {k: float(v) if k in floats and isinstance(v, int) else v for k, v in out.items()}


def timeout_stays_none(name: str, kwargs: Outcome, out: Outcome, method: str) -> Outcome:
    if name != "process_group":
        return out
    given_timeout = kwargs.get("timeout")
    out = dict(out)
    if method == "to_dict":
        out["timeout"] = given_timeout
        return out
    # The default instance's timeout is None too, so any timeout given differs from it.
    out.pop("timeout", None)
    if given_timeout is not None:
        out["timeout"] = given_timeout
    return out


def profile_ranks_added(name: str, kwargs: Outcome, out: Outcome, method: str) -> Outcome:
    return {**out, "profile_ranks": None} if name == "profile" and method == "to_dict" else out


ADJUSTMENTS: dict[str, Callable[[str, Outcome, Outcome, str], Outcome]] = {
    "numpy-scalars-as-python": numpy_as_python,
    "int-for-float-stored-as-float": int_as_float,
    "pg-timeout-none": timeout_stays_none,
    "profile-ranks-field": profile_ranks_added,
}


def order_like(out: Outcome, cls: type) -> Outcome:
    names = list(cls().to_dict(**({"ignore_keys": ()} if "comm_hook" in out else {})))
    return {k: out[k] for k in sorted(out, key=names.index)}


def expected_from_accelerate(name: str, kwargs: Outcome, out: Any, method: str) -> Any:
    for row, adjust in ADJUSTMENTS.items():
        adjusted = adjust(name, kwargs, out, method)
        if not same(adjusted, out):
            listed(row)
            out = adjusted
    return order_like(out, ours(name)) if isinstance(out, dict) else out


def compare(name: str, kwargs: Outcome, method: str) -> None:
    mine = run(lambda: getattr(build(ours(name), kwargs), method)())
    ref = run(lambda: getattr(build(theirs(name), kwargs), method)())
    expected = expected_from_accelerate(name, kwargs, ref, method)
    assert same(mine, expected), f"{method}({kwargs!r}): accelkw {mine!r}, Accelerate {ref!r}"


@pytest.mark.parametrize("method", ["to_kwargs", "to_dict"])
@pytest.mark.parametrize("name", NAMES)
def test_results_agree_on_random_valid_values(
    name: str, method: str, accelerate: ModuleType
) -> None:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(kwargs=STRATEGIES[name])
    def check(kwargs: Outcome) -> None:
        compare(name, kwargs, method)

    check()


@pytest.mark.parametrize("method", ["to_kwargs", "to_dict"])
@pytest.mark.parametrize("name", NAMES)
def test_results_are_copies(name: str, method: str, accelerate: ModuleType) -> None:
    @settings(max_examples=30, deadline=None)
    @given(kwargs=STRATEGIES[name])
    def check(kwargs: Outcome) -> None:
        for cls in (ours(name), theirs(name)):
            handler = build(cls, kwargs)
            before = copy.deepcopy(handler.to_dict())
            for key, value in getattr(handler, method)().items():
                if isinstance(value, dict | list):
                    assert value is not getattr(handler, key), (cls.__module__, key)
                    value.clear()
            assert same(handler.to_dict(), before)

    check()


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        (
            "profile",
            {"activities": ("cpu",), "schedule_option": {"wait": 0, "warmup": 0, "active": 1}},
        ),
        ("ddp", {"comm_hook": "power_sgd", "comm_state_option": {"matrix_approximation_rank": 2}}),
        ("process_group", {"backend": "gloo", "timeout": timedelta(seconds=30)}),
    ],
)
def test_examples_agree(name: str, kwargs: Outcome, accelerate: ModuleType) -> None:
    for method in ("to_kwargs", "to_dict"):
        compare(name, kwargs, method)


# -- each adjustment describes a difference that still shows ---------------------------------


@pytest.mark.parametrize(
    ("row", "name", "kwargs", "method"),
    [
        ("numpy-scalars-as-python", "ddp", {"bucket_cap_mb": np.int64(30)}, "to_kwargs"),
        ("int-for-float-stored-as-float", "grad_scaler", {"init_scale": 1024}, "to_kwargs"),
        ("pg-timeout-none", "process_group", {"backend": "gloo"}, "to_kwargs"),
        ("profile-ranks-field", "profile", {}, "to_dict"),
    ],
)
def test_each_adjustment_is_needed(
    row: str, name: str, kwargs: Outcome, method: str, accelerate: ModuleType
) -> None:
    mine = getattr(build(ours(name), kwargs), method)()
    ref = getattr(build(theirs(name), kwargs), method)()
    assert not same(mine, ref), f"{row} no longer shows: remove its row and adjustment"
    assert same(mine, order_like(ADJUSTMENTS[row](name, kwargs, ref, method), ours(name)))
    listed(row)


def test_process_group_to_kwargs_with_gloo(accelerate: ModuleType) -> None:
    # The case the process-group docs describe: Accelerate fills in 1800 s, accelkw nothing.
    assert ours("process_group")(backend="gloo").to_kwargs() == {"backend": "gloo"}
    assert theirs("process_group")(backend="gloo").to_kwargs() == {
        "backend": "gloo",
        "timeout": timedelta(seconds=1800),
    }
    listed("pg-timeout-none")

"""Hypothesis strategies for values both frameworks accept, one per handler.

Each draws keyword arguments as plain data (hook types as their string values, so each
framework gets its own enum member); :func:`build` constructs a handler from them.
"""

from __future__ import annotations

import enum
import typing
from datetime import timedelta
from typing import Any

import numpy as np
from hypothesis import strategies as st

INT64 = (-(2**63), 2**63 - 1)


def on_trace_ready(profiler: Any) -> None:
    """A module-level callable (deep copies of it are itself, in both frameworks)."""


def ints(lo: int, hi: int) -> st.SearchStrategy[Any]:
    plain = st.integers(lo, hi)
    small = st.integers(max(lo, -(2**31)), min(hi, 2**31 - 1))
    return st.one_of(plain, plain.map(np.int64), small.map(np.int32))


def floats(lo: float, hi: float | None = None) -> st.SearchStrategy[Any]:
    """Numbers strictly between ``lo`` and ``hi``: floats, ints, and their NumPy scalars."""
    plain = st.floats(lo, hi, exclude_min=True, exclude_max=hi is not None,
                      allow_nan=False, allow_infinity=False)  # fmt: skip
    nice = st.sampled_from([0.125, 0.25, 0.5, 0.75, 1.5, 2.0, 3.0, 1024.0, 65536.0])
    options = [
        plain,
        plain.map(np.float64),
        nice.filter(lambda v: lo < v < (hi or 2**70)).map(np.float32),
    ]
    if hi is None:
        whole = st.integers(int(lo) + 1, 2**40)
        options += [whole, whole.map(np.int64)]
    return st.one_of(*options)


def bools() -> st.SearchStrategy[Any]:
    return st.one_of(st.booleans(), st.booleans().map(np.bool_))


HOOKS = ("no", "fp16", "bf16", "power_sgd", "batched_power_sgd")


@st.composite
def ddp_kwargs(draw: st.DrawFn) -> dict[str, Any]:
    kwargs = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "dim": ints(*INT64),
                "broadcast_buffers": bools(),
                # Above 2**43 - 1 MiB DDP's C++ side overflows; accelkw refuses (ranges-checked).
                "bucket_cap_mb": ints(0, 2**43 - 1),
                "find_unused_parameters": bools(),
                "check_reduction": bools(),
                "gradient_as_bucket_view": bools(),
                "static_graph": bools(),
                "comm_hook": st.sampled_from(HOOKS),
            },
        )
    )
    if kwargs.get("comm_hook") in ("power_sgd", "batched_power_sgd"):
        if draw(st.booleans()):
            kwargs["comm_wrapper"] = draw(st.sampled_from(("no", "fp16", "bf16")))
        if draw(st.booleans()):
            kwargs["comm_state_option"] = {"matrix_approximation_rank": draw(st.integers(1, 4))}
    return kwargs


ACTIVITIES = ("cpu", "xpu", "mtia", "cuda", "hpu")

STRATEGIES: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "autocast": st.fixed_dictionaries(
        {}, optional={"enabled": bools(), "cache_enabled": st.none() | bools()}
    ),
    "ddp": ddp_kwargs(),
    "profile": st.fixed_dictionaries(
        {},
        optional={
            "activities": st.none()
            | st.lists(st.sampled_from(ACTIVITIES), unique=True, max_size=5)
            | st.lists(st.sampled_from(ACTIVITIES), unique=True, max_size=5).map(tuple),
            "schedule_option": st.none()
            | st.fixed_dictionaries(
                {
                    "wait": st.integers(0, 5),
                    "warmup": st.integers(0, 5),
                    "active": st.integers(1, 5),
                },
                optional={"repeat": st.integers(0, 5), "skip_first": st.integers(0, 5)},
            ),
            "on_trace_ready": st.sampled_from([None, on_trace_ready]),
            "record_shapes": bools(),
            "profile_memory": bools(),
            "with_stack": bools(),
            "with_flops": bools(),
            "with_modules": bools(),
            "output_trace_dir": st.none()
            | st.text("abc_-./", min_size=1, max_size=12).filter(str.strip),
        },
    ),
    "grad_scaler": st.fixed_dictionaries(
        {},
        optional={
            "init_scale": floats(0, None),
            "growth_factor": floats(1, None),
            "backoff_factor": floats(0, 1),
            "growth_interval": ints(1, INT64[1]),
            "enabled": bools(),
        },
    ),
    "process_group": st.fixed_dictionaries(
        {},
        optional={
            "backend": st.sampled_from([None, "nccl", "gloo", "mpi", "ucc", "cpu:gloo,cuda:nccl"]),
            "init_method": st.sampled_from(
                [None, "env://", "tcp://127.0.0.1:29500", "file:///tmp/rendezvous"]
            ),
            "timeout": st.none()
            | st.sampled_from([600, 1800]).map(lambda s: timedelta(seconds=s))
            | st.integers(1, 10**8).map(lambda s: timedelta(seconds=s)),
        },
    ),
}


def build(cls: type, kwargs: dict[str, Any]) -> Any:
    """``cls(**kwargs)`` with hook values turned into ``cls``'s own enum members."""
    hints = typing.get_type_hints(cls)
    converted = {}
    for key, value in kwargs.items():
        converted[key] = value
        if key in ("comm_hook", "comm_wrapper"):
            enum_type = hints["comm_hook"]
            assert isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)
            converted[key] = enum_type(value)
    return cls(**converted)

"""Who raises on invalid values: accelkw may be stricter than Accelerate, never looser.

Each case runs one program under both frameworks: build the handler, call ``to_kwargs()``
and ``to_dict()``, and use it as Accelerate's ``Accelerator`` does (the torch call its
``to_kwargs()`` feeds, or ``build()`` for the profiler). Accelerate raising means accelkw
must raise; accelkw raising alone must be a listed difference, named by the case.
"""

from __future__ import annotations

import math
from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest

from tests.conformance.differences import listed
from tests.conformance.handlers import Raised, ours, run, theirs
from tests.conformance.strategies import build


def program(name: str, cls: type, kwargs: dict[str, Any]) -> Any:
    handler = build(cls, kwargs)
    result = handler.to_kwargs()
    handler.to_dict()
    import torch

    if name == "grad_scaler":
        torch.amp.GradScaler("cpu", **result)
    elif name == "autocast":
        saved = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16, **result):
                pass
        finally:
            # torch.autocast.__enter__ that raises on a bad value (cache_enabled="no") has
            # already switched autocast on; later tests would run under it.
            torch.set_autocast_enabled("cpu", saved[0])
            torch.set_autocast_dtype("cpu", saved[1])
    elif name == "profile":
        handler.build()
    return result


# (handler, kwargs, the row that lists accelkw refusing what Accelerate accepts, or None when
# both frameworks must agree).
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("autocast", {"enabled": "yes"}, None),
    ("autocast", {"cache_enabled": "no"}, None),
    ("autocast", {"enabled": False, "cache_enabled": True}, None),
    ("ddp", {"bucket_cap_mb": -1}, "ranges-checked"),
    ("ddp", {"bucket_cap_mb": 2**43}, "ranges-checked"),
    ("ddp", {"dim": 2**63}, "ranges-checked"),
    ("ddp", {"bucket_cap_mb": "25"}, "wrong-type-refused"),
    ("ddp", {"dim": 1.5}, "wrong-type-refused"),
    ("ddp", {"dim": True}, "wrong-type-refused"),
    ("ddp", {"find_unused_parameters": "true"}, "wrong-type-refused"),
    ("ddp", {"comm_wrapper": "fp16"}, "ddp-hook-combinations-refused"),
    ("ddp", {"comm_hook": "fp16", "comm_wrapper": "bf16"}, "ddp-hook-combinations-refused"),
    (
        "ddp",
        {"comm_state_option": {"matrix_approximation_rank": 2}},
        "ddp-hook-combinations-refused",
    ),
    (
        "ddp",
        {"comm_hook": "power_sgd", "comm_state_option": {"process_group": None}},
        "ddp-hook-combinations-refused",
    ),
    ("grad_scaler", {"init_scale": 0.0}, "ranges-checked"),
    ("grad_scaler", {"init_scale": -1.0}, "ranges-checked"),
    ("grad_scaler", {"init_scale": math.inf}, "ranges-checked"),
    ("grad_scaler", {"growth_factor": 1.0}, None),
    ("grad_scaler", {"growth_factor": math.inf}, "ranges-checked"),
    ("grad_scaler", {"backoff_factor": 1.5}, None),
    ("grad_scaler", {"backoff_factor": 0.0}, "ranges-checked"),
    ("grad_scaler", {"growth_interval": 0}, "ranges-checked"),
    ("grad_scaler", {"growth_interval": 1.5}, "wrong-type-refused"),
    ("grad_scaler", {"enabled": "false"}, "wrong-type-refused"),
    ("grad_scaler", {"init_scale": "1024"}, "wrong-type-refused"),
    ("profile", {"activities": ["cpu", "cpu"]}, None),
    ("profile", {"activities": ["gpu"]}, None),
    ("profile", {"output_trace_dir": ""}, "profile-values-checked"),
    (
        "profile",
        {"schedule_option": {"wait": 0, "warmup": 0, "active": 1, "skip_first_wait": 1}},
        "profile-values-checked",
    ),
    ("profile", {"schedule_option": {"wiat": 1, "warmup": 0, "active": 1}}, None),
    ("profile", {"schedule_option": {"wait": 0, "warmup": 0, "active": 0}}, None),
    ("profile", {"record_shapes": "yes"}, "wrong-type-refused"),
    ("process_group", {"backend": "glo"}, "pg-values-checked"),
    ("process_group", {"init_method": "localhost:1234"}, "pg-values-checked"),
    ("process_group", {"timeout": timedelta(0)}, "pg-values-checked"),
    ("process_group", {"timeout": timedelta(days=4000)}, "pg-values-checked"),
    ("process_group", {"backend": 5}, "wrong-type-refused"),
]


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
@pytest.mark.parametrize(("name", "kwargs", "row"), CASES, ids=[f"{n}-{k}" for n, k, _ in CASES])
def test_accelkw_is_stricter_only_where_listed(
    name: str, kwargs: dict[str, Any], row: str | None, accelerate: ModuleType
) -> None:
    mine = run(lambda: program(name, ours(name), kwargs))
    ref = run(lambda: program(name, theirs(name), kwargs))
    if isinstance(ref, Raised):
        assert isinstance(mine, Raised), f"accelkw is looser: Accelerate raised {ref!r}"
        assert row is None, f"both raise: {row!r} does not apply ({mine!r}, {ref!r})"
        return
    if row is None:
        assert not isinstance(mine, Raised), f"accelkw raised {mine!r}; no difference listed"
        return
    listed(row)
    assert isinstance(mine, Raised), f"listed as {row!r}, but accelkw accepts it now"
    assert issubclass(mine.error, ValueError), mine  # ConfigError is a ValueError


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_a_schedule_without_wait_and_warmup(accelerate: ModuleType) -> None:
    kwargs = {"schedule_option": {"active": 2}}
    mine = run(lambda: program("profile", ours("profile"), kwargs))
    ref = run(lambda: program("profile", theirs("profile"), kwargs))
    assert isinstance(ref, Raised)
    assert isinstance(mine, Raised), "accelkw accepts a schedule Accelerate refuses"

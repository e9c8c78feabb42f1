"""Integration: the built-in handlers' numeric fields accept what torch accepts, and no more.

It imports the built-ins directly: a broken install fails it, never skips."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
from accelkw_ddp import DistributedDataParallelKwargs
from accelkw_grad_scaler import GradScalerKwargs

from accelkw_core.contract.validation import build_handler
from accelkw_core.errors import ConfigError
from accelkw_core.testing import free_port

# DDP turns MiB into bytes in a signed 64-bit integer: 2**43 MiB is 2**63 bytes.
LARGEST_BUCKET_MB = 2**43 - 1


def test_bucket_cap_mb_is_bounded_where_ddp_stops_accepting_it() -> None:
    for too_big in (LARGEST_BUCKET_MB + 1, 2**63 - 1):
        with pytest.raises(ConfigError) as caught:
            build_handler(DistributedDataParallelKwargs, {"bucket_cap_mb": too_big})
        assert (caught.value.field, caught.value.value) == ("bucket_cap_mb", too_big)
        assert caught.value.expected == f"a number >= 0 and <= {LARGEST_BUCKET_MB}"
    handler = build_handler(DistributedDataParallelKwargs, {"bucket_cap_mb": LARGEST_BUCKET_MB})
    assert handler.bucket_cap_mb == LARGEST_BUCKET_MB


def test_ddp_itself_takes_the_largest_bucket_and_refuses_the_next() -> None:
    # The bound above is torch's, not a guess: a one-process gloo group shows both sides.
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Linear(2, 2), bucket_cap_mb=LARGEST_BUCKET_MB
        )
        model(torch.randn(3, 2)).sum().backward()
        with pytest.raises(TypeError):
            torch.nn.parallel.DistributedDataParallel(
                torch.nn.Linear(2, 2), bucket_cap_mb=LARGEST_BUCKET_MB + 1
            )
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("name", ["init_scale", "growth_factor"])
@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_grad_scaler_factors_must_be_finite(name: str, bad: float) -> None:
    with pytest.raises(ConfigError) as caught:
        build_handler(GradScalerKwargs, {name: bad})
    assert caught.value.field == name and "a finite number" in caught.value.expected
    with pytest.raises(ConfigError, match=name):
        GradScalerKwargs(**{name: bad})

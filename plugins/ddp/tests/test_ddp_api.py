"""Accelerate's API on the DDP handler: hook type list/membership, to_dict, register_comm_hook."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from accelkw_ddp import DDPCommunicationHookType as T
from accelkw_ddp import DistributedDataParallelKwargs

from accelkw_core import ConfigError


class FakeDDP:
    """Records register_comm_hook calls as DistributedDataParallel receives them."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def register_comm_hook(self, state: Any, hook: Any) -> None:
        self.calls.append({"state": state, "hook": hook})


def test_list_is_every_value_in_order() -> None:
    assert T.list() == ["no", "fp16", "bf16", "power_sgd", "batched_power_sgd"]


@pytest.mark.parametrize(("probe", "expected"), [("fp16", True), (T.BF16, True), ("FP16", False),
                                                 ("fp32", False), (None, False), ([], False)])  # fmt: skip
def test_membership_by_value_on_every_python(probe: Any, expected: bool) -> None:
    assert (probe in T) is expected


def test_to_dict_leaves_out_the_comm_fields_unless_asked() -> None:
    handler = DistributedDataParallelKwargs(
        comm_hook="power_sgd", comm_state_option={"matrix_approximation_rank": 2}, dim=1
    )
    assert "comm_hook" not in handler.to_dict() and handler.to_dict()["dim"] == 1
    everything = handler.to_dict(ignore_keys=())
    assert everything["comm_hook"] is T.POWER_SGD
    everything["comm_state_option"]["matrix_approximation_rank"] = 9
    assert handler.comm_state_option == {"matrix_approximation_rank": 2}
    assert handler.to_kwargs() == {"dim": 1}


def test_register_comm_hook_with_no_hook_registers_nothing() -> None:
    model = FakeDDP()
    DistributedDataParallelKwargs().register_comm_hook(model)
    assert model.calls == []


def test_register_comm_hook_registers_the_named_hook() -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model = FakeDDP()
    DistributedDataParallelKwargs(comm_hook="fp16").register_comm_hook(model)
    assert model.calls == [{"state": None, "hook": default_hooks.fp16_compress_hook}]


def test_register_comm_hook_gives_powersgd_a_fresh_state_with_the_options() -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    handler = DistributedDataParallelKwargs(
        comm_hook="power_sgd",
        comm_wrapper="fp16",
        comm_state_option={"matrix_approximation_rank": 3},
    )
    first, second = FakeDDP(), FakeDDP()
    handler.register_comm_hook(first)
    handler.register_comm_hook(second)
    state = first.calls[0]["state"]
    assert isinstance(state, powerSGD_hook.PowerSGDState)
    assert state.matrix_approximation_rank == 3 and state.process_group is None
    assert second.calls[0]["state"] is not state
    assert first.calls[0]["hook"].__name__ == "fp16_compress_wrapper_hook"


def test_register_comm_hook_refuses_an_unknown_powersgd_option() -> None:
    handler = DistributedDataParallelKwargs(comm_hook="power_sgd", comm_state_option={"rank": 2})
    with pytest.raises(ConfigError, match="matrix_approximation_rank"):
        handler.register_comm_hook(FakeDDP())


def test_numpy_integers_are_accepted_as_python_ints() -> None:
    handler = DistributedDataParallelKwargs(bucket_cap_mb=np.int64(25), dim=np.int32(1))  # type: ignore[arg-type]
    assert type(handler.bucket_cap_mb) is int and handler.bucket_cap_mb == 25
    assert handler.to_kwargs() == {"dim": 1}

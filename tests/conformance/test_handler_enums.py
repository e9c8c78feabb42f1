"""DDPCommunicationHookType and DistributedDataParallelKwargs.register_comm_hook, compared.

Accelerate's enums with ``list()`` and value membership are its ``BaseEnum`` subclasses; of
those, the built-in handlers expose only ``DDPCommunicationHookType``.
"""

from __future__ import annotations

import enum
from types import ModuleType
from typing import Any

import pytest

from tests.conformance.differences import listed
from tests.conformance.handlers import Raised, ours, run, same, theirs


def hook_types(accelerate: ModuleType) -> tuple[Any, Any]:
    from accelkw_ddp import DDPCommunicationHookType

    return DDPCommunicationHookType, accelerate.utils.DDPCommunicationHookType


def test_every_reference_enum_a_builtin_exposes_lists_and_tests_membership_alike(
    accelerate: ModuleType,
) -> None:
    import accelerate.utils.dataclasses as ref

    import accelkw_core.utils

    with_list = {
        name
        for name, obj in vars(ref).items()
        if isinstance(obj, type) and issubclass(obj, ref.BaseEnum) and obj is not ref.BaseEnum
    }
    exposed = with_list & set(accelkw_core.utils.__all__)
    assert "DDPCommunicationHookType" in exposed
    for name in sorted(exposed):
        mine, theirs = getattr(accelkw_core.utils, name), getattr(ref, name)
        assert mine.list() == theirs.list(), name
        for value in theirs.list():
            assert value in mine, (name, value)
        assert "not-a-member" not in mine


def test_members_list_str_and_repr(accelerate: ModuleType) -> None:
    mine, ref = hook_types(accelerate)
    assert [(m.name, m.value) for m in mine] == [(m.name, m.value) for m in ref]
    assert mine.list() == ref.list() == ["no", "fp16", "bf16", "power_sgd", "batched_power_sgd"]
    assert [str(m) for m in mine] == [str(m) for m in ref]
    assert [repr(m) for m in mine] == [repr(m) for m in ref]


@pytest.mark.parametrize(
    "probe", ["fp16", "no", "FP16", "fp32", "", 1, None, ["fp16"], "POWER_SGD"]
)
def test_membership_by_value(probe: Any, accelerate: ModuleType) -> None:
    mine, ref = hook_types(accelerate)
    assert same(run(lambda: probe in mine), run(lambda: probe in ref))


def test_members_are_members(accelerate: ModuleType) -> None:
    mine, ref = hook_types(accelerate)
    assert all(m in mine for m in mine) and all(m in ref for m in ref)


def test_a_member_equals_its_value_only_in_accelkw(accelerate: ModuleType) -> None:
    mine, ref = hook_types(accelerate)
    listed("hook-type-is-str")
    assert mine.FP16 == "fp16" and isinstance(mine.FP16, str)
    assert ref.FP16 != "fp16" and not isinstance(ref.FP16, str)


def test_hook_strings_are_normalised_only_in_accelkw(accelerate: ModuleType) -> None:
    mine = ours("ddp")(comm_hook="fp16").comm_hook
    ref = theirs("ddp")(comm_hook="fp16").comm_hook
    listed("hook-strings-become-members")
    assert isinstance(mine, enum.Enum) and mine.value == "fp16"
    assert ref == "fp16" and not isinstance(ref, enum.Enum)


# -- register_comm_hook on a DistributedDataParallel model (one-process gloo group) ----------


def registered(handler: Any) -> Any:
    """The hooks ``handler.register_comm_hook`` puts on a fresh DDP model, after one step."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 2))
    handler.register_comm_hook(model)
    model(torch.randn(3, 4)).sum().backward()  # the hook runs on the first backward
    return [describe(hook, state) for hook, state in model._comm_hooks]


def describe(hook: Any, state: Any) -> tuple[str, str, dict[str, Any]]:
    options = (
        {k: getattr(state, k) for k in ("matrix_approximation_rank", "start_powerSGD_iter")}
        if state is not None
        else {}
    )
    return hook.__qualname__, type(state).__name__, options


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"comm_hook": "no"},
        {"comm_hook": "fp16"},
        {"comm_hook": "power_sgd"},
        {"comm_hook": "power_sgd", "comm_wrapper": "fp16"},
        {"comm_hook": "power_sgd", "comm_state_option": {"matrix_approximation_rank": 2}},
        {"comm_hook": "bf16"},  # torch refuses bf16 hooks without CUDA NCCL: both raise
        {"comm_hook": "power_sgd", "comm_state_option": {"rank": 2}},  # both raise
    ],
    ids=repr,
)
def test_register_comm_hook_registers_the_same_hook(
    kwargs: dict[str, Any], accelerate: ModuleType, gloo_group: None
) -> None:
    from tests.conformance.strategies import build

    mine = run(lambda: registered(build(ours("ddp"), kwargs)))
    ref = run(lambda: registered(build(theirs("ddp"), kwargs)))
    if isinstance(ref, Raised):
        assert isinstance(mine, Raised), f"accelkw is looser: Accelerate raised {ref!r}"
    else:
        assert mine == ref


def test_a_hook_given_as_a_string_is_registered_only_by_accelkw(
    accelerate: ModuleType, gloo_group: None
) -> None:
    listed("hook-strings-become-members")
    assert registered(ours("ddp")(comm_hook="fp16")) == [("fp16_compress_hook", "NoneType", {})]
    assert registered(theirs("ddp")(comm_hook="fp16")) == []


def test_batched_power_sgd_is_refused_at_registration(
    accelerate: ModuleType, gloo_group: None
) -> None:
    from accelkw_ddp._comm_hooks import batched_power_sgd_broken

    from accelkw_core import ConfigError

    if not batched_power_sgd_broken():
        pytest.fail("this torch runs batched PowerSGD: remove 'ddp-unrunnable-hook-refused'")
    listed("ddp-unrunnable-hook-refused")
    kwargs = {"comm_hook": "batched_power_sgd"}
    with pytest.raises(ConfigError, match="batched"):
        registered(ours("ddp")(**kwargs))
    # Accelerate registers it; it fails only once compression starts, mid-training.
    ref_type = accelerate.utils.DDPCommunicationHookType
    assert registered(theirs("ddp")(comm_hook=ref_type.BATCHED_POWER_SGD))[0][0] == (
        "batched_powerSGD_hook"
    )

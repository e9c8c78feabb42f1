"""DistributedDataParallelKwargs in one process: fields, validation, DDP arguments and hooks."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar, Literal

import accelkw_ddp.plugin
import pytest
from accelkw_ddp import DDPCommunicationHookType, DistributedDataParallelKwargs

from accelkw_core import AccelkwError, ConfigError, Registry
from accelkw_core.plugin import MODEL_WRAPPER
from accelkw_core.testing import (
    HandlerContract,
    apply_handler,
    isolated_registry,
    make_state,
    modules_loaded_by,
)

T = DDPCommunicationHookType


def test_fields_types_defaults_and_order_match_the_reference() -> None:
    hints = typing.get_type_hints(DistributedDataParallelKwargs)
    fields = dataclasses.fields(DistributedDataParallelKwargs)
    assert [f.name for f in fields] == [
        "dim",
        "broadcast_buffers",
        "bucket_cap_mb",
        "find_unused_parameters",
        "check_reduction",
        "gradient_as_bucket_view",
        "static_graph",
        "comm_hook",
        "comm_wrapper",
        "comm_state_option",
    ]
    assert DistributedDataParallelKwargs().field_values() == {
        "dim": 0,
        "broadcast_buffers": True,
        "bucket_cap_mb": 25,
        "find_unused_parameters": False,
        "check_reduction": False,
        "gradient_as_bucket_view": False,
        "static_graph": False,
        "comm_hook": T.NO,
        "comm_wrapper": T.NO,
        "comm_state_option": {},
    }
    assert hints["comm_hook"] is T
    assert hints["comm_wrapper"] == Literal[T.NO, T.FP16, T.BF16]
    assert [(m.name, m.value) for m in T] == [
        ("NO", "no"),
        ("FP16", "fp16"),
        ("BF16", "bf16"),
        ("POWER_SGD", "power_sgd"),
        ("BATCHED_POWER_SGD", "batched_power_sgd"),
    ]
    assert (DistributedDataParallelKwargs.name, DistributedDataParallelKwargs.after) == (
        "ddp",
        ("process_group",),
    )


def test_the_default_factory_gives_each_instance_its_own_dict() -> None:
    first, second = DistributedDataParallelKwargs(), DistributedDataParallelKwargs()
    assert first.comm_state_option is not second.comm_state_option


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, {}),
        ({"find_unused_parameters": True}, {"find_unused_parameters": True}),
        ({"bucket_cap_mb": 25}, {}),
        ({"bucket_cap_mb": 10, "static_graph": True}, {"bucket_cap_mb": 10, "static_graph": True}),
        # As in the reference, the comm_* fields configure the hook, not the DDP call.
        ({"comm_hook": "fp16"}, {}),
        (
            {"comm_hook": "power_sgd", "comm_state_option": {"matrix_approximation_rank": 2}},
            {},
        ),
    ],
)
def test_to_kwargs_keeps_the_reference_semantics(
    kwargs: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert DistributedDataParallelKwargs(**kwargs).to_kwargs() == expected


def test_explicit_kwargs_keep_everything_set_including_defaults_and_hooks() -> None:
    handler = DistributedDataParallelKwargs(bucket_cap_mb=25, comm_hook="fp16")
    assert handler.explicit_kwargs() == {"bucket_cap_mb": 25, "comm_hook": T.FP16}
    handler.comm_hook = T.POWER_SGD  # changed after construction: still explicit
    assert "comm_hook" in handler.explicit_fields()


@pytest.mark.parametrize("value", ["fp16", "FP16", T.FP16])
def test_hook_strings_become_members(value: Any) -> None:
    handler = DistributedDataParallelKwargs(comm_hook=value)
    assert handler.comm_hook is T.FP16
    wrapped = DistributedDataParallelKwargs(comm_hook="power_sgd", comm_wrapper="bf16")
    assert wrapped.comm_wrapper is T.BF16


@pytest.mark.parametrize(
    ("data", "field", "in_message"),
    [
        ({"comm_hook": "fp32"}, "comm_hook", "'power_sgd'"),
        ({"comm_wrapper": "power_sgd", "comm_hook": "power_sgd"}, "comm_wrapper", "'bf16'"),
        ({"comm_wrapper": "fp16"}, "comm_wrapper", "no hook to wrap"),
        ({"comm_hook": "fp16", "comm_wrapper": "bf16"}, "comm_wrapper", "already compresses"),
        ({"comm_state_option": {"matrix_approximation_rank": 2}}, "comm_state_option", "{}"),
        (
            {"comm_hook": "power_sgd", "comm_state_option": {"process_group": None}},
            "comm_state_option['process_group']",
            "default process group",
        ),
        ({"bucket_cap_mb": -1}, "bucket_cap_mb", ">= 0"),
        ({"dim": 0.5}, "dim", "integer"),
    ],
)
def test_from_mapping_rejects_bad_values_naming_the_field(
    data: dict[str, Any], field: str, in_message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        DistributedDataParallelKwargs.from_mapping(data)
    assert info.value.handler == "ddp"
    assert info.value.field == field
    assert in_message in str(info.value)


def test_from_mapping_reads_text_values_and_suggests_field_names() -> None:
    handler = DistributedDataParallelKwargs.from_mapping(
        {
            "bucket_cap_mb": "10",
            "comm_hook": "power_sgd",
            "comm_wrapper": "fp16",
            "comm_state_option": '{"matrix_approximation_rank": 2}',
        },
        strings=True,
    )
    assert (handler.bucket_cap_mb, handler.comm_hook, handler.comm_wrapper) == (
        10,
        T.POWER_SGD,
        T.FP16,
    )
    assert handler.comm_state_option == {"matrix_approximation_rank": 2}
    with pytest.raises(ConfigError) as info:
        DistributedDataParallelKwargs.from_mapping({"find_unused_parameter": True})
    assert info.value.suggestion == "find_unused_parameters"


def test_every_ddp_field_set_is_passed_even_when_equal_to_the_default() -> None:
    handler = DistributedDataParallelKwargs(
        dim=0,
        bucket_cap_mb=25,
        find_unused_parameters=False,
        gradient_as_bucket_view=True,
        static_graph=True,
    )
    assert handler.ddp_kwargs() == {
        "dim": 0,
        "bucket_cap_mb": 25,
        "find_unused_parameters": False,
        "gradient_as_bucket_view": True,
        "static_graph": True,
    }
    assert DistributedDataParallelKwargs().ddp_kwargs() == {}


def test_check_reduction_true_is_not_passed_and_the_log_says_why() -> None:
    handler = DistributedDataParallelKwargs(check_reduction=True)
    assert handler.ddp_kwargs() == {}
    state = apply_handler(handler, make_state(world_size=2))
    assert any("check_reduction=True not passed" in m for m in state.messages("ddp"))
    assert DistributedDataParallelKwargs(check_reduction=False).ddp_kwargs() == {
        "check_reduction": False
    }


def test_broadcast_buffers_follows_torchs_deprecation() -> None:
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    deprecated = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    keep = DistributedDataParallelKwargs(broadcast_buffers=True)
    off = DistributedDataParallelKwargs(broadcast_buffers=False)
    assert off.ddp_kwargs() == {"broadcast_buffers": False}
    assert keep.ddp_kwargs() == ({} if deprecated else {"broadcast_buffers": True})
    if deprecated:
        assert "broadcast_buffers=True not passed" in keep.describe(make_state(world_size=2))
        assert "forward_sync_buffers" in off.describe(make_state(world_size=2))


def test_world_size_one_records_that_the_model_is_not_wrapped() -> None:
    state = apply_handler(DistributedDataParallelKwargs(find_unused_parameters=True))
    assert [(e.message, e.applied) for e in state.log] == [
        ("world size 1: model not wrapped", False)
    ]
    assert state.values(MODEL_WRAPPER) == []
    assert state.capabilities == {}
    assert (
        DistributedDataParallelKwargs().describe(make_state()) == "world size 1: model not wrapped"
    )


def test_apply_adds_a_wrapper_that_needs_a_process_group() -> None:
    import torch

    handler = DistributedDataParallelKwargs(bucket_cap_mb=5)
    plan = handler.plan(make_state(world_size=2))
    state = apply_handler(handler, make_state(world_size=2))
    assert [c.handler for c in state.contributions(MODEL_WRAPPER)] == ["ddp"]
    assert state.capabilities == {"gradient_sync": "ddp"}
    messages = state.messages("ddp")
    assert messages == [s.message for s in plan.steps]
    assert messages[0] == (
        "models will be wrapped in DistributedDataParallel(module, device_ids=None, "
        "bucket_cap_mb=5); comm hook: none (plain all-reduce)"
    )
    assert any("a process group must exist when models are prepared" in m for m in messages)
    (wrap,) = state.values(MODEL_WRAPPER)
    with pytest.raises(AccelkwError, match="install accelkw-process-group"):
        wrap(torch.nn.Linear(2, 2))


@pytest.mark.parametrize(
    ("kwargs", "description"),
    [
        ({"comm_hook": "fp16"}, "comm hook: fp16_compress_hook"),
        (
            {
                "comm_hook": "power_sgd",
                "comm_wrapper": "fp16",
                "comm_state_option": {"matrix_approximation_rank": 2},
            },
            "comm hook: fp16_compress_wrapper(powerSGD_hook) with "
            "PowerSGDState(matrix_approximation_rank=2)",
        ),
        ({"comm_hook": "power_sgd"}, "comm hook: powerSGD_hook with PowerSGDState()"),
    ],
)
def test_describe_names_the_hook(kwargs: dict[str, Any], description: str) -> None:
    state = make_state(world_size=2)
    plan = DistributedDataParallelKwargs(**kwargs).plan(state)
    assert state.log == [] and state.values(MODEL_WRAPPER) == []  # planning changes nothing
    text = plan.summary()
    assert text.startswith(
        "models will be wrapped in DistributedDataParallel(module, device_ids=None)"
    )
    assert description in text
    assert description in plan.steps[0].message and plan.steps[0].point == "model_wrapper"


@pytest.mark.parametrize(
    ("kwargs", "field", "in_message"),
    [
        (
            {"comm_hook": "power_sgd", "comm_state_option": {"matrix_rank": 2}},
            "comm_state_option['matrix_rank']",
            "did you mean 'matrix_approximation_rank'",
        ),
        (
            {"comm_hook": "power_sgd", "comm_state_option": {"start_powerSGD_iter": 1}},
            "comm_state_option",
            "start_powerSGD_iter",
        ),
    ],
)
def test_powersgd_options_are_checked_at_apply(
    kwargs: dict[str, Any], field: str, in_message: str
) -> None:
    handler = DistributedDataParallelKwargs(**kwargs)
    with pytest.raises(ConfigError) as info:
        handler.apply(make_state(world_size=2))
    assert info.value.field == field
    assert in_message in str(info.value)


def test_bf16_hooks_without_cuda_nccl_are_refused_at_apply() -> None:
    from accelkw_ddp._comm_hooks import bf16_supported

    if bf16_supported():
        pytest.skip("this machine supports torch's bf16 communication hooks")
    for kwargs, field in [
        ({"comm_hook": "bf16"}, "comm_hook"),
        ({"comm_hook": "power_sgd", "comm_wrapper": "bf16"}, "comm_wrapper"),
    ]:
        state = make_state(world_size=2)
        with pytest.raises(ConfigError) as info:
            DistributedDataParallelKwargs(**kwargs).apply(state)
        assert (info.value.field, info.value.value) == (field, "bf16")
        assert "needs CUDA with NCCL >= 2.10" in str(info.value)
        assert state.values(MODEL_WRAPPER) == [] and state.log == []


def test_batched_powersgd_is_refused_where_torch_breaks_it() -> None:
    from accelkw_ddp._comm_hooks import batched_power_sgd_broken

    handler = DistributedDataParallelKwargs(comm_hook="batched_power_sgd")
    if not batched_power_sgd_broken():
        # A torch that fixed the hook gets it: the plan wraps the model with it.
        state = make_state(world_size=2)
        handler.apply(state)
        assert len(state.values(MODEL_WRAPPER)) == 1
        return
    with pytest.raises(ConfigError) as info:
        handler.apply(make_state(world_size=2))
    assert info.value.field == "comm_hook"
    assert "use 'power_sgd'" in str(info.value)


def test_registered_through_the_plugin_hook_and_the_installed_entry_point() -> None:
    registry = isolated_registry([accelkw_ddp.plugin])
    assert registry.get("ddp").cls is DistributedDataParallelKwargs
    info = Registry(autoload=True, allow=None, deny=(), env={}).handlers().get("ddp")
    assert info is not None, "accelkw-ddp is not installed (pip install -e plugins/ddp)"
    assert info.distribution == "accelkw-ddp"


def test_importing_the_plugin_and_building_a_handler_does_not_import_torch() -> None:
    code = (
        "import accelkw_ddp.plugin\n"
        "from accelkw_ddp import DistributedDataParallelKwargs\n"
        "h = DistributedDataParallelKwargs(comm_hook='power_sgd', comm_wrapper='fp16',\n"
        "    comm_state_option={'matrix_approximation_rank': 2}, bucket_cap_mb=10)\n"
        "h.to_kwargs(); h.explicit_kwargs()\n"
    )
    assert modules_loaded_by(code) == []


class TestDDPContract(HandlerContract):
    handler_class = DistributedDataParallelKwargs
    plugin_module = "accelkw_ddp.plugin"
    examples: ClassVar = (
        {"bucket_cap_mb": 10, "find_unused_parameters": True},
        {"broadcast_buffers": False, "gradient_as_bucket_view": True, "static_graph": True},
        {"comm_hook": "fp16"},
        {
            "comm_hook": "power_sgd",
            "comm_wrapper": "fp16",
            "comm_state_option": {"matrix_approximation_rank": 2},
        },
        {"dim": 0, "check_reduction": True},
    )

"""FullyShardedDataParallelPlugin in one process: fields, FSDP1 values, composition, the plan."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import accelkw_ddp.plugin
import accelkw_fsdp.plugin
import pytest
from accelkw_ddp import DistributedDataParallelKwargs
from accelkw_fsdp import FullyShardedDataParallelPlugin

from accelkw_core import Accelerator, ComposeError, ConfigError
from accelkw_core.testing import HandlerContract, isolated_registry, make_state

F = FullyShardedDataParallelPlugin

REFERENCE_FIELDS = [
    ("fsdp_version", None),
    ("sharding_strategy", None),
    ("reshard_after_forward", None),
    ("backward_prefetch", None),
    ("mixed_precision_policy", None),
    ("auto_wrap_policy", None),
    ("cpu_offload", None),
    ("ignored_modules", None),
    ("state_dict_type", None),
    ("state_dict_config", None),
    ("optim_state_dict_config", None),
    ("limit_all_gathers", True),
    ("use_orig_params", None),
    ("param_init_fn", None),
    ("sync_module_states", None),
    ("forward_prefetch", None),
    ("activation_checkpointing", None),
    ("activation_checkpointing_offload", None),
    ("cpu_ram_efficient_loading", None),
    ("transformer_cls_names_to_wrap", None),
    ("min_num_params", None),
]


def test_fields_order_and_defaults_match_accelerate() -> None:
    assert [(f.name, f.default) for f in dataclasses.fields(F)] == REFERENCE_FIELDS


def test_the_reference_name_is_served_lazily() -> None:
    from accelkw_core.utils import FullyShardedDataParallelPlugin as Served

    assert Served is F


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fsdp_version": 1}, "accelkw-fsdp runs FSDP2"),
        ({"sharding_strategy": "NO_SHARD"}, "FSDP2 always shards; for replicated"),
        ({"sharding_strategy": "HYBRID_SHARD"}, "2-D device mesh"),
        ({"sharding_strategy": "FULL_SHARD", "reshard_after_forward": False}, "as sharding"),
        ({"state_dict_type": "LOCAL_STATE_DICT"}, "flat"),
        ({"mixed_precision_policy": {"buffer_dtype": "bf16"}}, "keeps buffers"),
        ({"mixed_precision_policy": "fp8"}, "a torch dtype or one of"),
        ({"auto_wrap_policy": "by_size"}, "transformer_based_wrap, size_based_wrap"),
        ({"forward_prefetch": True}, "no forward-prefetch switch"),
        ({"activation_checkpointing_offload": True}, "unless activation_checkpointing"),
        ({"min_num_params": -1}, ">= 0"),
    ],
)
def test_values_fsdp2_cannot_honour_are_refused_with_the_reason(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match="fsdp") as info:
        F(**kwargs)
    assert message in str(info.value)


def test_fsdp1_values_are_mapped_with_a_note() -> None:
    resolved = F(
        sharding_strategy="SHARD_GRAD_OP",
        backward_prefetch="BACKWARD_PRE",
        use_orig_params=True,
        limit_all_gathers=False,
        mixed_precision_policy="bf16",
        state_dict_type="SHARDED_STATE_DICT",
        min_num_params=100,
    ).resolved()
    assert resolved.reshard_after_forward is False
    assert resolved.mixed_precision == {"param_dtype": "bfloat16", "reduce_dtype": "bfloat16"}
    assert resolved.state_dict == "sharded"
    assert resolved.wrap == "size_based_wrap"
    notes = " | ".join(resolved.notes)
    for text in ("SHARD_GRAD_OP mapped", "backward_prefetch", "use_orig_params", "limit_all"):
        assert text in notes


def test_one_process_shards_nothing_and_says_why() -> None:
    plan = F().plan(make_state(world_size=1))
    assert not plan.effective
    assert "world size 1: model not sharded" in plan.summary()


def test_the_plan_on_two_processes_contributes_every_point() -> None:
    plan = F(mixed_precision_policy={"param_dtype": "bf16"}).plan(make_state(world_size=2, rank=0))
    points = [step.point for step in plan.steps if step.point]
    assert points == [
        "model_wrapper",
        "optimizer_wrapper",
        "no_sync",
        "model_state",
        "model_checkpoint",
    ]
    assert plan.provides == {"gradient_sync"}
    assert "mesh=(2,) on cpu" in plan.summary()
    assert "full weights and optimizer state gathered to rank 0" in plan.summary()


def test_sharded_state_dicts_are_saved_by_every_rank() -> None:
    plan = F(state_dict_type="SHARDED_STATE_DICT").plan(make_state(world_size=2, rank=1))
    store = next(step.value for step in plan.steps if step.point == "model_checkpoint")
    assert repr(store) == "FSDPCheckpoint('sharded', cpu_offload=True)"
    assert "every rank writes its shards with torch.distributed.checkpoint" in plan.summary()


def test_fsdp_is_opt_in_and_the_default_ddp_gives_way() -> None:
    registry = isolated_registry([accelkw_ddp.plugin, accelkw_fsdp.plugin])
    with Accelerator(cpu=True, registry=registry) as plain:
        assert list(plain.state.handlers) == ["ddp"]
    with Accelerator(cpu=True, registry=registry, fsdp_plugin=F()) as sharded:
        assert list(sharded.state.handlers) == ["fsdp"]
        assert sharded.settings.disabled["ddp"].startswith("left out: the requested handler")


def test_ddp_and_fsdp_requested_together_is_a_composition_error() -> None:
    registry = isolated_registry([accelkw_ddp.plugin, accelkw_fsdp.plugin])
    with pytest.raises(
        ComposeError,
        match=r"handlers 'fsdp' and 'ddp' cannot be composed together "
        r"\(FullyShardedDataParallelPlugin declares conflicts=\['ddp'\]\)",
    ):
        Accelerator(
            cpu=True,
            registry=registry,
            kwargs_handlers=[DistributedDataParallelKwargs()],
            fsdp_plugin=F(),
        )


class TestFSDPContract(HandlerContract):
    handler_class = F
    plugin_module = "accelkw_fsdp.plugin"
    examples: ClassVar = (
        {"fsdp_version": 2, "reshard_after_forward": False},
        {"auto_wrap_policy": "transformer_based_wrap", "transformer_cls_names_to_wrap": ["Block"]},
        {"mixed_precision_policy": {"param_dtype": "bf16", "reduce_dtype": "fp32"}},
        {"state_dict_type": "SHARDED_STATE_DICT", "activation_checkpointing": True},
    )

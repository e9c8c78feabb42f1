"""Accelerate's FSDP fields, FSDP1 values included, resolved into what FSDP2 takes (no torch).

FSDP1-only values are either mapped to their FSDP2 equivalent, with a note that says so, or
refused with a :class:`~accelkw_core.plugin.ConfigError` that says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accelkw_core.plugin import ConfigError

__all__ = ["DTYPES", "Resolved", "resolve"]

NAME = "fsdp"
# Names a mixed-precision dtype may be given by -> torch's dtype attribute.
DTYPES = {
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "no": "float32",
}
MP_KEYS = ("param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs")
WRAP_POLICIES = ("transformer_based_wrap", "size_based_wrap", "no_wrap")
STATE_DICT_TYPES = {
    "full_state_dict": "full",
    "full": "full",
    "sharded_state_dict": "sharded",
    "sharded": "sharded",
}


@dataclass
class Resolved:
    """What the FSDP2 wrapper does, decided from the fields; ``notes`` say what was mapped."""

    reshard_after_forward: bool = True
    #: dtype attribute names (``"bfloat16"``) or torch dtypes, plus ``cast_forward_inputs``.
    mixed_precision: dict[str, Any] | None = None
    #: A torch ``MixedPrecisionPolicy`` given as it is.
    mixed_precision_object: Any = None
    #: ``"transformer_based_wrap"``, ``"size_based_wrap"``, ``"no_wrap"`` or ``"callable"``.
    wrap: str = "no_wrap"
    cpu_offload: bool = False
    state_dict: str = "full"
    state_dict_cpu_offload: bool = True
    broadcast_from_rank0: bool = False
    notes: list[str] = field(default_factory=list)


def _name(value: Any) -> str:
    """A string, or a torch enum member's name, lower-cased (``ShardingStrategy.FULL_SHARD``)."""
    text = value if isinstance(value, str) else getattr(value, "name", str(value))
    return str(text).lower()


def _reshard(sharding_strategy: Any, reshard_after_forward: Any, notes: list[str]) -> bool:
    from_strategy: bool | None = None
    if sharding_strategy is not None:
        strategy = _name(sharding_strategy)
        if strategy in ("full_shard", "1"):
            from_strategy = True
        elif strategy in ("shard_grad_op", "2"):
            from_strategy = False
        else:
            why = (
                "FSDP2 always shards; for replicated parameters use accelkw-ddp"
                if strategy in ("no_shard", "3")
                else "hybrid sharding needs a 2-D device mesh, which accelkw-fsdp does not build"
            )
            raise ConfigError(
                NAME, "sharding_strategy", sharding_strategy, f"FULL_SHARD or SHARD_GRAD_OP: {why}"
            )
        notes.append(
            f"sharding_strategy {strategy.upper()} mapped to reshard_after_forward="
            f"{from_strategy} (FSDP2 has no sharding strategies; Accelerate deprecates the field)"
        )
    value = reshard_after_forward
    if isinstance(value, str):
        text = value.lower()
        if text in ("full_shard", "shard_grad_op"):
            value = text == "full_shard"
            notes.append(f"reshard_after_forward {text.upper()} (an FSDP1 value) read as {value}")
        elif text in ("true", "1", "yes", "false", "0", "no"):
            value = text in ("true", "1", "yes")
        else:
            raise ConfigError(
                NAME, "reshard_after_forward", reshard_after_forward, "True or False (FSDP2)"
            )
    elif value is not None and not isinstance(value, bool):
        raise ConfigError(NAME, "reshard_after_forward", value, "True or False (FSDP2)")
    if value is None:
        return True if from_strategy is None else from_strategy
    if from_strategy is not None and from_strategy != value:
        raise ConfigError(
            NAME,
            "reshard_after_forward",
            value,
            f"{from_strategy}, as sharding_strategy says, or leave sharding_strategy unset",
        )
    return bool(value)


def _dtype(value: Any, key: str) -> Any:
    if value is None or type(value).__name__ == "dtype":
        return value
    if isinstance(value, str) and value.lower().removeprefix("torch.") in DTYPES:
        return DTYPES[value.lower().removeprefix("torch.")]
    raise ConfigError(
        NAME,
        f"mixed_precision_policy[{key!r}]",
        value,
        "a torch dtype or one of " + ", ".join(DTYPES),
    )


def _mixed_precision(policy: Any, out: Resolved) -> None:
    if policy is None:
        return
    if isinstance(policy, str):
        dtype = _dtype(policy, "param_dtype")
        out.mixed_precision = {"param_dtype": dtype, "reduce_dtype": dtype}
        return
    if isinstance(policy, dict):
        unknown = sorted(set(policy) - set(MP_KEYS))
        if unknown:
            why = (
                "FSDP2 keeps buffers in their own dtype (buffer_dtype is FSDP1's)"
                if unknown == ["buffer_dtype"]
                else "unknown keys " + ", ".join(unknown)
            )
            raise ConfigError(
                NAME, "mixed_precision_policy", policy, f"keys among {', '.join(MP_KEYS)}: {why}"
            )
        mp = {k: _dtype(v, k) for k, v in policy.items() if k != "cast_forward_inputs"}
        if "cast_forward_inputs" in policy:
            mp["cast_forward_inputs"] = bool(policy["cast_forward_inputs"])
        out.mixed_precision = mp
        return
    if type(policy).__name__ == "MixedPrecisionPolicy":
        out.mixed_precision_object = policy
        return
    if type(policy).__name__ == "MixedPrecision":  # FSDP1's class
        if getattr(policy, "buffer_dtype", None) is not None:
            raise ConfigError(
                NAME,
                "mixed_precision_policy",
                policy,
                "no buffer_dtype: FSDP2 keeps buffers in their own dtype",
            )
        out.mixed_precision = {
            "param_dtype": getattr(policy, "param_dtype", None),
            "reduce_dtype": getattr(policy, "reduce_dtype", None),
        }
        out.notes.append("FSDP1 MixedPrecision mapped to FSDP2's MixedPrecisionPolicy")
        return
    raise ConfigError(
        NAME,
        "mixed_precision_policy",
        policy,
        "'fp16'/'bf16'/'no', a dict of param_dtype/reduce_dtype/output_dtype, or a "
        "torch.distributed.fsdp.MixedPrecisionPolicy",
    )


def _wrap(policy: Any, names: list[str] | None, min_num_params: int | None) -> str:
    if policy is None:
        if names:
            return "transformer_based_wrap"
        return "size_based_wrap" if min_num_params is not None else "no_wrap"
    if callable(policy):
        return "callable"
    if isinstance(policy, str) and policy.lower() in WRAP_POLICIES:
        return policy.lower()
    raise ConfigError(
        NAME,
        "auto_wrap_policy",
        policy,
        "a callable (module) -> bool or one of " + ", ".join(WRAP_POLICIES),
    )


def _state_dict(handler: Any, out: Resolved) -> None:
    if handler.state_dict_type is not None:
        kind = STATE_DICT_TYPES.get(_name(handler.state_dict_type))
        if kind is None:
            raise ConfigError(
                NAME,
                "state_dict_type",
                handler.state_dict_type,
                "FULL_STATE_DICT or SHARDED_STATE_DICT (LOCAL_STATE_DICT is FSDP1's flat "
                "parameters, which FSDP2 does not have)",
            )
        out.state_dict = kind
    config = handler.state_dict_config
    if config is not None:
        if hasattr(config, "offload_to_cpu"):
            out.state_dict_cpu_offload = bool(config.offload_to_cpu)
        if getattr(config, "rank0_only", True) is False and out.state_dict == "full":
            raise ConfigError(
                NAME,
                "state_dict_config",
                config,
                "rank0_only=True: a full state dict is gathered on rank 0 only",
            )
        out.notes.append(
            f"state_dict_config {type(config).__name__} mapped to StateDictOptions("
            f"cpu_offload={out.state_dict_cpu_offload})"
        )


def resolve(handler: Any) -> Resolved:
    """The FSDP2 settings ``handler``'s fields stand for; raises ``ConfigError`` for FSDP1-only."""
    if handler.fsdp_version not in (None, 2):
        raise ConfigError(
            NAME,
            "fsdp_version",
            handler.fsdp_version,
            "2 (or None): accelkw-fsdp runs FSDP2, torch.distributed.fsdp.fully_shard; FSDP1 "
            "(FullyShardedDataParallel) is deprecated by torch and not supported",
        )
    out = Resolved()
    out.reshard_after_forward = _reshard(
        handler.sharding_strategy, handler.reshard_after_forward, out.notes
    )
    if handler.backward_prefetch is not None and _name(handler.backward_prefetch) not in (
        "no_prefetch",
        "none",
    ):
        out.notes.append(
            f"backward_prefetch {_name(handler.backward_prefetch).upper()} not used: FSDP2 "
            "prefetches the next all-gather in backward by itself (as in Accelerate)"
        )
    _mixed_precision(handler.mixed_precision_policy, out)
    out.wrap = _wrap(
        handler.auto_wrap_policy, handler.transformer_cls_names_to_wrap, handler.min_num_params
    )
    offload = handler.cpu_offload
    if offload is not None and not isinstance(offload, bool):
        if type(offload).__name__ == "CPUOffload":  # FSDP1's class
            out.notes.append("FSDP1 CPUOffload mapped to FSDP2's CPUOffloadPolicy")
            offload = bool(getattr(offload, "offload_params", False))
        elif type(offload).__name__ == "CPUOffloadPolicy":
            offload = True
        else:
            raise ConfigError(NAME, "cpu_offload", offload, "a bool or a CPUOffloadPolicy")
    out.cpu_offload = bool(offload)
    _state_dict(handler, out)
    if handler.use_orig_params is not None:
        out.notes.append(
            f"use_orig_params={handler.use_orig_params} not used: FSDP2 always trains the "
            "original parameters (as DTensors)"
        )
    if handler.forward_prefetch:
        raise ConfigError(
            NAME,
            "forward_prefetch",
            True,
            "None or False: FSDP2 has no forward-prefetch switch (Accelerate refuses it too)",
        )
    if not handler.limit_all_gathers:
        out.notes.append(
            "limit_all_gathers=False not used: FSDP2 has no all-gather rate limiter (it frees "
            "memory through its own stream synchronisation)"
        )
    if handler.activation_checkpointing_offload and not handler.activation_checkpointing:
        raise ConfigError(
            NAME,
            "activation_checkpointing_offload",
            True,
            "False unless activation_checkpointing=True",
        )
    out.broadcast_from_rank0 = bool(handler.cpu_ram_efficient_loading or handler.sync_module_states)
    return out

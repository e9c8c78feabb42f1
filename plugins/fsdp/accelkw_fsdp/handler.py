"""``FullyShardedDataParallelPlugin``: models sharded across processes with FSDP2 (``fully_shard``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from accelkw_core.plugin import (
    FORWARD_CONTEXT,
    MODEL_CHECKPOINT,
    MODEL_STATE,
    MODEL_WRAPPER,
    NO_SYNC,
    OPTIMIZER_WRAPPER,
    AccelerateEnv,
    KwargsHandler,
    Plan,
    accelerate_flag,
    handler_field,
)
from accelkw_fsdp._checkpoint import FSDPCheckpoint
from accelkw_fsdp._resolve import Resolved, resolve
from accelkw_fsdp._shard import FSDPModelState, ParamSwap, activation_offload, suspend_sync

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["FullyShardedDataParallelPlugin"]

NAME = "fsdp"


@dataclass
class FullyShardedDataParallelPlugin(KwargsHandler):
    """Shard a prepared model's parameters, gradients and optimizer state across processes.

    Accelerate's class, field for field, on FSDP2 only (``torch.distributed.fsdp.fully_shard``):
    on a run with more than one process, ``prepare(model)`` applies ``fully_shard`` to the layers
    the wrap policy picks, then to the whole model, so each parameter becomes a ``DTensor``
    holding this process's shard; an optimizer prepared with it is switched to those parameters.
    FSDP1-only values are mapped to their FSDP2 meaning, with a note in the plan, or refused with
    a ``ConfigError`` that says why. Opt-in: applied only when requested
    (``Accelerator(fsdp_plugin=...)``, ``[handlers.fsdp]``, ``ACCELKW_FSDP__*``); it conflicts
    with ``ddp``, whose default instance then stays out of the run.

    Example::

        from accelkw_fsdp import FullyShardedDataParallelPlugin

        plugin = FullyShardedDataParallelPlugin(
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["Block"],
            mixed_precision_policy={"param_dtype": "bf16", "reduce_dtype": "fp32"},
        )
        accelerator = Accelerator(fsdp_plugin=plugin)
    """

    name: ClassVar[str] = NAME
    after: ClassVar[tuple[str, ...]] = ("process_group",)
    conflicts: ClassVar[tuple[str, ...]] = ("ddp",)
    opt_in: ClassVar[bool] = True
    accelerator_keywords: ClassVar[dict[str, str]] = {"fsdp_plugin": "*"}
    accelerate_env: ClassVar[dict[str, str]] = {
        "ACCELERATE_USE_FSDP": "*",
        "FSDP_VERSION": "fsdp_version",
        "FSDP_SHARDING_STRATEGY": "sharding_strategy",
        "FSDP_RESHARD_AFTER_FORWARD": "reshard_after_forward",
        "FSDP_OFFLOAD_PARAMS": "cpu_offload",
        "FSDP_BACKWARD_PREFETCH": "backward_prefetch",
        "FSDP_STATE_DICT_TYPE": "state_dict_type",
        "FSDP_AUTO_WRAP_POLICY": "auto_wrap_policy",
        "FSDP_TRANSFORMER_CLS_TO_WRAP": "transformer_cls_names_to_wrap",
        "FSDP_MIN_NUM_PARAMS": "min_num_params",
        "FSDP_USE_ORIG_PARAMS": "use_orig_params",
        "FSDP_SYNC_MODULE_STATES": "sync_module_states",
        "FSDP_FORWARD_PREFETCH": "forward_prefetch",
        "FSDP_ACTIVATION_CHECKPOINTING": "activation_checkpointing",
        "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD": "activation_checkpointing_offload",
        "FSDP_IGNORED_MODULES": "ignored_modules",
        "FSDP_CPU_RAM_EFFICIENT_LOADING": "cpu_ram_efficient_loading",
    }

    fsdp_version: int | None = handler_field(
        None, doc="2, or None for 2: accelkw-fsdp runs FSDP2 only (FSDP1 is refused)."
    )
    sharding_strategy: Any = handler_field(
        None,
        doc="FSDP1's strategy, mapped: FULL_SHARD -> reshard_after_forward=True, SHARD_GRAD_OP "
        "-> False; NO_SHARD and the hybrid ones are refused.",
    )
    reshard_after_forward: bool | str | None = handler_field(
        None, doc="Free the gathered parameters after forward (True, the default) or keep them."
    )
    backward_prefetch: Any = handler_field(
        None, doc="FSDP1 only: FSDP2 prefetches in backward by itself; a value is noted, unused."
    )
    mixed_precision_policy: Any = handler_field(
        None,
        doc="'fp16'/'bf16'/'no', a dict of param_dtype/reduce_dtype/output_dtype/"
        "cast_forward_inputs, or a torch MixedPrecisionPolicy.",
    )
    auto_wrap_policy: Any = handler_field(
        None,
        doc="Which layers get their own shard group: 'transformer_based_wrap', "
        "'size_based_wrap', 'no_wrap' or a callable (module) -> bool.",
    )
    cpu_offload: Any = handler_field(
        None,
        doc="Keep sharded parameters in CPU memory between uses (a bool or a CPUOffloadPolicy); "
        "nothing to do on a CPU run.",
    )
    ignored_modules: Any = handler_field(
        None,
        doc="Modules (or a regular expression over module names) whose parameters stay unsharded.",
    )
    state_dict_type: Any = handler_field(
        None,
        doc="FULL_STATE_DICT (default: gathered on rank 0) or SHARDED_STATE_DICT (DTensor shards).",
    )
    state_dict_config: Any = handler_field(
        None, doc="FSDP1's FullStateDictConfig: offload_to_cpu is kept; rank0_only must be True."
    )
    optim_state_dict_config: Any = handler_field(
        None, doc="Accepted for compatibility; optimizer state follows state_dict_type."
    )
    limit_all_gathers: bool = handler_field(
        True, doc="FSDP1 only: FSDP2 has no all-gather rate limiter; an explicit value is noted."
    )
    use_orig_params: bool | None = handler_field(
        None, doc="FSDP1 only: FSDP2 always trains the original parameters; a value is noted."
    )
    param_init_fn: Callable[..., Any] | None = handler_field(
        None,
        doc="Called on each module whose parameters are on the meta device, after sharding "
        "(default: reset_parameters()).",
    )
    sync_module_states: bool | None = handler_field(
        None, doc="Broadcast rank 0's weights into every shard after sharding."
    )
    forward_prefetch: bool | None = handler_field(
        None, doc="FSDP1 only: True is refused (FSDP2 has no such switch)."
    )
    activation_checkpointing: bool | None = handler_field(
        None,
        doc="Recompute the wrapped layers' activations in backward instead of keeping them.",
    )
    activation_checkpointing_offload: bool | None = handler_field(
        None,
        doc="Keep saved activations in CPU memory (needs activation_checkpointing; nothing to do "
        "on a CPU run).",
    )
    cpu_ram_efficient_loading: bool | None = handler_field(
        None,
        doc="Only rank 0 needs real weights (others may build the model on the meta device): "
        "they are broadcast into the shards after sharding.",
    )
    transformer_cls_names_to_wrap: list[str] | None = handler_field(
        None,
        doc="Layer class names sharded on their own under 'transformer_based_wrap' (default: "
        "the model's _no_split_modules).",
    )
    min_num_params: int | None = handler_field(
        None, ge=0, doc="Under 'size_based_wrap', layers with more parameters get their own group."
    )

    @classmethod
    def from_accelerate_env(cls, env: Mapping[str, str]) -> AccelerateEnv:
        """``ACCELERATE_USE_FSDP`` and ``FSDP_*``, read in the cases Accelerate reads them.

        Accelerate reads the sharding strategy, ``use_orig_params``, ``sync_module_states`` and
        ``forward_prefetch`` for FSDP1 only (``FSDP_VERSION=1``, which this plugin then refuses),
        the minimum size under ``SIZE_BASED_WRAP`` only and the layer names under
        ``TRANSFORMER_BASED_WRAP`` only; ``accelerate launch`` sets several of them whatever the
        run, so the others are left unused here too. ``FSDP_OFFLOAD_PARAMS`` is a switch.
        """
        reading = super().from_accelerate_env(env)
        fields = dict(reading.fields)
        unused: dict[str, str] = {}
        version = str(fields.get("fsdp_version", ("", "2"))[1]).strip()
        policy = str(fields.get("auto_wrap_policy", ("", ""))[1]).strip().upper()
        only: dict[str, tuple[bool, str]] = {
            "sharding_strategy": (version == "1", "read for FSDP1 only"),
            "use_orig_params": (version == "1", "read for FSDP1 only"),
            "sync_module_states": (version == "1", "read for FSDP1 only"),
            "forward_prefetch": (version == "1", "read for FSDP1 only"),
            "min_num_params": (policy == "SIZE_BASED_WRAP", "read with SIZE_BASED_WRAP only"),
            "transformer_cls_names_to_wrap": (
                policy == "TRANSFORMER_BASED_WRAP",
                "read with TRANSFORMER_BASED_WRAP only",
            ),
        }
        for field, (read, why) in only.items():
            if field in fields and not read:
                unused[fields.pop(field)[0]] = why
        if "cpu_offload" in fields:
            var, text = fields["cpu_offload"]
            flag = accelerate_flag(str(text))
            fields["cpu_offload"] = (var, text if flag is None else flag)
        return AccelerateEnv(reading.requested, fields, unused)

    def check_values(self) -> None:
        """Refuse FSDP1-only values FSDP2 cannot honour (see :func:`resolved`)."""
        self.resolved()

    def resolved(self) -> Resolved:
        """What FSDP2 does with these fields, with notes on what was mapped."""
        return resolve(self)

    def set_state_dict_type(self, state_dict_type: Any = None) -> None:
        """Accelerate's setter: ``"FULL_STATE_DICT"`` (the default) or ``"SHARDED_STATE_DICT"``."""
        self.state_dict_type = state_dict_type or "FULL_STATE_DICT"
        self.resolved()

    def plan(self, state: AcceleratorState) -> Plan:
        """Shard models on a multi-process ``state``, or say why they are not sharded."""
        plan = Plan(NAME)
        resolved = self.resolved()
        if state.world_size <= 1:
            return plan.note("world size 1: model not sharded (FSDP2 shards across processes)")
        from accelkw_fsdp._shard import describe, shard_model

        swap = ParamSwap()

        def wrap(model: Any) -> Any:
            return shard_model(model, state, self, resolved, swap)

        plan.contribute(
            MODEL_WRAPPER,
            wrap,
            "models will be sharded with fully_shard(" + describe(self, resolved, state) + ")",
            provides=("gradient_sync",),
        )
        plan.contribute(
            OPTIMIZER_WRAPPER,
            swap.switch,
            "optimizers will be switched to the sharded parameters",
        )
        plan.contribute(
            NO_SYNC,
            suspend_sync,
            "no_sync: set_requires_gradient_sync(False) holds back the reduce-scatter",
        )
        plan.contribute(
            MODEL_STATE,
            FSDPModelState(resolved.state_dict, resolved.state_dict_cpu_offload),
            "state dicts: "
            + (
                "full, gathered on rank 0"
                if resolved.state_dict == "full"
                else "sharded (DTensor shards per rank)"
            ),
        )
        plan.contribute(
            MODEL_CHECKPOINT,
            FSDPCheckpoint(resolved.state_dict, resolved.state_dict_cpu_offload),
            "save_state: "
            + (
                "full weights and optimizer state gathered to rank 0 (pytorch_model_fsdp.bin, "
                "optimizer.bin)"
                if resolved.state_dict == "full"
                else "every rank writes its shards with torch.distributed.checkpoint "
                "(pytorch_model_fsdp_<i>/, optimizer_<i>/; async_save when saves are written "
                "in the background)"
            ),
        )
        if self.activation_checkpointing_offload:
            if state.device_type == "cpu":
                plan.note("activation_checkpointing_offload: activations already live on the CPU")
            else:
                plan.contribute(
                    FORWARD_CONTEXT,
                    activation_offload,
                    "saved activations offloaded to pinned CPU memory",
                )
        for note in resolved.notes:
            plan.note(note)
        return plan

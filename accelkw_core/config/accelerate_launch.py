"""``accelerate launch``'s flags: each honoured as Accelerate means it, or refused.

Accelerate's launcher turns its flags (and the YAML ``accelerate config`` writes, read with
``--config_file``) into torchrun's options and into ``ACCELERATE_*``/``FSDP_*`` variables that
the workers' ``Accelerator`` reads. ``accelkw launch`` does the same: :data:`FLAGS` says what
becomes of each flag (:mod:`accelkw_core.cli.accelerate_options` registers them), and
:func:`translate` turns the values given into the variables and torchrun options of the run. Only what the user
gave is set (``accelerate launch`` also writes its own defaults, such as ``FSDP_VERSION=1``,
which accelkw's FSDP2-only plugin would refuse).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from accelkw_core.errors import ConfigError
from accelkw_core.facts.precision import MIXED_PRECISION_MODES

__all__ = [
    "FLAGS",
    "HONOURED",
    "REFUSED",
    "UNUSED",
    "Flag",
    "Translation",
    "translate",
]

HONOURED, REFUSED, UNUSED = "honoured", "refused", "unused"
SWITCH, VALUE, APPEND = "switch", "value", "append"


class Flag(NamedTuple):
    """One ``accelerate launch`` flag: how it is given, what accelkw does with it."""

    takes: str  # SWITCH, VALUE or APPEND
    action: str  # HONOURED, REFUSED or UNUSED
    what: str  # what it becomes, or why it is refused


def _group(names: str, takes: str, action: str, what: str) -> dict[str, Flag]:
    return {name: Flag(takes, action, what) for name in names.split()}


_FSDP_VALUES = (
    "fsdp_version fsdp_offload_params fsdp_min_num_params fsdp_sharding_strategy "
    "fsdp_reshard_after_forward fsdp_auto_wrap_policy fsdp_transformer_layer_cls_to_wrap "
    "fsdp_backward_prefetch fsdp_state_dict_type fsdp_forward_prefetch fsdp_use_orig_params "
    "fsdp_cpu_ram_efficient_loading fsdp_sync_module_states fsdp_activation_checkpointing "
    "fsdp_activation_checkpointing_offload"
)
_DEEPSPEED = (
    "deepspeed_config_file zero_stage offload_optimizer_device offload_param_device "
    "offload_optimizer_nvme_path offload_param_nvme_path gradient_clipping zero3_init_flag "
    "zero3_save_16bit_model deepspeed_hostfile deepspeed_exclusion_filter "
    "deepspeed_inclusion_filter deepspeed_multinode_launcher deepspeed_moe_layer_cls_names"
)
_MEGATRON = (
    "megatron_lm_tp_degree megatron_lm_use_custom_fsdp megatron_lm_no_load_optim "
    "megatron_lm_eod_mask_loss megatron_lm_overlap_cpu_optimizer_d2h_h2d "
    "megatron_lm_no_save_optim megatron_lm_optimizer_cpu_offload "
    "megatron_lm_use_precision_aware_optimizer megatron_lm_decoder_last_pipeline_num_layers "
    "megatron_lm_pp_degree megatron_lm_num_micro_batches megatron_lm_sequence_parallelism "
    "megatron_lm_recompute_activations megatron_lm_use_distributed_optimizer "
    "megatron_lm_gradient_clipping megatron_lm_recompute_granularity "
    "megatron_lm_recompute_method megatron_lm_recompute_num_layers "
    "megatron_lm_attention_backend megatron_lm_expert_model_parallel_size "
    "megatron_lm_context_parallel_size megatron_lm_attention_dropout "
    "megatron_lm_hidden_dropout megatron_lm_attention_softmax_in_fp32 "
    "megatron_lm_expert_tensor_parallel_size megatron_lm_calculate_per_token_loss "
    "megatron_lm_use_rotary_position_embeddings"
)
_PARALLELISM = (
    "parallelism_config_dp_replicate_size parallelism_config_dp_shard_size "
    "parallelism_config_tp_size parallelism_config_cp_size parallelism_config_cp_backend "
    "parallelism_config_cp_comm_strategy parallelism_config_sp_size "
    "parallelism_config_sp_backend parallelism_config_sp_seq_length "
    "parallelism_config_sp_seq_length_is_variable parallelism_config_sp_attn_implementation"
)
_FP8 = (
    "fp8_backend fp8_margin fp8_interval fp8_format fp8_amax_history_len "
    "fp8_amax_compute_algo fp8_override_linear_precision fp8_opt_level "
    "fp8_enable_fsdp_float8_all_gather fp8_pad_inner_dim"
)
_SCOPE = "out of scope for accelkw (docs/migrating.md, Out of scope)"
_FP8_WHAT = (
    "with `--mixed_precision fp8`: the `ACCELERATE_FP8_*` variable of the same name "
    "(`--fp8_override_linear_precision`: `ACCELERATE_FP8_OVERRIDE_FPROP`/`_DGRAD`/`_WGRAD`), "
    "read by the installed fp8 recipe handlers as Accelerate reads it"
)

#: Every flag of ``accelerate launch`` 1.15 (by its name without dashes) and what becomes of it.
#: ``--max_restarts``, ``--rdzv_backend`` and ``-m``/``--module`` are ``accelkw launch``'s own
#: options too, with the same meaning (torchrun's).
FLAGS: dict[str, Flag] = {
    "config_file": Flag(
        VALUE,
        HONOURED,
        "reads the YAML `accelerate config` wrote: its keys fill the flags not given",
    ),
    "num_processes": Flag(
        VALUE,
        HONOURED,
        "processes in all: torchrun `--nproc-per-node` = num_processes / num_machines",
    ),
    "num_machines": Flag(VALUE, HONOURED, "torchrun `--nnodes`"),
    "machine_rank": Flag(VALUE, HONOURED, "torchrun `--node-rank`"),
    "main_process_ip": Flag(
        VALUE,
        HONOURED,
        "torchrun `--master-addr` (one machine, or `--same_network`), else `--rdzv-endpoint IP:PORT`",
    ),
    "main_process_port": Flag(
        VALUE,
        HONOURED,
        "torchrun `--master-port` (or the port of `--rdzv-endpoint`); 0 or none on one machine: "
        "torchrun picks a free port",
    ),
    "same_network": Flag(SWITCH, HONOURED, "machines meet at `--master-addr`/`--master-port`"),
    "rdzv_conf": Flag(VALUE, HONOURED, "torchrun `--rdzv-conf`"),
    "monitor_interval": Flag(VALUE, HONOURED, "torchrun `--monitor-interval`"),
    "tee": Flag(VALUE, HONOURED, "torchrun `--tee`"),
    "log_dir": Flag(VALUE, HONOURED, "torchrun `--log-dir`"),
    "role": Flag(VALUE, HONOURED, "torchrun `--role`"),
    "multi_gpu": Flag(
        SWITCH,
        HONOURED,
        "several processes through torchrun; each on `cuda:LOCAL_RANK` when CUDA is available, "
        "else on the CPU",
    ),
    "cpu": Flag(SWITCH, HONOURED, "`ACCELERATE_USE_CPU=true`: every process on the CPU"),
    "mixed_precision": Flag(
        VALUE,
        HONOURED,
        "`ACCELERATE_MIXED_PRECISION`: `no`, `fp16`, `bf16` or `fp8` (with an installed handler "
        "that trains in fp8)",
    ),
    "gradient_accumulation_steps": Flag(
        VALUE,
        HONOURED,
        "`ACCELERATE_GRADIENT_ACCUMULATION_STEPS`, which the workers' `Accelerator` reads (Accelerate's "
        "launcher sets it for DeepSpeed runs only)",
    ),
    "num_cpu_threads_per_process": Flag(VALUE, HONOURED, "`OMP_NUM_THREADS`"),
    "gpu_ids": Flag(VALUE, HONOURED, "`CUDA_VISIBLE_DEVICES` (`all`: left as it is)"),
    "quiet": Flag(SWITCH, HONOURED, "nothing to silence: a failed worker's error is printed once"),
    "dynamo_backend": Flag(
        VALUE, HONOURED, "`ACCELERATE_DYNAMO_BACKEND` (needs `accelkw-compile`)"
    ),
    "dynamo_mode": Flag(VALUE, HONOURED, "`ACCELERATE_DYNAMO_MODE`"),
    "dynamo_use_fullgraph": Flag(SWITCH, HONOURED, "`ACCELERATE_DYNAMO_USE_FULLGRAPH=True`"),
    "dynamo_use_dynamic": Flag(SWITCH, HONOURED, "`ACCELERATE_DYNAMO_USE_DYNAMIC=True`"),
    "dynamo_use_regional_compilation": Flag(
        SWITCH, HONOURED, "`ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=True`"
    ),
    "use_fsdp": Flag(SWITCH, HONOURED, "`ACCELERATE_USE_FSDP=true` (needs `accelkw-fsdp`)"),
    **_group(
        _FSDP_VALUES,
        VALUE,
        HONOURED,
        "with `--use_fsdp`: the `FSDP_*` variable of the same name (`--fsdp_transformer_layer_"
        "cls_to_wrap`: `FSDP_TRANSFORMER_CLS_TO_WRAP`), read by `accelkw-fsdp` as Accelerate reads it",
    ),
    "main_training_function": Flag(
        VALUE, UNUSED, "read by Accelerate's TPU launcher only; the script runs as a script"
    ),
    "debug": Flag(SWITCH, REFUSED, "accelkw has no debug mode for collectives"),
    "enable_cpu_affinity": Flag(SWITCH, REFUSED, "accelkw does not pin processes to CPUs"),
    "no_python": Flag(SWITCH, REFUSED, "accelkw launch runs Python scripts and modules only"),
    "mpirun_hostfile": Flag(VALUE, REFUSED, "accelkw launches through torchrun, not mpirun"),
    **_group(
        "tpu tpu_cluster no_tpu_cluster tpu_use_sudo downcast_bf16",
        SWITCH,
        REFUSED,
        f"TPU is {_SCOPE}",
    ),
    **_group("vm env", APPEND, REFUSED, f"TPU is {_SCOPE}"),
    "use_deepspeed": Flag(SWITCH, REFUSED, f"DeepSpeed is {_SCOPE}"),
    **_group(_DEEPSPEED, VALUE, REFUSED, f"DeepSpeed is {_SCOPE}"),
    "use_megatron_lm": Flag(SWITCH, REFUSED, f"Megatron-LM is {_SCOPE}"),
    **_group(_MEGATRON, VALUE, REFUSED, f"Megatron-LM is {_SCOPE}"),
    "use_parallelism_config": Flag(SWITCH, REFUSED, f"`parallelism_config` is {_SCOPE}"),
    **_group(_PARALLELISM, VALUE, REFUSED, f"`parallelism_config` is {_SCOPE}"),
    "fp8_use_autocast_during_eval": Flag(SWITCH, HONOURED, _FP8_WHAT),
    **_group(_FP8, VALUE, HONOURED, _FP8_WHAT),
    **_group("aws_access_key_id aws_secret_access_key", VALUE, REFUSED, f"SageMaker is {_SCOPE}"),
}


@dataclass
class Translation:
    """What the Accelerate flags ask of the run: variables and torchrun options."""

    env: dict[str, str] = field(default_factory=dict)
    torchrun: dict[str, str] = field(default_factory=dict)  # accelkw launch option -> value


def _bad(name: str, value: object, expected: str, source: str | None) -> ConfigError:
    return ConfigError("launch", name, value, expected, source=source or f"option --{name}")


def _read_only_with(
    option: str, given: Mapping[str, Any], sources: Mapping[str, str]
) -> ConfigError:
    """The first of ``given``'s flags, refused: Accelerate reads them only with ``option``."""
    name = next(iter(given))
    return _bad(
        name,
        given[name],
        f"it together with {option} (Accelerate reads it only then)",
        sources.get(name),
    )


def _int(values: Mapping[str, Any], name: str, low: int, sources: Mapping[str, str]) -> int | None:
    if name not in values:
        return None
    raw = values[name]
    try:
        number = int(str(raw).strip())
    except ValueError:
        number = low - 1
    if isinstance(raw, bool) or number < low:
        raise _bad(name, raw, f"an integer >= {low}", sources.get(name))
    return number


def _flag_text(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def translate(values: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> Translation:
    """The variables and torchrun options that ``values`` (flag name -> value) ask for.

    ``sources`` names where each value came from (a YAML key), for errors; a flag's default is
    the command line. Raises a :class:`ConfigError` for the first refused or bad value.
    """
    sources = sources or {}
    for name, value in values.items():
        flag = FLAGS[name]
        if flag.action == REFUSED and value not in (False, None, [], ""):
            raise _bad(name, value, f"it left out: {flag.what}", sources.get(name))
    out = Translation()
    env = out.env
    mp = values.get("mixed_precision")
    if mp is not None:
        text = str(mp).strip().lower()
        if text not in MIXED_PRECISION_MODES:
            modes = ", ".join(repr(m) for m in MIXED_PRECISION_MODES)
            raise _bad("mixed_precision", mp, f"one of {modes}", sources.get("mixed_precision"))
        env["ACCELERATE_MIXED_PRECISION"] = text
    if values.get("cpu"):
        env["ACCELERATE_USE_CPU"] = "true"
    steps = _int(values, "gradient_accumulation_steps", 1, sources)
    if steps is not None:
        env["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] = str(steps)
    threads = _int(values, "num_cpu_threads_per_process", 1, sources)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    gpu_ids = values.get("gpu_ids")
    if gpu_ids is not None and str(gpu_ids).strip() not in ("", "all"):
        env["CUDA_VISIBLE_DEVICES"] = str(gpu_ids).strip()
    for name in ("dynamo_backend", "dynamo_mode"):
        if values.get(name) is not None:
            env[f"ACCELERATE_{name.upper()}"] = str(values[name])
    for name in ("dynamo_use_fullgraph", "dynamo_use_dynamic", "dynamo_use_regional_compilation"):
        if values.get(name) is not None:
            env[f"ACCELERATE_{name.upper()}"] = "True" if _truthy(values[name]) else "False"
    _fp8(values, sources, env)
    fsdp = {n: v for n, v in values.items() if n.startswith("fsdp_") and v is not None}
    if values.get("use_fsdp"):
        env["ACCELERATE_USE_FSDP"] = "true"
        for name, value in fsdp.items():
            var = "FSDP_" + name[len("fsdp_") :].upper()
            if name == "fsdp_transformer_layer_cls_to_wrap":
                var = "FSDP_TRANSFORMER_CLS_TO_WRAP"
            env[var] = _flag_text(value)
    elif fsdp:
        raise _read_only_with("--use_fsdp", fsdp, sources)
    _processes(values, sources, out.torchrun)
    return out


# The choices and integers of Accelerate's launcher for its --fp8_* flags (its argparse's).
_FP8_CHOICES = {
    "fp8_backend": ("ao", "te", "msamp"),
    "fp8_format": ("HYBRID", "E4M3", "E5M2"),
    "fp8_amax_compute_algo": ("max", "most_recent"),
    "fp8_opt_level": ("O1", "O2"),
    "fp8_enable_fsdp_float8_all_gather": ("true", "false", "1", "0"),
    "fp8_pad_inner_dim": ("true", "false", "1", "0"),
}
_FP8_INTS = ("fp8_margin", "fp8_interval", "fp8_amax_history_len")


def _fp8(values: Mapping[str, Any], sources: Mapping[str, str], env: dict[str, str]) -> None:
    """The ``--fp8_*`` flags as Accelerate's launcher passes them: read only with fp8."""
    # A switch left off asks for nothing; a value flag set to false (YAML) is a value.
    given = {
        n: v
        for n, v in values.items()
        if n.startswith("fp8_") and v is not None and not (FLAGS[n].takes == SWITCH and not v)
    }
    if not given:
        return
    if env.get("ACCELERATE_MIXED_PRECISION") != "fp8":
        raise _read_only_with("--mixed_precision fp8", given, sources)
    for name, value in given.items():
        choices = _FP8_CHOICES.get(name)
        # Any case: Accelerate's YAML writes the backend upper-cased, its launcher lower-cased.
        if choices is not None and str(value).strip().lower() not in {c.lower() for c in choices}:
            raise _bad(name, value, "one of " + ", ".join(choices), sources.get(name))
        if name in _FP8_INTS:
            _int(given, name, 0, sources)
        if name == "fp8_override_linear_precision":
            parts = value if isinstance(value, list | tuple) else str(value).split(",")
            if len(parts) != 3:
                raise _bad(name, value, "three booleans: FPROP,DGRAD,WGRAD", sources.get(name))
            for part, gemm in zip(parts, ("FPROP", "DGRAD", "WGRAD"), strict=True):
                env[f"ACCELERATE_FP8_OVERRIDE_{gemm}"] = str(_truthy(part))
        elif name == "fp8_backend":
            env["ACCELERATE_FP8_BACKEND"] = str(value).strip()
        elif name == "fp8_use_autocast_during_eval":
            env["ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL"] = "True"
        else:
            env["ACCELERATE_" + name.upper()] = _flag_text(value)


def _truthy(value: object) -> bool:
    return value is True or str(value).strip().lower() in ("1", "true", "yes", "y", "t", "on")


def _processes(
    values: Mapping[str, Any], sources: Mapping[str, str], torchrun: dict[str, str]
) -> None:
    machines = _int(values, "num_machines", 1, sources) or 1
    processes = _int(values, "num_processes", 1, sources)
    rank = _int(values, "machine_rank", 0, sources)
    port = _int(values, "main_process_port", 0, sources)
    if port is not None and port > 65535:
        raise _bad(
            "main_process_port", port, "a port from 0 to 65535", sources.get("main_process_port")
        )
    ip = values.get("main_process_ip")
    if processes is not None:
        if processes % machines:
            raise _bad(
                "num_processes",
                processes,
                f"a multiple of num_machines ({machines}): the processes of every machine",
                sources.get("num_processes"),
            )
        torchrun["nproc_per_node"] = str(processes // machines)
    if machines > 1:
        if ip is None or not port:
            missing = "main_process_ip" if ip is None else "main_process_port"
            raise _bad(missing, None, "a value when num_machines > 1", sources.get(missing))
        torchrun["nnodes"] = str(machines)
        torchrun["node_rank"] = str(rank or 0)
        if values.get("same_network"):
            torchrun["master_addr"], torchrun["master_port"] = str(ip), str(port)
        else:
            torchrun["rdzv_endpoint"] = f"{ip}:{port}"
    else:
        if ip is not None:
            torchrun["master_addr"] = str(ip)
        if port:
            torchrun["master_port"] = str(port)
    for name in ("rdzv_conf", "monitor_interval", "tee", "log_dir", "role"):
        if values.get(name) not in (None, ""):
            torchrun[name] = str(values[name])

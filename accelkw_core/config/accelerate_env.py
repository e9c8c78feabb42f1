"""Accelerate's environment variables, read as Accelerate 1.15 reads them.

``accelerate launch`` and ``accelerate config`` hand their settings to the training script as
``ACCELERATE_*`` and ``FSDP_*`` variables, which Accelerate's ``Accelerator``, its state and its
plugins take as defaults. accelkw takes them the same way, and each one is one of:

- **honoured** by the core (:data:`CORE_VARIABLES`: mixed precision, the CPU switch, ...) or by
  the installed handler that declares it (``KwargsHandler.accelerate_env``: the core never
  names which plugin reads which variable);
- **refused** when it asks for something accelkw does not do (DeepSpeed, Megatron-LM,
  SageMaker, TPU, ...): the run stops before it starts, in one line naming the variable and why;
- **unused**, where Accelerate would not read it either (``ACCELERATE_DEEPSPEED_*`` without
  DeepSpeed, ``FSDP_*`` without FSDP), or where what reads it in Accelerate is not part of
  accelkw's run (``ACCELERATE_LOG_LEVEL``, read by ``get_logger``'s loggers, not the run).

Precedence, per setting: a value in code, then ``ACCELKW_*`` variables, then ``ACCELERATE_*``
variables, then the config file, then the default. One exception keeps Accelerate's meaning:
``ACCELERATE_USE_CPU=true`` runs on the CPU even when the code says ``cpu=False`` (that is the
default of Accelerate's signature, so Accelerate cannot tell the two apart, and ``accelerate
launch --cpu`` relies on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from accelkw_core.contract.accelerate_env import AccelerateEnv, accelerate_flag
from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.discovery.catalog import (
    ACCELERATE_ENV_PREFIXES,
    ACCELERATE_ENV_PROVIDERS,
    install_hint,
)
from accelkw_core.errors import ConfigError

__all__ = [
    "CORE_VARIABLES",
    "FAMILIES",
    "HONOURED",
    "REFUSED",
    "UNUSED",
    "CoreVariable",
    "Family",
    "Finding",
    "accelerate_cpu",
    "accelerate_mixed_precision",
    "check_accelerate_env",
    "describe_accelerate_env",
    "handler_readings",
    "is_accelerate_variable",
]

HONOURED, REFUSED, UNUSED = "honoured", "refused", "unused"
MIXED_PRECISION_VAR = "ACCELERATE_MIXED_PRECISION"
USE_CPU_VAR = "ACCELERATE_USE_CPU"
TORCH_DEVICE_VAR = "ACCELERATE_TORCH_DEVICE"


class CoreVariable(NamedTuple):
    """One of Accelerate's variables the core itself judges.

    ``action``: :data:`HONOURED`, :data:`REFUSED` or :data:`UNUSED`. A refused variable is
    refused only when its value asks for something: ``off`` says which values ask for nothing
    (``"flag"``: Accelerate's false words, ``""``: any value asks).
    """

    accelerate: str  # what it means to Accelerate 1.15
    action: str
    accelkw: str  # what accelkw does with it, or why it refuses it
    off: str = ""


OUT_OF_SCOPE = "out of scope for accelkw (docs/migrating.md, Out of scope)"

CORE_VARIABLES: dict[str, CoreVariable] = {
    MIXED_PRECISION_VAR: CoreVariable(
        "the default of `Accelerator(mixed_precision=)`",
        HONOURED,
        "the default of `mixed_precision`; `fp8` needs an installed handler that trains in it, "
        "as in code",
    ),
    USE_CPU_VAR: CoreVariable(
        "true: run on the CPU, whatever `cpu=` says",
        HONOURED,
        "the same: true runs on the CPU even when the code passes `cpu=False`",
    ),
    "ACCELERATE_ENABLE_RICH": CoreVariable(
        "true: `is_rich_available()` when rich is installed",
        HONOURED,
        "the same (`accelkw_core.utils.is_rich_available`)",
    ),
    "ACCELERATE_BYPASS_DEVICE_MAP": CoreVariable(
        "true: `prepare` skips its refusal of models spread over devices by a `device_map`",
        HONOURED,
        "what accelkw always does: it has no device-map check to bypass",
    ),
    "ACCELERATE_DEBUG_MODE": CoreVariable(
        "true: check the shapes of tensors across processes before each collective",
        REFUSED,
        "accelkw has no debug mode for collectives; unset it (or set it to false)",
        off="flag",
    ),
    TORCH_DEVICE_VAR: CoreVariable(
        "the device of every process (`cpu`, `cuda:1`, ...); Ray Train sets it",
        HONOURED,
        "`cpu` runs on the CPU; `cuda` or `cuda:LOCAL_RANK`, where accelkw places the process "
        "anyway, is kept; another device is refused (accelkw places each process on "
        "`cuda:LOCAL_RANK`: choose GPUs with CUDA_VISIBLE_DEVICES)",
    ),
    "ACCELERATE_CPU_AFFINITY": CoreVariable(
        "true: pin each process to the CPUs near its GPU",
        REFUSED,
        "accelkw does not pin processes; use numactl or taskset",
        off="flag",
    ),
    "ACCELERATE_USE_DEEPSPEED": CoreVariable(
        "true: train with DeepSpeed", REFUSED, f"DeepSpeed is {OUT_OF_SCOPE}", off="flag"
    ),
    "ACCELERATE_USE_MEGATRON_LM": CoreVariable(
        "true: train with Megatron-LM", REFUSED, f"Megatron-LM is {OUT_OF_SCOPE}", off="flag"
    ),
    "ACCELERATE_USE_SAGEMAKER": CoreVariable(
        "true: run under SageMaker's data parallelism",
        REFUSED,
        f"SageMaker is {OUT_OF_SCOPE}",
        off="flag",
    ),
    "ACCELERATE_USE_PARALLELISM_CONFIG": CoreVariable(
        "true: build a `ParallelismConfig` (tensor, context, sequence parallelism) from "
        "`PARALLELISM_CONFIG_*`",
        REFUSED,
        f"`parallelism_config` is {OUT_OF_SCOPE}",
        off="flag",
    ),
    "ACCELERATE_DOWNCAST_BF16": CoreVariable(
        "set: on TPU, bf16 for tensors but fp32 for doubles",
        REFUSED,
        f"XLA and TPU are {OUT_OF_SCOPE}",
    ),
    "ACCELERATE_LOG_LEVEL": CoreVariable(
        "the level of `accelerate.logging.get_logger` loggers",
        UNUSED,
        "not a setting of the run: read by `accelkw_core.logging.get_logger` (the port of "
        "`accelerate.logging`); accelkw's own loggers follow ACCELKW_LOG_LEVEL",
    ),
    "ACCELERATE_INIT_INCLUDE_BUFFERS": CoreVariable(
        "the default of `init_empty_weights(include_buffers=)`",
        UNUSED,
        "read by `init_empty_weights`, which accelkw does not provide",
    ),
    "ACCELERATE_DEBUG_RDV_FILE": CoreVariable(
        "the rendezvous file of `accelerate`'s own debug launcher",
        UNUSED,
        "read by Accelerate's debug launcher only",
    ),
    "ACCELERATE_ALLOW_CP_STANDALONE": CoreVariable(
        "true: allow context parallelism without FSDP",
        UNUSED,
        "read only with `parallelism_config` (ACCELERATE_USE_PARALLELISM_CONFIG, refused)",
    ),
    "ACCELERATE_GRADIENT_CLIPPING": CoreVariable(
        "DeepSpeed's `gradient_clipping`",
        UNUSED,
        "read by Accelerate's DeepSpeed plugin only (ACCELERATE_USE_DEEPSPEED, refused); "
        "clip with `accelerator.clip_grad_norm_`",
    ),
    "ACCELERATE_CONFIG_DS_FIELDS": CoreVariable(
        "the DeepSpeed fields `accelerate config` set",
        UNUSED,
        "read by Accelerate's DeepSpeed plugin only (ACCELERATE_USE_DEEPSPEED, refused)",
    ),
}


class Family(NamedTuple):
    """Variables sharing a prefix that accelkw leaves alone, as Accelerate would."""

    prefix: str
    accelerate: str
    accelkw: str


FAMILIES: tuple[Family, ...] = (
    Family(
        "ACCELERATE_DEEPSPEED_",
        "DeepSpeed's settings (ZeRO stage, offload, config file, ...)",
        "read by Accelerate's DeepSpeed plugin only (ACCELERATE_USE_DEEPSPEED, refused)",
    ),
    Family(
        "MEGATRON_LM_",
        "Megatron-LM's settings",
        "read by Accelerate's Megatron-LM plugin only (ACCELERATE_USE_MEGATRON_LM, refused)",
    ),
    Family(
        "PARALLELISM_CONFIG_",
        "the sizes and backends of `ParallelismConfig`",
        "read only with ACCELERATE_USE_PARALLELISM_CONFIG, refused",
    ),
    Family(
        "ACCELERATE_SAGEMAKER_",
        "SageMaker's settings",
        "read only with ACCELERATE_USE_SAGEMAKER, refused",
    ),
)

# The prefixes under which Accelerate's handler-specific variables live (plugins declare them).
_HANDLER_PREFIXES = ("ACCELERATE_", "FSDP_")


def is_accelerate_variable(name: str) -> bool:
    """Whether ``name`` is in the namespaces Accelerate reads (``ACCELERATE_*``, ``FSDP_*``, ...)."""
    return name.startswith((*_HANDLER_PREFIXES, *(f.prefix for f in FAMILIES)))


def _asks(var: str, text: str, off: str) -> bool:
    """Whether ``text`` in ``var`` asks for something (a refused variable set to a true value)."""
    if not text.strip():
        return False
    if off == "flag":
        flag = accelerate_flag(text)
        if flag is None:
            raise ConfigError(
                "accelerator",
                var.lower(),
                text,
                "true or false (Accelerate's words: 1/0, yes/no, y/n, t/f, on/off)",
                source=f"environment variable {var}",
            )
        return flag
    return True


def accelerate_mixed_precision(env: Mapping[str, str]) -> str | None:
    """The mixed precision ``ACCELERATE_MIXED_PRECISION`` gives, lower-cased; ``None`` when unset."""
    text = env.get(MIXED_PRECISION_VAR, "").strip()
    return text.lower() or None


def accelerate_cpu(env: Mapping[str, str]) -> bool:
    """Whether ``ACCELERATE_USE_CPU`` (Accelerate's true words) or ``ACCELERATE_TORCH_DEVICE=cpu``
    asks for the CPU."""
    device = env.get(TORCH_DEVICE_VAR, "").strip().lower()
    return _asks(USE_CPU_VAR, env.get(USE_CPU_VAR, ""), "flag") or device == "cpu"


def _device_refusal(env: Mapping[str, str]) -> str | None:
    """Why ``ACCELERATE_TORCH_DEVICE`` names a device accelkw would not use; ``None`` if fine."""
    device = env.get(TORCH_DEVICE_VAR, "").strip().lower()
    local_rank = env.get("LOCAL_RANK", "0").strip() or "0"
    if device in ("", "cpu", "cuda", f"cuda:{local_rank}"):
        return None
    return (
        f"'cpu', 'cuda' or 'cuda:{local_rank}' (LOCAL_RANK={local_rank}): accelkw places each "
        "process on cpu or cuda:LOCAL_RANK; choose GPUs with CUDA_VISIBLE_DEVICES"
    )


def handler_readings(
    classes: Mapping[str, type[KwargsHandler]], env: Mapping[str, str]
) -> dict[str, AccelerateEnv]:
    """What Accelerate's variables in ``env`` ask of each handler class (by registry name)."""
    out = {}
    for name, cls in classes.items():
        reading = cls.from_accelerate_env(env)
        if reading.requested or reading.fields or reading.unused:
            out[name] = reading
    return out


def _claimed(classes: Mapping[str, type[KwargsHandler]]) -> dict[str, str]:
    return {var: name for name, cls in classes.items() for var in cls.accelerate_env}


def check_accelerate_env(
    env: Mapping[str, str], classes: Mapping[str, type[KwargsHandler]]
) -> None:
    """Raise a :class:`ConfigError` naming the first variable that asks what accelkw won't do.

    That is a refused core variable set to a value that asks for something, or a variable an
    Accelerate plugin reads (``ACCELERATE_USE_FSDP=true``) when no installed handler declares
    it: the error then names the distribution to install.
    """
    for var, spec in CORE_VARIABLES.items():
        text = env.get(var)
        if spec.action == REFUSED and text is not None and _asks(var, text, spec.off):
            raise ConfigError(
                "accelerator",
                var.lower(),
                text,
                f"it unset: {spec.accelkw}",
                source=f"environment variable {var}",
            )
    accelerate_cpu(env)  # a word Accelerate would not read is an error here, not at startup
    refusal = _device_refusal(env)
    if refusal is not None:
        raise ConfigError(
            "accelerator",
            TORCH_DEVICE_VAR.lower(),
            env[TORCH_DEVICE_VAR],
            refusal,
            source=f"environment variable {TORCH_DEVICE_VAR}",
        )
    claimed = _claimed(classes)
    for var, (provider, off) in ACCELERATE_ENV_PROVIDERS.items():
        text = env.get(var)
        if var in claimed or text is None or not text.strip():
            continue
        if off == "flag" and accelerate_flag(text) is not True:
            continue
        if off != "flag" and text.strip().lower() == off:
            continue
        raise ConfigError(
            "accelerator",
            var.lower(),
            text,
            f"an installed handler that reads it: {install_hint(provider)}",
            source=f"environment variable {var}",
        )


class Finding(NamedTuple):
    """One variable found in the environment and what accelkw does with it."""

    variable: str
    value: str
    action: str  # HONOURED, REFUSED or UNUSED
    what: str


def describe_accelerate_env(
    env: Mapping[str, str], classes: Mapping[str, type[KwargsHandler]]
) -> list[Finding]:
    """Every Accelerate variable set in ``env``, with what accelkw does with it (``accelkw env``)."""
    claimed = _claimed(classes)
    readings = handler_readings(classes, env)
    out: list[Finding] = []
    for var in sorted(env):
        if not is_accelerate_variable(var) and var not in claimed:
            continue
        text = env[var]
        out.append(Finding(var, text, *_judge(var, text, claimed, readings, env)))
    return out


def _judge(
    var: str,
    text: str,
    claimed: Mapping[str, str],
    readings: Mapping[str, AccelerateEnv],
    env: Mapping[str, str],
) -> tuple[str, str]:
    spec = CORE_VARIABLES.get(var)
    if var == TORCH_DEVICE_VAR:
        refusal = _device_refusal(env)
        return (
            (REFUSED, f"expected {refusal}") if refusal else (HONOURED, CORE_VARIABLES[var].accelkw)
        )
    if spec is not None:
        if spec.action != REFUSED:
            return spec.action, spec.accelkw
        try:
            asks = _asks(var, text, spec.off)
        except ConfigError as exc:
            return REFUSED, str(exc)
        return (REFUSED, spec.accelkw) if asks else (UNUSED, "asks for nothing")
    if var in claimed:
        name = claimed[var]
        reading = readings.get(name)
        if reading is not None and var in reading.unused:
            return UNUSED, f"{name}: {reading.unused[var]}"
        fields = reading.fields if reading is not None else {}
        field = next((f for f, (v, _) in fields.items() if v == var), None)
        if field is not None:
            return HONOURED, f"{name}.{field}, when the {name!r} handler is applied"
        if reading is not None and reading.requested:
            return HONOURED, f"asks for the {name!r} handler"
        return HONOURED, f"read by the {name!r} handler: asks for nothing"
    if var in ACCELERATE_ENV_PROVIDERS:
        provider = ACCELERATE_ENV_PROVIDERS[var][0]
        return REFUSED, f"no installed handler reads it: {install_hint(provider)}"
    prefix = next((p for p in ACCELERATE_ENV_PREFIXES if var.startswith(p)), None)
    if prefix is not None:
        provider = ACCELERATE_ENV_PREFIXES[prefix]
        return UNUSED, f"read by a handler that is not installed: {install_hint(provider)}"
    family = next((f for f in FAMILIES if var.startswith(f.prefix)), None)
    if family is not None:
        return UNUSED, family.accelkw
    return UNUSED, "not a variable Accelerate 1.15 reads, nor an installed handler"

"""The YAML ``accelerate config`` writes, read as ``accelerate launch --config_file`` reads it.

Only a file the user names is read (``accelkw launch --config_file PATH``, ``accelkw config
import PATH``): accelkw never looks in Accelerate's default location. Each key becomes the
launch flag Accelerate fills from it (``fsdp_config: {fsdp_version: 2}`` is ``--fsdp_version
2``, ``distributed_type: FSDP`` is ``--use_fsdp``), is left unused where Accelerate's launcher
would not use it on a local machine either, or is refused, naming the key and why.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from accelkw_core.config.accelerate_launch import FLAGS, REFUSED
from accelkw_core.errors import AccelkwError, ConfigError, ConfigFileError, suggest

__all__ = ["ACCELERATE_KEYS", "AccelerateConfig", "read_accelerate_config"]

_SCOPE = "out of scope for accelkw (docs/migrating.md, Out of scope)"

# distributed_type -> the flag it stands for (None: nothing), or why it is refused.
_DISTRIBUTED: dict[str, str | None] = {
    "NO": None,
    "MULTI_CPU": "cpu",
    "MULTI_GPU": "multi_gpu",
    "FSDP": "use_fsdp",
}
_REFUSED_TYPES = {
    "DEEPSPEED": f"DeepSpeed is {_SCOPE}",
    "MEGATRON_LM": f"Megatron-LM is {_SCOPE}",
    "XLA": f"XLA and TPU are {_SCOPE}",
}

# Keys whose mapping holds launch flags, by their names with or without this prefix.
_NESTED = {"fsdp_config": "fsdp_", "dynamo_config": "dynamo_", "fp8_config": "fp8_"}
# Keys that are launch flags of the same name.
_SAME = [
    "mixed_precision",
    "num_processes",
    "num_machines",
    "machine_rank",
    "main_process_ip",
    "main_process_port",
    "same_network",
    "main_training_function",
    "gpu_ids",
    "enable_cpu_affinity",
    "debug",
    "downcast_bf16",
]
# Keys refused when set to anything but an empty or false value, with the reason.
_REFUSED_WHEN_SET = {
    "deepspeed_config": f"DeepSpeed is {_SCOPE}",
    "megatron_lm_config": f"Megatron-LM is {_SCOPE}",
    "parallelism_config": f"`parallelism_config` is {_SCOPE}",
    "mpirun_config": "accelkw launches through torchrun, not mpirun",
    "tpu_name": f"TPU is {_SCOPE}",
    "tpu_zone": f"TPU is {_SCOPE}",
    "tpu_use_cluster": f"TPU is {_SCOPE}",
    "tpu_use_sudo": f"TPU is {_SCOPE}",
    "command_file": f"TPU is {_SCOPE}",
    "commands": f"TPU is {_SCOPE}",
    "tpu_vm": f"TPU is {_SCOPE}",
    "tpu_env": f"TPU is {_SCOPE}",
}

#: Every key ``accelerate config`` 1.15 writes for a local machine, for listings and typos.
ACCELERATE_KEYS = (
    "compute_environment",
    "distributed_type",
    "use_cpu",
    "rdzv_backend",
    "fsdp_config",
    "dynamo_config",
    "fp8_config",
    *_SAME,
    *_REFUSED_WHEN_SET,
)


class AccelerateConfig(NamedTuple):
    """A read ``accelerate config`` file.

    ``flags``: launch flag name -> value; ``sources``: flag name -> where it came from (for
    errors); ``shared``: values for ``accelkw launch``'s own options (``rdzv_backend``);
    ``unused``: key -> why it changes nothing here.
    """

    path: str
    flags: dict[str, Any]
    sources: dict[str, str]
    shared: dict[str, Any]
    unused: dict[str, str]


def _empty(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("", "no", "false", "none")
    return value in (None, False, 0) or (isinstance(value, list | dict) and not value)


def read_accelerate_config(
    path: str | os.PathLike[str], *, refused: list[AccelkwError] | None = None
) -> AccelerateConfig:
    """Read ``path`` (YAML or JSON, as Accelerate accepts both) into launch flags.

    Raises :class:`ConfigFileError` when the file cannot be read or is not a mapping, and
    :class:`ConfigError` naming the key for a value accelkw refuses; with ``refused``, such
    errors are appended to it and the other keys still read.
    """
    import yaml

    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigFileError(where, f"cannot be read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(where, f"is not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, Mapping):
        raise ConfigFileError(where, "is not an accelerate config: expected a mapping of keys")
    out = AccelerateConfig(where, {}, {}, {}, {})

    def refuse(key: str, value: object, why: str) -> ConfigError:
        return ConfigError("accelerate_config", key, value, why, source=where)

    def flag(name: str, value: object, key: str) -> None:
        out.flags[name] = value
        out.sources[name] = f"{where}: {key}"

    for key, value in data.items():
        try:
            _read_key(str(key), value, out, flag, refuse)
        except ConfigError as exc:
            if refused is None:
                raise
            refused.append(exc)
    return out


def _read_key(key: str, value: object, out: AccelerateConfig, flag: Any, refuse: Any) -> None:
    """Carry out one top-level key of the file into ``out`` (or raise a ConfigError)."""
    where = out.path
    if key == "compute_environment":
        if str(value) != "LOCAL_MACHINE":
            raise refuse(key, value, f"'LOCAL_MACHINE' (SageMaker is {_SCOPE})")
    elif key == "distributed_type":
        kind = str(value).upper()
        if kind in _REFUSED_TYPES:
            raise refuse(key, value, f"NO, MULTI_CPU, MULTI_GPU or FSDP: {_REFUSED_TYPES[kind]}")
        if kind not in _DISTRIBUTED:
            raise refuse(
                key, value, "NO, MULTI_CPU, MULTI_GPU or FSDP: accelkw runs on CPU and CUDA"
            )
        name = _DISTRIBUTED[kind]
        if name is not None:
            flag(name, True, key)
    elif key == "use_cpu":
        if value:
            flag("cpu", True, key)
    elif key == "rdzv_backend":
        # "static" is torchrun's default: on one machine accelkw then lets torchrun pick the
        # port, on several the static rendezvous is used as Accelerate uses it.
        if value not in (None, "static"):
            out.shared["rdzv_backend"] = value
    elif key in _NESTED:
        _nested(key, value, flag, refuse)
    elif key in _REFUSED_WHEN_SET:
        if not _empty(value):
            raise refuse(key, value, f"it empty or left out: {_REFUSED_WHEN_SET[key]}")
    elif key in _SAME:
        if key == "downcast_bf16" and _empty(value):
            return
        if key in ("debug", "enable_cpu_affinity", "same_network") and not value:
            return
        if key == "main_training_function":
            out.unused[key] = "read by Accelerate's TPU launcher only"
            return
        if key == "num_processes" and value == -1:
            return  # "pass --num_processes on the command line", as Accelerate says
        if FLAGS[key].action == REFUSED:
            raise refuse(key, value, f"it false or left out: {FLAGS[key].what}")
        if value is not None:
            flag(key, value, key)
    else:
        raise ConfigError(
            "accelerate_config",
            key,
            value,
            "a key `accelerate config` writes: " + ", ".join(ACCELERATE_KEYS),
            suggestion=suggest(key, ACCELERATE_KEYS),
            source=where,
        )


def _nested(key: str, value: object, flag: Any, refuse: Any) -> None:
    """``fsdp_config``/``dynamo_config``/``fp8_config``: each entry is the flag of its name
    (prefixed)."""
    prefix = _NESTED[key]
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise refuse(key, value, "a mapping of settings")
    known = [n for n in FLAGS if n.startswith(prefix)]
    for inner, setting in value.items():
        name = str(inner) if str(inner).startswith(prefix) else prefix + str(inner)
        if name not in known:
            raise ConfigError(
                "accelerate_config",
                f"{key}.{inner}",
                setting,
                f"a key of {key} that accelerate launch reads: " + ", ".join(known),
                suggestion=suggest(name, known),
            )
        if setting is not None:
            flag(name, setting, f"{key}.{inner}")

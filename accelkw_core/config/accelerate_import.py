"""An ``accelerate config`` YAML turned into accelkw's TOML config, saying what went where.

The YAML is read as ``accelerate launch --config_file`` reads it (:mod:`.accelerate_yaml`), its
flags turned into the variables Accelerate's launcher would set (:mod:`.accelerate_launch`), and
those read back as a run would read them: ``ACCELERATE_MIXED_PRECISION`` and
``ACCELERATE_USE_CPU`` become ``[accelerator]``; each installed handler takes the variables it
declares (``FSDP_*``, ``ACCELERATE_DYNAMO_*``) into its ``[handlers.NAME]`` table, values
checked as the run would check them. What belongs to the launch (process counts, addresses)
is not a config setting: it comes back as the ``accelkw launch`` options that carry it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from accelkw_core.config.accelerate_env import (
    MIXED_PRECISION_VAR,
    USE_CPU_VAR,
    handler_readings,
)
from accelkw_core.config.accelerate_launch import translate
from accelkw_core.config.accelerate_yaml import read_accelerate_config
from accelkw_core.contract.validation import coerce_values
from accelkw_core.discovery.default_registry import get_registry
from accelkw_core.discovery.registry import Registry
from accelkw_core.errors import AccelkwError, ConfigError

__all__ = ["Imported", "import_accelerate_config"]


@dataclass
class Imported:
    """The TOML data, and for each key of the YAML where it went or why it did not."""

    toml: dict[str, Any] = field(default_factory=dict)
    mapped: list[str] = field(default_factory=list)  # "mixed_precision -> [accelerator] ..."
    launch: list[str] = field(default_factory=list)  # accelkw launch options
    unused: list[str] = field(default_factory=list)
    refused: list[AccelkwError] = field(default_factory=list)


def import_accelerate_config(
    path: str | os.PathLike[str], registry: Registry | None = None
) -> Imported:
    """Convert the ``accelerate config`` file at ``path``; refusals are collected, not raised."""
    registry = registry if registry is not None else get_registry()
    out = Imported()
    read = read_accelerate_config(path, refused=out.refused)
    for key, why in read.unused.items():
        out.unused.append(f"{key}: {why}")
    for key, value in read.shared.items():
        out.launch.append(f"--{key.replace('_', '-')} {value}")
    flags = dict(read.flags)
    try:
        translation = translate(flags, read.sources)
    except ConfigError as exc:
        out.refused.append(exc)
        return out
    env = translation.env
    for key, value in translation.torchrun.items():
        out.launch.append(f"--{key.replace('_', '-')} {value}")
    accelerator: dict[str, Any] = {}
    if MIXED_PRECISION_VAR in env:
        accelerator["mixed_precision"] = env.pop(MIXED_PRECISION_VAR)
        out.mapped.append(
            f"mixed_precision -> [accelerator] mixed_precision = {accelerator['mixed_precision']!r}"
        )
    if env.pop(USE_CPU_VAR, None) == "true":
        accelerator["cpu"] = True
        out.mapped.append("use_cpu / distributed_type -> [accelerator] cpu = true")
    if accelerator:
        out.toml["accelerator"] = accelerator
    classes = {name: info.cls for name, info in registry.handlers().items()}
    handlers: dict[str, dict[str, Any]] = {}
    claimed: set[str] = set()
    for name, reading in handler_readings(classes, env).items():
        claimed |= {var for var in classes[name].accelerate_env if var in env}
        if not (reading.requested or (reading.fields and not classes[name].opt_in)):
            continue  # Accelerate would not build the plugin: its variables set nothing
        table: dict[str, Any] = {}
        for field_name, (var, raw) in reading.fields.items():
            try:
                table.update(coerce_values(classes[name], {field_name: raw}, strings=True))
            except ConfigError as exc:
                out.refused.append(exc.with_source(f"{read.path}: {_key_of(var, read.sources)}"))
                continue
            out.mapped.append(
                f"{_key_of(var, read.sources)} -> [handlers.{name}] {field_name} = {table[field_name]!r}"
            )
        for var, why in reading.unused.items():
            out.unused.append(f"{_key_of(var, read.sources)}: {why}")
        if reading.requested and not table:
            out.mapped.append(
                f"{_requested_by(classes[name].accelerate_env, env, read.sources)} -> [handlers.{name}]"
            )
        handlers[name] = table
    for var in env:
        if var in claimed:
            continue
        if var.startswith(("ACCELERATE_", "FSDP_")):
            out.refused.append(
                ConfigError(
                    "accelerate_config",
                    _key_of(var, read.sources),
                    env[var],
                    f"an installed handler that reads {var} (accelkw plugins list shows what is installed)",
                    source=read.path,
                )
            )
        else:  # OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES: the launch's environment, not a setting
            out.launch.append(f"{var}={env[var]} (environment of the launch)")
    if handlers:
        out.toml["handlers"] = handlers
    return out


def _key_of(var: str, sources: dict[str, str]) -> str:
    """The YAML key behind variable ``var`` (``FSDP_VERSION`` -> ``fsdp_config.fsdp_version``)."""
    guess = var.lower().removeprefix("accelerate_")
    if guess == "fsdp_transformer_cls_to_wrap":
        guess = "fsdp_transformer_layer_cls_to_wrap"
    if guess == "use_fsdp":
        return "distributed_type"
    where = sources.get(guess)
    return where.split(": ", 1)[1] if where and ": " in where else guess


def _requested_by(declared: Any, env: dict[str, str], sources: dict[str, str]) -> str:
    var = next((v for v in declared if v in env), "")
    return _key_of(var, sources)

"""Effective settings: code > environment > file > defaults, per field, every value validated.

:func:`resolve_settings` is the one place the three sources meet. It returns the handlers to
compose (built through the core's validated constructor) and, for each non-default field, where
its value came from, so ``accelkw plan`` and ``accelkw config check`` can show it.

Environment variables: ``ACCELKW_MIXED_PRECISION``, ``ACCELKW_CPU`` and
``ACCELKW_<HANDLER>__<FIELD>`` (``ACCELKW_DDP__BUCKET_CAP_MB=50``,
``ACCELKW_PROCESS_GROUP__TIMEOUT=30s``), read with the text forms ``from_mapping`` accepts; and
Accelerate's own (``ACCELERATE_MIXED_PRECISION``, ``ACCELERATE_USE_FSDP`` with ``FSDP_*``, ...),
which rank below the ``ACCELKW_*`` ones (see :mod:`.accelerate_env`).

Neither a file nor an override imports code: a callable field (``on_trace_ready``) is set in
code, unless ``ACCELKW_ALLOW_IMPORTS=1`` lets its value name one as ``"package.module:function"``.
The switch is an environment variable on purpose: a config file cannot opt itself in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelkw_core.config.accelerate_env import (
    MIXED_PRECISION_VAR,
    USE_CPU_VAR,
    accelerate_cpu,
    accelerate_mixed_precision,
    check_accelerate_env,
    handler_readings,
)
from accelkw_core.config.files import ConfigFile, check_mixed_precision, find_config, load_config
from accelkw_core.config.selection import (
    conflicting_defaults,
    handler_key,
    order_handlers,
    resolve_handlers,
)
from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.contract.validation import coerce_values
from accelkw_core.discovery.catalog import install_hint
from accelkw_core.discovery.default_registry import get_registry
from accelkw_core.discovery.registry import Registry
from accelkw_core.discovery.required_plugins import check_requirements
from accelkw_core.errors import (
    AccelkwError,
    ConfigError,
    ConfigWarning,
    flatten,
    raise_all,
    suggest,
)
from accelkw_core.facts.environment import ENV_PREFIX, VARIABLES, env_flag, unknown_variables

__all__ = [
    "ENV_ALLOW_IMPORTS",
    "ENV_PREFIX",
    "HandlerSettings",
    "Settings",
    "env_overrides",
    "resolve_settings",
]

CODE, DEFAULT = "code", "default"
ENV_ALLOW_IMPORTS = f"{ENV_PREFIX}ALLOW_IMPORTS"


@dataclass
class HandlerSettings:
    """One handler to compose, with the source of each field that is not at its default."""

    name: str
    handler: KwargsHandler
    sources: dict[str, str] = field(default_factory=dict)
    distribution: str | None = None
    #: Why it is composed: ``"code"`` (passed in code), ``"config"`` (asked for by a config
    #: file or the environment) or ``"default"`` (installed and on by default).
    origin: str = DEFAULT

    def source(self, field_name: str) -> str:
        """``"code"``, ``"env ACCELKW_…"``, ``"file … [handlers.…]"`` or ``"default"``."""
        return self.sources.get(field_name, DEFAULT)


@dataclass
class Settings:
    """The effective configuration of a run, before any handler is applied."""

    mixed_precision: str = "no"
    cpu: bool = False
    accelerator_sources: dict[str, str] = field(default_factory=dict)
    handlers: list[HandlerSettings] = field(default_factory=list)
    disabled: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    config: ConfigFile = field(default_factory=ConfigFile)
    errors: list[AccelkwError] = field(default_factory=list)

    def handler(self, name: str) -> HandlerSettings | None:
        """The settings of the handler registered as ``name``, if it will be composed."""
        return next((h for h in self.handlers if h.name == name), None)


def env_overrides(env: Mapping[str, str]) -> dict[str, dict[str, tuple[str, str]]]:
    """``{handler: {field: (variable, raw value)}}`` from ``ACCELKW_<HANDLER>__<FIELD>`` names."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for var, raw in env.items():
        if not var.startswith(ENV_PREFIX) or "__" not in var[len(ENV_PREFIX) :]:
            continue
        handler, _, field_name = var[len(ENV_PREFIX) :].partition("__")
        out.setdefault(handler.lower(), {})[field_name.lower()] = (var, raw)
    return out


def resolve_settings(
    handlers: Sequence[object] = (),
    *,
    mixed_precision: str | None = None,
    cpu: bool | None = None,
    config: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    registry: Registry | None = None,
    cwd: str | os.PathLike[str] | None = None,
    collect_errors: bool = False,
) -> Settings:
    """Merge code, environment, config file and defaults into :class:`Settings`.

    ``handlers`` are the handler instances passed in code; their explicit fields win, and their
    unset fields are taken from the environment or the file. Every problem is found before
    anything is raised: one is raised as it is (a ``ConfigError``, ``ConfigFileError``,
    ``ComposeError``), several as one :class:`~accelkw_core.errors.ConfigErrors`, a line each.
    With ``collect_errors`` they are kept in ``Settings.errors`` instead, and the faulty
    settings fall back to their defaults. A file that is not TOML is raised at once.
    """
    env = os.environ if env is None else env
    registry = registry if registry is not None else get_registry()
    code = {
        handler_key(h): h for h in resolve_handlers(handlers, include_defaults=False, order=False)
    }
    cfg = load_config(find_config(config, env=env, cwd=cwd), collect=True)
    out = Settings(config=cfg)
    out.errors.extend(cfg.errors)
    imports = bool(_env_flag(env, ENV_ALLOW_IMPORTS, "allow_imports"))
    installed = registry.handlers()
    known = set(installed) | set(code)
    env_values = env_overrides(env)
    _warn_unknown_variables(
        env, {n: type(code[n]) if n in code else installed[n].cls for n in sorted(known)}
    )

    def attempt(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except AccelkwError as exc:
            out.errors.extend(flatten([exc]))
            return None

    attempt(_accelerator, out, cfg, env, mixed_precision, cpu)

    if cfg.required:  # first: a missing plugin explains the errors that would follow
        attempt(check_requirements, cfg.required, registry, cfg.where("plugins"))
    for name in cfg.handlers:
        if name not in known:
            attempt(_unknown, name, sorted(known), cfg.where("handlers"), f"[handlers.{name}]")
    for name, fields in env_values.items():
        if name not in known:
            var = next(iter(fields.values()))[0]
            attempt(_unknown, name, sorted(known), f"environment variable {var}", var)
    attempt(_disabled, out, cfg, installed, code)
    # A plugin built for another core was never imported: say so once, naming it, not mid-run.
    registry.warn_incompatible(skip=out.disabled, stacklevel=3)

    classes = {n: type(code[n]) if n in code else installed[n].cls for n in sorted(known)}
    attempt(check_accelerate_env, env, classes)
    readings = handler_readings(classes, env)
    requested = {n for n in known if n in code or n in cfg.handlers or n in env_values}
    requested |= {n for n, reading in readings.items() if reading.requested}
    requested |= {n for n in known if cfg.enable is not None and n in cfg.enable}
    for name, cls in classes.items():
        if cls.opt_in and name not in requested and name not in out.disabled:
            out.disabled[name] = (
                f"opt-in: applied only when requested ({cls.__name__} in code, "
                f"[handlers.{name}] or ACCELKW_{name.upper()}__<FIELD>)"
            )
    defaults = {n: c for n, c in classes.items() if n not in requested and n not in out.disabled}
    wanted = {n: c for n, c in classes.items() if n in requested and n not in out.disabled}
    out.disabled.update(conflicting_defaults(wanted, defaults))

    for name, cls in classes.items():
        accelerate = readings[name].fields if name in readings else {}
        built = attempt(
            _build, name, cls, code.get(name), cfg, env_values.get(name, {}), imports, accelerate
        )
        if name in out.disabled:
            continue
        if built is None:
            built = HandlerSettings(name, code[name] if name in code else cls())
        info = installed.get(name)
        built.distribution = info.distribution if info and info.cls is cls else None
        built.origin = CODE if name in code else "config" if name in requested else DEFAULT
        out.handlers.append(built)
    if not collect_errors:
        raise_all(out.errors)
    order = {id(h): i for i, h in enumerate(order_handlers(s.handler for s in out.handlers))}
    out.handlers.sort(key=lambda s: order[id(s.handler)])
    return out


def _accelerator(
    out: Settings,
    cfg: ConfigFile,
    env: Mapping[str, str],
    mixed_precision: str | None,
    cpu: bool | None,
) -> None:
    file_values = cfg.accelerator
    file_label = f"file {cfg.where('accelerator')}"
    env_mp = env.get(f"{ENV_PREFIX}MIXED_PRECISION")
    accelerate_mp = accelerate_mixed_precision(env)
    if mixed_precision is not None:
        out.mixed_precision, how = check_mixed_precision(mixed_precision, CODE), CODE
    elif env_mp:
        var = f"{ENV_PREFIX}MIXED_PRECISION"
        value = check_mixed_precision(env_mp.strip().lower(), f"environment variable {var}")
        out.mixed_precision, how = value, f"env {var}"
    elif accelerate_mp:
        where = f"environment variable {MIXED_PRECISION_VAR}"
        out.mixed_precision = check_mixed_precision(accelerate_mp, where)
        how = f"env {MIXED_PRECISION_VAR}"
    elif "mixed_precision" in file_values:
        out.mixed_precision, how = file_values["mixed_precision"], file_label
    else:
        how = DEFAULT
    out.accelerator_sources["mixed_precision"] = how
    env_cpu = _env_flag(env, f"{ENV_PREFIX}CPU", "cpu")
    if accelerate_cpu(env):  # Accelerate's meaning: true wins over cpu=False in code
        out.cpu, how = True, f"env {USE_CPU_VAR}"
    elif cpu is not None:
        out.cpu, how = bool(cpu), CODE
    elif env_cpu is not None:
        out.cpu, how = env_cpu, f"env {ENV_PREFIX}CPU"
    elif "cpu" in file_values:
        out.cpu, how = file_values["cpu"], file_label
    else:
        how = DEFAULT
    out.accelerator_sources["cpu"] = how


def _env_flag(env: Mapping[str, str], var: str, field_name: str) -> bool | None:
    """The boolean in environment variable ``var``; ``None`` when it is unset or empty."""
    return env_flag(env, var, handler="accelerator", field=field_name)


def _warn_unknown_variables(env: Mapping[str, str], classes: Mapping[str, type]) -> None:
    """A :class:`ConfigWarning` for each ``ACCELKW_*`` variable that nothing reads."""
    import dataclasses
    import warnings

    fields = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in classes.items()}
    for var, hint in unknown_variables(env, fields):
        why = (
            f"did you mean {hint}?"
            if hint
            else f"known: {', '.join(VARIABLES)} and ACCELKW_<HANDLER>__<FIELD>"
        )
        warnings.warn(
            f"environment variable {var} is not an accelkw setting and is ignored ({why})",
            ConfigWarning,
            stacklevel=3,
        )


def _unknown(name: str, known: list[str], source: str, what: str) -> None:
    hint = suggest(name, known)
    # No close match: most often a table or variable left behind when a plugin was removed.
    fix = f"remove the {what} table" if what.startswith("[") else f"unset {what}"
    raise ConfigError(
        "handlers",
        name,
        what,
        "an installed handler: "
        + (", ".join(known) or "none installed")
        + (
            f"; no installed plugin provides {name!r} (was it uninstalled?): "
            f"{install_hint(name)}, or {fix}"
            if hint is None
            else ""
        ),
        suggestion=hint,
        source=source,
    )


def _disabled(
    out: Settings, cfg: ConfigFile, installed: Mapping[str, Any], code: Mapping[str, Any]
) -> None:
    known = sorted(set(installed) | set(code))
    unknown: list[AccelkwError] = []
    for key, names in (("enable", cfg.enable or []), ("disable", cfg.disable)):
        for name in names:
            if name not in known:
                hint = suggest(name, known)
                # Disabling what is not installed needs no install: the name is a typo or stale.
                fix = (
                    f"; no handler {name!r} is installed, so there is nothing to disable: "
                    "remove it from the list"
                    if key == "disable"
                    else f"; or {install_hint(name)}"
                )
                unknown.append(
                    ConfigError(
                        "plugins",
                        key,
                        name,
                        "names of installed handlers: "
                        + (", ".join(known) or "none installed")
                        + ("" if hint else fix),
                        suggestion=hint,
                        source=cfg.where("plugins"),
                    )
                )
    raise_all(unknown)
    reasons = {n: f"listed in [plugins] disable of {cfg.label}" for n in cfg.disable}
    if cfg.enable is not None:
        for name in installed:
            if name not in cfg.enable:
                reasons.setdefault(name, f"not listed in [plugins] enable of {cfg.label}")
    for name, reason in sorted(reasons.items()):
        if name in code:
            out.notes.append(f"{name}: passed in code, so applied although {reason}")
        else:
            out.disabled[name] = reason


def _build(
    name: str,
    cls: type[KwargsHandler],
    code_handler: KwargsHandler | None,
    cfg: ConfigFile,
    env_fields: Mapping[str, tuple[str, str]],
    imports: bool = False,
    accelerate: Mapping[str, tuple[str, object]] | None = None,
) -> HandlerSettings:
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    # Every source is read, so each bad value of the table and the variables is reported.
    errors: list[AccelkwError] = []
    table = cfg.handlers.get(name)
    if table:
        where = cfg.where(f"handlers.{name}")
        try:
            parsed = coerce_values(cls, table, import_callables=imports)
        except ConfigError as exc:
            errors.append(exc.with_source(where))
            parsed = {}
        for key, value in parsed.items():
            values[key], sources[key] = value, f"file {where}"
    variables = [(key, var, raw, False) for key, (var, raw) in (accelerate or {}).items()]
    variables += [(key, var, raw, imports) for key, (var, raw) in env_fields.items()]
    for key, var, raw, may_import in variables:
        # One at a time, so an error names the variable that gave the value.
        try:
            parsed = coerce_values(cls, {key: raw}, strings=True, import_callables=may_import)
        except ConfigError as exc:
            errors.append(exc.with_source(f"environment variable {var}"))
            continue
        values[key], sources[key] = parsed[key], f"env {var}"
    raise_all(errors)
    if code_handler is not None:
        explicit = code_handler.explicit_kwargs()
        if not values:
            return HandlerSettings(name, code_handler, dict.fromkeys(explicit, CODE))
        values.update(explicit)
        sources.update(dict.fromkeys(explicit, CODE))
    if not values:
        return HandlerSettings(name, cls(), {})
    try:
        handler = cls(**values)
    except ConfigError as exc:
        raise exc.with_source(" + ".join(sorted(set(sources.values())))) from None
    return HandlerSettings(name, handler, sources)

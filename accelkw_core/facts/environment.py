"""The ``ACCELKW_*`` environment variables: which exist, how switches are read, typos caught.

Every boolean switch (``ACCELKW_CPU``, ``ACCELKW_ALLOW_IMPORTS``,
``ACCELKW_DISABLE_PLUGIN_AUTOLOAD``, ``ACCELKW_NO_CACHE``) goes through :func:`env_flag`, so all
of them accept the same words and reject anything else with a :class:`ConfigError` that names
the variable. :func:`unknown_variables` finds the ``ACCELKW_*`` names that nothing reads (a
misspelt ``ACCELKW_MIXED_PRECISON``, or ``ACCELKW_DDP_BUCKET_CAP_MB`` with one underscore where
two separate handler and field), each with the closest known name.

This module imports nothing but :mod:`accelkw_core.errors`: the registry reads its switches
before any plugin loads, and ``accelkw plugins list`` must stay fast.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from accelkw_core.contract.coercion import FALSE_WORDS, TRUE_WORDS
from accelkw_core.errors import ConfigError, suggest

__all__ = [
    "ENV_PREFIX",
    "FALSE_WORDS",
    "FLAG_EXPECTED",
    "TRUE_WORDS",
    "VARIABLES",
    "env_flag",
    "env_int",
    "env_log_level",
    "handler_variable",
    "unknown_variables",
]

ENV_PREFIX = "ACCELKW_"
FLAG_EXPECTED = "a boolean (true/false, 1/0, yes/no, on/off)"

# Every variable the core reads, other than the ACCELKW_<HANDLER>__<FIELD> overrides.
VARIABLES: dict[str, str] = {
    "ACCELKW_CONFIG": "the config file to use",
    "ACCELKW_MIXED_PRECISION": "'no', 'fp16', 'bf16' or 'fp8'",
    "ACCELKW_CPU": "a switch: run on the CPU even when an accelerator is available",
    "ACCELKW_ALLOW_IMPORTS": "a switch: let configuration name a callable to import",
    "ACCELKW_PLUGINS": "comma-separated allow-list of plugin or distribution names",
    "ACCELKW_DISABLE_PLUGINS": "comma-separated deny-list of plugin or distribution names",
    "ACCELKW_DISABLE_PLUGIN_AUTOLOAD": "a switch: read no entry points",
    "ACCELKW_NO_CACHE": "a switch: plugins list keeps no listing and always loads for real",
    "ACCELKW_LOG_LEVEL": "what the 'accelkw' loggers print to stderr: DEBUG, INFO, WARNING, ...",
    # Set by `accelkw launch` for its workers (accelkw_core.cli.worker), not by users.
    "ACCELKW_LAUNCH_ERRORS": "the folder where workers leave a configuration error",
    "ACCELKW_LAUNCH_PARENT": "the pid of the process that started the workers",
    "ACCELKW_LAUNCH_WARNED": "the plugin troubles the launcher warned about (workers do not "
    "repeat them)",
    "ACCELKW_LAUNCH_CHECK": "the world size torchrun's process checks the run's handlers for "
    "conflicts on, before any worker starts",
}


def env_flag(
    env: Mapping[str, str], var: str, *, handler: str = "environment", field: str | None = None
) -> bool | None:
    """The switch in environment variable ``var``: ``None`` when unset or empty.

    ``handler``/``field`` name the setting in the :class:`ConfigError` a bad value raises
    (``accelerator.cpu``); the error always names the variable as its source.
    """
    raw = env.get(var)
    if raw is None or not raw.strip():
        return None
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigError(
        handler,
        field or var[len(ENV_PREFIX) :].lower(),
        raw,
        FLAG_EXPECTED,
        source=f"environment variable {var}",
    )


def env_int(env: Mapping[str, str], var: str, default: int, minimum: int) -> int:
    """The integer in ``var`` (``WORLD_SIZE``…), ``default`` when unset or empty; a value that is
    not an integer ``>= minimum`` is a :class:`ConfigError` naming the variable."""
    raw = env.get(var)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(
            "environment",
            var,
            raw,
            f"an integer >= {minimum}",
            source=f"environment variable {var}",
        )
    return value


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def env_log_level(env: Mapping[str, str]) -> str | None:
    """The level in ``ACCELKW_LOG_LEVEL`` (upper case), ``None`` when unset; else ConfigError."""
    raw = env.get("ACCELKW_LOG_LEVEL")
    if raw is None or not raw.strip():
        return None
    level = raw.strip().upper()
    if level not in LOG_LEVELS:
        raise ConfigError(
            "environment",
            "log_level",
            raw,
            "one of " + ", ".join(LOG_LEVELS),
            suggestion=suggest(level, LOG_LEVELS),
            source="environment variable ACCELKW_LOG_LEVEL",
        )
    return level


def handler_variable(handler: str, field: str) -> str:
    """``ACCELKW_DDP__BUCKET_CAP_MB``: the variable that overrides ``field`` of ``handler``."""
    return f"{ENV_PREFIX}{handler.upper()}__{field.upper()}"


def unknown_variables(
    env: Mapping[str, str], handler_fields: Mapping[str, Iterable[str]]
) -> list[tuple[str, str | None]]:
    """The ``ACCELKW_*`` variables in ``env`` that nothing reads, each with a close match.

    A name with ``__`` is a handler override; those are checked where they are applied (an
    unknown handler or field there is an error), so only the other names are looked at here.
    ``handler_fields`` maps each known handler to its field names, to suggest the override a
    single underscore was meant to be.
    """
    overrides = [handler_variable(h, f) for h, fields in handler_fields.items() for f in fields]
    # Compared without the shared prefix, which would make every name look close to every other.
    choices = {var[len(ENV_PREFIX) :]: var for var in [*VARIABLES, *overrides]}
    found = []
    for var in sorted(env):
        rest = var[len(ENV_PREFIX) :]
        if not var.startswith(ENV_PREFIX) or var in VARIABLES or "__" in rest:
            continue
        hint = suggest(rest.upper(), choices)
        found.append((var, choices[hint] if hint else None))
    return found

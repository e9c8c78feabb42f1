"""How a handler takes its defaults from Accelerate's environment variables.

Accelerate's plugins fill the fields left unset from ``ACCELERATE_*`` and ``FSDP_*`` variables,
which ``accelerate launch`` and ``accelerate config`` set. An accelkw handler never reads the
environment: it declares the variables (``KwargsHandler.accelerate_env``), and the core hands
it the environment as a mapping through :meth:`KwargsHandler.from_accelerate_env`, which turns
it into field values as text. The core then builds the handler through the same validated path
as config files and ``ACCELKW_*`` variables (see :mod:`accelkw_core.config.accelerate_env`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["SWITCH", "AccelerateEnv", "accelerate_flag", "read_declared"]

#: The ``accelerate_env`` value for a switch variable: a true value asks for the handler.
SWITCH = "*"

# Accelerate's ``str_to_bool`` words: an ACCELERATE_* switch is read with Accelerate's meaning,
# which takes more words than accelkw's own table (contract.coercion's TRUE_WORDS/FALSE_WORDS).
_TRUE = frozenset({"y", "yes", "t", "true", "on", "1"})
_FALSE = frozenset({"n", "no", "f", "false", "off", "0"})


class AccelerateEnv(NamedTuple):
    """What Accelerate's environment asks of one handler class.

    ``requested``: the variables ask for the handler (``ACCELERATE_USE_FSDP=true``).
    ``fields``: field name -> (variable, value), the defaults the variables give: their text,
    or a value the handler class read from it (a switch's ``bool``), checked by the core like
    any configured value.
    ``unused``: variable -> why it sets nothing here, as Accelerate would not read it either
    (``FSDP_SYNC_MODULE_STATES`` on FSDP2).
    """

    requested: bool
    fields: Mapping[str, tuple[str, object]]
    unused: Mapping[str, str]


def accelerate_flag(text: str | None) -> bool | None:
    """A switch as Accelerate reads it (``str_to_bool``): ``None`` when unset, empty or not a word."""
    if text is None:
        return None
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    return None


def read_declared(declared: Mapping[str, str], env: Mapping[str, str]) -> AccelerateEnv:
    """The plain reading of ``declared`` (variable -> field or :data:`SWITCH`) over ``env``.

    A switch with a true value requests the handler; every other variable that is set and not
    empty gives its field's value as text.
    """
    requested = False
    fields: dict[str, tuple[str, object]] = {}
    for variable, field in declared.items():
        text = env.get(variable)
        if text is None or not text.strip():
            continue
        if field == SWITCH:
            requested = requested or accelerate_flag(text) is True
        else:
            fields[field] = (variable, text.strip())
    return AccelerateEnv(requested, fields, {})

"""Accelerator keywords that handlers claim: ``Accelerator(gradient_accumulation_steps=4)``.

Accelerate takes some settings as ``Accelerator`` keywords rather than kwargs handlers
(``gradient_accumulation_steps``, ``fsdp_plugin``, ``dynamo_backend``, ...). Here a handler class
claims such a keyword through ``accelerator_keywords`` (keyword -> field name, or ``"*"`` for a
keyword that takes an instance of the class); the runtime turns the keywords into handler
instances and never knows which plugin claims which keyword.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.discovery.catalog import ACCELERATE_KEYWORDS, install_hint
from accelkw_core.errors import ComposeError, ConfigError

__all__ = ["INSTANCE", "handlers_from_keywords"]

INSTANCE = "*"


def _claims(installed: Mapping[str, Any]) -> dict[str, type[KwargsHandler]]:
    claims: dict[str, type[KwargsHandler]] = {}
    for info in installed.values():
        for keyword in getattr(info.cls, "accelerator_keywords", {}):
            claims.setdefault(keyword, info.cls)
    return claims


def handlers_from_keywords(
    keywords: Mapping[str, Any],
    code_handlers: Sequence[object],
    installed: Mapping[str, Any],
) -> list[KwargsHandler]:
    """The handler instances the given Accelerator keywords stand for.

    A keyword left at Accelerate's default (``gradient_accumulation_steps=1``, ``None``) asks
    for nothing, installed or not. Raises ``TypeError`` for a keyword Accelerate does not have,
    :class:`~accelkw_core.errors.ConfigError` for one no installed handler claims (with the pip
    line), and :class:`~accelkw_core.errors.ComposeError` when two sources set one handler.
    """
    claims = _claims(installed)
    given: dict[type[KwargsHandler], dict[str, Any]] = {}
    instances: dict[type[KwargsHandler], tuple[str, KwargsHandler]] = {}
    for keyword, value in keywords.items():
        default = ACCELERATE_KEYWORDS.get(keyword, (None, None))[1]
        cls = claims.get(keyword)
        if cls is None:
            if keyword not in ACCELERATE_KEYWORDS:
                raise TypeError(
                    f"Accelerator() got an unexpected keyword argument {keyword!r}; the keywords "
                    "handlers can claim here are: " + ", ".join(sorted(ACCELERATE_KEYWORDS))
                )
            if value is None or value == default:
                continue
            provider = ACCELERATE_KEYWORDS[keyword][0]
            raise ConfigError(
                "accelerator",
                keyword,
                value,
                f"an installed handler that takes it: {install_hint(provider)}",
            )
        if value is None or (value == default and not isinstance(value, KwargsHandler)):
            continue
        field = cls.accelerator_keywords[keyword]
        if field == INSTANCE:
            if not isinstance(value, cls):
                raise ConfigError(
                    "accelerator", keyword, value, f"a {cls.__name__} instance (or None)"
                )
            instances[cls] = (keyword, value)
        else:
            given.setdefault(cls, {})[field] = value
    passed = {type(h) for h in code_handlers}
    out: list[KwargsHandler] = []
    for cls in {*given, *instances}:
        sources = [k for k, c in claims.items() if c is cls and k in keywords]
        if cls in passed:
            raise ComposeError(
                f"{cls.__name__} is passed in kwargs_handlers and set through "
                f"{', '.join(sources)}=; pass it only once"
            )
        if cls in instances and cls in given:
            raise ComposeError(
                f"Accelerator() got both {instances[cls][0]}= and "
                f"{', '.join(k for k in sources if k != instances[cls][0])}= for "
                f"{cls.__name__}; set the value on the {cls.__name__} instance instead"
            )
        out.append(instances[cls][1] if cls in instances else cls(**given[cls]))
    return out

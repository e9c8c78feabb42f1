"""The reference's import path: ``from accelkw_core.utils import AutocastKwargs`` and friends.

Handler classes live in their plugin packages; this module imports them on first access, so
``import accelkw_core.utils`` stays cheap and a missing plugin fails with the distribution to
install. A third-party handler class is found by its class name through the registry.
"""

from __future__ import annotations

import importlib
from typing import Any

from accelkw_core.discovery.catalog import REFERENCE_NAMES
from accelkw_core.handlers.base import KwargsHandler
from accelkw_core.runtime.processes import DistributedType
from accelkw_core.runtime.project import ProjectConfiguration
from accelkw_core.tracking.selection import LoggerType

__all__ = [
    "DistributedType",
    "KwargsHandler",
    "LoggerType",
    "ProjectConfiguration",
    *REFERENCE_NAMES,
]


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    known = REFERENCE_NAMES.get(name)
    if known is not None:
        module_name, distribution = known
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ImportError(
                f"cannot import name {name!r} from 'accelkw_core.utils': it is provided by the "
                f"{distribution} distribution, which is not installed or failed to import "
                f"({exc}). Install it with: pip install {distribution}",
                name=name,
            ) from exc
        value = getattr(module, name)
        globals()[name] = value
        return value
    found = _registered_class(name)
    if found is not None:
        return found
    raise AttributeError(f"module 'accelkw_core.utils' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


def _registered_class(name: str) -> type[KwargsHandler] | None:
    from accelkw_core.discovery.registry import get_registry

    for info in get_registry().handlers().values():
        if info.cls.__name__ == name:
            return info.cls
    return None

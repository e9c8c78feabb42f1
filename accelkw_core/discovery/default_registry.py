"""The process-wide registry: created on first use, replaceable in code (tests, notebooks).

Kept apart from :mod:`accelkw_core.discovery.registry` so that asking whether one exists
(:func:`registry_exists`, which ``accelkw plugins list`` does before answering from its cache)
imports no pluggy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkw_core.discovery.registry import Registry

__all__ = ["get_registry", "registry_exists", "set_registry"]

_default: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, created (not loaded) on first use."""
    global _default
    if _default is None:
        from accelkw_core.discovery.registry import Registry

        _default = Registry()
    return _default


def set_registry(registry: Registry | None) -> Callable[[], None]:
    """Replace the process-wide registry (``None`` resets it); returns an undo function."""
    global _default
    previous = _default
    _default = registry

    def restore() -> None:
        global _default
        _default = previous

    return restore


def registry_exists() -> bool:
    """Whether the process-wide registry was created or set (in code) already."""
    return _default is not None

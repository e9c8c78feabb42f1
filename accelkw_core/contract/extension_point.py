"""``ExtensionPoint[T]``: one place where a handler takes part in a run, typed by what it takes.

The class and its cardinalities only; the points themselves are the constants of
:mod:`accelkw_core.contract.points`. A point binds ``T`` for both ways of contributing: a plan's
:meth:`~accelkw_core.contract.plan.Plan.contribute` goes through :meth:`ExtensionPoint.step` and
the state's ``contribute`` through :meth:`ExtensionPoint.entry`, so ``mypy`` checks a value
against the point's own type and names that type when it does not fit.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

__all__ = [
    "EVERY_RANK",
    "KEYED",
    "MANY",
    "ONE",
    "ROLES",
    "STACK",
    "Contribution",
    "ExtensionPoint",
    "PointStep",
    "constant_name",
]

ONE, MANY, KEYED, STACK = "one", "many", "keyed", "stack"
ROLES = ("precision", "distribution", "shared", "loop", "checkpoint")
EVERY_RANK = "every rank"

# Contravariant, as for anything that takes values in: a point of ``ModelWrapper`` accepts any
# subtype (a class implementing a protocol). ``T`` is bound by the point before the value is
# seen, so a wrong contribution is reported against the point's own type ("expected
# Callable[[Module], Module]"), never as a type variable mypy could not solve.
T_contra = TypeVar("T_contra", contravariant=True)


class Contribution(NamedTuple):
    """One handler's contribution to an extension point (``key`` for keyed points)."""

    handler: str
    value: Any
    key: str | None = None


class PointStep(NamedTuple):
    """What a plan will contribute to a point: ``value`` under ``key``, with its message and
    the capabilities it ``provides`` (made by :meth:`ExtensionPoint.step`)."""

    message: str
    point: str
    value: Any
    key: str | None
    provides: tuple[str, ...]


@dataclass(frozen=True)
class ExtensionPoint(Generic[T_contra]):
    """One extension point; ``T`` is what a contribution is (checked by ``mypy``).

    ``name``: the point's name (what ``accelkw plan`` prints); ``cardinality``: ``one``,
    ``many``, ``keyed`` or ``stack``; ``contribution`` and ``used``: what a contribution is
    and how the runtime uses it; ``role``: ``precision``, ``distribution``, ``shared``,
    ``loop`` or ``checkpoint``; ``ranks``: on which processes and when the runtime calls it;
    ``deprecated``: what to use instead, for a point kept only for plugins written before it
    (contributing to it from a plan warns with a ``DeprecationWarning`` saying so).
    """

    name: str
    cardinality: str
    contribution: str
    used: str
    role: str = "shared"
    ranks: str = EVERY_RANK
    deprecated: str = ""

    def __str__(self) -> str:
        return self.name

    def step(
        self,
        value: T_contra,
        message: str,
        /,
        *,
        key: str | None = None,
        provides: Iterable[str] = (),
    ) -> PointStep:
        """What ``Plan.contribute(point, value, message, ...)`` records; ``mypy`` checks
        ``value`` against ``T``."""
        if self.deprecated:
            warnings.warn(
                f"the {constant_name(self)} extension point is deprecated and stops working in "
                f"accelkw 0.4: {self.deprecated}",
                DeprecationWarning,
                stacklevel=3,
            )
        return PointStep(message, self.name, value, key, tuple(provides))

    def entry(self, handler: str, value: T_contra, /, *, key: str | None = None) -> Contribution:
        """``handler``'s ``value`` as this point keeps it (what ``state.contribute(point,
        handler, value, key=...)`` adds; ``mypy`` checks ``value`` against ``T``): a keyed
        point keys it by ``key``, or by the handler's name; the others keep no key."""
        if self.cardinality != KEYED:
            return Contribution(handler, value, None)
        return Contribution(handler, value, handler if key is None else key)


def constant_name(point: ExtensionPoint[Any] | str) -> str:
    """The constant of ``accelkw_core.plugin`` a point is (``"model_wrapper"`` -> ``MODEL_WRAPPER``)."""
    return str(point).upper()

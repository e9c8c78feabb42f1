"""``Plan``: what a handler would do on a state, and the one path by which apply does it.

A handler's :meth:`~accelkw_core.contract.handler.KwargsHandler.plan` builds a :class:`Plan`
without side effects; ``accelkw plan`` prints it, and ``apply`` carries the same plan out. So
what a user sees before a run is what the run does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, overload

if TYPE_CHECKING:
    from accelkw_core.contract.points import ExtensionPoint
    from accelkw_core.contract.state import AcceleratorState

T = TypeVar("T")

__all__ = ["Plan", "PlanStep"]


class PlanStep(NamedTuple):
    """One step of a plan: a message and what carrying it out does.

    ``point``/``value``/``key``: a contribution to an extension point (``point`` is its name);
    ``action``: a side
    effect run at apply time (creating a process group); neither: a note on why nothing happens.
    """

    message: str
    point: str | None = None
    value: Any = None
    key: str | None = None
    action: Callable[[AcceleratorState], None] | None = None
    provides: tuple[str, ...] = ()

    @property
    def effective(self) -> bool:
        """Whether carrying the step out changes the run (a note does not)."""
        return self.point is not None or self.action is not None


class Plan:
    """The steps a handler takes on a state, in order; built by ``plan()``, run by ``apply()``.

    Example::

        def plan(self, state):
            plan = Plan(self.name)
            if state.world_size == 1:
                return plan.note("world size 1: nothing to clip across processes")
            return plan.contribute(AROUND_STEP, self._clip, "clip gradients to max_norm 1.0")

    ``AROUND_STEP`` and the other points are constants of :mod:`accelkw_core.plugin`, each an
    ``ExtensionPoint[T]``: ``mypy`` checks that a contribution is a ``T``.
    """

    __slots__ = ("handler", "steps")

    def __init__(self, handler: str) -> None:
        self.handler = handler
        self.steps: list[PlanStep] = []

    @overload
    def contribute(
        self,
        point: ExtensionPoint[T],
        value: T,
        message: str,
        *,
        key: str | None = None,
        provides: Iterable[str] = (),
    ) -> Plan: ...

    @overload
    def contribute(
        self,
        point: str,
        value: Any,
        message: str,
        *,
        key: str | None = None,
        provides: Iterable[str] = (),
    ) -> Plan: ...

    def contribute(
        self,
        point: ExtensionPoint[Any] | str,
        value: Any,
        message: str,
        *,
        key: str | None = None,
        provides: Iterable[str] = (),
    ) -> Plan:
        """Contribute ``value`` to extension ``point`` when applied; ``message`` says what it does.

        ``point`` is a constant of :mod:`accelkw_core.plugin` (``MODEL_WRAPPER``, ...), so the
        type checker checks ``value``. A point's name (``"model_wrapper"``) still works until
        0.4, with a ``DeprecationWarning`` naming the constant. ``key``: the key of a keyed
        point (default: the handler's name). ``provides`` names capabilities this gives the
        run (``"gradient_sync"``), which the runtime's gap checks ask for instead of handler
        names.
        """
        if isinstance(point, str):
            from accelkw_core.contract.points import POINTS, constant_name

            if point in POINTS:
                warnings.warn(
                    f"plan.contribute({point!r}, ...) in handler {self.handler!r}: extension "
                    f"points given by name are deprecated and stop working in accelkw 0.4; "
                    f"use the constant: from accelkw_core.plugin import {constant_name(point)}",
                    DeprecationWarning,
                    stacklevel=2,
                )
            name = point
        else:
            name = point.name
        self.steps.append(PlanStep(message, name, value, key, None, tuple(provides)))
        return self

    def run(
        self,
        action: Callable[[AcceleratorState], None],
        message: str,
        *,
        provides: Iterable[str] = (),
    ) -> Plan:
        """Run ``action(state)`` when applied (a side effect such as creating a process group)."""
        self.steps.append(PlanStep(message, None, None, None, action, tuple(provides)))
        return self

    def note(self, message: str) -> Plan:
        """Say why something does not happen; carrying it out only logs the message."""
        self.steps.append(PlanStep(message))
        return self

    @property
    def effective(self) -> bool:
        """Whether any step changes the run."""
        return any(step.effective for step in self.steps)

    @property
    def provides(self) -> set[str]:
        """Every capability the plan's steps provide."""
        return {cap for step in self.steps for cap in step.provides}

    def summary(self) -> str:
        """The steps' messages as one line (what ``accelkw plan`` prints)."""
        return "; ".join(step.message for step in self.steps) or "nothing to do"

    def carry_out(self, state: AcceleratorState) -> None:
        """Do every step on ``state`` in order, recording each message in the state's log."""
        for step in self.steps:
            if step.action is not None:
                step.action(state)
            if step.point is not None:
                state.contribute(step.point, self.handler, step.value, key=step.key)
            for capability in step.provides:
                state.provide(capability, self.handler)
            state.record(self.handler, step.message, applied=step.effective)

    def __repr__(self) -> str:
        return f"Plan({self.handler!r}: {self.summary()})"

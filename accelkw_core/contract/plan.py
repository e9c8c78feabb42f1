"""``Plan``: what a handler would do on a state, and the one path by which apply does it.

A handler's :meth:`~accelkw_core.contract.handler.KwargsHandler.plan` builds a :class:`Plan`
without side effects; ``accelkw plan`` prints it, and ``apply`` carries the same plan out. So
what a user sees before a run is what the run does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, ParamSpec, Protocol

from accelkw_core.contract.extension_point import ExtensionPoint, PointStep
from accelkw_core.contract.points import POINTS, constant_name
from accelkw_core.contract.state_view import AcceleratorState

P = ParamSpec("P")

__all__ = ["Plan", "PlanPoint", "PlanStep"]


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


class PlanPoint(Protocol[P]):
    """What ``Plan.contribute`` takes first: an extension point constant of
    :mod:`accelkw_core.plugin` (``MODEL_WRAPPER``), which makes the step from the arguments after
    it; a point's name (a ``str``, the deprecated form) is not one, so ``mypy`` reports it as
    "expected PlanPoint[...]" (:meth:`ExtensionPoint.step
    <accelkw_core.contract.points.ExtensionPoint.step>`). Through ``P`` the point alone decides
    what those arguments must be."""

    def step(self, *args: P.args, **kwargs: P.kwargs) -> PointStep: ...


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

    def contribute(self, point: PlanPoint[P], /, *args: P.args, **kwargs: P.kwargs) -> Plan:
        """Contribute a value to an extension point when applied:
        ``plan.contribute(POINT, value, message, key=None, provides=())``.

        ``POINT`` is a constant of :mod:`accelkw_core.plugin` (``MODEL_WRAPPER``, ...), an
        ``ExtensionPoint[T]``; the arguments after it are those of :meth:`ExtensionPoint.step
        <accelkw_core.contract.points.ExtensionPoint.step>`, whose ``value`` the point types, so
        ``mypy`` reports a wrong value as "expected <the point's T>". ``message`` says what the
        contribution does; ``key``: the key of a keyed point (default: the handler's name);
        ``provides`` names capabilities this gives the run (``"gradient_sync"``), which the
        runtime's gap checks ask for instead of handler names.

        A point's name (``"model_wrapper"``) still runs until 0.4, with a
        ``DeprecationWarning`` naming the constant, but is not typed: a type checker reports it.
        """
        if isinstance(point, str):
            # The deprecated form is untyped on purpose (see above): its arguments are checked
            # at run time by _named_step's signature.
            named: Callable[..., PlanStep] = self._named_step
            self.steps.append(named(point, *args, **kwargs))
        else:
            made = point.step(*args, **kwargs)
            self.steps.append(
                PlanStep(made.message, made.point, made.value, made.key, None, made.provides)
            )
        return self

    def _named_step(
        self,
        name: str,
        value: object,
        message: str,
        /,
        *,
        key: str | None = None,
        provides: Iterable[str] = (),
    ) -> PlanStep:
        if name in POINTS:
            warnings.warn(
                f"plan.contribute({name!r}, ...) in handler {self.handler!r}: extension "
                f"points given by name are deprecated and stop working in accelkw 0.4; "
                f"use the constant: from accelkw_core.plugin import {constant_name(name)}",
                DeprecationWarning,
                stacklevel=3,
            )
        return PlanStep(message, name, value, key, None, tuple(provides))

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
                state.contribute(_point(step.point), self.handler, step.value, key=step.key)
            for capability in step.provides:
                state.provide(capability, self.handler)
            state.record(self.handler, step.message, applied=step.effective)

    def __repr__(self) -> str:
        return f"Plan({self.handler!r}: {self.summary()})"


def _point(name: str) -> ExtensionPoint[Any]:
    # A step made from a point's name (the deprecated form) names no point until it is applied.
    found = POINTS.get(name)
    if found is None:
        raise ValueError(f"unknown extension point {name!r}; the points are: {', '.join(POINTS)}")
    return found

"""Planning a run without running it: each handler's plan on a state, and the gaps they leave.

``accelkw plan`` prints this; ``Accelerator`` carries the same plans out (``apply`` runs
``plan(state).carry_out(state)``), so the dry run and the run never disagree.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.contract.plan import Plan
from accelkw_core.contract.points import ExtensionPoint, point_conflicts
from accelkw_core.errors import AccelkwError, Contributor, PointConflictError
from accelkw_core.runtime.composing.missing_capabilities import (
    gaps_of_run,
    live_capabilities,
    refuse_unprovided_precision,
)

if TYPE_CHECKING:
    from accelkw_core.config.settings import Settings
    from accelkw_core.discovery.registry import Registry
    from accelkw_core.runtime.run_state import RunState

__all__ = ["HandlerPlan", "override_values", "plan_conflicts", "plan_handler", "plan_run"]

T = TypeVar("T")


class HandlerPlan:
    """A handler's plan on a state, or why it could not be planned (``error``)."""

    __slots__ = ("error", "ms", "name", "plan")

    def __init__(self, name: str, plan: Plan | None, error: str | None = None) -> None:
        self.name = name
        self.plan = plan
        self.error = error
        self.ms = 0.0  # how long planning took

    @property
    def summary(self) -> str:
        """One line: the plan's steps, or ``would fail: ...``."""
        if self.plan is None:
            return f"would fail: {self.error}"
        return self.plan.summary()


def plan_handler(name: str, handler: KwargsHandler, state: RunState) -> HandlerPlan:
    """``handler.plan(state)``; an error (a bad value, a plugin bug) becomes ``would fail``.

    A handler written before plans existed (it overrides ``apply`` and not ``plan``) is shown by
    its ``describe()``, since its ``apply`` does not go through a plan.
    """
    cls = type(handler)
    try:
        if cls.plan is KwargsHandler.plan and cls.apply is not KwargsHandler.apply:
            described = (
                handler.describe(state) if cls.describe is not KwargsHandler.describe else ""
            )
            return HandlerPlan(
                name, Plan(name).note(described or "applies (apply() without plan())")
            )
        return HandlerPlan(name, handler.plan(state))
    except AccelkwError as exc:
        return HandlerPlan(name, None, str(exc))
    except Exception as exc:  # a plugin's plan() must not hide the rest of the plan
        return HandlerPlan(name, None, f"plan() raised {type(exc).__name__}: {exc}")


def plan_run(
    settings: Settings, state: RunState, registry: Registry
) -> tuple[list[HandlerPlan], list[str]]:
    """Every composed handler's plan on ``state``, in apply order, and the gaps they leave."""
    plans = []
    for hs in settings.handlers:
        started = time.perf_counter()
        planned = plan_handler(hs.name, hs.handler, state)
        planned.ms = (time.perf_counter() - started) * 1000
        plans.append(planned)
    provided = {cap for hp in plans if hp.plan is not None for cap in hp.plan.provides}
    capabilities = live_capabilities(state, provided)
    gaps = gaps_of_run(state, capabilities, registry, settings.disabled)
    try:
        refuse_unprovided_precision(state, capabilities, registry, settings.disabled)
    except AccelkwError as exc:
        gaps.insert(0, f"the run would stop: {exc}")
    return plans, gaps


def plan_conflicts(
    plans: Sequence[HandlerPlan], who: Mapping[str, tuple[str | None, str | None]]
) -> list[PointConflictError]:
    """The point conflicts the plans would meet when carried out, one error each, naming every
    contributor; ``who`` maps a handler to its ``(distribution, origin)``.

    ``accelkw plan``, ``config check`` and ``plugins list --strict`` report these before a run,
    and a run that meets one raises the same error (:func:`~.composition.compose`).
    """
    steps = [
        (hp.name, step.point, step.key)
        for hp in plans
        if hp.plan is not None
        for step in hp.plan.steps
        if step.point is not None
    ]
    return [
        PointConflictError.of(
            point, [Contributor(h, *who.get(h, (None, None))) for h in handlers], key
        )
        for point, key, handlers in point_conflicts(steps)
    ]


def override_values(state: RunState, handler: Any, point: ExtensionPoint[T], what: str) -> list[T]:
    """What ``handler``, passed for one call, contributes to ``point`` on this run's facts.

    ``accelerator.autocast(autocast_handler=...)`` and ``profile(profile_handler=...)`` carry
    the handler's plan out on a scratch state, so a per-call override goes through the same
    points as a composed handler. ``what`` names the call in the ``TypeError`` for a
    ``handler`` that is not a handler instance.
    """
    if not isinstance(handler, KwargsHandler):
        raise TypeError(
            f"{what}: got {type(handler).__name__}, expected a handler instance that "
            f"contributes to the {point.name!r} extension point"
        )
    scratch = state.scratch()
    handler.plan(scratch).carry_out(scratch)
    return scratch.values(point)

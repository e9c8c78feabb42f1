"""The process group of a run without an ``Accelerator``: what ``PartialState()`` sets up.

Accelerate's ``PartialState()`` starts the processes' group by itself, so an inference script
needs nothing else. Here the group is a capability (``"process_group"``) that an installed
handler provides, so ``PartialState()`` resolves the run's settings as an ``Accelerator`` would
(code, environment, config file), plans every composed handler on the run's facts and carries
out the plans of those that would provide the group, through the same :func:`compose` as the
``Accelerator``. The other handlers (autocast, wrappers, ...) take no part: a ``PartialState``
has no model, and Accelerate's sets up nothing else either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from accelkw_core.config.settings import resolve_settings
from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.discovery.default_registry import get_registry
from accelkw_core.discovery.registry import Registry
from accelkw_core.errors import ConfigError
from accelkw_core.runtime.composing.composition import compose
from accelkw_core.runtime.composing.missing_capabilities import PROCESS_GROUP
from accelkw_core.runtime.composing.planning import plan_handler
from accelkw_core.runtime.run_state import RunState

__all__ = ["compose_process_group"]


def compose_process_group(
    state: RunState,
    init_kwargs: Mapping[str, Any] | None = None,
    *,
    registry: Registry | None = None,
) -> list[KwargsHandler]:
    """Apply to ``state`` the handlers whose plan provides the process group; return them.

    ``init_kwargs`` are Accelerate's ``PartialState(**kwargs)`` (``backend="gloo"``,
    ``timeout=...``): each goes to the field of that name of a handler providing the group
    (its other values come from the config and the environment, as for an ``Accelerator``). A
    keyword none of them has is a :class:`ConfigError`. Nothing provides a group on one
    process, or when no installed handler does: then nothing is applied, and a collective
    says what to install.
    """
    registry = registry if registry is not None else get_registry()
    settings = resolve_settings(
        mixed_precision=state.mixed_precision, cpu=state.cpu, registry=registry
    )
    chosen = []
    for hs in settings.handlers:
        planned = plan_handler(hs.name, hs.handler, state.scratch())
        if planned.plan is not None and PROCESS_GROUP in planned.plan.provides:
            chosen.append(hs)
    left = dict(init_kwargs or {})
    for hs in chosen:
        names = hs.handler.field_values()
        mine = {k: left.pop(k) for k in list(left) if k in names}
        if mine:
            hs.handler = hs.handler.replace(**mine)
    if left:
        key, value = next(iter(left.items()))
        owners = ", ".join(hs.name for hs in chosen) or "none installed"
        raise ConfigError(
            "PartialState",
            key,
            value,
            f"a field of the handler that sets up the process group ({owners})",
        )
    if not chosen:
        return []
    return compose(
        state, registry=registry, settings=dataclasses.replace(settings, handlers=chosen)
    )

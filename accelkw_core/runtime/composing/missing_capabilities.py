"""Loud gaps: what a multi-process run lacks when no handler provides a capability it needs.

A world size above one with nothing that synchronises gradients, or with no process group, does
not fail by itself: each process would train its own model. These checks ask for capabilities
(not for handler names) and turn a missing one into a warning that says what will happen and
what to install. The same check serves a plan (capabilities its steps would provide) and a
composed state (capabilities its handlers provided, plus a process group created outside).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from accelkw_core.discovery.catalog import PROVIDERS, provider_hint
from accelkw_core.errors import ConfigError, MissingPluginWarning
from accelkw_core.facts.precision import FP8
from accelkw_core.runtime.run_state import RunState

if TYPE_CHECKING:
    from accelkw_core.discovery.registry import Registry

__all__ = [
    "FP8_TRAINING",
    "GRADIENT_SYNC",
    "LOSS_SCALING",
    "MIXED_PRECISION",
    "PROCESS_GROUP",
    "check_composed_run",
    "find_gaps",
    "gaps_of_run",
    "live_capabilities",
    "precision_refusal",
    "refuse_unprovided_precision",
    "warn_gaps",
]

GRADIENT_SYNC = "gradient_sync"
PROCESS_GROUP = "process_group"
MIXED_PRECISION = "mixed_precision"
LOSS_SCALING = "loss_scaling"
#: What a handler provides when it trains the run in fp8: the core has no fp8 of its own.
FP8_TRAINING = "fp8"


def _why_missing(
    capability: str,
    installed: Collection[str],
    disabled: Mapping[str, str],
    troubles: Mapping[str, str],
) -> str:
    provider = PROVIDERS.get(capability)
    if provider is not None and provider in troubles:
        return troubles[provider]
    if provider is not None and provider in disabled:
        return f"the {provider!r} handler is disabled ({disabled[provider]})"
    if provider is not None and provider in installed:
        return f"the {provider!r} handler is installed but does not provide it on this run"
    return f"no installed handler provides it ({provider_hint(capability)})"


def find_gaps(
    world_size: int,
    capabilities: Collection[str],
    installed: Collection[str],
    disabled: Mapping[str, str],
    *,
    mixed_precision: str = "no",
    troubles: Mapping[str, str] | None = None,
) -> list[str]:
    """What a run lacks, given the capabilities it has: gradient sync and a process group on
    several processes, autocast and loss scaling under mixed precision.

    ``troubles`` (handler name -> why an installed one is unusable, see
    :func:`~accelkw_core.discovery.plugin_warnings.handler_troubles`) explains a missing provider
    better than an install line would.
    """
    troubles = troubles or {}

    def why(capability: str) -> str:
        return _why_missing(capability, installed, disabled, troubles)

    gaps = []
    if mixed_precision in ("fp16", "bf16") and MIXED_PRECISION not in capabilities:
        gaps.append(
            f"mixed_precision={mixed_precision!r} has no effect: no handler autocasts the forward "
            f"passes, so the run trains in float32; {why(MIXED_PRECISION)}"
        )
    if mixed_precision == "fp16" and LOSS_SCALING not in capabilities:
        gaps.append(
            "mixed_precision='fp16' without loss scaling: small gradients may underflow to zero "
            f"in float16; {why(LOSS_SCALING)}"
        )
    if world_size <= 1:
        return gaps
    if GRADIENT_SYNC not in capabilities:
        gaps.append(
            f"world size {world_size} > 1 but no handler synchronises gradients across "
            "processes: gradients will not be synchronised, each process trains its own copy; "
            + why(GRADIENT_SYNC)
        )
    if PROCESS_GROUP not in capabilities:
        gaps.append(
            f"world size {world_size} > 1 but no torch.distributed process group is initialised: "
            "gather, reduce, wait_for_everyone and gradient synchronisation need one; "
            + why(PROCESS_GROUP)
            + ", or call torch.distributed.init_process_group before creating the Accelerator"
        )
    return gaps


def precision_refusal(
    mixed_precision: str,
    capabilities: Collection[str],
    installed: Collection[str],
    disabled: Mapping[str, str],
    troubles: Mapping[str, str] | None = None,
) -> str | None:
    """Why the run cannot train in ``mixed_precision`` (``"fp8"`` with no handler providing
    it), or ``None``. Unlike the gaps, this stops the run: fp8 has no float32 fallback that
    would still be the run the user asked for."""
    if mixed_precision != FP8 or FP8_TRAINING in capabilities:
        return None
    provider = PROVIDERS.get(FP8_TRAINING)
    known = (installed, disabled, troubles or {})
    if provider is None or not any(provider in names for names in known):
        return f"an installed handler that trains in fp8: {provider_hint(FP8_TRAINING)}"
    why = _why_missing(FP8_TRAINING, installed, disabled, troubles or {})
    return f"an installed handler that trains in fp8 ({why})"


def refuse_unprovided_precision(
    state: RunState,
    capabilities: Collection[str],
    registry: Registry,
    disabled: Mapping[str, str],
) -> None:
    """Raise a one-line :class:`ConfigError` when :func:`precision_refusal` has a reason."""
    from accelkw_core.discovery.plugin_warnings import handler_troubles

    refusal = precision_refusal(
        state.mixed_precision,
        capabilities,
        registry.handlers(),
        disabled,
        handler_troubles(registry.plugins()),
    )
    if refusal is not None:
        raise ConfigError("accelerator", "mixed_precision", state.mixed_precision, refusal)


def gaps_of_run(
    state: RunState,
    capabilities: Collection[str],
    registry: Registry,
    disabled: Mapping[str, str],
) -> list[str]:
    """:func:`find_gaps` for a run on ``state`` with ``registry``'s plugins (and their troubles)."""
    from accelkw_core.discovery.plugin_warnings import handler_troubles

    return find_gaps(
        state.world_size,
        capabilities,
        registry.handlers(),
        disabled,
        mixed_precision=state.mixed_precision,
        troubles=handler_troubles(registry.plugins()),
    )


def live_capabilities(state: RunState, provided: Collection[str] | None = None) -> set[str]:
    """``provided`` (default: what the state's handlers provided) plus a process group that
    already exists in this process, made outside any handler."""
    found = set(state.capabilities if provided is None else provided)
    # A group made elsewhere needs torch.distributed imported already: never import it here,
    # so `accelkw plan` stays torch-free.
    dist = sys.modules.get("torch.distributed")
    live = dist is not None and dist.is_available() and dist.is_initialized()
    if state.distributed and live:
        found.add(PROCESS_GROUP)
    return found


def warn_gaps(state: RunState, gaps: list[str], stacklevel: int = 3) -> None:
    """Warn about each gap and record it in the state's log (``stacklevel``: ``warnings``')."""
    for gap in gaps:
        state.record("accelerator", gap, applied=False)
        warnings.warn(gap, MissingPluginWarning, stacklevel=stacklevel)


def check_composed_run(state: RunState, registry: Registry, disabled: Mapping[str, str]) -> None:
    """Refuse a mixed precision nothing composed provides, then warn about each gap.

    What a just-composed ``Accelerator`` checks; the warnings point at the line that built it.
    """
    capabilities = live_capabilities(state)
    refuse_unprovided_precision(state, capabilities, registry, disabled)
    # 4: past this function and the Accelerator's constructor, to the code that called it.
    warn_gaps(state, gaps_of_run(state, capabilities, registry, disabled), stacklevel=4)

"""Loud gaps: what a multi-process run lacks when a plugin is missing or disabled.

A world size above one with nothing that synchronises gradients, or with no process group, does
not fail by itself: each process would train its own model. These checks turn that into a
warning that says what will happen and which distribution to install.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from accelkw_core.discovery.catalog import install_hint
from accelkw_core.errors import MissingPluginWarning
from accelkw_core.runtime.state import AcceleratorState

__all__ = ["gaps_after_apply", "gaps_in_plan", "warn_gaps"]

# The built-in handlers that close each gap; named here only to say what to install.
SYNC_HANDLER = "ddp"
GROUP_HANDLER = "process_group"


def _why_missing(name: str, installed: Mapping[str, object], disabled: Mapping[str, str]) -> str:
    if name in disabled:
        return f"the {name!r} handler is disabled ({disabled[name]})"
    if name in installed:
        return f"the {name!r} handler is installed but did not apply"
    return f"no {name!r} handler is installed ({install_hint(name)})"


def _sync_gap(world_size: int, why: str) -> str:
    return (
        f"world size {world_size} > 1 but no handler wraps models for gradient synchronisation: "
        f"gradients will not be synchronised, each process trains its own copy; {why}"
    )


def _group_gap(world_size: int, why: str) -> str:
    return (
        f"world size {world_size} > 1 but no torch.distributed process group is initialised: "
        f"gather, reduce, wait_for_everyone and DDP need one; {why}, "
        "or call torch.distributed.init_process_group before creating the Accelerator"
    )


def gaps_after_apply(
    state: AcceleratorState,
    installed: Mapping[str, object],
    disabled: Mapping[str, str],
) -> list[str]:
    """The gaps of a composed ``state``: judged by its slots and the live process group."""
    if not state.distributed:
        return []
    gaps = []
    if not state.model_wrappers:
        gaps.append(_sync_gap(state.world_size, _why_missing(SYNC_HANDLER, installed, disabled)))
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        why = _why_missing(GROUP_HANDLER, installed, disabled)
        gaps.append(_group_gap(state.world_size, why))
    return gaps


def gaps_in_plan(
    world_size: int,
    composed: set[str],
    installed: Mapping[str, object],
    disabled: Mapping[str, str],
) -> list[str]:
    """The gaps a plan would have, judged by which handlers it composes (nothing is applied)."""
    if world_size <= 1:
        return []
    gaps = []
    if SYNC_HANDLER not in composed:
        gaps.append(_sync_gap(world_size, _why_missing(SYNC_HANDLER, installed, disabled)))
    if GROUP_HANDLER not in composed:
        gaps.append(_group_gap(world_size, _why_missing(GROUP_HANDLER, installed, disabled)))
    return gaps


def warn_gaps(state: AcceleratorState, gaps: list[str]) -> None:
    """Warn about each gap and record it in the state's log."""
    for gap in gaps:
        state.record("accelerator", gap, applied=False)
        warnings.warn(gap, MissingPluginWarning, stacklevel=3)

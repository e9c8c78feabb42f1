"""Who takes part in a save: every process, or the main process alone.

Accelerate lets a script save from the main process only (``if accelerator.is_main_process:
accelerator.save_state(path)``, the diffusers scripts' way), because its ``save_state`` runs no
collective. accelkw's save agrees on each of its stages, so before the first collective the
processes find out who is saving without one, in the process group's key-value store:

- each process other than the main one, in ``save_state``, claims the next slot of a sequence
  of its own (``here``) and waits for the main process to take it;
- the main process waits up to ``ACCELKW_SAVE_JOIN_TIMEOUT`` seconds (default 5) for each
  other process's next slot; it takes those claimed (``joined``) and claims those still empty
  for itself (``alone``), one atomic ``compare_set`` each, so a process arriving at that
  instant is either in or out, never both;
- when every process joined, the save is the usual one, agreed by all; otherwise the main
  process saves alone (its own random states only, as Accelerate's checkpoint holds), and a
  process that had joined returns without saving. A process other than the main one waits
  longer, :data:`FOLLOWER_FACTOR` times the timeout (the main process may be late after work of
  its own, a validation, a log), then withdraws its claim the same way and returns.

Slots are decided in order, and the store keeps which is next, so a process that never called
``save_state`` during the main process's lone saves skips their ``alone`` slots the next time
it does, and a second ``Accelerator`` on the same process group continues where the first
stopped.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import ConfigError

if TYPE_CHECKING:
    from accelkw_core.runtime.state import RunState

__all__ = ["FOLLOWER_FACTOR", "JOIN_TIMEOUT_ENV", "Participation", "join_timeout", "meet"]

#: How long (seconds) the main process waits for the others to reach ``save_state``.
JOIN_TIMEOUT_ENV = "ACCELKW_SAVE_JOIN_TIMEOUT"
_DEFAULT_TIMEOUT = 5.0
#: How many timeouts a process other than the main one waits for the main process.
FOLLOWER_FACTOR = 30
_POLL = 0.01


def _pauses() -> Iterator[float]:
    """How long to sleep between polls: from 0.5 ms, doubling, up to 10 ms (most meetings
    end within a millisecond or two, and a long wait costs the store little)."""
    pause = 0.0005
    while True:
        yield pause
        pause = min(pause * 2, _POLL)


_HERE, _JOINED, _ALONE, _WITHDRAWN = "here", "joined", "alone", "withdrawn"


class Participation(enum.Enum):
    """How this process takes part in one ``save_state`` call."""

    #: Every process is saving: the usual save, agreed by all.
    ALL = "all"
    #: The main process saves alone (the others are not in ``save_state``).
    MAIN_ALONE = "main-alone"
    #: This process called ``save_state`` but the main process saved without it.
    LEFT_OUT = "left-out"


def join_timeout() -> float:
    """``ACCELKW_SAVE_JOIN_TIMEOUT`` in seconds (default 5)."""
    raw = os.environ.get(JOIN_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return _DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError("environment", JOIN_TIMEOUT_ENV, raw, "a number of seconds above 0")
    return value


def _store() -> Any:
    # torch names no public accessor for the default group's store; this one is what its own
    # store-based barrier uses. Prefixed, so nothing of ours meets anyone else's keys.
    from torch.distributed.distributed_c10d import PrefixStore, _get_default_store

    return PrefixStore("accelkw/save-rendezvous/", _get_default_store())


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def meet(state: RunState) -> Participation:
    """Who takes part in this save; no collective, so a lone main process never waits."""
    from accelkw_core.runtime import collectives as ops

    if not (state.distributed and state.world_size > 1 and ops.has_group()):
        return Participation.ALL
    timeout = join_timeout()
    store = _store()
    if state.is_main_process:
        return _lead(store, state, timeout)
    return _join(store, state.rank, timeout)


# Each process other than the main one has a sequence of slots, ``<rank>/<n>``, and a pointer to
# the first one not yet decided, ``<rank>/next``, both in the store (not in any Accelerator:
# a second Accelerator on the same process group continues the sequence). Exactly one process
# decides each slot (its compare_set succeeds) and then moves the pointer on.


def _pointer(store: Any, rank: int) -> int:
    return int(store.add(f"{rank}/next", 0))


def _advance(store: Any, rank: int) -> None:
    store.add(f"{rank}/next", 1)


def _moved_past(store: Any, rank: int, slot: int) -> None:
    """Wait for the process that decided ``slot`` to move the pointer on (at once, after it)."""
    pauses = _pauses()
    while _pointer(store, rank) <= slot:
        time.sleep(next(pauses))


def _lead(store: Any, state: RunState, timeout: float) -> Participation:
    deadline = time.monotonic() + timeout
    joined: list[str] = []
    everyone = True
    for rank in range(state.world_size):
        if rank == state.rank:
            continue
        while True:
            slot = _pointer(store, rank)
            key = f"{rank}/{slot}"
            value = _take(store, key, deadline)
            if value == _WITHDRAWN:
                # It gave up waiting for an earlier save of ours; its next slot is this save's.
                _moved_past(store, rank, slot)
                continue
            _advance(store, rank)
            if value == _JOINED:
                joined.append(key)
            else:
                everyone = False
            break
    verdict = Participation.ALL if everyone else Participation.MAIN_ALONE
    for key in joined:
        store.set(f"{key}/verdict", verdict.value)
    return verdict


def _join(store: Any, rank: int, timeout: float) -> Participation:
    while True:
        slot = _pointer(store, rank)
        key = f"{rank}/{slot}"
        if _text(store.compare_set(key, "", _HERE)) == _HERE:
            break
        # Decided already (``alone``: a save the main process made while this one was
        # elsewhere): wait for the pointer to move on, and claim the next.
        _moved_past(store, rank, slot)
    deadline = time.monotonic() + timeout * FOLLOWER_FACTOR
    verdict = f"{key}/verdict"
    pauses = _pauses()
    while True:
        if store.check([verdict]):
            found = _text(store.get(verdict))
            return Participation.ALL if found == Participation.ALL.value else Participation.LEFT_OUT
        # Past the deadline, withdraw; if the main process took the slot first, its verdict
        # follows.
        if (
            time.monotonic() > deadline
            and _text(store.compare_set(key, _HERE, _WITHDRAWN)) == _WITHDRAWN
        ):
            _advance(store, rank)
            return Participation.LEFT_OUT
        time.sleep(next(pauses))


def _take(store: Any, key: str, deadline: float) -> str:
    """Wait until ``deadline`` for ``key`` to be claimed, then decide it: ``joined``, ``alone``
    (still empty: claimed for the main process), or ``withdrawn`` (decided by its process)."""
    pauses = _pauses()
    while True:
        if store.check([key]) or time.monotonic() > deadline:
            value = _text(store.compare_set(key, "", _ALONE))
            if value == _HERE:
                value = _text(store.compare_set(key, _HERE, _JOINED))
            if value in (_JOINED, _ALONE, _WITHDRAWN):
                return value
        time.sleep(next(pauses))

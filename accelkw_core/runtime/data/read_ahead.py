"""What a pass of a prepared loader has read ahead of the loop, and how a resumed pass reads it again.

A prepared loader fetches a batch before the loop has used the one before it (Accelerate's
loaders do too), and fetching draws: a collate function masking tokens draws from torch's global
generator in the main process; a worker draws for its samples from its own generators. So at a
save the process's generators already hold the draws of a batch the loop has not seen. A
:class:`PassReads` counts a pass's fetches (by index in the pass, skipped batches included),
keeps the global states before the last few and the states the workers sent with theirs; a
checkpoint records from them where the pass stood (:meth:`PassReads.ahead`,
:meth:`PassReads.worker_plan`). A resumed pass gets that record as a :class:`Replay`: it starts
from the pass's opening states (its base seed, its order), fetches the batch that was ahead
from the states it was fetched from, then gives back the states the load restored, so every
later draw is the uninterrupted run's.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator
from typing import Any

from accelkw_core.runtime.data.generators import (
    global_states,
    numpy_fingerprint,
    set_global_states,
)
from accelkw_core.runtime.data.worker_draws import Tapped, read_worker_states

__all__ = ["DrawWatch", "PassReads", "Replay"]


class DrawWatch:
    """Whether a loader's fetches draw from NumPy's global generator, learnt as it fetches.

    Reading NumPy's state before every fetch costs more than most batches; until a fetch is
    seen to draw from it (by :func:`numpy_fingerprint`), only its fingerprint is read; a pass
    keeps the fetches that drew unseen (a save with one of them ahead says so).
    """

    __slots__ = ("numpy",)

    def __init__(self) -> None:
        self.numpy = False


@dataclasses.dataclass
class Replay:
    """A pass to resume, as a checkpoint recorded it.

    ``opening``: the global generators' states when the pass began (an older checkpoint has
    torch's only). ``ahead``: ``{"index", "count", "states"}``, the pass's batches fetched but
    not yet used at the save (from ``index``, ``count`` of them) and the global states before
    the first was fetched; ``None`` when none were. ``workers``: ``{"at", "states"}``, each
    worker's states before it made batch ``at`` of the pass; ``None`` without workers.
    ``left``: the loop had left the pass (``break``) before the save; then ``order`` is the
    state the pass's shuffling generator drew its order from (the loader's generator is set to
    where the next pass starts, and to ``order`` only when ``skip_first_batches`` continues the
    pass).
    """

    opening: dict[str, Any]
    ahead: dict[str, Any] | None = None
    workers: dict[str, Any] | None = None
    left: bool = False
    order: Any = None

    @classmethod
    def from_position(cls, position: Any) -> Replay | None:
        """The replay a saved position asks for; ``None`` for a position between passes."""
        opening = position.get("pass_states")
        if opening is None and position.get("global_generator") is not None:
            opening = {"torch": position["global_generator"]}
        if opening is None:
            return None
        left = bool(position.get("left", False))
        return cls(
            opening,
            position.get("ahead"),
            position.get("workers"),
            left=left,
            order=position.get("generator") if left else None,
        )


class PassReads:
    """The fetches of one pass from torch's iterator, from the pass's batch ``first`` on.

    Iterating it over torch's iterator yields the same batches (a worker's tapped batch
    unwrapped). Given a ``replay`` and the states a load restored (``restored``), it sets the
    states the batch that was ahead was fetched from just before fetching it, and ``restored``
    once the last batch that was ahead is fetched. ``handed_over``: a skipping batch sampler
    calls :meth:`hand_over` before the pass's first fetch. ``ahead``: how many fetches a
    batch the loader yields takes (it reads one such batch ahead).
    """

    def __init__(
        self,
        first: int,
        *,
        replay: Replay | None = None,
        restored: dict[str, Any] | None = None,
        workers: int = 0,
        handed_over: bool = False,
        ahead: int = 1,
        watch: DrawWatch | None = None,
    ) -> None:
        self.first = first
        # A skipping batch sampler hands over at ``first`` (hand_over): torch's first fetch
        # draws the pass's order too, which must come from the opening states.
        self._handed_over = handed_over
        self.count = first  # the index in the pass of the next fetch
        self._workers = workers
        # The states before each fetch of the batches a save may find ahead (``ahead`` of
        # them, a dispatched global batch's several), and one more.
        self._before: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(
            maxlen=ahead + 2
        )
        # Enough for two rounds of workers behind the first unused batch, and what is read
        # ahead of it (a dispatched global batch is several of the loader's).
        self._taps: collections.deque[tuple[int, int, bytes]] = collections.deque(
            maxlen=2 * workers + ahead + 2
        )
        self._restored = restored
        self._watch = watch if watch is not None else DrawWatch()
        self._unseen: set[int] = set()  # fetches that drew from NumPy before it was watched
        saved = replay.ahead if replay is not None else None
        self._switch_at = int(saved["index"]) if saved else None
        self._switch_states: dict[str, Any] | None = saved["states"] if saved else None
        self._restore_after = int(saved["index"]) + int(saved["count"]) - 1 if saved else None

    @property
    def pending(self) -> bool:
        """Whether the states the load restored are still to be given back."""
        return self._restored is not None

    @property
    def restores_on_its_own(self) -> bool:
        """Whether the replay says when to give the restored states back (a newer checkpoint)."""
        return self._restore_after is not None

    def restore(self) -> None:
        """Give back the states the load restored (at once, if the replay cannot say when)."""
        if self._restored is not None:
            set_global_states(self._restored)
            self._restored = None

    def hand_over(self) -> None:
        """The pass's order is drawn and the first batch it keeps is next: a skipping batch
        sampler calls this just before handing that batch's indices out."""
        if self._switch_at == self.first and self._switch_states is not None:
            set_global_states(self._switch_states)
            self._switch_states = None
        elif self._switch_at is not None and self._switch_at < self.first:
            self.restore()  # the batch that was ahead is skipped: nothing to fetch again

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        while True:
            index = self.count
            handed = self._handed_over and index == self.first
            if index == self._switch_at and self._switch_states is not None and not handed:
                set_global_states(self._switch_states)
                self._switch_states = None
            # With workers the main process only receives the batch: nothing it does draws
            # from Python's or NumPy's generator, so torch's (the pass's opening) is enough.
            main = self._workers == 0
            numpy = main and self._watch.numpy
            self._before.append((index, global_states(python=main, numpy=numpy)))
            fingerprint = numpy_fingerprint() if main and not numpy else None
            try:
                batch = next(batches)
            except StopIteration:
                self.restore()
                return
            if fingerprint is not None and numpy_fingerprint() != fingerprint:
                self._watch.numpy = True  # read NumPy's state before every fetch from now on
                self._unseen.add(index)
            if isinstance(batch, Tapped):
                self._taps.append((index, batch.worker, batch.states))
                batch = batch.batch
            self.count += 1
            if index == self._restore_after:
                self.restore()
            yield batch

    def ahead(self, consumed: int) -> dict[str, Any] | None:
        """The batches fetched beyond the first ``consumed`` of the pass, and the states the
        first of them was fetched from; ``None`` when none were fetched."""
        if self.count <= consumed:
            return None
        states = next((s for i, s in self._before if i == consumed), None)
        if states is None:
            return None
        return {"index": consumed, "count": self.count - consumed, "states": states}

    def unseen_ahead(self, consumed: int) -> bool:
        """Whether a batch fetched beyond the first ``consumed`` drew from NumPy's generator
        before the loader watched it (its states before the fetch lack NumPy's)."""
        return any(consumed <= index < self.count for index in self._unseen)

    def worker_plan(self, consumed: int) -> dict[str, Any] | None:
        """Each worker's states before the round of batches that holds batch ``consumed``.

        Batch ``i`` of a pass is made by worker ``i % workers``; a resumed pass skips whole
        rounds (to ``at``) and reads the rest of the round again, so each worker starts at
        ``at`` with the states it had after its last batch before it. ``None`` when ``at`` is 0
        (the workers' seeding gives their states) or the states were not kept.
        """
        workers = self._workers
        if not workers:
            return None
        at = consumed - consumed % workers
        if at == 0:
            return None
        latest: dict[int, tuple[int, bytes]] = {}
        for index, worker, blob in self._taps:
            if index < at and index >= latest.get(worker, (-1, b""))[0]:
                latest[worker] = (index, blob)
        if sorted(latest) != list(range(workers)):
            return None
        states = {w: read_worker_states(blob) for w, (_, blob) in latest.items()}
        return {"at": at, "states": states}

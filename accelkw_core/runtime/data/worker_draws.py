"""Where each worker process's generators stand, so a resumed pass's workers start there.

A worker seeds Python's, NumPy's and torch's generators from the pass's base seed and its id, then
draws from them for each sample it loads (a random crop in ``__getitem__``). With worker
processes a prepared loader collates through :class:`WorkerTap`, which sends with each batch the
worker's states once the batch is made, and starts its workers through :class:`WorkerStart`,
which can set a worker's states to the ones a checkpoint recorded. Both are picklable, for
workers started by ``spawn``.
"""

from __future__ import annotations

import pickle
import random
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from accelkw_core.runtime.data.generators import set_global_states

__all__ = ["Tapped", "WorkerStart", "WorkerTap", "read_worker_states"]


class Tapped(NamedTuple):
    """A batch made in a worker, with the worker's id and its generators' states after it.

    A named tuple, so that pinning memory pins the batch inside it as it would the batch alone.
    """

    batch: Any
    worker: int
    states: bytes


class WorkerTap:
    """``collate_fn`` run in a worker: the batch, tapped with the worker's generators' states."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> Any:
        batch = self.collate_fn(samples)
        info = torch.utils.data.get_worker_info()
        if info is None:  # collated in the main process: nothing to tap
            return batch
        states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            states["numpy"] = numpy.random.get_state()
        # Pickled here, once, so the main process keeps bytes until a checkpoint asks for them.
        return Tapped(batch, info.id, pickle.dumps(states))


def read_worker_states(blob: bytes) -> dict[str, Any]:
    """The states a :class:`WorkerTap` of this run's own workers sent."""
    # Bytes this run's own workers made (never read from a file).
    states: dict[str, Any] = pickle.loads(blob)
    return states


class WorkerStart:
    """``worker_init_fn`` that runs the user's, then sets the states ``plan`` gives the worker.

    ``plan`` maps a worker id to the states that worker had in the run a checkpoint recorded;
    a worker not in it keeps what torch's seeding and the user's function gave it.
    """

    def __init__(
        self, init_fn: Callable[[int], Any] | None, plan: dict[int, dict[str, Any]] | None = None
    ) -> None:
        self.init_fn = init_fn
        self.plan = plan or {}

    def __call__(self, worker_id: int) -> None:
        if self.init_fn is not None:
            self.init_fn(worker_id)
        states = self.plan.get(worker_id)
        if states is None:
            return
        set_global_states(states)

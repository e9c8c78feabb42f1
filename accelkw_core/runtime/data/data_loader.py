"""Data loaders for a run: sharded across processes, batches moved to the process's device.

Imported by ``Accelerator.prepare`` only, so importing torch here costs nothing at package import.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
import warnings
from collections.abc import Callable, Iterator, Sized
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler

from accelkw_core.errors import AccelkwError, CheckpointWarning, ConfigError
from accelkw_core.runtime.data.batch_dispatch import (
    DispatchedBatch,
    IterableShard,
    dispatched_batches,
)
from accelkw_core.runtime.data.dataloader_config import DataLoaderConfiguration
from accelkw_core.runtime.data.generators import global_states, set_global_states
from accelkw_core.runtime.data.read_ahead import DrawWatch, PassReads, Replay
from accelkw_core.runtime.data.worker_draws import WorkerStart, WorkerTap
from accelkw_core.runtime.run_state import RunState

__all__ = [
    "BatchShard",
    "DispatchingDataLoader",
    "LoaderProgress",
    "PreparedDataLoader",
    "SeedableRandomSampler",
    "SkipBatchSampler",
    "SkippingDataLoader",
    "move_to_device",
    "prepare_data_loader",
    "skip_first_batches",
]

# DataLoader arguments copied from the original onto the rebuilt loader, when torch has them.
_COPIED = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


class LoaderProgress:
    """Which prepared data loaders are iterating, innermost last (Accelerate's ``GradientState``).

    ``end_of_dataloader`` is ``True`` while the last batch of the innermost active loader is
    out; ``remainder`` is how many samples of that loader's last round are real (the rest were
    repeated from the start so every process got a full batch), ``-1`` when unknown.
    ``accelerator.gather_for_metrics`` reads both; so may a gradient-accumulation plugin
    (``sync_with_dataloader``).
    """

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active: list[PreparedDataLoader] = []

    @property
    def in_dataloader(self) -> bool:
        return bool(self.active)

    @property
    def end_of_dataloader(self) -> bool:
        return bool(self.active) and self.active[-1].end_of_dataloader

    @property
    def remainder(self) -> int:
        return self.active[-1].remainder if self.active else -1


class PreparedDataLoader(DataLoader[Any]):
    """A ``DataLoader`` that yields device batches and knows when its last batch is out.

    It iterates one batch ahead, as Accelerate's ``DataLoaderShard`` does, so
    ``end_of_dataloader`` is ``True`` while the last batch is being used, and ``remainder`` says
    how many samples of the last round across processes are real. ``epoch`` counts full passes;
    ``set_epoch(n)`` sets it and is passed on to a sampler (or dataset) that has ``set_epoch``.
    When distributed with shuffling, the sampler's generator is made equal on every process at
    the start of each pass (rank 0's), so the processes shard one permutation.
    """

    def __init__(
        self,
        *args: Any,
        device: Any = None,
        progress: LoaderProgress | None = None,
        total_batch_size: int | None = None,
        synchronized_generator: Any = None,
        non_blocking: bool = False,
        skip_batches: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.device = device
        #: batches of each pass not yielded (read and dropped: a stream cannot seek).
        self.skip_batches = skip_batches
        self.non_blocking = non_blocking
        self.epoch = 0
        self.progress = progress
        self.end_of_dataloader = False
        self.remainder = -1
        self._total_batch_size = total_batch_size
        self.synchronized_generator = synchronized_generator
        # The shuffling generator's state when the current pass drew its order, so that a
        # checkpoint taken mid-pass gives a resumed run the same order (see position()).
        self._pass_state: Any = None
        # The global generators when the pass began: a pass draws from them as it starts (the
        # loader's base seed; the order, for a sampler without a generator of its own), so a
        # resumed pass replays those draws from them and then goes back to the restored state.
        # _pass_global is torch's alone, the key older checkpoints have.
        self._pass_draws: dict[str, Any] | None = None
        self._pass_global: Any = None
        self._replay: Replay | None = None
        # The current pass's fetches (what it read ahead of the loop, and from which states),
        # how many of its batches the loop has had, whether it is running or was left (a
        # ``break``: a save then still records where it stood), and for a resumed pass, the
        # states to start its workers with.
        self._reads = PassReads(0)
        self._consumed = 0
        self._in_pass = False
        self._abandoned = False
        self._worker_plan: dict[int, dict[str, Any]] | None = None
        # Whether this loader's fetches draw from NumPy (its copies share what it learnt).
        self._watch = DrawWatch()
        # Batches of a pass read and dropped that len() leaves out (see skip_first_batches).
        self._dropped = 0
        # For a copy made by skip_first_batches: the loader it stands for (the one prepared,
        # which a checkpoint records), and on that loader, the copy iterating now.
        self._origin: PreparedDataLoader | None = None
        self._live: PreparedDataLoader | None = None
        if self.batch_size is None:
            # Built from a batch sampler: report its per-process batch size, as the user set it
            # (DataLoader refuses to set the attribute once built).
            object.__setattr__(self, "batch_size", getattr(self.batch_sampler, "batch_size", None))

    def _settings(self) -> dict[str, Any]:
        """What ``prepare`` gave this loader besides torch's arguments (a copy gets them too)."""
        return {
            "device": self.device,
            "progress": self.progress,
            "total_batch_size": self._total_batch_size,
            "synchronized_generator": self.synchronized_generator,
            "non_blocking": self.non_blocking,
        }

    @property
    def total_batch_size(self) -> int | None:
        """The batch size summed over the processes (``batch_size * num_processes``)."""
        return self._total_batch_size

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next pass; a sampler or dataset with ``set_epoch`` gets it too."""
        self.epoch = epoch
        sampler = getattr(self.batch_sampler, "batch_sampler", self.batch_sampler)
        inner = getattr(sampler, "sampler", None)
        if inner is not None and hasattr(inner, "set_epoch"):
            inner.set_epoch(epoch)
        elif hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def _begin(self) -> None:
        self.end_of_dataloader = False
        self.remainder = self._opening_remainder()
        if self.progress is not None:
            self.progress.active.append(self)

    def _end(self) -> None:
        if self.progress is not None and self in self.progress.active:
            self.progress.active.remove(self)

    @property
    def shuffle_generator(self) -> Any:
        """The generator a shuffling sampler draws each pass's order from, if it has one.

        The one ``prepare`` gives a shuffling loader of a multi-process run, or the user's
        (``DataLoader(..., generator=...)``); for a stream, the ``torch.Generator`` its dataset
        keeps as ``generator`` (Accelerate's convention for a shuffling ``IterableDataset``). A
        sampler without one draws a fresh seed from torch's global generator at each pass,
        which a checkpoint cannot tell apart later.
        """
        if self.synchronized_generator is not None:
            return self.synchronized_generator
        dataset = self.dataset
        if isinstance(dataset, IterableShard):
            dataset = dataset.dataset
        if isinstance(dataset, IterableDataset):
            generator = getattr(dataset, "generator", None)
            return generator if isinstance(generator, torch.Generator) else None
        sampler = getattr(self.batch_sampler, "batch_sampler", self.batch_sampler)
        inner = getattr(sampler, "sampler", None)
        return getattr(inner, "generator", None) if isinstance(inner, RandomSampler) else None

    def position(self) -> dict[str, Any]:
        """What a checkpoint keeps of this loader: the epoch and its order generator's state.

        Mid-pass (also once the loop has left the pass with ``break``, until a new pass
        begins): the state the pass drew its order from, the global generators' states when it
        began, its epoch, the batches it had fetched beyond those the loop had (``ahead``:
        where they start, how many, and the global states the first was fetched from) and,
        with worker processes, each worker's states (``workers``). A resumed run goes through
        the same pass again, drawing what it drew, skips what it did, and fetches what was
        ahead from the same states. On the last batch of a pass, as if the pass had ended: a
        resumed run starts the next one. While a copy made by ``skip_first_batches`` iterates
        (or was left) for this loader, the copy's position.
        """
        if self._live is not None:
            return self._live.position()
        generator = self.shuffle_generator
        state = generator.get_state() if generator is not None else None
        started = self._in_pass or self._abandoned
        if started and not self.end_of_dataloader:
            position = {
                "epoch": self.epoch,
                "generator": self._pass_state,
                "global_generator": self._pass_global,
                "pass_states": self._pass_draws,
                "ahead": self._reads.ahead(self._consumed),
                "workers": self._reads.worker_plan(self._consumed),
            }
            if self._reads.unseen_ahead(self._consumed):
                warnings.warn(
                    "save_state: the batch a data loader had fetched ahead of the loop was the "
                    "first to draw from NumPy's global generator; a run resumed from this "
                    "checkpoint draws it from NumPy's state at the save (later saves are exact)",
                    CheckpointWarning,
                    stacklevel=4,
                )
            if self._abandoned:
                # Left with ``break``: a resumed run that skips the done batches continues the
                # pass; one that iterates the loader starts the next pass, as this run's next
                # iteration would (the epoch not counted on, the order generator where it is).
                position["left"] = True
                position["next_generator"] = state
            return position
        return {"epoch": self.epoch + (1 if started else 0), "generator": state}

    def resume_position(self, position: dict[str, Any]) -> None:
        """Take back what :meth:`position` gave: the next pass draws the saved order.

        Warns when the saved pass's worker processes cannot start where they stood
        (``persistent_workers``, ``in_order=False``).
        """
        if hasattr(position, "get"):
            self.epoch = int(position.get("epoch", self.epoch))
            generator = self.shuffle_generator
            key = "next_generator" if position.get("left") else "generator"
            if generator is not None and position.get(key) is not None:
                generator.set_state(position[key])
            self._replay = Replay.from_position(position)
            self._warn_inexact_workers()

    def _warn_inexact_workers(self) -> None:
        """Say so when a resumed run's workers will not draw what the saved run's drew."""
        if not self.num_workers:
            return
        why = []
        if self.persistent_workers:
            why.append(
                "persistent_workers=True (its workers kept drawing across passes; a resumed "
                "run starts new ones)"
            )
        if getattr(self, "in_order", True) is False:
            why.append("in_order=False (which worker makes which batch is not fixed)")
        if why:
            warnings.warn(
                f"load_state: a data loader with num_workers={self.num_workers} and "
                f"{' and '.join(why)} resumes the batches of the saved run, but not its "
                "workers' random draws (a random transform in the dataset may differ)",
                CheckpointWarning,
                stacklevel=4,
            )

    def _opening_remainder(self) -> int:
        """``remainder`` as a pass begins: the real samples of its last round, ``-1`` if unknown."""
        total = self._total_batch_size
        if not total or self.drop_last:
            return -1
        try:
            length = len(cast(Sized, self.dataset))
        except TypeError:  # a dataset without a length
            return -1
        if isinstance(self.dataset, IterableShard):
            # The shard's length is whole per-process batches, so Accelerate's count gives 0:
            # nothing is dropped from the last round of a sharded stream.
            return 0
        return length % total

    def __len__(self) -> int:
        return max(super().__len__() - self._dropped, 0)

    def _per_read(self) -> int:
        """How many batches of the pass (torch's) each batch this loader yields is made of."""
        return 1

    def _torch_iterator(self) -> Iterator[Any]:
        """torch's iterator for this pass, counted by the pass's :class:`PassReads`.

        With worker processes, its workers collate through :class:`WorkerTap` (each batch comes
        with the worker's states) and start through :class:`WorkerStart` (a resumed pass's
        workers take the states its checkpoint recorded); the loader's own ``collate_fn`` and
        ``worker_init_fn`` are put back once the workers have them.
        """
        if not self.num_workers:
            return self._reads(DataLoader.__iter__(self))
        collate_fn, init_fn = self.collate_fn, self.worker_init_fn
        plan, self._worker_plan = self._worker_plan, None
        self.collate_fn = WorkerTap(collate_fn)
        self.worker_init_fn = WorkerStart(init_fn, plan)
        try:
            return self._reads(DataLoader.__iter__(self))
        finally:
            self.collate_fn, self.worker_init_fn = collate_fn, init_fn

    def _stream(self) -> Iterator[tuple[Any, bool]]:
        """This pass's batches on the device, each with whether it is the pass's last.

        Read one ahead, so the last batch is known while it is used; the pass's random draws
        (its base seed, its order) happen at the first ``next``.
        """
        batches = self._torch_iterator()
        try:
            current = next(batches)
        except StopIteration:
            return
        while True:
            if self.device is not None:
                current = move_to_device(current, self.device, self.non_blocking)
            try:
                upcoming = next(batches)
            except StopIteration:
                yield current, True
                return
            yield current, False
            current = upcoming

    # torch annotates DataLoader.__iter__ with its private iterator class; this one yields the
    # batches itself, one ahead, as a generator.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.synchronized_generator is not None:
            _synchronize(self.synchronized_generator)
        generator = self.shuffle_generator
        self._pass_state = generator.get_state() if generator is not None else None
        replay, self._replay = self._replay, None
        if replay is not None and replay.left:
            replay = None  # a pass the loop had left: iterated again, the next pass begins
        # A resumed pass replays its opening draws, then gives back what the load restored.
        restored = global_states() if replay is not None else None
        if replay is not None:
            set_global_states(replay.opening)
        self._pass_draws = global_states()
        self._pass_global = self._pass_draws["torch"]
        sampler = self.batch_sampler
        first = sampler.skip_batches if isinstance(sampler, SkipBatchSampler) else 0
        reads = PassReads(
            first,
            replay=replay,
            restored=restored,
            workers=self.num_workers,
            handed_over=replay is not None and isinstance(sampler, SkipBatchSampler),
            ahead=self._per_read(),
            watch=self._watch,
        )
        self._reads, self._consumed = reads, first
        if replay is not None and replay.workers and first == int(replay.workers["at"]):
            self._worker_plan = {int(w): s for w, s in replay.workers["states"].items()}
        if replay is not None and isinstance(sampler, SkipBatchSampler):
            sampler.handoff = reads.hand_over
        self.set_epoch(self.epoch)
        self._begin()
        self._in_pass, self._abandoned, self._live = True, False, None
        origin = self._origin
        if origin is not None:
            origin._live, origin._abandoned = self, False
        completed = False
        try:
            stream = self._stream()
            try:
                head = next(stream)  # the pass's draws happen here
            except StopIteration:
                completed = True
                return
            finally:
                # An older checkpoint does not say what was ahead; a process that reads
                # nothing (a dispatched loader's others) has nothing to fetch again.
                if not reads.restores_on_its_own or reads.count == reads.first:
                    reads.restore()
            per = self._per_read()
            for index, (batch, last) in enumerate(itertools.chain([head], stream)):
                if last:
                    self.end_of_dataloader = True
                self._consumed = first + (index + 1) * per
                if index >= self.skip_batches:
                    yield batch
            self.epoch += 1
            completed = True
            if origin is not None:
                origin.epoch = self.epoch
        finally:
            reads.restore()  # a pass left before what was ahead was fetched again
            if isinstance(sampler, SkipBatchSampler):
                sampler.handoff = None
            self._in_pass, self._abandoned = False, not completed
            self._end()
            if origin is not None and origin._live is self and completed:
                origin._live = None


class DispatchingDataLoader(PreparedDataLoader):
    """A prepared loader read on the main process only, each global batch split among all.

    Accelerate's ``DataLoaderDispatcher`` (``dispatch_batches=True``, the default for an
    ``IterableDataset``): process 0 iterates the loader as it was given (every process starts
    the pass, so each draws its base seed from torch's generator as under Accelerate) and
    broadcasts each global batch: one batch of it with ``split_batches``, else
    ``num_processes`` of them concatenated. Each process keeps its equal slice; unless
    ``drop_last``, a last batch that does not divide is completed from the first. On the last
    batch ``remainder`` is the number of real samples in it, which ``gather_for_metrics`` keeps.
    ``drops_last`` is the given loader's ``drop_last``, for a loader built from its batch
    sampler (whose own ``drop_last`` torch leaves ``False``).
    """

    def __init__(
        self,
        *args: Any,
        rank: int = 0,
        num_processes: int = 1,
        split_batches: bool = False,
        drops_last: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.rank = rank
        self.num_processes = num_processes
        self.split_batches = split_batches
        self.drops_last: bool = self.drop_last if drops_last is None else drops_last

    def __len__(self) -> int:
        whole = super().__len__()
        if self.split_batches:
            return whole
        if self.drops_last:
            return whole // self.num_processes
        return math.ceil(whole / self.num_processes)

    def _opening_remainder(self) -> int:
        return -1  # known once the last global batch is read

    def _per_read(self) -> int:
        return 1 if self.split_batches else self.num_processes

    def _stream(self) -> Iterator[tuple[Any, bool]]:
        batches = self._torch_iterator()
        device = self.device
        slices: Iterator[DispatchedBatch] = dispatched_batches(
            batches,
            rank=self.rank,
            num_processes=self.num_processes,
            split_batches=self.split_batches,
            drop_last=self.drops_last,
            device=device if device is not None else "cpu",
            to_device=lambda batch: (
                move_to_device(batch, device, self.non_blocking) if device is not None else batch
            ),
        )
        for piece in slices:
            if piece.last:
                self.remainder = piece.observed
            yield piece.batch, piece.last

    def _settings(self) -> dict[str, Any]:
        return {
            **super()._settings(),
            "rank": self.rank,
            "num_processes": self.num_processes,
            "split_batches": self.split_batches,
            "drops_last": self.drops_last,
        }


def _synchronize(generator: Any) -> None:
    """Give ``generator`` rank 0's state (Accelerate's ``synchronize_rng_states(["generator"])``)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        state = generator.get_state()
        dist.broadcast(state, 0)
        generator.set_state(state)


class BatchShard:
    """The batches of ``batch_sampler`` that fall to process ``rank`` of ``num_processes``.

    By default batch ``i`` goes to process ``i % num_processes``, as Accelerate's
    ``BatchSamplerShard`` deals them; with ``split_batches`` every batch is cut into
    ``num_processes`` equal slices and process ``rank`` gets slice ``rank``. Unless
    ``drop_last``, with ``even_batches`` the last round is completed with samples from the start
    of the pass so that every process gets the same number of full batches; without it the last
    batches are left as they are.
    """

    def __init__(
        self,
        batch_sampler: Any,
        num_processes: int,
        rank: int,
        *,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.rank = rank
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.batch_size: int = batch_sampler.batch_size
        self.drop_last: bool = batch_sampler.drop_last

    @property
    def sampler(self) -> Any:
        return self.batch_sampler.sampler

    def __len__(self) -> int:
        full, n = len(self.batch_sampler), self.num_processes
        if self.split_batches or full % n == 0:
            return full if self.split_batches else full // n
        if self.drop_last:
            return full // n
        if self.even_batches:
            return full // n + 1
        return full // n + (1 if self.rank < full % n else 0)

    def __iter__(self) -> Iterator[list[int]]:
        return self._split() if self.split_batches else self._deal()

    def _split(self) -> Iterator[list[int]]:
        size = self.batch_size
        part = size // self.num_processes
        cut = slice(part * self.rank, part * (self.rank + 1))
        first: list[int] = []
        batch: list[int] = []
        for index, drawn in enumerate(self.batch_sampler):
            batch = list(drawn)
            if index == 0:
                first = batch
            if len(batch) == size:
                yield batch[cut]
        if self.drop_last or not first or len(batch) == size:
            return
        if not self.even_batches:
            if len(batch) > cut.start:
                yield batch[cut]
            return
        while len(first) < size:
            first = first + first
        yield (batch + first)[cut]

    def _deal(self) -> Iterator[list[int]]:
        n, rank, size = self.num_processes, self.rank, self.batch_size
        first: list[int] = []  # the first round's indices, to complete the last round with
        mine: list[int] = []
        batch: list[int] = []
        index = -1
        for index, drawn in enumerate(self.batch_sampler):
            batch = list(drawn)
            if index < n:
                first += batch
            if index % n == rank:
                mine = batch
            if index % n == n - 1 and len(batch) == size:
                yield mine  # a round is dealt once every process has a full batch
                mine = []
        if self.drop_last or not first:
            return
        if not self.even_batches:
            if mine:
                yield mine
            return
        if len(mine) == size:
            yield mine
        while len(first) < n * size:
            first += first
        if len(batch) == size:
            batch, index = [], index + 1
        cursor = 0
        while index % n != 0 or batch:
            end = cursor + size - len(batch)
            batch = batch + first[cursor:end]
            if index % n == rank:
                yield batch
            cursor, batch, index = end, [], index + 1


class SkipBatchSampler:
    """The batches of ``batch_sampler`` after its first ``skip_batches`` (Accelerate's class)."""

    def __init__(self, batch_sampler: Any, skip_batches: int = 0) -> None:
        self.batch_sampler = batch_sampler
        self.skip_batches = skip_batches
        #: Called once, just before the first batch kept is handed out (the pass's order is
        #: drawn by then): a resumed pass sets the states its next fetch draws from.
        self.handoff: Callable[[], None] | None = None
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = getattr(batch_sampler, "drop_last", False)

    @property
    def sampler(self) -> Any:
        return getattr(self.batch_sampler, "sampler", None)

    @property
    def total_length(self) -> int:
        return len(self.batch_sampler)

    def __len__(self) -> int:
        return len(self.batch_sampler) - self.skip_batches

    def __iter__(self) -> Iterator[Any]:
        for index, batch in enumerate(self.batch_sampler):
            if index >= self.skip_batches:
                handoff, self.handoff = self.handoff, None
                if handoff is not None:
                    handoff()
                yield batch


class SeedableRandomSampler(RandomSampler):
    """A ``RandomSampler`` whose order for each epoch depends only on a seed and the epoch.

    Each pass seeds its generator with ``initial_seed + epoch`` (``initial_seed``: ``data_seed``,
    else torch's initial seed), then moves to the next epoch, as Accelerate's class does.
    """

    def __init__(self, *args: Any, data_seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial_seed = data_seed if data_seed is not None else torch.random.initial_seed()
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        generator: torch.Generator | None = getattr(self, "generator", None)
        if generator is None:
            generator = torch.Generator()
            self.generator = generator
        generator.manual_seed(self.epoch + self.initial_seed)
        yield from super().__iter__()
        self.set_epoch(self.epoch + 1)

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next pass."""
        self.epoch = epoch


def move_to_device(data: Any, device: Any, non_blocking: bool = False) -> Any:
    """``data`` with every tensor in it (nested lists, tuples, dicts) moved to ``device``.

    An object with a ``to`` method (a tokenizer's ``BatchEncoding``) moves itself.
    """
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, dict):
        return type(data)({k: move_to_device(v, device, non_blocking) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(move_to_device(v, device, non_blocking) for v in data))
    if isinstance(data, list | tuple):
        return type(data)(move_to_device(v, device, non_blocking) for v in data)
    to = getattr(data, "to", None)
    if callable(to):
        try:
            return to(device, non_blocking=non_blocking)
        except TypeError:  # a .to(device) without the keyword
            return to(device)
    return data


def _copied_kwargs(loader: Any) -> dict[str, Any]:
    accepted = inspect.signature(DataLoader.__init__).parameters
    kwargs = {k: getattr(loader, k) for k in _COPIED if k in accepted and hasattr(loader, k)}
    if not kwargs.get("num_workers"):
        # torch rejects these two without worker processes.
        kwargs.pop("prefetch_factor", None)
        kwargs["persistent_workers"] = False
    return kwargs


def prepare_data_loader(
    loader: Any,
    state: RunState,
    progress: LoaderProgress | None = None,
    config: DataLoaderConfiguration | None = None,
) -> Any:
    """``loader`` rebuilt for ``state``: its batches dealt across processes, on the device.

    As Accelerate does with ``config`` (a :class:`DataLoaderConfiguration`, default settings
    when ``None``): by default the per-process batch size is kept, batch ``i`` goes to process
    ``i % world_size`` (:class:`BatchShard`), the last round is completed from the start so
    every process gets as many full batches (unless ``drop_last``), and a shuffling sampler gets
    a generator seeded from torch's global generator, equal on every process at each pass.
    ``split_batches`` cuts each batch across the processes instead; ``use_seedable_sampler``
    shuffles with a :class:`SeedableRandomSampler`. With ``dispatch_batches`` (by default for an
    ``IterableDataset`` only) the main process reads the loader and sends each process its
    slice (:class:`DispatchingDataLoader`); an ``IterableDataset`` without it is read whole by
    every process, which keeps its share (:class:`IterableShard`). ``progress`` tracks the
    loaders being iterated.
    """
    config = config if config is not None else DataLoaderConfiguration()
    config.check()  # fields set after construction (accelerator.dataloader_config.x = ...)
    device = None if state.device_type == "cpu" else state.device
    iterable = isinstance(loader.dataset, IterableDataset)
    # Accelerate's default: an iterable dataset is read on the main process and dispatched.
    dispatch = config.dispatch_batches if config.dispatch_batches is not None else iterable
    if iterable:
        return _prepare_stream(loader, state, progress, config, dispatch=dispatch, device=device)
    kwargs = _copied_kwargs(loader)
    kwargs["non_blocking"] = config.non_blocking
    batch_sampler = loader.batch_sampler
    size = getattr(batch_sampler, "batch_size", None)
    sampler = loader.sampler
    if config.use_seedable_sampler and isinstance(sampler, RandomSampler):
        sampler = SeedableRandomSampler(
            sampler.data_source,
            replacement=sampler.replacement,
            num_samples=sampler._num_samples,
            generator=sampler.generator,
            data_seed=config.data_seed,
        )
        batch_sampler.sampler = sampler  # as Accelerate's set_sampler does
    if dispatch:
        _check_split(config, size, state)
        kwargs.pop("generator", None)  # the pass's base seed comes from torch's generator
        state.record(
            "accelerator",
            f"data loader dispatched from the main process to {state.world_size} process(es) "
            f"({'each batch split' if config.split_batches else 'batches joined and split'})",
        )
        return DispatchingDataLoader(
            loader.dataset,
            batch_sampler=batch_sampler,
            device=device,
            progress=progress,
            total_batch_size=size
            if config.split_batches or size is None
            else size * state.world_size,
            rank=state.rank,
            num_processes=state.world_size,
            split_batches=config.split_batches,
            drops_last=loader.drop_last,
            **kwargs,
        )
    if not state.distributed:
        return PreparedDataLoader(
            loader.dataset,
            batch_sampler=batch_sampler,
            device=device,
            progress=progress,
            total_batch_size=size,
            **kwargs,
        )
    if not isinstance(size, int) or not hasattr(batch_sampler, "drop_last"):
        raise AccelkwError(
            f"prepare: cannot shard a DataLoader whose batch_sampler "
            f"({type(batch_sampler).__name__}) has no fixed batch_size across "
            f"{state.world_size} processes; give the batch sampler batch_size and drop_last "
            "attributes, or shard it yourself and do not pass it to prepare()"
        )
    split = config.split_batches
    _check_split(config, size, state)
    synchronized = None
    shuffles = isinstance(sampler, RandomSampler)
    if shuffles and not config.use_seedable_sampler:
        if sampler.generator is None:
            # Drawn from torch's global generator, as Accelerate does, so seeding the run
            # (torch.manual_seed) gives the same order under both.
            sampler.generator = torch.Generator()
            sampler.generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        synchronized = sampler.generator
    how = (
        f"each batch split in {state.world_size}"
        if split
        else f"batch i to process i % {state.world_size}"
    )
    state.record(
        "accelerator",
        f"data loader sharded over {state.world_size} processes ({how}, shuffle={shuffles}, "
        f"even_batches={config.even_batches}, batch size {size} "
        f"{'in all' if split else 'per process'})",
    )
    return PreparedDataLoader(
        loader.dataset,
        batch_sampler=BatchShard(
            batch_sampler,
            state.world_size,
            state.rank,
            split_batches=split,
            even_batches=config.even_batches,
        ),
        device=device,
        progress=progress,
        total_batch_size=size if split else size * state.world_size,
        synchronized_generator=synchronized,
        **kwargs,
    )


def _check_split(config: DataLoaderConfiguration, size: Any, state: RunState) -> None:
    """Refuse ``split_batches`` for a batch size the processes cannot share equally."""
    if not config.split_batches or state.world_size == 1:
        return
    if not isinstance(size, int):
        raise ConfigError(
            "dataloader_config",
            "split_batches",
            True,
            "a DataLoader (or batch sampler) with an int batch_size to split; or "
            "split_batches=False",
        )
    if size > 1 and size % state.world_size != 0:
        raise ConfigError(
            "dataloader_config",
            "split_batches",
            True,
            f"a DataLoader batch size that is a multiple of the {state.world_size} processes "
            f"(got batch_size={size}); or split_batches=False",
        )


def _prepare_stream(
    loader: Any,
    state: RunState,
    progress: LoaderProgress | None,
    config: DataLoaderConfiguration,
    *,
    dispatch: bool,
    device: Any,
) -> PreparedDataLoader:
    """A loader over an ``IterableDataset`` prepared as Accelerate prepares it.

    Dispatched: the main process reads batches of the loader's batch size and sends each
    process its slice. Otherwise, on several processes, every process reads the stream through
    an :class:`IterableShard` and keeps its part of each global batch; on one, the stream as
    it is. Either way batches land on the device and the loader reports to ``progress``.
    """
    size = loader.batch_size
    if size is None:
        raise AccelkwError(
            "prepare: a DataLoader over an IterableDataset needs a batch_size to share its "
            "batches between processes (got batch_size=None); batch the samples through the "
            "DataLoader, not inside the dataset"
        )
    _check_split(config, size, state)
    n, split = state.world_size, config.split_batches
    kwargs = _copied_kwargs(loader)
    kwargs["non_blocking"] = config.non_blocking
    settings: dict[str, Any] = {
        "device": device,
        "progress": progress,
        "total_batch_size": size if split else size * n,
        "drop_last": loader.drop_last,
    }
    if dispatch:
        kwargs.pop("generator", None)  # the pass's base seed comes from torch's generator
        state.record(
            "accelerator",
            f"stream data loader dispatched from the main process to {n} process(es) "
            f"({'each batch split' if split else f'{n} batches of {size} joined and split'})",
        )
        return DispatchingDataLoader(
            loader.dataset,
            batch_size=size,
            rank=state.rank,
            num_processes=n,
            split_batches=split,
            **settings,
            **kwargs,
        )
    if not state.distributed:
        return PreparedDataLoader(loader.dataset, batch_size=size, **settings, **kwargs)
    generator = getattr(loader.dataset, "generator", None)
    shard = IterableShard(
        loader.dataset,
        batch_size=size,
        drop_last=loader.drop_last,
        num_processes=n,
        process_index=state.rank,
        split_batches=split,
    )
    state.record(
        "accelerator",
        f"stream data loader sharded over {n} processes (every process reads the stream and "
        f"keeps its {'slice of each batch' if split else 'batch of each round'})",
    )
    return PreparedDataLoader(
        shard,
        batch_size=size // n if split else size,
        synchronized_generator=generator if isinstance(generator, torch.Generator) else None,
        **settings,
        **kwargs,
    )


class SkippingDataLoader(DataLoader[Any]):
    """A plain ``DataLoader`` over an ``IterableDataset`` that drops each pass's first batches.

    What :func:`skip_first_batches` gives for a loader ``prepare`` did not make (Accelerate's
    ``SkipDataLoader``): a stream cannot seek, so the batches are read and dropped.
    """

    def __init__(self, *args: Any, skip_batches: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.skip_batches = skip_batches

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return itertools.islice(super().__iter__(), self.skip_batches, None)

    def __len__(self) -> int:
        return max(super().__len__() - self.skip_batches, 0)


def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
    """A data loader like ``dataloader`` that skips its first ``num_batches`` batches.

    For a prepared loader, the new one keeps its device, its place in the epochs and its
    synchronised shuffling (Accelerate's ``skip_first_batches``); for a plain ``DataLoader``, a
    plain ``DataLoader`` over the same dataset. A loader that has no batch sampler to skip in
    (over an ``IterableDataset``) or that dispatches its batches reads the skipped batches and
    drops them.
    """
    if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
        raise ConfigError("skip_first_batches", "num_batches", num_batches, "an int >= 0")
    kwargs = _copied_kwargs(dataloader)
    stream = isinstance(dataloader.dataset, IterableDataset)
    if not isinstance(dataloader, PreparedDataLoader):
        if stream:
            return SkippingDataLoader(
                dataloader.dataset,
                batch_size=dataloader.batch_size,
                drop_last=dataloader.drop_last,
                skip_batches=num_batches,
                **kwargs,
            )
        skipping = SkipBatchSampler(dataloader.batch_sampler, skip_batches=num_batches)
        return DataLoader(dataloader.dataset, batch_sampler=skipping, **kwargs)
    # The skipping loader is prepared as the original was: same device, shared progress.
    skipped: PreparedDataLoader
    if stream:
        skipped = type(dataloader)(
            dataloader.dataset,
            batch_size=dataloader.batch_size,
            drop_last=dataloader.drop_last,
            skip_batches=num_batches,
            **dataloader._settings(),
            **kwargs,
        )
    elif isinstance(dataloader, DispatchingDataLoader):
        # One batch of this loader is several of its batch sampler's: count what it yields.
        skipped = DispatchingDataLoader(
            dataloader.dataset,
            batch_sampler=dataloader.batch_sampler,
            skip_batches=num_batches,
            **dataloader._settings(),
            **kwargs,
        )
    else:
        # With worker processes, batch i is made by worker i % num_workers, whose draws depend
        # on the batches it made before: whole rounds are skipped unread (a resumed pass's
        # workers start with the states its checkpoint recorded at that round) and the rest of
        # the round is read and dropped, so each worker makes the batches it made before.
        workers = dataloader.num_workers
        unread = num_batches - num_batches % workers if workers else num_batches
        skipping = SkipBatchSampler(dataloader.batch_sampler, skip_batches=unread)
        skipped = PreparedDataLoader(
            dataloader.dataset,
            batch_sampler=skipping,
            skip_batches=num_batches - unread,
            **dataloader._settings(),
            **kwargs,
        )
        skipped._dropped = num_batches - unread
    skipped.epoch = dataloader.epoch
    skipped._watch = dataloader._watch
    # The copy iterates for the prepared loader, which the checkpoint records: it takes over a
    # pass to replay, and reports its position and its epochs to that loader.
    origin = dataloader._origin if dataloader._origin is not None else dataloader
    skipped._origin = origin
    replay, dataloader._replay = dataloader._replay, None
    if replay is not None and replay.left:
        # The script continues the pass the saved loop had left: its order again.
        generator = dataloader.shuffle_generator
        if generator is not None and replay.order is not None:
            generator.set_state(replay.order)
        replay = dataclasses.replace(replay, left=False)
    skipped._replay = replay
    return skipped

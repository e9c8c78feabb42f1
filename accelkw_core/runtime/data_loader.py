"""Data loaders for a run: sharded across processes, batches moved to the process's device.

Imported by ``Accelerator.prepare`` only, so importing torch here costs nothing at package import.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler

from accelkw_core.errors import AccelkwError
from accelkw_core.runtime.state import AcceleratorState

__all__ = [
    "BatchShard",
    "LoaderProgress",
    "PreparedDataLoader",
    "move_to_device",
    "prepare_data_loader",
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


class PreparedDataLoader(DataLoader):  # type: ignore[misc]
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
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.device = device
        self.epoch = 0
        self.progress = progress
        self.end_of_dataloader = False
        self.remainder = -1
        self._total_batch_size = total_batch_size
        self.synchronized_generator = synchronized_generator
        # The shuffling generator's state when the current pass drew its order, so that a
        # checkpoint taken mid-pass gives a resumed run the same order (see position()).
        self._pass_state: Any = None
        if self.batch_size is None:
            # Built from a batch sampler: report its per-process batch size, as the user set it
            # (DataLoader refuses to set the attribute once built).
            object.__setattr__(self, "batch_size", getattr(self.batch_sampler, "batch_size", None))

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
        self.remainder = -1
        total = self._total_batch_size
        if total and not self.drop_last:
            with contextlib.suppress(TypeError):
                self.remainder = len(self.dataset) % total
        if self.progress is not None:
            self.progress.active.append(self)

    def _end(self) -> None:
        if self.progress is not None and self in self.progress.active:
            self.progress.active.remove(self)

    @property
    def shuffle_generator(self) -> Any:
        """The generator a shuffling sampler draws each pass's order from, if it has one.

        The one ``prepare`` gives a shuffling loader of a multi-process run, or the user's
        (``DataLoader(..., generator=...)``). A sampler without one draws a fresh seed from
        torch's global generator at each pass, which a checkpoint cannot tell apart later.
        """
        if self.synchronized_generator is not None:
            return self.synchronized_generator
        sampler = getattr(self.batch_sampler, "batch_sampler", self.batch_sampler)
        inner = getattr(sampler, "sampler", None)
        return getattr(inner, "generator", None) if isinstance(inner, RandomSampler) else None

    def position(self) -> dict[str, Any]:
        """What a checkpoint keeps of this loader: the epoch and its order generator's state.

        Mid-pass, the state the pass drew its order from, and its epoch: a resumed run goes
        through the same pass again and skips what it did. On the last batch of a pass, as if
        the pass had ended: a resumed run starts the next one.
        """
        generator = self.shuffle_generator
        active = self.progress is not None and self in self.progress.active
        if active and not self.end_of_dataloader:
            return {"epoch": self.epoch, "generator": self._pass_state}
        state = generator.get_state() if generator is not None else None
        return {"epoch": self.epoch + (1 if active else 0), "generator": state}

    def resume_position(self, position: dict[str, Any]) -> None:
        """Take back what :meth:`position` gave: the next pass draws the saved order."""
        if hasattr(position, "get"):
            self.epoch = int(position.get("epoch", self.epoch))
            generator = self.shuffle_generator
            if generator is not None and position.get("generator") is not None:
                generator.set_state(position["generator"])

    def __iter__(self) -> Iterator[Any]:
        if self.synchronized_generator is not None:
            _synchronize(self.synchronized_generator)
        generator = self.shuffle_generator
        self._pass_state = generator.get_state() if generator is not None else None
        self.set_epoch(self.epoch)
        self._begin()
        device = self.device
        try:
            batches = super().__iter__()
            try:
                current = next(batches)
            except StopIteration:
                return
            while True:
                if device is not None:
                    current = move_to_device(current, device)
                try:
                    upcoming = next(batches)
                except StopIteration:
                    self.end_of_dataloader = True
                    yield current
                    break
                yield current
                current = upcoming
            self.epoch += 1
        finally:
            self._end()


def _synchronize(generator: Any) -> None:
    """Give ``generator`` rank 0's state (Accelerate's ``synchronize_rng_states(["generator"])``)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        state = generator.get_state()
        dist.broadcast(state, 0)
        generator.set_state(state)


class BatchShard:
    """The batches of ``batch_sampler`` that fall to process ``rank`` of ``num_processes``.

    Batch ``i`` goes to process ``i % num_processes``, as Accelerate's ``BatchSamplerShard``
    deals them. Unless ``drop_last``, the last round is completed with samples from the start
    of the pass so that every process gets the same number of full batches (even batches).
    """

    def __init__(self, batch_sampler: Any, num_processes: int, rank: int) -> None:
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.rank = rank
        self.batch_size: int = batch_sampler.batch_size
        self.drop_last: bool = batch_sampler.drop_last

    @property
    def sampler(self) -> Any:
        return self.batch_sampler.sampler

    def __len__(self) -> int:
        full, n = len(self.batch_sampler), self.num_processes
        if self.drop_last:
            return full // n
        return -(-full // n)

    def __iter__(self) -> Iterator[list[int]]:
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


def move_to_device(data: Any, device: Any) -> Any:
    """``data`` with every tensor in it (nested lists, tuples, dicts) moved to ``device``."""
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=True)
    if isinstance(data, dict):
        return type(data)({k: move_to_device(v, device) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(move_to_device(v, device) for v in data))
    if isinstance(data, list | tuple):
        return type(data)(move_to_device(v, device) for v in data)
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
    loader: Any, state: AcceleratorState, progress: LoaderProgress | None = None
) -> Any:
    """``loader`` rebuilt for ``state``: its batches dealt across processes, on the device.

    As Accelerate does by default: the per-process batch size is kept, batch ``i`` goes to
    process ``i % world_size`` (:class:`BatchShard`), the last round is completed from the start
    so every process gets as many full batches (unless ``drop_last``), and a shuffling sampler
    gets a generator seeded from torch's global generator, equal on every process at each pass.
    Loaders over an ``IterableDataset`` are returned unchanged, with a warning when distributed
    (they cannot be sharded by index). ``progress`` tracks the loaders being iterated.
    """
    device = None if state.device_type == "cpu" else state.device
    if isinstance(loader.dataset, IterableDataset):
        if state.distributed:
            message = (
                "prepare: a DataLoader over an IterableDataset is not sharded; every process "
                "reads the whole stream unless the dataset splits itself by rank"
            )
            state.record("accelerator", message, applied=False)
            warnings.warn(message, stacklevel=3)
        return loader
    kwargs = _copied_kwargs(loader)
    batch_sampler = loader.batch_sampler
    size = getattr(batch_sampler, "batch_size", None)
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
    synchronized = None
    sampler = loader.sampler
    if isinstance(sampler, RandomSampler):
        if sampler.generator is None:
            # Drawn from torch's global generator, as Accelerate does, so seeding the run
            # (torch.manual_seed) gives the same order under both.
            sampler.generator = torch.Generator()
            sampler.generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        synchronized = sampler.generator
    state.record(
        "accelerator",
        f"data loader sharded over {state.world_size} processes (batch i to process "
        f"i % {state.world_size}, shuffle={isinstance(sampler, RandomSampler)}, batch size "
        f"{size} per process)",
    )
    return PreparedDataLoader(
        loader.dataset,
        batch_sampler=BatchShard(batch_sampler, state.world_size, state.rank),
        device=device,
        progress=progress,
        total_batch_size=size * state.world_size,
        synchronized_generator=synchronized,
        **kwargs,
    )

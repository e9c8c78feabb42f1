"""Sharing a stream of batches across processes: an iterable dataset's shard, and dispatching.

Two ways an ``IterableDataset`` (which has no indices to deal) is shared, as Accelerate 1.15
shares it:

- :class:`IterableShard`: every process reads the whole stream and keeps its part of each global
  batch (``dispatch_batches=False``);
- :func:`dispatched_batches`: the main process reads the stream, broadcasts each global batch,
  and every process keeps its slice (``dispatch_batches=True``, the default for an iterable
  dataset). It serves map-style loaders too.

Imported by :mod:`accelkw_core.runtime.data.data_loader` only, so importing torch here costs
nothing at package import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sized
from typing import Any, NamedTuple, cast

import torch
from torch.utils.data import IterableDataset

from accelkw_core.errors import AccelkwError

__all__ = ["DispatchedBatch", "IterableShard", "dispatched_batches"]


class IterableShard(IterableDataset[Any]):
    """The samples of ``dataset`` that fall to process ``process_index`` of ``num_processes``.

    The stream is cut into global batches of ``batch_size * num_processes`` samples
    (``batch_size`` with ``split_batches``); process ``process_index`` keeps its equal part of
    each, so a loader over the shard with the per-process batch size gives each process its own
    batch of every global one. Unless ``drop_last``, a last, short global batch is completed
    with samples from the start of the pass; with it, the short batch is dropped. A dataset
    without ``set_epoch`` but with a ``torch.Generator`` named ``generator`` has it seeded with
    the epoch at each pass, as Accelerate's ``IterableDatasetShard`` does.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
    ) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next pass; passed on to the dataset when it has ``set_epoch``."""
        self.epoch = epoch
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        # This process's samples, whole per-process batches (Accelerate's count, kept so that a
        # loader's len() and its last-batch bookkeeping agree with Accelerate's).
        length = len(cast(Sized, self.dataset))
        rounds = length / (self.batch_size * self.num_processes)
        return (math.floor(rounds) if self.drop_last else math.ceil(rounds)) * self.batch_size

    def __iter__(self) -> Iterator[Any]:
        generator = getattr(self.dataset, "generator", None)
        if not hasattr(self.dataset, "set_epoch") and isinstance(generator, torch.Generator):
            generator.manual_seed(self.epoch)
        n = self.num_processes
        whole = self.batch_size if self.split_batches else self.batch_size * n
        part = self.batch_size // n if self.split_batches else self.batch_size
        mine = slice(self.process_index * part, (self.process_index + 1) * part)
        first: list[Any] | None = None
        batch: list[Any] = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == whole:
                yield from batch[mine]
                if first is None:
                    first = batch
                batch = []
        if self.drop_last or not batch:
            return
        filler = first if first is not None else list(batch)
        while len(batch) < whole:
            batch += filler
        yield from batch[mine]


class DispatchedBatch(NamedTuple):
    """One process's slice of a dispatched global batch, and what the pass knows with it."""

    batch: Any
    last: bool
    #: samples in the global batch before it was completed (set on the last batch only).
    observed: int


def dispatched_batches(
    batches: Iterator[Any] | None,
    *,
    rank: int,
    num_processes: int,
    split_batches: bool,
    drop_last: bool,
    device: Any,
    to_device: Callable[[Any], Any],
) -> Iterator[DispatchedBatch]:
    """This process's slices of the global batches process 0 reads from ``batches``.

    ``batches`` is read on process 0 only (the others may pass anything: it is not touched).
    With ``split_batches`` each batch of ``batches`` is a global batch; without it, the next
    ``num_processes`` batches are concatenated into one. Each global batch is broadcast (moved
    to the run's device by ``to_device`` first, so that the backend can send it; the others
    receive it on ``device``) and cut into ``num_processes`` equal slices along its first
    dimension. Unless ``drop_last``, a last global batch that does not
    divide is completed with samples of the first one; with it, what does not divide is left
    out. A global batch is read one ahead, so the slice of the last one says so.
    """
    # Wrapped in a generator, so that once ``batches`` ends it is never asked again (a
    # DataLoader's worker iterator need not tolerate that).
    batches = (batch for batch in batches) if batches is not None else None
    first: Any = None
    current = _next_global(
        batches, rank, num_processes, split_batches, drop_last, device, to_device
    )
    while current is not None:
        upcoming = _next_global(
            batches, rank, num_processes, split_batches, drop_last, device, to_device
        )
        last = upcoming is None
        observed = _batch_size(current)
        if first is None and not drop_last:
            first = _slice(current, slice(0, num_processes))
        size = observed // num_processes
        if last and not drop_last and observed % num_processes:
            current = _concatenate([current, first])
            size += 1
        mine = _slice(current, slice(rank * size, (rank + 1) * size))
        yield DispatchedBatch(mine, last, observed if last else -1)
        current = upcoming


def _next_global(
    batches: Iterator[Any] | None,
    rank: int,
    num_processes: int,
    split_batches: bool,
    drop_last: bool,
    device: Any,
    to_device: Callable[[Any], Any],
) -> Any:
    """The next global batch on every process (``None`` at the end), read and sent by process 0.

    An error while process 0 reads or joins the batch is raised on every process (the others
    would otherwise wait in the broadcast for ever): as itself on process 0, naming it on the
    others.
    """
    batch: Any = None
    failure: BaseException | None = None
    if rank == 0:
        try:
            batch = _read_global(batches, num_processes, split_batches, drop_last, to_device)
        except Exception as error:
            failure = error
    return _broadcast(batch, rank, device, failure)


def _read_global(
    batches: Iterator[Any] | None,
    num_processes: int,
    split_batches: bool,
    drop_last: bool,
    to_device: Callable[[Any], Any],
) -> Any:
    parts: list[Any] = []
    try:
        for _ in range(1 if split_batches else num_processes):
            parts.append(next(cast(Iterator[Any], batches)))
    except StopIteration:
        if split_batches or drop_last:
            parts = []
    if not parts:
        return None
    batch = to_device(_concatenate(parts))
    leaves = _foreign_leaves(batch)
    if leaves and _world_size() > 1:
        raise AccelkwError(
            "dispatch_batches: a dispatched batch must hold only tensors (and lists, tuples "
            f"and dicts of them) to be cut among the processes; this one holds {leaves}; "
            "collate them into tensors, or set DataLoaderConfiguration(dispatch_batches=False) "
            "so each process reads its own share"
        )
    return batch


class _Failed(NamedTuple):
    """What process 0 sends instead of a batch when reading it failed."""

    message: str


def _world_size() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def _broadcast(batch: Any, rank: int, device: Any, failure: BaseException | None = None) -> Any:
    """``batch`` of process 0 on every process: its layout as an object, then its tensors."""
    import torch.distributed as dist

    if _world_size() == 1:
        if failure is not None:
            raise failure
        return batch
    if failure is not None:
        sent: Any = _Failed(f"{type(failure).__name__}: {failure}")
    else:
        sent = _layout(batch) if rank == 0 else None
    layout = [sent]
    dist.broadcast_object_list(layout, src=0)
    if failure is not None:
        raise failure
    if isinstance(layout[0], _Failed):
        raise AccelkwError(
            f"dispatch_batches: the main process failed to read the next batch to dispatch "
            f"({layout[0].message}); see its traceback"
        )
    if layout[0] is None:
        return None
    tensors = _tensors(batch) if rank == 0 else _empty_tensors(layout[0], device)
    for tensor in tensors:
        dist.broadcast(tensor, src=0)
    return batch if rank == 0 else _rebuild(layout[0], iter(tensors))


class _TensorSlot(NamedTuple):
    shape: tuple[int, ...]
    dtype: torch.dtype


def _layout(data: Any) -> Any:
    """``data`` with every tensor replaced by its shape and dtype (the rest sent as it is)."""
    if isinstance(data, torch.Tensor):
        return _TensorSlot(tuple(data.shape), data.dtype)
    if isinstance(data, dict):
        return type(data)({k: _layout(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_layout(v) for v in data))
    if isinstance(data, list | tuple):
        return type(data)(_layout(v) for v in data)
    return data


def _foreign_leaves(data: Any) -> list[str]:
    """The type names of what in ``data`` is neither a tensor nor a container of tensors."""
    if isinstance(data, torch.Tensor):
        return []
    if isinstance(data, dict):
        return sorted({n for v in data.values() for n in _foreign_leaves(v)})
    if isinstance(data, list | tuple):
        return sorted({n for v in data for n in _foreign_leaves(v)})
    return [type(data).__name__]


def _tensors(data: Any) -> list[torch.Tensor]:
    if isinstance(data, torch.Tensor):
        return [data.contiguous()] if not data.is_contiguous() else [data]
    if isinstance(data, dict):
        return [t for v in data.values() for t in _tensors(v)]
    if isinstance(data, list | tuple):
        return [t for v in data for t in _tensors(v)]
    return []


def _empty_tensors(layout: Any, device: Any) -> list[torch.Tensor]:
    if isinstance(layout, _TensorSlot):
        return [torch.empty(layout.shape, dtype=layout.dtype, device=device)]
    if isinstance(layout, dict):
        return [t for v in layout.values() for t in _empty_tensors(v, device)]
    if isinstance(layout, list | tuple):
        return [t for v in layout for t in _empty_tensors(v, device)]
    return []


def _rebuild(layout: Any, tensors: Iterator[torch.Tensor]) -> Any:
    if isinstance(layout, _TensorSlot):
        return next(tensors)
    if isinstance(layout, dict):
        return type(layout)({k: _rebuild(v, tensors) for k, v in layout.items()})
    if isinstance(layout, tuple) and hasattr(layout, "_fields"):
        return type(layout)(*(_rebuild(v, tensors) for v in layout))
    if isinstance(layout, list | tuple):
        return type(layout)(_rebuild(v, tensors) for v in layout)
    return layout


def _batch_size(data: Any) -> int:
    """The length of the first tensor's first dimension in ``data``."""
    tensors = _tensors(data)
    if not tensors or tensors[0].dim() == 0:
        raise AccelkwError(
            "dispatch_batches: a dispatched batch must hold tensors with a batch dimension "
            f"(got {type(data).__name__}); collate the samples into tensors, or set "
            "DataLoaderConfiguration(dispatch_batches=False) so each process reads its own share"
        )
    return int(tensors[0].shape[0])


def _slice(data: Any, cut: slice) -> Any:
    if isinstance(data, torch.Tensor):
        return data[cut]
    if isinstance(data, dict):
        return type(data)({k: _slice(v, cut) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_slice(v, cut) for v in data))
    if isinstance(data, list | tuple):
        return type(data)(_slice(v, cut) for v in data)
    return data


def _concatenate(parts: list[Any]) -> Any:
    """The batches ``parts`` joined along their first dimension, structure by structure."""
    head = parts[0]
    if len(parts) == 1:
        return head
    if isinstance(head, torch.Tensor):
        try:
            return torch.cat(parts, dim=0)
        except RuntimeError as error:
            raise AccelkwError(
                "dispatch_batches: the batches to dispatch do not have the same shape past "
                f"their first dimension ({[tuple(p.shape) for p in parts]}); pad them to one "
                "shape, set split_batches=True (one batch is read and split), or set "
                "dispatch_batches=False so each process reads its own share"
            ) from error
    if isinstance(head, dict):
        return type(head)({k: _concatenate([p[k] for p in parts]) for k in head})
    if isinstance(head, tuple) and hasattr(head, "_fields"):
        return type(head)(*(_concatenate(list(col)) for col in zip(*parts, strict=True)))
    if isinstance(head, list | tuple):
        return type(head)(_concatenate(list(col)) for col in zip(*parts, strict=True))
    raise AccelkwError(
        "dispatch_batches: a dispatched batch must hold only tensors (and lists, tuples and "
        f"dicts of them) to be joined and cut among the processes; this one holds "
        f"{[type(head).__name__]}; collate them into tensors, or set "
        "DataLoaderConfiguration(dispatch_batches=False) so each process reads its own share"
    )

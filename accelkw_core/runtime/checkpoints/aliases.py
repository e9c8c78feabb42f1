"""Tensors that share storage (tied weights, views of one buffer) in a safetensors file.

safetensors refuses two names for overlapping memory. The names of a state dict are grouped as
safetensors groups them: by storage, then by the bytes each covers (two names overlapping, even in
part, are one group; two halves of one buffer are two). In each group of several names, one name
is written and the others are left out of the file:

- a plain tie (every name the same view, GPT-2's ``lm_head.weight`` and its embedding's weight):
  the first name in the state dict's order is written, as Accelerate writes it;
- a view of part of a tensor whose storage another name covers whole (``upper = full[5:]``): the
  name covering the whole storage is written (Accelerate's own load asks for that one);
- overlapping views none of which covers the storage: refused at save, naming the tensor, since
  neither framework could load the file back whole (Accelerate would leave values out).

On load the names left out are given their values from the name written: the same tensor for a
tie, the right part of it for a view, so ``load_state_dict`` copies the same values into the
model (whose own ties and views stay as they are). A checkpoint of either framework then loads
into the other.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from accelkw_core.errors import CheckpointError

__all__ = ["alias_sources", "tied_names", "with_aliases", "without_aliases"]


def _storage(tensor: Any) -> tuple[Any, ...]:
    storage = tensor.untyped_storage()
    return (tensor.device, storage.data_ptr(), storage.nbytes())


def _view(tensor: Any) -> tuple[Any, ...]:
    """Which part of its storage ``tensor`` is: two names with one view are one tensor."""
    return (
        *_storage(tensor),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tensor.stride(),
        tensor.dtype,
    )


def _is_tensor(value: Any) -> bool:
    return callable(getattr(value, "untyped_storage", None))


def _area(tensor: Any) -> tuple[int, int]:
    """The bytes of its storage ``tensor`` spans: ``[start, stop)`` (empty for no elements)."""
    start = int(tensor.data_ptr())
    if tensor.numel() == 0:
        return start, start
    last = sum(
        (size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
    )
    return start, start + (last + 1) * tensor.element_size()


def _covers_storage(tensor: Any) -> bool:
    """Whether ``tensor`` is its whole storage (safetensors' "complete" tensor)."""
    storage = tensor.untyped_storage()
    return bool(
        tensor.data_ptr() == storage.data_ptr()
        and tensor.numel() * tensor.element_size() == storage.nbytes()
    )


def _groups(state_dict: Mapping[str, Any]) -> list[list[str]]:
    """The names of ``state_dict`` whose bytes overlap, in groups of two or more, each in the
    state dict's order."""
    order = {key: i for i, key in enumerate(state_dict)}
    by_storage: dict[tuple[Any, ...], list[str]] = {}
    for key, tensor in state_dict.items():
        if _is_tensor(tensor) and tensor.untyped_storage().nbytes() > 0:
            by_storage.setdefault(_storage(tensor), []).append(key)
    groups: list[list[str]] = []
    for names in by_storage.values():
        if len(names) < 2:
            continue
        spans = sorted((*_area(state_dict[name]), order[name], name) for name in names)
        current: list[str] = []
        stop = -1
        for begin, end, _, name in spans:
            if current and begin >= stop:
                groups.append(current)
                current = []
            current.append(name)
            stop = max(stop, end)
        groups.append(current)
    return [sorted(g, key=order.__getitem__) for g in groups if len(g) > 1]


def _written(state_dict: Mapping[str, Any], names: list[str]) -> str | None:
    """The name of a group that a file holds: the first for a tie, else the one covering the
    storage whole; ``None`` when no name can stand for the others."""
    first = _view(state_dict[names[0]])
    if all(_view(state_dict[name]) == first for name in names):
        return names[0]
    for name in names:
        if _covers_storage(state_dict[name]):
            return name
    return None


def without_aliases(weights: Mapping[str, Any]) -> dict[str, Any]:
    """``weights`` as a safetensors file holds them: one name per group of overlapping names.

    A tensor that shares storage with an earlier one but none of its bytes (two halves of one
    buffer) is copied: it holds values of its own. Overlapping views that no name covers whole
    raise :class:`CheckpointError` naming the tensor.
    """
    left_out: set[str] = set()
    for names in _groups(weights):
        kept = _written(weights, names)
        if kept is None:
            raise CheckpointError(
                f"tensor {names[1]!r}",
                f"overlaps part of {names[0]!r} in one storage and no saved name covers that "
                "storage whole: a safetensors file cannot hold both and neither framework "
                "could load it back; register the whole buffer as well, or save with "
                "safe_serialization=False",
            )
        left_out.update(name for name in names if name != kept)
    storages: set[tuple[Any, ...]] = set()
    out: dict[str, Any] = {}
    for key, tensor in weights.items():
        if key in left_out:
            continue
        if _is_tensor(tensor):
            storage = _storage(tensor)
            if storage in storages:
                tensor = tensor.detach().clone()
            storages.add(storage)
        out[key] = tensor
    return out


def tied_names(state_dict: Mapping[str, Any]) -> list[list[str]]:
    """The groups of names of ``state_dict`` that are one tensor (two or more each), in order."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for key, tensor in state_dict.items():
        if _is_tensor(tensor):
            groups.setdefault(_view(tensor), []).append(key)
    return [names for names in groups.values() if len(names) > 1]


def alias_sources(state_dict: Mapping[str, Any], present: Collection[str]) -> dict[str, str]:
    """For each name of the model's ``state_dict`` a file lacks, the name in ``present`` (the
    file's) whose values it takes: a name of the same tensor, else, for a view of part of a
    storage, the name covering that storage whole (of the same dtype)."""
    sources: dict[str, str] = {}
    for names in _groups(state_dict):
        held = [name for name in names if name in present]
        if not held:
            continue
        whole = [
            name
            for name in held
            if _covers_storage(state_dict[name]) and state_dict[name].is_contiguous()
        ]
        for name in names:
            if name in present:
                continue
            view = _view(state_dict[name])
            same = [h for h in held if _view(state_dict[h]) == view]
            if same:
                sources[name] = same[0]
            elif whole and state_dict[whole[0]].dtype == state_dict[name].dtype:
                sources[name] = whole[0]
    return sources


def with_aliases(weights: Mapping[str, Any], state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """``weights`` (read from a file) with the names the model shares storage under filled in.

    ``state_dict`` is the model's: a name it ties to one the file holds gets that tensor; a view
    of part of a storage whose whole the file holds gets the same part of it.
    """
    out = dict(weights)
    for name, source in alias_sources(state_dict, weights.keys()).items():
        mine, theirs = state_dict[name], state_dict[source]
        loaded = out[source]
        if _view(mine) == _view(theirs):
            out[name] = loaded
            continue
        flat = loaded.reshape(-1)
        offset = mine.storage_offset() - theirs.storage_offset()
        out[name] = flat.as_strided(
            tuple(mine.shape), mine.stride(), flat.storage_offset() + offset
        )
    return out

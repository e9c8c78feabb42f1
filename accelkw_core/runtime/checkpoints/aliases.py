"""Tensors that share storage (tied weights) in a safetensors file, and their ties on load.

safetensors refuses two names for one storage. A model whose ``lm_head.weight`` is its
embedding's weight is saved as Accelerate saves it: the first name of each tie, in the state
dict's order, is kept and the others are left out of the file. On load the names left out are
given the tensor of the name kept, so ``load_state_dict`` copies the same values into the tied
parameter (the tie itself is the model's and stays as it is). A checkpoint of either framework
then loads into the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["tied_names", "with_aliases", "without_aliases"]


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


def without_aliases(weights: Mapping[str, Any]) -> dict[str, Any]:
    """``weights`` with each second name of a tensor left out, the first in order kept.

    A tensor that shares storage with an earlier one but is another part of it (two halves of
    one buffer) is copied instead: it holds values of its own, which leaving it out would lose.
    """
    views: set[tuple[Any, ...]] = set()
    storages: set[tuple[Any, ...]] = set()
    out: dict[str, Any] = {}
    for key, tensor in weights.items():
        if not _is_tensor(tensor):
            out[key] = tensor
            continue
        view, storage = _view(tensor), _storage(tensor)
        if view in views:
            continue
        if storage in storages:
            tensor = tensor.detach().clone()
        views.add(view)
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


def with_aliases(weights: Mapping[str, Any], state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """``weights`` (read from a file) with the names a model ties left out filled in.

    ``state_dict`` is the model's: where it holds several names for one tensor and ``weights``
    holds only some, the others get the tensor of the first one held.
    """
    out = dict(weights)
    for names in tied_names(state_dict):
        held = [name for name in names if name in out]
        if held:
            for name in names:
                out.setdefault(name, out[held[0]])
    return out

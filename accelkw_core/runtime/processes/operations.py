"""Accelerate's free collective helpers (``accelerate.utils.gather``, ``reduce``, ``broadcast``, ...).

Each works on a tensor or a nested list/tuple/dict of tensors, across the processes of the
``torch.distributed`` process group of this run, with no ``Accelerator`` needed: with no group
(or a group of one) each is the identity (``reduce`` returns a copy), as in Accelerate.
torch is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "broadcast",
    "broadcast_object_list",
    "concatenate",
    "find_batch_size",
    "gather",
    "gather_object",
    "pad_across_processes",
    "recursively_apply",
    "reduce",
    "send_to_device",
]

REDUCTIONS = ("mean", "sum", "max", "none")


def _world() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return 1


def _is_tensor(data: Any) -> bool:
    import torch

    return isinstance(data, torch.Tensor)


def recursively_apply(
    func: Callable[..., Any],
    data: Any,
    *args: Any,
    test_type: Callable[[Any], bool] = _is_tensor,
    error_on_other_type: bool = False,
    **kwargs: Any,
) -> Any:
    """``func`` applied to every leaf of ``data`` that passes ``test_type``, keeping the nesting.

    Other leaves are returned as they are, or refused with ``TypeError`` when
    ``error_on_other_type``.
    """

    def visit(node: Any) -> Any:
        if isinstance(node, tuple) and hasattr(node, "_fields"):  # a named tuple takes positions
            return type(node)(*map(visit, node))
        if isinstance(node, list | tuple):
            return type(node)(map(visit, node))
        if isinstance(node, Mapping):
            rebuild: Any = type(node)
            return rebuild({key: visit(value) for key, value in node.items()})
        if test_type(node):
            return func(node, *args, **kwargs)
        if not error_on_other_type:
            return node
        applied = getattr(func, "__name__", repr(func))
        wanted = getattr(test_type, "__name__", repr(test_type))
        raise TypeError(
            f"{applied}: found a leaf of type {type(node).__name__}; expected lists, tuples and "
            f"mappings whose leaves pass {wanted}"
        )

    return visit(data)


def send_to_device(
    tensor: Any, device: Any, non_blocking: bool = False, skip_keys: Any = None
) -> Any:
    """``tensor`` (or every tensor nested in it) moved to ``device``; keys in ``skip_keys`` stay."""
    from accelkw_core.runtime.data.data_loader import move_to_device

    if skip_keys is None:
        return move_to_device(tensor, device, non_blocking)
    if isinstance(skip_keys, str):
        skip_keys = [skip_keys]
    if isinstance(tensor, Mapping):
        rebuild: Any = type(tensor)
        return rebuild(
            {
                k: v if k in skip_keys else send_to_device(v, device, non_blocking, skip_keys)
                for k, v in tensor.items()
            }
        )
    return move_to_device(tensor, device, non_blocking)


def gather(tensor: Any) -> Any:
    """Every process's tensors concatenated on dim 0, in rank order (0-d tensors become 1-d)."""
    import torch
    import torch.distributed as dist

    world = _world()

    def one(t: Any) -> Any:
        t = t if t.ndim > 0 else t.clone()[None]
        if world == 1:
            return t
        t = t.contiguous()
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t)
        return torch.cat(parts, dim=0)

    return recursively_apply(one, tensor, error_on_other_type=True)


def gather_object(object: Any) -> Any:
    """Every process's list of picklable objects, concatenated in rank order (one process: as is)."""
    import torch.distributed as dist

    world = _world()
    if world == 1:
        return object
    parts: list[Any] = [None] * world
    dist.all_gather_object(parts, object)
    return [item for part in parts for item in part]


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Every tensor in ``tensor`` overwritten, in place, with process ``from_process``'s."""
    import torch.distributed as dist

    if _world() == 1:
        return tensor

    def one(t: Any) -> Any:
        dist.broadcast(t, src=from_process)
        return t

    return recursively_apply(one, tensor, error_on_other_type=True)


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """``object_list`` filled, in place, with process ``from_process``'s picklable objects."""
    import torch.distributed as dist

    if _world() > 1:
        dist.broadcast_object_list(object_list, src=from_process)
    return object_list


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """New tensors holding the ``"mean"``, ``"sum"`` or ``"max"`` over processes of each tensor.

    ``"none"`` sums, as Accelerate's does; ``scale`` is used on XLA only, as in Accelerate.
    """
    import torch.distributed as dist

    if reduction not in REDUCTIONS:
        from accelkw_core.errors import ConfigError

        raise ConfigError(
            "reduce", "reduction", reduction, "one of " + ", ".join(map(repr, REDUCTIONS))
        )
    world = _world()

    def one(t: Any) -> Any:
        out = t.clone()
        if world == 1:
            return out
        dist.all_reduce(out, dist.ReduceOp.MAX if reduction == "max" else dist.ReduceOp.SUM)
        if reduction == "mean":
            out /= world
        return out

    return recursively_apply(one, tensor, error_on_other_type=True)


def pad_across_processes(
    tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
) -> Any:
    """Every tensor padded with ``pad_index`` along ``dim`` to the largest size across processes.

    Pads at the end, or at the beginning with ``pad_first``; so tensors of different lengths
    can be gathered.
    """
    import torch

    def one(t: Any) -> Any:
        if dim >= len(t.shape) or dim < -len(t.shape):
            return t
        d = dim + len(t.shape) if dim < 0 else dim
        sizes = gather(torch.tensor(t.shape, device=t.device)[None]).cpu()
        longest = max(int(s[d]) for s in sizes)
        if longest == t.shape[d]:
            return t
        shape = list(t.shape)
        shape[d] = longest
        out = t.new_zeros(tuple(shape)) + pad_index
        start = longest - t.shape[d] if pad_first else 0
        where = tuple(
            slice(start, start + t.shape[d]) if i == d else slice(None) for i in range(len(shape))
        )
        out[where] = t
        return out

    return recursively_apply(one, tensor, error_on_other_type=True)


def concatenate(data: list[Any], dim: int = 0) -> Any:
    """The tensors of ``data`` (a list of equally nested tensors) concatenated along ``dim``."""
    import torch

    first = data[0]
    if isinstance(first, tuple | list):
        return type(first)(concatenate([d[i] for d in data], dim=dim) for i in range(len(first)))
    if isinstance(first, Mapping):
        rebuild: Any = type(first)
        return rebuild({k: concatenate([d[k] for d in data], dim=dim) for k in first})
    if not isinstance(first, torch.Tensor):
        raise TypeError(f"Can only concatenate tensors but got {type(first)}")
    return torch.cat(data, dim=dim)


def find_batch_size(data: Any) -> int:
    """The size of the first dimension of the first tensor found in ``data``."""
    if isinstance(data, tuple | list | Mapping) and len(data) == 0:
        raise ValueError(f"Cannot find the batch size from empty {type(data)}.")
    if isinstance(data, tuple | list):
        return find_batch_size(data[0])
    if isinstance(data, Mapping):
        return find_batch_size(next(iter(data.values())))
    if not _is_tensor(data):
        raise TypeError(f"Can only find the batch size of tensors but got {type(data)}.")
    return int(data.shape[0])

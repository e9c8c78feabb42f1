"""Collective operations of the runtime: gather, reduce and barrier across the processes of a run.

With one process each is the identity (a copy for ``reduce``); with several, a
``torch.distributed`` process group must exist, or the error says how to get one.
"""

from __future__ import annotations

from typing import Any

from accelkw_core.contract.state_view import AcceleratorState
from accelkw_core.discovery.catalog import provider_hint
from accelkw_core.errors import AccelkwError

__all__ = [
    "REDUCTIONS",
    "VALUE_OPS",
    "agree",
    "agree_value",
    "barrier",
    "gather",
    "gather_objects",
    "has_group",
    "reduce",
]

REDUCTIONS = ("sum", "mean")
VALUE_OPS = ("sum", "mean", "max", "min")


def has_group() -> bool:
    """Whether a ``torch.distributed`` process group is initialised in this process."""
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def _group(state: AcceleratorState, what: str) -> Any:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist
    raise AccelkwError(
        f"{what} needs a torch.distributed process group across the {state.world_size} processes "
        "of this run, and none is initialised: create the Accelerator or a PartialState() "
        "first (each starts it through the installed handler that provides it: "
        f"{provider_hint('process_group')}), or call torch.distributed.init_process_group"
    )


def gather(data: Any, state: AcceleratorState) -> Any:
    """Every process's tensors concatenated on dim 0, rank order; nested lists/tuples/dicts too.

    A 0-dimensional tensor is gathered as a 1-D tensor of ``world_size`` values.
    """
    import torch

    if isinstance(data, dict):
        return type(data)({k: gather(v, state) for k, v in data.items()})
    if isinstance(data, list | tuple):
        return type(data)(gather(v, state) for v in data)
    if not isinstance(data, torch.Tensor):
        raise TypeError(
            f"gather: got {type(data).__name__}, expected a tensor or a list/tuple/dict of tensors"
        )
    tensor = data if data.dim() > 0 else data.unsqueeze(0)
    if not state.distributed:
        return tensor
    dist = _group(state, "gather")
    tensor = tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(state.world_size)]
    dist.all_gather(parts, tensor)
    return torch.cat(parts, dim=0)


def reduce(tensor: Any, reduction: str, state: AcceleratorState) -> Any:
    """A new tensor holding the element-wise ``"sum"`` or ``"mean"`` of ``tensor`` over processes."""
    import torch

    if reduction not in REDUCTIONS:
        raise ValueError(
            f"reduce: got reduction={reduction!r}, expected one of "
            + ", ".join(repr(r) for r in REDUCTIONS)
        )
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"reduce: got {type(tensor).__name__}, expected a tensor")
    out = tensor.detach().clone()
    if not state.distributed:
        return out
    dist = _group(state, "reduce")
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    if reduction == "mean":
        out = out / state.world_size if not out.is_floating_point() else out.div_(state.world_size)
    return out


def agree(flag: bool, state: AcceleratorState, how: str = "any") -> bool:
    """``flag`` agreed by every process: whether it is true on any (``how="any"``) or on every
    (``how="all"``) process. Every process must call it; with one process it is ``flag``."""
    if how not in ("any", "all"):
        raise ValueError(f"agree: got how={how!r}, expected 'any' or 'all'")
    if not state.distributed:
        return bool(flag)
    import torch

    dist = _group(state, "agree")
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=state.device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX if how == "any" else dist.ReduceOp.MIN)
    return bool(value.item())


def agree_value(value: float, state: AcceleratorState, op: str = "mean") -> float:
    """``value`` combined over every process by ``op`` (``"sum"``, ``"mean"``, ``"max"`` or
    ``"min"``), the same float on every rank. Every process must call it, as often; with one
    process it is ``float(value)``. Reduced in float64, so an int up to 2**53 stays exact."""
    if op not in VALUE_OPS:
        raise ValueError(
            f"agree_value: got op={op!r}, expected one of " + ", ".join(map(repr, VALUE_OPS))
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"agree_value: got {type(value).__name__} {value!r}, expected a number (int or "
            "float); agree on a flag with agree(flag)"
        )
    if not state.distributed:
        return float(value)
    import torch

    dist = _group(state, "agree_value")
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=state.device)
    reduce_op = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}.get(op, dist.ReduceOp.SUM)
    dist.all_reduce(tensor, op=reduce_op)
    total = float(tensor.item())
    return total / state.world_size if op == "mean" else total


def barrier(state: AcceleratorState) -> None:
    """Wait until every process reaches this point (nothing to wait for with one process)."""
    if state.distributed:
        _group(state, "wait_for_everyone").barrier()


def gather_objects(data: Any, state: AcceleratorState) -> Any:
    """Every process's list of picklable objects, concatenated in rank order.

    With one process ``data`` itself, as Accelerate's ``gather_object``.
    """
    if not state.distributed:
        return data
    dist = _group(state, "gather_for_metrics")
    parts: list[Any] = [None] * state.world_size
    dist.all_gather_object(parts, data)
    return [item for part in parts for item in part]

"""Gradient clipping for ``Accelerator.clip_grad_norm_``/``clip_grad_value_``: unscale, then clip.

Gradients of a loss-scaled run hold ``scale * gradient`` until the step; clipping them as they
are would clip the wrong values. The handler that scales losses contributes to the
``unscale_gradients`` point a callable that divides one optimizer's gradients by the scale;
the runtime calls it for every prepared optimizer before clipping, as Accelerate does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from accelkw_core.contract.points import UNSCALE_GRADIENTS

if TYPE_CHECKING:
    from accelkw_core.runtime.run_state import RunState

__all__ = ["clip_norm", "innermost_optimizer", "unscale"]


def innermost_optimizer(optimizer: Any) -> Any:
    """The optimizer a step chain sees: ``optimizer`` without the runtime's own wrapper."""
    from accelkw_core.runtime.preparing.optimizer import AcceleratedOptimizer

    while isinstance(optimizer, AcceleratedOptimizer):
        optimizer = optimizer.optimizer
    return optimizer


def unscale(state: RunState, optimizers: Sequence[Any]) -> None:
    """Unscale the gradients of each optimizer through the ``unscale_gradients`` contribution.

    Nothing happens when no handler scales losses.
    """
    contributed = state.values(UNSCALE_GRADIENTS)
    if not contributed:
        return
    for optimizer in optimizers:
        contributed[0](innermost_optimizer(optimizer))


def clip_norm(parameters: Iterable[Any], max_norm: float, norm_type: float = 2) -> Any:
    """``torch.nn.utils.clip_grad_norm_``, also when the gradients are DTensors on several meshes.

    The total norm is taken over every gradient: per mesh (and the plain tensors), then combined,
    so sharded and replicated parameters are clipped together. Returns the total norm.
    """
    import torch

    params = list(parameters)
    groups: dict[Any, list[Any]] = {}
    plain: list[Any] = []
    dtensor: Any = None
    if torch.distributed.is_available():
        from torch.distributed.tensor import DTensor

        dtensor = DTensor
    for p in params:
        if p.grad is None:
            continue
        if dtensor is not None and isinstance(p.grad, dtensor):
            groups.setdefault(p.grad.device_mesh, []).append(p)
        else:
            plain.append(p)
    if len(groups) + bool(plain) <= 1:
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
    members = [*groups.values(), *([plain] if plain else [])]
    norms = []
    for group in members:
        norm = torch.nn.utils.get_total_norm([p.grad for p in group], norm_type)
        norms.append(norm.full_tensor() if isinstance(norm, dtensor) else norm)
    total = torch.linalg.vector_norm(torch.stack(norms), norm_type)
    for mesh, group in groups.items():
        torch.nn.utils.clip_grads_with_norm_(group, max_norm, dtensor.from_local(total, mesh))
    if plain:
        torch.nn.utils.clip_grads_with_norm_(plain, max_norm, total)
    return total

"""Wrapping a model in ``DistributedDataParallel`` at prepare time, and describing the call."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from accelkw_core.plugin import AccelkwError
from accelkw_ddp._comm_hooks import CommHook

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["backend_for", "describe_call", "wrap_model"]

NAME = "ddp"


def wrap_model(
    model: Any,
    state: AcceleratorState,
    device_ids: list[int] | None,
    kwargs: dict[str, Any],
    hook: CommHook | None,
    check_group: Callable[[AcceleratorState], None],
) -> Any:
    """``model`` in ``DistributedDataParallel`` with ``kwargs`` and ``hook``, or as it is.

    A model with no trainable parameter is returned unwrapped (DDP refuses it), as in
    Accelerate, and the state's log says so.
    """
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not (dist.is_available() and dist.is_initialized()):
        raise AccelkwError(
            f"ddp: the run has {state.world_size} processes but no process group is "
            "initialised; install accelkw-process-group (its handler creates the group) or call "
            "torch.distributed.init_process_group() before preparing the model"
        )
    check_group(state)
    if not any(p.requires_grad for p in model.parameters()):
        state.record(
            NAME,
            f"{type(model).__name__} has no parameter that requires grad: not wrapped",
            applied=False,
        )
        return model
    wrapped = DistributedDataParallel(model, device_ids=device_ids, **kwargs)
    if hook is not None:
        hook.register(wrapped)
    state.record(NAME, f"wrapped {type(model).__name__} in DistributedDataParallel")
    return wrapped


def backend_for(device_type: str) -> str:
    """The backend the default group uses for tensors on ``device_type``."""
    import torch.distributed as dist

    backend = str(dist.get_backend()).lower()
    if ":" not in backend:
        return backend
    # A per-device group, as in "cpu:gloo,cuda:nccl".
    pairs = dict(part.split(":", 1) for part in backend.split(",") if ":" in part)
    return pairs.get(device_type, backend)


def describe_call(
    device_ids: list[int] | None, kwargs: dict[str, Any], hook: CommHook | None
) -> str:
    """``DistributedDataParallel(module, ...)`` as text, with the hook it gets."""
    args = ", ".join(
        ["module", f"device_ids={device_ids!r}", *(f"{k}={v!r}" for k, v in kwargs.items())]
    )
    return f"DistributedDataParallel({args}); comm hook: " + (
        hook.description if hook else "none (plain all-reduce)"
    )

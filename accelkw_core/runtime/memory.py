"""``find_executable_batch_size``: retry a training function with smaller batches on out-of-memory.

Accelerate's decorator, with its signature and semantics: the batch size starts at
``starting_batch_size`` and is multiplied by 0.9 (or set by ``reduce_batch_size_fn``) after each
out-of-memory error, with the device cache emptied in between.
"""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["clear_device_cache", "find_executable_batch_size", "should_reduce_batch_size"]

# The messages torch raises when a device (or the host) runs out of memory, as Accelerate lists.
_OUT_OF_MEMORY = (
    " out of memory.",
    "MPS backend out of memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "DefaultCPUAllocator: can't allocate memory",
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",
)


def should_reduce_batch_size(exception: Exception) -> bool:
    """Whether ``exception`` is an out-of-memory error a smaller batch may avoid."""
    if isinstance(exception, RuntimeError) and len(exception.args) == 1:
        message = exception.args[0]
        return isinstance(message, str) and any(s in message for s in _OUT_OF_MEMORY)
    return False


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Empty the CUDA cache (after a garbage collection when ``garbage_collection``)."""
    import torch

    if garbage_collection:
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[], int] | None = None,
) -> Any:
    """Decorate ``function(batch_size, ...)`` to run it with the largest batch size that fits.

    Call the decorated function without the batch size: it is passed as the first argument,
    starting at ``starting_batch_size``; after an out-of-memory error (see
    :func:`should_reduce_batch_size`) it is reduced and the function called again, until it
    returns or the size reaches 0 (``RuntimeError``). Other errors propagate.
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    batch_size = starting_batch_size

    def reduce_by_a_tenth() -> int:
        nonlocal batch_size
        batch_size = int(batch_size * 0.9)
        return batch_size

    reduce = reduce_batch_size_fn if reduce_batch_size_fn is not None else reduce_by_a_tenth

    def decorator(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        clear_device_cache(garbage_collection=True)
        params = list(inspect.signature(function).parameters)
        if len(params) < len(args) + 1:
            given = ", ".join(f"{p}={v}" for p, v in zip(params[1:], args[1:], strict=False))
            raise TypeError(
                f"Batch size was passed into `{function.__name__}` as the first argument when "
                f"called. Remove this as the decorator already does so: "
                f"`{function.__name__}({given})`"
            )
        while True:
            if batch_size == 0:
                raise RuntimeError("No executable batch size found, reached zero.")
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as exc:
                if not should_reduce_batch_size(exc):
                    raise
                clear_device_cache(garbage_collection=True)
                batch_size = reduce()

    return decorator

"""``find_executable_batch_size``: run a training function again, with a smaller batch, whenever
it runs out of memory.

The public facts are Accelerate's: the decorator's signature and defaults, a batch size that
starts at ``starting_batch_size`` and becomes ``int(size * 0.9)`` after each out-of-memory error
unless ``reduce_batch_size_fn`` gives the next one, the device cache emptied (after a garbage
collection) before every try, and a size that survives between calls of the decorated function.
"""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any

from accelkw_core.errors import BatchSizeError

__all__ = ["clear_device_cache", "find_executable_batch_size", "should_reduce_batch_size"]

# Wording of the out-of-memory errors torch raises on each backend (CUDA/HIP/XPU share the first);
# a smaller batch can get past these and nothing else.
_OUT_OF_MEMORY_MARKERS = (
    " out of memory.",
    "MPS backend out of memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "DefaultCPUAllocator: can't allocate memory",
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",
)


def should_reduce_batch_size(exception: Exception) -> bool:
    """True when ``exception`` is a ``RuntimeError`` whose one argument is torch's out-of-memory
    wording, so that a smaller batch may succeed."""
    if not isinstance(exception, RuntimeError) or len(exception.args) != 1:
        return False
    (text,) = exception.args
    return isinstance(text, str) and any(marker in text for marker in _OUT_OF_MEMORY_MARKERS)


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Give the accelerator's cached blocks back (after ``gc.collect()`` when asked)."""
    import torch

    if garbage_collection:
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class _Shrinking:
    """The decorated function: calls ``function(size, ...)`` until a size fits."""

    def __init__(
        self,
        function: Callable[..., Any],
        starting_batch_size: int,
        reduce_batch_size_fn: Callable[[], int] | None,
    ) -> None:
        self.function = function
        self.size = starting_batch_size
        self.next_size = reduce_batch_size_fn or self._nine_tenths
        functools.update_wrapper(self, function)

    def _nine_tenths(self) -> int:
        return int(self.size * 0.9)

    def _refuse_a_given_size(self, args: tuple[Any, ...]) -> None:
        # The size is the first parameter, filled here: a caller who passes it as well shifts
        # every argument one place, which would fail later and far less clearly.
        names = list(inspect.signature(self.function).parameters)
        if len(args) < len(names):
            return
        name = self.function.__name__
        rest = ", ".join(f"{n}={v!r}" for n, v in zip(names[1:], args[1:], strict=False))
        raise TypeError(
            f"{name}() gets its batch size from find_executable_batch_size, as its first "
            f"argument: call it without one, {name}({rest})"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        clear_device_cache(garbage_collection=True)
        self._refuse_a_given_size(args)
        tried: list[int] = []
        while self.size != 0:
            tried.append(self.size)
            try:
                return self.function(self.size, *args, **kwargs)
            except Exception as error:
                if not should_reduce_batch_size(error):
                    raise
            clear_device_cache(garbage_collection=True)
            self.size = self.next_size()
        raise BatchSizeError(self.function.__name__, tried)


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[], int] | None = None,
) -> Any:
    """Decorate ``function(batch_size, ...)`` so that it runs with the largest batch that fits.

    Call the result without the batch size: it is given as the first argument, starting at
    ``starting_batch_size``. When the call raises an out-of-memory error (see
    :func:`should_reduce_batch_size`) the size is reduced (to nine tenths, or to what
    ``reduce_batch_size_fn()`` returns) and the call made again; any other error propagates.
    Raises :class:`~accelkw_core.errors.BatchSizeError` (a ``RuntimeError``) when the size
    reaches 0, and ``TypeError`` when the caller passes a batch size itself. Usable bare
    (``@find_executable_batch_size``) or with arguments.
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    return _Shrinking(function, starting_batch_size, reduce_batch_size_fn)

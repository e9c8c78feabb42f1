"""Which kind of run this is, and the helpers that let processes take turns or share work.

``DistributedType`` is Accelerate's enum, defined by the core (served from
``accelkw_core.utils``); ``split_between_processes``, ``goes_first`` and ``on_process`` carry
Accelerate's semantics for the ``Accelerator`` methods of the same purpose.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import ConfigError

if TYPE_CHECKING:
    from accelkw_core.runtime.state import AcceleratorState

__all__ = ["DistributedType", "distributed_type", "goes_first", "on_process", "split_inputs"]


class DistributedType(str, enum.Enum):
    """The kind of run (Accelerate's ``DistributedType``; members and values are Accelerate's).

    accelkw reports ``NO`` (one process), ``MULTI_CPU`` or ``MULTI_GPU`` by itself; a plugin that
    changes the kind of run (sharded data parallel) contributes its member to the ``attribute``
    point under the key ``"distributed_type"``.
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"


def distributed_type(state: AcceleratorState) -> DistributedType:
    """``NO`` for one process, else ``MULTI_GPU`` on CUDA, ``MULTI_<DEVICE>`` otherwise.

    A contribution to the ``attribute`` point keyed ``"distributed_type"`` wins.
    """
    contributed = state.keyed("attribute").get("distributed_type")
    if contributed is not None:
        return DistributedType(contributed)
    if not state.distributed:
        return DistributedType.NO
    if state.device_type == "cuda":
        return DistributedType.MULTI_GPU
    return DistributedType(f"MULTI_{state.device_type.upper()}")


@contextmanager
def goes_first(state: AcceleratorState, first: bool) -> Iterator[None]:
    """The block runs on the processes with ``first`` set, then on the others (barriers)."""
    from accelkw_core.runtime import collectives as ops

    if not first:
        ops.barrier(state)
    yield
    if first:
        ops.barrier(state)


def on_process(
    function: Callable[..., Any] | None, chosen: Callable[[], bool], what: str
) -> Callable[..., Any]:
    """``function`` wrapped to run only where ``chosen()`` is true (``None`` elsewhere)."""
    if function is None or not callable(function):
        raise ConfigError(
            "accelerator",
            what,
            function,
            f"a function to decorate (@accelerator.{what}, or accelerator.{what}(fn))",
        )

    @functools.wraps(function)
    def inner(*args: Any, **kwargs: Any) -> Any:
        if chosen():
            return function(*args, **kwargs)
        return None

    return inner


def split_inputs(inputs: Any, state: AcceleratorState, apply_padding: bool = False) -> Any:
    """This process's contiguous share of ``inputs`` (a list, tuple, tensor, or dict of them).

    The first ``len % num_processes`` processes get one element more; with ``apply_padding``
    the others repeat the last element so every share has the same length.
    """
    n, rank = state.world_size, state.rank
    if n == 1:
        return inputs
    if isinstance(inputs, dict):
        lengths = {len(v) for v in inputs.values()}
        if len(lengths) > 1:
            raise ValueError("All values in the dictionary must have the same length")
        length = lengths.pop() if lengths else 0
    else:
        length = len(inputs)
    per, extra = divmod(length, n)
    start = rank * per + min(rank, extra)
    end = start + per + (1 if rank < extra else 0)
    target = per + (1 if extra else 0)

    def cut(values: Any) -> Any:
        if isinstance(values, dict):
            return type(values)({k: cut(v) for k, v in values.items()})
        if not isinstance(values, list | tuple) and not hasattr(values, "shape"):
            return values
        share = values[start:end]
        if apply_padding and len(share) < target and length:
            missing = target - len(share)
            if hasattr(share, "shape"):
                import torch

                share = torch.cat([share, values[-1:].expand(missing, *values.shape[1:])])
            else:
                share = share + type(share)([values[-1]] * missing)
        return share

    return cut(inputs)

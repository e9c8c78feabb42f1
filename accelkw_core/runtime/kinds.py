"""``DistributedType``: which kind of run this is (Accelerate's enum), and the run's own kind.

A module of its own, importing nothing else of the runtime, so the state can describe itself
(``str(accelerator.state)``) without a circle of imports.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkw_core.contract.state_view import AcceleratorState

__all__ = ["DistributedType", "distributed_type"]


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

"""accelkw-ddp: ``DistributedDataParallelKwargs``, how models are wrapped in DDP."""

from accelkw_ddp.handler import DDPCommunicationHookType, DistributedDataParallelKwargs

__all__ = ["DDPCommunicationHookType", "DistributedDataParallelKwargs"]

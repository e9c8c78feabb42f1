"""accelkw-fsdp: ``FullyShardedDataParallelPlugin``, models sharded with FSDP2 (``fully_shard``)."""

from accelkw_fsdp.handler import FullyShardedDataParallelPlugin

__all__ = ["FullyShardedDataParallelPlugin"]

"""accelkw-process-group: ``InitProcessGroupKwargs``, how the process group is initialised."""

from accelkw_process_group.handler import GroupPlan, InitProcessGroupKwargs

__all__ = ["GroupPlan", "InitProcessGroupKwargs"]

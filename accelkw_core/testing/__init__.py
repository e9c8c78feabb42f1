"""The test tier: isolated registries, states, real multi-process runs and the handler and tracker contract kits.

Nothing here mocks torch: :func:`run_workers` starts real processes that form a real
``torch.distributed`` group (gloo over loopback) when the target asks for one.
"""

from accelkw_core.testing.contract import HandlerContract, TrackerContract
from accelkw_core.testing.helpers import (
    WorkerFailed,
    applied,
    apply_handler,
    compose_handlers,
    free_port,
    isolated_registry,
    make_state,
    modules_loaded_by,
    plugin_of,
    run_workers,
)

__all__ = [
    "HandlerContract",
    "TrackerContract",
    "WorkerFailed",
    "applied",
    "apply_handler",
    "compose_handlers",
    "free_port",
    "isolated_registry",
    "make_state",
    "modules_loaded_by",
    "plugin_of",
    "run_workers",
]

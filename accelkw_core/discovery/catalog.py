"""The one place the core names the built-in plugins: for install hints, never for dispatch.

The runtime works with any handler through the registry; these names only turn "not installed"
into the exact ``pip install`` line, and let ``accelkw_core.utils`` serve the reference's class
names lazily.
"""

from __future__ import annotations

__all__ = ["HANDLER_DISTRIBUTIONS", "REFERENCE_NAMES", "install_hint"]

# Reference class name -> (module that defines it, distribution that ships the module).
REFERENCE_NAMES: dict[str, tuple[str, str]] = {
    "AutocastKwargs": ("accelkw_autocast", "accelkw-autocast"),
    "DistributedDataParallelKwargs": ("accelkw_ddp", "accelkw-ddp"),
    "DDPCommunicationHookType": ("accelkw_ddp", "accelkw-ddp"),
    "ProfileKwargs": ("accelkw_profile", "accelkw-profile"),
    "GradScalerKwargs": ("accelkw_grad_scaler", "accelkw-grad-scaler"),
    "InitProcessGroupKwargs": ("accelkw_process_group", "accelkw-process-group"),
}

# Handler registry name -> the distribution that ships it.
HANDLER_DISTRIBUTIONS: dict[str, str] = {
    "autocast": "accelkw-autocast",
    "ddp": "accelkw-ddp",
    "profile": "accelkw-profile",
    "grad_scaler": "accelkw-grad-scaler",
    "process_group": "accelkw-process-group",
}


def install_hint(handler_name: str) -> str:
    """``"pip install accelkw-ddp"`` for a built-in handler name, else a generic hint."""
    dist = HANDLER_DISTRIBUTIONS.get(handler_name)
    if dist is None:
        return f"install the plugin that provides the {handler_name!r} handler"
    return f"pip install {dist}"

"""The one place the core names the built-in plugins: for install hints, never for dispatch.

The runtime works with any handler through the registry and the extension points; this table
only turns "not installed" into the exact ``pip install`` line, lets ``accelkw_core.utils``
serve the reference's class names lazily, and is what the docs generator, the README check and
the tests read instead of writing the list again.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "ACCELERATE_ENV_PREFIXES",
    "ACCELERATE_ENV_PROVIDERS",
    "ACCELERATE_KEYWORDS",
    "ACCELERATE_TOP_LEVEL",
    "ACCELKW_ONLY",
    "BUILTINS",
    "HANDLER_DISTRIBUTIONS",
    "PROVIDERS",
    "REFERENCE_NAMES",
    "TRACKER_DISTRIBUTIONS",
    "Builtin",
    "install_hint",
    "provider_hint",
    "tracker_install_hint",
]


class Builtin(NamedTuple):
    """A built-in handler plugin: registry name, reference class, module, distribution, folder.

    ``extra_names`` are other reference names the module serves (enums); ``in_accelerate``:
    whether Accelerate has the class (``False`` for a handler of accelkw's own, served by
    ``accelkw_core.utils`` all the same but never an import a ported script rewrites).
    """

    name: str
    cls: str
    module: str
    distribution: str
    folder: str
    extra_names: tuple[str, ...] = ()
    in_accelerate: bool = True


BUILTINS: tuple[Builtin, ...] = (
    Builtin("autocast", "AutocastKwargs", "accelkw_autocast", "accelkw-autocast", "autocast"),
    Builtin(
        "ddp",
        "DistributedDataParallelKwargs",
        "accelkw_ddp",
        "accelkw-ddp",
        "ddp",
        ("DDPCommunicationHookType",),
    ),
    Builtin("profile", "ProfileKwargs", "accelkw_profile", "accelkw-profile", "profile"),
    Builtin(
        "grad_scaler",
        "GradScalerKwargs",
        "accelkw_grad_scaler",
        "accelkw-grad-scaler",
        "grad-scaler",
    ),
    Builtin(
        "grad_accum",
        "GradientAccumulationPlugin",
        "accelkw_grad_accum",
        "accelkw-grad-accum",
        "grad-accum",
    ),
    Builtin(
        "process_group",
        "InitProcessGroupKwargs",
        "accelkw_process_group",
        "accelkw-process-group",
        "process-group",
    ),
    Builtin("fsdp", "FullyShardedDataParallelPlugin", "accelkw_fsdp", "accelkw-fsdp", "fsdp"),
    Builtin(
        "compile",
        "TorchDynamoPlugin",
        "accelkw_compile",
        "accelkw-compile",
        "compile",
        ("DynamoBackend",),
    ),
    Builtin("ao_recipe", "AORecipeKwargs", "accelkw_fp8", "accelkw-fp8", "fp8"),
    Builtin("te_recipe", "TERecipeKwargs", "accelkw_fp8", "accelkw-fp8", "fp8"),
    Builtin("msamp_recipe", "MSAMPRecipeKwargs", "accelkw_fp8", "accelkw-fp8", "fp8"),
    Builtin("fp8_recipe", "FP8RecipeKwargs", "accelkw_fp8", "accelkw-fp8", "fp8"),
    Builtin(
        "async_checkpoint",
        "AsyncCheckpointKwargs",
        "accelkw_async_checkpoint",
        "accelkw-async-checkpoint",
        "async-checkpoint",
        in_accelerate=False,
    ),
)

# Reference class name -> (module that defines it, distribution that ships the module).
REFERENCE_NAMES: dict[str, tuple[str, str]] = {
    ref: (b.module, b.distribution) for b in BUILTINS for ref in (b.cls, *b.extra_names)
}

# The built-ins' classes Accelerate does not have (accelkw's own handlers).
ACCELKW_ONLY = frozenset(b.cls for b in BUILTINS if not b.in_accelerate)

# Reference names Accelerate exports from ``accelerate`` itself as well as ``accelerate.utils``.
ACCELERATE_TOP_LEVEL = frozenset(
    {
        "AutocastKwargs",
        "DDPCommunicationHookType",
        "DistributedDataParallelKwargs",
        "FullyShardedDataParallelPlugin",
        "GradScalerKwargs",
        "InitProcessGroupKwargs",
        "ProfileKwargs",
    }
)

# Handler registry name -> the distribution that ships it.
HANDLER_DISTRIBUTIONS: dict[str, str] = {b.name: b.distribution for b in BUILTINS}

# A capability the runtime checks for, or an extension point -> the built-in that provides it.
PROVIDERS: dict[str, str] = {
    "gradient_sync": "ddp",
    "process_group": "process_group",
    "profiler": "profile",
    "forward_context": "autocast",
    "mixed_precision": "autocast",
    "loss_scaling": "grad_scaler",
    "accumulation": "grad_accum",
    "fp8": "ao_recipe",
}


# Accelerate's Accelerator keywords that a handler may claim -> (the built-in handler that claims
# it, or None when accelkw has none; Accelerate's default, which asks for nothing).
ACCELERATE_KEYWORDS: dict[str, tuple[str | None, object]] = {
    "gradient_accumulation_steps": ("grad_accum", 1),
    "gradient_accumulation_plugin": ("grad_accum", None),
    "fsdp_plugin": ("fsdp", None),
    "dynamo_backend": ("compile", None),
    "dynamo_plugin": ("compile", None),
    "deepspeed_plugin": (None, None),
    "deepspeed_plugins": (None, None),
    "megatron_lm_plugin": (None, None),
    "torch_tp_plugin": (None, None),
    "parallelism_config": (None, None),
}

# Accelerate's variables that ask for a built-in's work on their own -> (the built-in whose
# handler declares it, the value that asks for nothing: "flag" for Accelerate's false words).
# Read only to name the distribution to install when none declares the variable.
ACCELERATE_ENV_PROVIDERS: dict[str, tuple[str, str]] = {
    "ACCELERATE_USE_FSDP": ("fsdp", "flag"),
    "ACCELERATE_DYNAMO_BACKEND": ("compile", "no"),
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": ("grad_accum", "1"),
}
# Prefixes of the variables Accelerate's plugins read -> the built-in that reads them here.
ACCELERATE_ENV_PREFIXES: dict[str, str] = {
    "FSDP_": "fsdp",
    "ACCELERATE_DYNAMO_": "compile",
    "ACCELERATE_FP8_": "ao_recipe",
}

# Tracker name -> the distribution that ships it (the built-in tracker plugins).
TRACKER_DISTRIBUTIONS: dict[str, str] = {
    "tensorboard": "accelkw-tensorboard",
    "mlflow": "accelkw-mlflow",
}
# Accelerate's other tracker names, for which no accelkw distribution exists (yet).
_ACCELERATE_TRACKERS = ("aim", "clearml", "comet_ml", "dvclive", "swanlab", "trackio", "wandb")


def install_hint(handler_name: str | None) -> str:
    """``"pip install accelkw-ddp"`` for a built-in handler name, else a generic hint."""
    if handler_name is None:
        return "accelkw has no handler for it (docs/migrating.md lists what is out of scope)"
    dist = HANDLER_DISTRIBUTIONS.get(handler_name)
    if dist is None:
        return f"install the plugin that provides the {handler_name!r} handler"
    return f"pip install {dist}"


def provider_hint(capability: str) -> str:
    """The pip line of the built-in that provides ``capability``, else a generic hint."""
    name = PROVIDERS.get(capability)
    if name is None:
        return f"install a plugin that provides {capability}"
    return install_hint(name)


def tracker_install_hint(tracker_name: str) -> str:
    """``"pip install accelkw-tensorboard"`` for a built-in tracker name, else what to do."""
    dist = TRACKER_DISTRIBUTIONS.get(tracker_name)
    if dist is not None:
        return f"pip install {dist}"
    if tracker_name in _ACCELERATE_TRACKERS:
        return (
            f"accelkw has no {tracker_name!r} tracker plugin yet: pass a GeneralTracker "
            "instance, or write a plugin (accelkw plugins new --kind tracker)"
        )
    return f"install the plugin that provides the {tracker_name!r} tracker"

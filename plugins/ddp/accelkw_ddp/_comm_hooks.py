"""DDP communication hooks: the torch hook a setting names, its state, and whether it can run.

Everything here is checked when the handler is applied, so a hook that cannot run on this
machine or torch fails at composition with a :class:`~accelkw_core.ConfigError`, not in the
middle of the first backward pass.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from accelkw_core.plugin import ConfigError, suggest

__all__ = ["POWER_SGD_HOOKS", "CommHook", "check_hook_on_backend", "resolve_comm_hook"]

POWER_SGD_HOOKS = ("power_sgd", "batched_power_sgd")


@dataclass(frozen=True)
class CommHook:
    """A resolved communication hook: the callable, a factory for its state, a description."""

    hook: Callable[..., Any]
    make_state: Callable[[], Any]
    description: str

    def register(self, model: Any) -> None:
        """Register the hook on a ``DistributedDataParallel`` model, with a fresh state."""
        # A fresh state per model: PowerSGD keeps per-bucket error and warm-start memory.
        model.register_comm_hook(state=self.make_state(), hook=self.hook)


def resolve_comm_hook(
    handler: str, hook: str, wrapper: str, options: Mapping[str, Any]
) -> CommHook | None:
    """The hook for ``comm_hook``/``comm_wrapper`` values (``'no'``, ``'fp16'``, ...), or ``None``.

    Raises ``ConfigError`` when the hook cannot run with this torch build or machine, or when a
    PowerSGD option is unknown or rejected by ``PowerSGDState``.
    """
    if hook == "no":
        return None
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    hooks: dict[str, Callable[..., Any]] = {
        "fp16": default_hooks.fp16_compress_hook,
        "bf16": default_hooks.bf16_compress_hook,
        "power_sgd": powerSGD_hook.powerSGD_hook,
        "batched_power_sgd": powerSGD_hook.batched_powerSGD_hook,
    }
    wrappers: dict[str, Callable[..., Any]] = {
        "fp16": default_hooks.fp16_compress_wrapper,
        "bf16": default_hooks.bf16_compress_wrapper,
    }
    for field_name, value in (("comm_hook", hook), ("comm_wrapper", wrapper)):
        if value == "bf16" and not bf16_supported():
            raise ConfigError(
                handler,
                field_name,
                value,
                "a hook this machine can run: torch's bf16 compression needs CUDA with "
                "NCCL >= 2.10 (or XPU with XCCL); use 'fp16'",
            )
    if hook == "batched_power_sgd" and batched_power_sgd_broken():
        import torch

        raise ConfigError(
            handler,
            "comm_hook",
            hook,
            f"a hook that works with torch {torch.__version__}: its batched_powerSGD_hook fails "
            "as soon as compression starts (it passes a 2-D matrix to _orthogonalize, which "
            "requires a batch); use 'power_sgd'",
        )
    fn = hooks[hook]
    name = getattr(fn, "__name__", hook)
    if wrapper != "no":
        fn = wrappers[wrapper](fn)
        name = f"{wrappers[wrapper].__name__}({name})"
    if hook not in POWER_SGD_HOOKS:
        # State None: the hook communicates over the default process group.
        return CommHook(fn, lambda: None, name)
    opts = check_power_sgd_options(handler, options)
    shown = ", ".join(f"{k}={v!r}" for k, v in opts.items())

    def make_state() -> Any:
        return powerSGD_hook.PowerSGDState(process_group=None, **opts)

    return CommHook(fn, make_state, f"{name} with PowerSGDState({shown})")


def check_hook_on_backend(handler: str, hook: str, find_unused: bool, backend: str) -> None:
    """Refuse PowerSGD with ``find_unused_parameters=True`` on gloo, where it aborts training.

    PowerSGD issues its second all-reduce from a gloo callback thread while DDP all-reduces its
    used-parameter map from the autograd thread; the ranks can order the two differently and
    gloo aborts the processes ("Received data size doesn't match expected size") as soon as
    compression starts (after ``start_powerSGD_iter`` steps). Seen with torch 2.13.
    """
    if hook in POWER_SGD_HOOKS and find_unused and backend == "gloo":
        raise ConfigError(
            handler,
            "find_unused_parameters",
            True,
            f"False with comm_hook {hook!r} on the gloo backend: PowerSGD's all-reduces and "
            "DDP's used-parameter all-reduce run on different threads, get out of order "
            "across ranks, and gloo aborts once compression starts; make every parameter "
            "take part (or freeze the unused ones) and set find_unused_parameters=False, "
            "or use comm_hook='fp16'",
        )


def check_power_sgd_options(handler: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` as ``PowerSGDState`` keyword arguments, after checking names and values."""
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

    params = inspect.signature(PowerSGDState.__init__).parameters
    allowed = [p for p in params if p not in ("self", "process_group")]
    for key in options:
        if key not in allowed:
            raise ConfigError(
                handler,
                f"comm_state_option[{key!r}]",
                key,
                "a PowerSGDState option: " + ", ".join(allowed),
                suggestion=suggest(str(key), allowed),
            )
    opts = dict(options)
    try:
        PowerSGDState(process_group=None, **opts)
    except Exception as exc:
        raise ConfigError(
            handler, "comm_state_option", opts, f"options PowerSGDState accepts ({exc})"
        ) from exc
    return opts


def _nccl_version() -> tuple[int, ...]:
    import torch

    # torch leaves nccl.version() unannotated; it returns NCCL's (major, minor, patch).
    version: tuple[int, ...] = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
    return version


def bf16_supported() -> bool:
    """Whether torch will accept its bf16 hooks here (mirrors ``DDP._check_comm_hook``)."""
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        return False
    cuda_build = torch.version.cuda is not None or torch.version.hip is not None
    # NCCL's version is asked only of a build that has NCCL: a CPU build has no such call.
    if cuda_build and dist.is_nccl_available() and _nccl_version() >= (2, 10):
        return True
    xccl = getattr(dist, "is_xccl_available", lambda: False)
    return bool(xccl()) and bool(torch.xpu.is_available())


def batched_power_sgd_broken() -> bool:
    """Whether ``batched_powerSGD_hook`` fails once compression starts on this torch.

    The hook orthogonalises a 2-D matrix with ``_orthogonalize``, which (in torch 2.13, and
    wherever it was made batched) only accepts a batch of matrices and raises
    ``AssertionError`` otherwise. The probe makes that same call, so a torch that fixes either
    side is detected as working.
    """
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    orthogonalize = getattr(powerSGD_hook, "_orthogonalize", None)
    if orthogonalize is None:
        return False
    try:
        orthogonalize(torch.ones(2, 1))
    except AssertionError:
        return True
    except Exception:
        return False
    return False

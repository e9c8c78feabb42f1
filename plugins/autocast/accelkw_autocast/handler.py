"""``AutocastKwargs``: how ``torch.autocast`` runs around forward passes under mixed precision."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from accelkw_core.plugin import (
    FORWARD_CONTEXT,
    FORWARD_OUTPUT,
    ConfigError,
    KwargsHandler,
    Plan,
    fp32_outputs,
    handler_field,
)

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["AutocastKwargs"]

# The torch dtype attribute each mixed-precision mode autocasts to.
_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}

ContextFactory = Callable[[], AbstractContextManager[Any]]


@dataclass
class AutocastKwargs(KwargsHandler):
    """Customise how ``torch.autocast`` behaves (Accelerate's ``AutocastKwargs``).

    With mixed precision ``"fp16"`` or ``"bf16"`` it contributes
    ``torch.autocast(device_type=state.device_type, dtype=torch.float16 | torch.bfloat16,
    enabled=..., cache_enabled=...)`` to the ``forward_context`` extension point, so every
    forward of a prepared model (and ``accelerator.autocast()``) runs under it, and converts a
    prepared model's half-precision outputs back to float32 (``forward_output``), as Accelerate
    does. ``cache_enabled`` is passed only when it is not ``None``, so torch keeps its own
    default otherwise. With mixed precision ``"no"`` it contributes nothing.

    Example::

        from accelkw_autocast import AutocastKwargs

        accelerator = Accelerator(
            mixed_precision="bf16", kwargs_handlers=[AutocastKwargs(cache_enabled=True)]
        )
        with accelerator.autocast(autocast_handler=AutocastKwargs(enabled=False)):
            ...  # a region that must run in full precision
    """

    name: ClassVar[str] = "autocast"

    enabled: bool = handler_field(
        True,
        doc="Whether autocasting is on inside the context; False turns it off locally, "
        "even inside an enclosing autocast region.",
    )
    cache_enabled: bool | None = handler_field(
        None,
        doc="Whether torch caches casted weights inside the context; None keeps torch's default.",
    )

    def autocast_kwargs(self, state: AcceleratorState) -> dict[str, Any] | None:
        """The keyword arguments for ``torch.autocast`` on ``state``; ``None`` for precision "no"."""
        if state.mixed_precision not in _DTYPES:
            return None
        import torch

        kwargs: dict[str, Any] = {
            "device_type": state.device_type,
            "dtype": getattr(torch, _DTYPES[state.mixed_precision]),
            "enabled": self.enabled,
        }
        if self.cache_enabled is not None:
            kwargs["cache_enabled"] = self.cache_enabled
        return kwargs

    def factory(self, state: AcceleratorState) -> ContextFactory:
        """A zero-argument callable that makes a fresh autocast context for ``state``.

        Everything is resolved here, once, so entering a context later costs what a bare
        ``torch.autocast`` costs. Raises :class:`~accelkw_core.ConfigError` when this torch
        build would disable the requested autocast (it only warns), so it is never dropped.
        """
        kwargs = self.autocast_kwargs(state)
        if kwargs is None:
            return contextlib.nullcontext
        import torch

        _check_supported(torch, kwargs, state.mixed_precision)
        # Bound without the arguments torch defaults to anyway: every keyword costs on each
        # enter, and this context is entered around every forward.
        device_type = kwargs.pop("device_type")
        if kwargs.get("enabled") is True:
            del kwargs["enabled"]
        return functools.partial(torch.autocast, device_type, **kwargs)

    def context(self, state: AcceleratorState) -> AbstractContextManager[Any]:
        """A context manager that autocasts as this handler says on ``state``."""
        return self.factory(state)()

    def plan(self, state: AcceleratorState) -> Plan:
        """The autocast context around forwards on ``state``, or why there is none.

        Checks that this torch build can autocast as asked (a :class:`ConfigError` otherwise),
        which imports torch; it changes nothing.
        """
        plan = Plan(self.name)
        if state.mixed_precision not in _DTYPES:
            text = f"mixed precision {state.mixed_precision!r}: autocast not used"
            explicit = self.explicit_kwargs()
            if explicit:
                settings = ", ".join(f"{k}={v!r}" for k, v in explicit.items())
                text += f" ({settings} has no effect without fp16 or bf16)"
            return plan.note(text)
        args = [
            f"device_type={state.device_type!r}",
            f"dtype=torch.{_DTYPES[state.mixed_precision]}",
            f"enabled={self.enabled!r}",
        ]
        if self.cache_enabled is not None:
            args.append(f"cache_enabled={self.cache_enabled!r}")
        text = (
            f"torch.autocast({', '.join(args)}) around every forward of prepared models "
            "and in accelerator.autocast()"
        )
        if not self.enabled:
            text += "; autocasting explicitly turned off inside it"
        plan.contribute(FORWARD_CONTEXT, self.factory(state), text, provides=("mixed_precision",))
        plan.contribute(
            FORWARD_OUTPUT,
            fp32_outputs(),
            "prepared models return float32 outputs (half-precision tensors converted)",
        )
        return plan


def outputs_to_fp32(outputs: Any) -> Any:
    """``outputs`` with every float16/bfloat16 tensor (nested lists, tuples, dicts) in float32."""
    return fp32_outputs()(outputs)


def _check_supported(torch: Any, kwargs: dict[str, Any], mode: str) -> None:
    # Some torch builds turn autocast off with only a warning when a device lacks the dtype
    # (older CPU builds and fp16); building one context once at apply time makes that loud.
    device_type = kwargs["device_type"]
    is_available = getattr(torch.amp, "is_autocast_available", None)
    if is_available is not None and not is_available(device_type):
        raise ConfigError(
            "autocast",
            "mixed_precision",
            mode,
            f"a device type torch can autocast; torch {torch.__version__} has no autocast "
            f"for device_type={device_type!r}",
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe = torch.autocast(**kwargs)
    if getattr(probe, "_enabled", kwargs["enabled"]) != kwargs["enabled"]:
        why = "; ".join(str(w.message) for w in caught) or "autocast was disabled"
        raise ConfigError(
            "autocast",
            "mixed_precision",
            mode,
            f"a dtype torch {torch.__version__} autocasts to on {device_type!r} ({why}); "
            "use mixed_precision 'bf16' or 'no', or a newer torch",
        )

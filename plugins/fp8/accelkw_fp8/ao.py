"""``AORecipeKwargs``: fp8 training with torchao's ``Float8Linear``, as Accelerate 1.15 runs it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from accelkw_core.plugin import (
    FORWARD_CONTEXT,
    FORWARD_OUTPUT,
    MODEL_WRAPPER,
    OPTIMIZER_WRAPPER,
    AccelerateEnv,
    KwargsHandler,
    Plan,
    fp32_outputs,
    handler_field,
)
from accelkw_fp8._backends import require

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["BACKEND_VAR", "FP8_CAPABILITY", "AORecipeKwargs", "backend_requested", "not_fp8"]

NAME = "ao_recipe"
#: The capability a handler provides when it trains a run in fp8 (the core asks for it).
FP8_CAPABILITY = "fp8"
BACKEND_VAR = "ACCELERATE_FP8_BACKEND"


def not_fp8(handler: KwargsHandler, state: AcceleratorState, what: str) -> str:
    """Why a recipe does nothing on ``state``, naming the settings that then have no effect
    (Accelerate refuses a recipe without fp8; here it is composed in every run, so it notes)."""
    text = f"mixed precision {state.mixed_precision!r}: {what}"
    explicit = handler.explicit_kwargs()
    if explicit:
        settings = ", ".join(f"{k}={v!r}" for k, v in explicit.items())
        text += f" ({settings} has no effect without mixed_precision='fp8')"
    return text


def backend_requested(env: Mapping[str, str], backend: str) -> bool:
    """Whether ``ACCELERATE_FP8_BACKEND`` (``accelerate launch --fp8_backend``) names ``backend``."""
    return env.get(BACKEND_VAR, "").strip().upper() == backend


@dataclass
class AORecipeKwargs(KwargsHandler):
    """FP8 training with torchao (Accelerate's ``AORecipeKwargs``, field for field).

    With ``mixed_precision="fp8"``, ``prepare(model)`` converts the model's ``nn.Linear`` layers
    to torchao's ``Float8Linear`` in place (before DDP, FSDP or ``torch.compile`` wrap it), and
    every forward runs under ``torch.autocast(dtype=torch.bfloat16)`` with its outputs converted
    back to float32, as in Accelerate. The default filter keeps the first and the last linear
    layers and those whose dimensions are not multiples of 16; ``module_filter_func(module,
    fqn) -> bool`` replaces it. ``config`` (a ``torchao.float8.Float8LinearConfig``) wins over
    ``pad_inner_dim`` and ``enable_fsdp_float8_all_gather``, which default to ``True``
    (``ACCELERATE_FP8_PAD_INNER_DIM`` / ``ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER``).
    With any other precision it does nothing.

    Example::

        from accelkw_fp8 import AORecipeKwargs

        accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs()])
    """

    name: ClassVar[str] = NAME
    # The conversion swaps modules: it must see the bare model, before any wrapper holds it.
    before: ClassVar[tuple[str, ...]] = ("ddp", "fsdp", "compile")
    accelerate_env: ClassVar[dict[str, str]] = {
        "ACCELERATE_FP8_PAD_INNER_DIM": "pad_inner_dim",
        "ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER": "enable_fsdp_float8_all_gather",
    }

    config: Any = handler_field(
        None,
        doc="A torchao.float8.Float8LinearConfig; None builds one from pad_inner_dim and "
        "enable_fsdp_float8_all_gather.",
    )
    module_filter_func: Callable[..., Any] | None = handler_field(
        None,
        doc="module_filter_func(module, fqn) -> bool: which nn.Linear layers to convert; None "
        "keeps the first and last linear layers and those with a dimension not divisible by 16.",
    )
    pad_inner_dim: bool | None = handler_field(
        None, doc="Pad the inner dimension of the fp8 matmuls to a multiple of 16 (None: True)."
    )
    enable_fsdp_float8_all_gather: bool | None = handler_field(
        None, doc="All-gather FSDP2 parameters in float8 (None: True)."
    )

    @classmethod
    def from_accelerate_env(cls, env: Mapping[str, str]) -> AccelerateEnv:
        """Accelerate's ``ACCELERATE_FP8_*``; ``ACCELERATE_FP8_BACKEND=AO`` asks for this handler."""
        reading = super().from_accelerate_env(env)
        return reading._replace(requested=backend_requested(env, "AO"))

    def float8_config(self) -> Any:
        """The ``Float8LinearConfig`` the conversion uses (imports torchao)."""
        if self.config is not None:
            return self.config
        from torchao.float8 import Float8LinearConfig

        return Float8LinearConfig(
            pad_inner_dim=True if self.pad_inner_dim is None else self.pad_inner_dim,
            enable_fsdp_float8_all_gather=(
                True
                if self.enable_fsdp_float8_all_gather is None
                else self.enable_fsdp_float8_all_gather
            ),
        )

    def plan(self, state: AcceleratorState) -> Plan:
        """Convert prepared models to float8 and run forwards in bfloat16, or say why not."""
        plan = Plan(NAME)
        if state.mixed_precision != "fp8":
            return plan.note(not_fp8(self, state, "no fp8 conversion"))
        require(NAME, "AORecipeKwargs", "AO")
        from accelkw_fp8._convert import convert_model
        from accelkw_fp8._params import ParameterSwaps
        from accelkw_fp8._precision import bf16_autocast

        config = self.float8_config()
        module_filter = self.module_filter_func
        swaps = ParameterSwaps()

        def convert(model: Any) -> Any:
            converted = convert_model(model, config, module_filter, swaps)
            # A large model has hundreds of linears: the log names the first few and counts.
            shown = ", ".join(converted[:8]) if converted else "none"
            if len(converted) > 8:
                shown += f" and {len(converted) - 8} more"
            state.record(NAME, f"converted to Float8Linear: {shown}")
            return model

        chosen = (
            "the layers module_filter_func chooses"
            if module_filter is not None
            else "all but the first and last, and those with a dimension not divisible by 16"
        )
        settings = (
            "the given config"
            if self.config is not None
            else f"pad_inner_dim={config.pad_inner_dim}, "
            f"enable_fsdp_float8_all_gather={config.enable_fsdp_float8_all_gather}"
        )
        plan.contribute(
            MODEL_WRAPPER,
            convert,
            f"nn.Linear layers of prepared models converted to torchao Float8Linear ({chosen}; "
            f"{settings})",
            provides=(FP8_CAPABILITY,),
        )
        plan.contribute(
            OPTIMIZER_WRAPPER,
            swaps.repoint,
            "prepared optimizers hold the converted layers' weights (the parameters torchao "
            "put in the model), so those layers train",
        )
        plan.contribute(
            FORWARD_CONTEXT,
            bf16_autocast(state.device_type),
            f"torch.autocast(device_type={state.device_type!r}, dtype=torch.bfloat16) around "
            "every forward of prepared models and in accelerator.autocast()",
            provides=("mixed_precision",),
        )
        plan.contribute(
            FORWARD_OUTPUT,
            fp32_outputs(),
            "prepared models return float32 outputs (half-precision tensors converted)",
        )
        return plan

"""``TorchDynamoPlugin``: prepared models compiled with ``torch.compile``, outside DDP and FSDP."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from accelkw_core.plugin import (
    MODEL_WRAPPER,
    AccelerateEnv,
    ConfigError,
    KwargsHandler,
    Plan,
    ReferenceEnum,
    handler_field,
)

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["DynamoBackend", "TorchDynamoPlugin"]

NAME = "compile"
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class DynamoBackend(ReferenceEnum):
    """Accelerate's backend names (upper-case values); torch takes them lower-cased."""

    NO = "NO"
    EAGER = "EAGER"
    AOT_EAGER = "AOT_EAGER"
    INDUCTOR = "INDUCTOR"
    AOT_TS_NVFUSER = "AOT_TS_NVFUSER"
    NVPRIMS_NVFUSER = "NVPRIMS_NVFUSER"
    CUDAGRAPHS = "CUDAGRAPHS"
    OFI = "OFI"
    FX2TRT = "FX2TRT"
    ONNXRT = "ONNXRT"
    TENSORRT = "TENSORRT"
    AOT_TORCHXLA_TRACE_ONCE = "AOT_TORCHXLA_TRACE_ONCE"
    TORCHXLA_TRACE_ONCE = "TORCHXLA_TRACE_ONCE"
    TVM = "TVM"
    HPU_BACKEND = "HPU_BACKEND"
    NEURON = "NEURON"


def check_backend(backend: str) -> None:
    """Raise ``ConfigError`` unless torch's dynamo knows ``backend`` (imports torch._dynamo)."""
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        raise ConfigError(
            NAME,
            "backend",
            backend,
            "'no' or a backend of this torch (torch._dynamo.list_backends()): " + ", ".join(known),
        )


@dataclass
class TorchDynamoPlugin(KwargsHandler):
    """Compile prepared models with ``torch.compile`` (Accelerate's class, field for field).

    ``prepare(model)`` wraps the model in ``torch.compile(model, backend=..., ...)`` after every
    other model wrapper, so DDP or FSDP sit inside the compiled module, as torch recommends;
    ``unwrap_model(model, keep_torch_compile=False)`` gives the original back (the default keeps
    the compiled wrapper, as Accelerate's does). With ``use_regional_compilation`` the repeated
    blocks (the items of each ``nn.ModuleList``) are compiled in place instead, which compiles
    one block's graph once and reuses it. Backend ``'no'`` (the default) or ``disable=True``
    compiles nothing. Opt-in: applied only when requested (``Accelerator(dynamo_backend=...)``,
    ``dynamo_plugin=``, ``[handlers.compile]``, ``ACCELKW_COMPILE__BACKEND``).

    Example::

        from accelkw_compile import TorchDynamoPlugin

        accelerator = Accelerator(dynamo_plugin=TorchDynamoPlugin(backend="inductor"))
    """

    name: ClassVar[str] = NAME
    # Applied after the wrappers torch wants inside the compiled module.
    after: ClassVar[tuple[str, ...]] = ("process_group", "ddp", "fsdp")
    opt_in: ClassVar[bool] = True
    accelerator_keywords: ClassVar[dict[str, str]] = {
        "dynamo_backend": "backend",
        "dynamo_plugin": "*",
    }
    accelerate_env: ClassVar[dict[str, str]] = {
        "ACCELERATE_DYNAMO_BACKEND": "backend",
        "ACCELERATE_DYNAMO_MODE": "mode",
        "ACCELERATE_DYNAMO_USE_FULLGRAPH": "fullgraph",
        "ACCELERATE_DYNAMO_USE_DYNAMIC": "dynamic",
        "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "use_regional_compilation",
    }

    backend: str | None = handler_field(
        None,
        doc="A torch.compile backend ('inductor', 'aot_eager', 'eager', ...; Accelerate's "
        "upper-case names too); None or 'no' compiles nothing.",
    )
    mode: str | None = handler_field(
        None, doc="'default', 'reduce-overhead', 'max-autotune' or 'max-autotune-no-cudagraphs'."
    )
    fullgraph: bool | None = handler_field(
        None, doc="Require one graph for the whole forward (an error instead of graph breaks)."
    )
    dynamic: bool | None = handler_field(
        None, doc="Trace with dynamic shapes (True), static (False) or decide (None)."
    )
    options: dict[str, Any] | None = handler_field(
        None, doc="Backend options passed to torch.compile (not together with mode)."
    )
    disable: bool = handler_field(False, doc="Turn compilation off (a no-op, for testing).")
    use_regional_compilation: bool | None = handler_field(
        None, doc="Compile the repeated blocks (nn.ModuleList items) in place, one graph reused."
    )

    @classmethod
    def from_accelerate_env(cls, env: Mapping[str, str]) -> AccelerateEnv:
        """Accelerate's ``ACCELERATE_DYNAMO_*``: a backend other than ``no`` asks for compiling.

        ``accelerate launch`` always sets them (``NO`` and ``default`` unless told otherwise);
        then they only fill the fields of a plugin requested some other way, as in Accelerate.
        """
        reading = super().from_accelerate_env(env)
        backend = reading.fields.get("backend")
        requested = backend is not None and str(backend[1]).lower() != "no"
        return reading._replace(requested=requested)

    @property
    def backend_name(self) -> str:
        """The backend as torch spells it (lower case), ``"no"`` when none."""
        return str(self.backend or "no").lower()

    def check_values(self) -> None:
        """Refuse an unknown mode, mode with options, and a backend torch does not know."""
        if self.mode is not None and self.mode not in MODES:
            raise ConfigError(NAME, "mode", self.mode, "one of " + ", ".join(MODES))
        if self.mode not in (None, "default") and self.options:
            raise ConfigError(
                NAME,
                "options",
                self.options,
                "None when mode is set: torch.compile takes either mode or options",
            )
        name = self.backend_name
        # Accelerate's names are checked against torch at plan time, so building one stays cheap.
        if name != "no" and name.upper() not in DynamoBackend.__members__:
            check_backend(name)

    def compile_kwargs(self) -> dict[str, Any]:
        """The keyword arguments passed to ``torch.compile`` (only what was set)."""
        kwargs: dict[str, Any] = {"backend": self.backend_name}
        for key in ("mode", "fullgraph", "dynamic", "options"):
            value = getattr(self, key)
            if value is not None:
                kwargs[key] = value
        return kwargs

    def to_dict(self) -> dict[str, Any]:
        """Every field, the backend lower-cased as Accelerate's ``to_dict`` gives it."""
        out = super().to_dict()
        out["backend"] = self.backend_name
        return out

    def plan(self, state: AcceleratorState) -> Plan:
        """Compile prepared models, or say why not."""
        plan = Plan(NAME)
        name = self.backend_name
        if name == "no":
            return plan.note("backend 'no': models are not compiled")
        if self.disable:
            return plan.note("disable=True: models are not compiled")
        check_backend(name)
        from accelkw_compile._compile import compile_model, describe

        kwargs = self.compile_kwargs()
        regional = bool(self.use_regional_compilation)

        def wrap(model: Any) -> Any:
            return compile_model(model, state, kwargs, regional)

        return plan.contribute(
            MODEL_WRAPPER, wrap, "models will be compiled: " + describe(kwargs, regional)
        )

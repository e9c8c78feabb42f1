"""``DistributedDataParallelKwargs``: how models are wrapped in ``DistributedDataParallel``."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from accelkw_core.plugin import (
    MODEL_WRAPPER,
    ConfigError,
    KwargsHandler,
    Plan,
    ReferenceEnum,
    handler_field,
)
from accelkw_ddp._comm_hooks import (
    POWER_SGD_HOOKS,
    CommHook,
    check_hook_on_backend,
    resolve_comm_hook,
)
from accelkw_ddp._wrap import backend_for, describe_call, wrap_model

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["DDPCommunicationHookType", "DistributedDataParallelKwargs"]

NAME = "ddp"
# The fields passed to DistributedDataParallel; the comm_* fields configure the hook instead.
DDP_FIELDS = (
    "dim",
    "broadcast_buffers",
    "bucket_cap_mb",
    "find_unused_parameters",
    "check_reduction",
    "gradient_as_bucket_view",
    "static_graph",
)
COMM_FIELDS = ("comm_hook", "comm_wrapper", "comm_state_option")


class DDPCommunicationHookType(ReferenceEnum):
    """The DDP communication hooks (reference values; a member compares equal to its string)."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"


_NO = DDPCommunicationHookType.NO


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Customise how models are wrapped in ``torch.nn.parallel.DistributedDataParallel``.

    On a run with more than one process, ``apply`` adds a model wrapper that builds
    ``DistributedDataParallel(model, device_ids=[local_rank] on CUDA else None, **every DDP
    field you set)`` and registers the communication hook you chose (``comm_hook``, optionally
    wrapped by ``comm_wrapper``, with ``comm_state_option`` for PowerSGD). Applied after
    ``process_group``. Combinations that cannot work are ``ConfigError`` at construction (a
    wrapper without a PowerSGD hook, PowerSGD options without a PowerSGD hook) or at ``apply``
    (a hook this torch or machine cannot run).

    Example::

        from accelkw_ddp import DistributedDataParallelKwargs

        accelerator = Accelerator(
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)]
        )
    """

    name: ClassVar[str] = NAME
    after: ClassVar[tuple[str, ...]] = ("process_group",)

    dim: int = handler_field(0, doc="The dimension inputs are scattered along (DDP's dim).")
    broadcast_buffers: bool = handler_field(
        True, doc="Whether buffers are synchronised from rank 0 at wrap time and each forward."
    )
    bucket_cap_mb: int = handler_field(
        25,
        ge=0,
        le=2**43 - 1,
        doc="Gradient bucket size in MiB: gradients are all-reduced per bucket.",
    )
    find_unused_parameters: bool = handler_field(
        False,
        doc="Whether to find parameters that get no gradient in a forward pass (slower; "
        "needed when parts of the model are skipped).",
    )
    check_reduction: bool = handler_field(
        False,
        doc="Accepted for compatibility; torch's DDP ignores it (deprecated), so it is not "
        "passed when True and the log says so.",
    )
    gradient_as_bucket_view: bool = handler_field(
        False, doc="Whether gradients are views into the all-reduce buckets (saves memory)."
    )
    static_graph: bool = handler_field(
        False,
        doc="Whether the set of used parameters and the graph are the same every iteration.",
    )
    comm_hook: DDPCommunicationHookType = handler_field(
        _NO,
        doc="Gradient communication hook: 'no', 'fp16', 'bf16', 'power_sgd', 'batched_power_sgd'.",
    )
    comm_wrapper: Literal[
        DDPCommunicationHookType.NO, DDPCommunicationHookType.FP16, DDPCommunicationHookType.BF16
    ] = handler_field(
        _NO,
        doc="Cast gradients to 'fp16' or 'bf16' around a PowerSGD hook; 'no' for none.",
    )
    comm_state_option: dict[str, Any] = handler_field(
        default_factory=dict,
        doc="PowerSGDState options (matrix_approximation_rank, start_powerSGD_iter, ...); "
        "only with comm_hook 'power_sgd' or 'batched_power_sgd'.",
    )

    def check_values(self) -> None:
        """Reject hook settings that cannot take effect together."""
        hook, wrapper = str(self.comm_hook), str(self.comm_wrapper)
        if wrapper != "no" and hook not in POWER_SGD_HOOKS:
            reason = (
                "there is no hook to wrap (comm_hook is 'no')"
                if hook == "no"
                else f"comm_hook {hook!r} already compresses; wrappers cast around PowerSGD"
            )
            raise ConfigError(
                NAME,
                "comm_wrapper",
                wrapper,
                f"'no' unless comm_hook is 'power_sgd' or 'batched_power_sgd': {reason}",
            )
        if self.comm_state_option and hook not in POWER_SGD_HOOKS:
            raise ConfigError(
                NAME,
                "comm_state_option",
                self.comm_state_option,
                "{} unless comm_hook is 'power_sgd' or 'batched_power_sgd' "
                f"(these are PowerSGDState options; comm_hook is {hook!r})",
            )
        if "process_group" in self.comm_state_option:
            raise ConfigError(
                NAME,
                "comm_state_option['process_group']",
                self.comm_state_option["process_group"],
                "no process_group: the hook uses the default process group",
            )

    def to_kwargs(self) -> dict[str, Any]:
        """The DDP fields that differ from the defaults (reference: comm_* fields excluded)."""
        return {k: v for k, v in super().to_kwargs().items() if k not in COMM_FIELDS}

    def ddp_kwargs(self) -> dict[str, Any]:
        """The keyword arguments the wrapper passes to ``DistributedDataParallel``."""
        return self._ddp_call()[0]

    def comm_hook_plan(self) -> CommHook | None:
        """The communication hook to register, or ``None``; raises ``ConfigError`` if unusable."""
        return resolve_comm_hook(
            NAME, str(self.comm_hook), str(self.comm_wrapper), self.comm_state_option
        )

    def plan(self, state: AcceleratorState) -> Plan:
        """The DDP model wrapper on a multi-process ``state``, or why models are not wrapped.

        Raises :class:`~accelkw_core.plugin.ConfigError` for settings this torch cannot use.
        """
        plan = Plan(NAME)
        if state.world_size <= 1:
            return plan.note("world size 1: model not wrapped")
        import torch.distributed as dist

        kwargs, notes = self._ddp_call()
        hook = self.comm_hook_plan()
        device_ids = [state.local_rank] if state.device_type == "cuda" else None
        # The process-group handler runs first, so on a composed run this check fails early.
        group_ready = dist.is_available() and dist.is_initialized()
        if group_ready:
            self._check_group(state)

        def wrap(model: Any) -> Any:
            return wrap_model(model, state, device_ids, kwargs, hook, self._check_group)

        plan.contribute(
            MODEL_WRAPPER,
            wrap,
            "models will be wrapped in " + describe_call(device_ids, kwargs, hook),
            provides=("gradient_sync",),
        )
        for note in notes:
            plan.note(note)
        if not group_ready:
            plan.note(
                "a process group must exist when models are prepared "
                "(accelkw-process-group creates it)"
            )
        return plan

    def _check_group(self, state: AcceleratorState) -> None:
        """Checks that need the process group: the backend the model's tensors will use."""
        check_hook_on_backend(
            NAME,
            str(self.comm_hook),
            self.find_unused_parameters,
            backend_for(state.device_type),
        )

    def _ddp_call(self) -> tuple[dict[str, Any], list[str]]:
        """The DDP keyword arguments (every DDP field you set) and notes on any not passed."""
        from torch.nn.parallel import DistributedDataParallel

        params = inspect.signature(DistributedDataParallel.__init__).parameters
        explicit = self.explicit_fields()
        kwargs: dict[str, Any] = {}
        notes: list[str] = []
        for field_name in DDP_FIELDS:
            if field_name not in explicit:
                continue
            value = getattr(self, field_name)
            if field_name == "check_reduction" and value:
                notes.append(
                    "check_reduction=True not passed: torch's DDP ignores it (deprecated) "
                    "and only warns"
                )
                continue
            if field_name == "broadcast_buffers" and "forward_sync_buffers" in params:
                if value:
                    notes.append(
                        "broadcast_buffers=True not passed: it is this torch's default "
                        "behaviour, and passing the deprecated argument only adds a warning"
                    )
                    continue
                notes.append(
                    "broadcast_buffers=False passed; this torch deprecates it (FutureWarning) in "
                    "favour of forward_sync_buffers, which still syncs buffers at wrap time"
                )
            kwargs[field_name] = value
        return kwargs, notes

    # -- Accelerate's API: to_dict() and register_comm_hook(model) -----------------------------

    def to_dict(self, ignore_keys: Iterable[str] = COMM_FIELDS) -> dict[str, Any]:
        """Every field but ``ignore_keys`` (by default the comm_* fields, as Accelerate's)."""
        ignored = frozenset(ignore_keys)
        return {k: v for k, v in super().to_dict().items() if k not in ignored}

    def register_comm_hook(self, model: Any) -> None:
        """Register the configured hook on a ``DistributedDataParallel`` ``model`` (Accelerate's).

        ``comm_hook`` ``'no'`` registers nothing. A hook this torch or machine cannot run is a
        ``ConfigError`` here, not a failure inside the first backward pass; PowerSGD hooks get
        a fresh ``PowerSGDState(None, **comm_state_option)``.
        """
        hook = self.comm_hook_plan()
        if hook is not None:
            hook.register(model)

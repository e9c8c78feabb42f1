"""Sharding a model with ``fully_shard`` at prepare time, and the contributions that go with it."""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from accelkw_core.plugin import AccelkwError, ConfigError

if TYPE_CHECKING:
    import torch

    from accelkw_core.plugin import AcceleratorState
    from accelkw_fsdp._resolve import Resolved

__all__ = [
    "FSDPModelState",
    "ParamSwap",
    "activation_offload",
    "describe",
    "resharded",
    "shard_model",
    "suspend_sync",
]

NAME = "fsdp"


def _fsdp_root(model: Any) -> Any:
    """The outermost ``FSDPModule`` under wrappers such as ``torch.compile``'s."""
    from torch.distributed.fsdp import FSDPModule

    seen = model
    while not isinstance(seen, FSDPModule):
        inner = getattr(seen, "_orig_mod", None) or getattr(seen, "module", None)
        if inner is None:
            raise AccelkwError(
                f"fsdp: {type(model).__name__} was not sharded by accelkw-fsdp "
                "(prepare it with the Accelerator first)"
            )
        seen = inner
    return seen


def resharded(model: Any) -> Any:
    """The FSDP root of ``model`` with every group resharded, so parameters are DTensors again.

    With ``reshard_after_forward=False`` a forward leaves the parameters gathered (plain
    tensors); state-dict reads and writes need the sharded ones.
    """
    from torch.distributed.fsdp import FSDPModule

    root = _fsdp_root(model)
    for module in root.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
    return root


class ParamSwap:
    """Optimizers built on a model's parameters, switched to the sharded ones ``fully_shard`` makes.

    ``fully_shard`` replaces each parameter with a new ``DTensor`` parameter; an optimizer that
    still holds the old ones would step tensors no forward uses. Whichever of the model and the
    optimizer is prepared first, the optimizer ends up on the sharded parameters.
    """

    def __init__(self) -> None:
        self.mapping: dict[int, Any] = {}
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()

    def switch(self, optimizer: Any) -> Any:
        """Replace the optimizer's parameters that have sharded counterparts (optimizer_wrapper)."""
        self._optimizers.add(optimizer)
        self._apply(optimizer)
        return optimizer

    def add(self, mapping: dict[int, Any]) -> None:
        """Record old-parameter ids -> sharded parameters, and switch optimizers seen before."""
        self.mapping.update(mapping)
        for optimizer in list(self._optimizers):
            self._apply(optimizer)

    def _apply(self, optimizer: Any) -> None:
        for group in optimizer.param_groups:
            group["params"] = [self.mapping.get(id(p), p) for p in group["params"]]


def _layers(model: Any, handler: Any, resolved: Resolved) -> list[Any]:
    """The sub-modules the wrap policy gives their own shard group, innermost first."""
    policy: Callable[[Any], bool]
    if resolved.wrap == "callable":
        policy = handler.auto_wrap_policy
    elif resolved.wrap == "transformer_based_wrap":
        names = handler.transformer_cls_names_to_wrap or list(
            getattr(model, "_no_split_modules", None) or []
        )
        present = {type(m).__name__ for m in model.modules()}
        missing = sorted(set(names) - present)
        if missing or not names:
            raise ConfigError(
                NAME,
                "transformer_cls_names_to_wrap",
                names,
                "class names of layers in the model: " + ", ".join(sorted(present)),
            )

        def policy(module: Any) -> bool:
            return type(module).__name__ in names

    elif resolved.wrap == "size_based_wrap":
        threshold = handler.min_num_params or 0

        def policy(module: Any) -> bool:
            return bool(sum(p.numel() for p in module.parameters()) > threshold)

    else:
        return []
    mods: list[torch.nn.Module] = [m for m in model.modules() if m is not model and policy(m)]
    return list(reversed(mods))


def _ignored(model: Any, handler: Any) -> set[Any] | None:
    spec = handler.ignored_modules
    if spec is None:
        return None
    if isinstance(spec, str):
        pattern = re.compile(spec)
        modules = [m for n, m in model.named_modules() if n and pattern.fullmatch(n)]
    else:
        modules = list(spec)
    return {p for m in modules for p in m.parameters()}


def _policies(handler: Any, resolved: Resolved, state: AcceleratorState) -> dict[str, Any]:
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

    kwargs: dict[str, Any] = {"reshard_after_forward": resolved.reshard_after_forward}
    if resolved.mixed_precision_object is not None:
        kwargs["mp_policy"] = resolved.mixed_precision_object
    elif resolved.mixed_precision is not None:
        mp = {
            k: getattr(torch, v) if isinstance(v, str) else v
            for k, v in resolved.mixed_precision.items()
        }
        kwargs["mp_policy"] = MixedPrecisionPolicy(**mp)
    if resolved.cpu_offload and state.device_type != "cpu":
        kwargs["offload_policy"] = CPUOffloadPolicy()
    return kwargs


def describe(handler: Any, resolved: Resolved, state: AcceleratorState) -> str:
    """The ``fully_shard`` arguments as text, for the plan."""
    parts = [f"mesh=({state.world_size},) on {state.device_type}"]
    parts.append(f"reshard_after_forward={resolved.reshard_after_forward}")
    if resolved.mixed_precision_object is not None:
        parts.append(f"mp_policy={resolved.mixed_precision_object!r}")
    elif resolved.mixed_precision is not None:
        parts.append(f"mp_policy={resolved.mixed_precision}")
    if resolved.cpu_offload:
        parts.append(
            "offload_policy=CPUOffloadPolicy()"
            if state.device_type != "cpu"
            else "no CPU offload (parameters already live on the CPU)"
        )
    wrap = resolved.wrap
    if wrap == "transformer_based_wrap":
        wrap += f" {handler.transformer_cls_names_to_wrap or '_no_split_modules'}"
    elif wrap == "size_based_wrap":
        wrap += f" > {handler.min_num_params or 0} parameters"
    parts.append(f"layers: {wrap}")
    if handler.activation_checkpointing:
        parts.append("activation checkpointing on the layers")
    if resolved.broadcast_from_rank0:
        parts.append("rank 0's weights broadcast into the shards")
    return ", ".join(parts)


def shard_model(
    model: Any, state: AcceleratorState, handler: Any, resolved: Resolved, swap: ParamSwap
) -> Any:
    """``model`` sharded in place with ``fully_shard`` (layers first, then the root)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    if not (dist.is_available() and dist.is_initialized()):
        raise AccelkwError(
            f"fsdp: the run has {state.world_size} processes but no process group is "
            "initialised; install accelkw-process-group or call "
            "torch.distributed.init_process_group() before preparing the model"
        )
    if isinstance(model, FSDPModule):
        return model
    kind = type(model).__name__
    full = None
    if resolved.broadcast_from_rank0 and state.rank == 0:
        full = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    old = {name: p for name, p in model.named_parameters()}
    layers = _layers(model, handler, resolved)
    if handler.activation_checkpointing:
        from torch.distributed._composable.checkpoint_activation import checkpoint

        for layer in layers or [model]:
            checkpoint(layer)
    kwargs = _policies(handler, resolved, state)
    kwargs["mesh"] = init_device_mesh(state.device_type, (state.world_size,))
    ignored = _ignored(model, handler)
    if ignored:
        kwargs["ignored_params"] = ignored
    for layer in layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    if any(p.is_meta for p in model.parameters()):
        model.to_empty(device=state.device)
        init = handler.param_init_fn
        for module in model.modules():
            if init is not None:
                init(module)
            elif hasattr(module, "reset_parameters"):
                module.reset_parameters()
    if resolved.broadcast_from_rank0:
        set_model_state_dict(
            model,
            full or {},
            options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
        )
    new = dict(model.named_parameters())
    swap.add({id(p): new[name] for name, p in old.items() if name in new})
    state.record(
        NAME,
        f"sharded {kind} with fully_shard ({len(layers)} layer groups + root) "
        f"over {state.world_size} processes",
    )
    return model


@contextlib.contextmanager
def suspend_sync(model: Any) -> Iterator[None]:
    """Hold back FSDP2's gradient reduce-scatter in the block (the ``no_sync`` point)."""
    root = _fsdp_root(model)
    root.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        root.set_requires_gradient_sync(True)


def activation_offload() -> Any:
    """Saved activations kept in pinned CPU memory during forward (a forward context)."""
    import torch

    return torch.autograd.graph.save_on_cpu(pin_memory=True)


class FSDPModelState:
    """The ``model_state`` contribution: full state dicts gathered on rank 0, or DTensor shards."""

    def __init__(self, kind: str, cpu_offload: bool) -> None:
        self.kind = kind
        self.cpu_offload = cpu_offload

    def state_dict(self, model: Any) -> dict[str, Any]:
        """Full: every tensor on rank 0 (``{}`` on the others); sharded: this rank's DTensors."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        full = self.kind == "full"
        options = StateDictOptions(full_state_dict=full, cpu_offload=full and self.cpu_offload)
        result: dict[str, Any] = get_model_state_dict(resharded(model), options=options)
        return result

    def load_state_dict(self, model: Any, state: dict[str, Any]) -> None:
        """Full: rank 0's dict broadcast into the shards (others may pass ``{}``); sharded: as is."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        full = self.kind == "full"
        options = StateDictOptions(full_state_dict=full, broadcast_from_rank0=full)
        # A copy: loading with broadcast_from_rank0 replaces the dict's tensors in place.
        set_model_state_dict(resharded(model), dict(state), options=options)

    def __repr__(self) -> str:
        return f"FSDPModelState({self.kind!r}, cpu_offload={self.cpu_offload})"

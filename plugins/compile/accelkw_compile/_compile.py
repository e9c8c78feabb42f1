"""Compiling a prepared model: the whole model wrapped, or its repeated blocks in place."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["compile_model", "describe"]

NAME = "compile"


def _repeated_blocks(model: Any) -> list[Any]:
    """The items of every ``nn.ModuleList`` in ``model`` (the repeated blocks of a transformer)."""
    import torch

    return [
        block
        for module in model.modules()
        if isinstance(module, torch.nn.ModuleList)
        for block in module
    ]


def compile_model(
    model: Any, state: AcceleratorState, kwargs: dict[str, Any], regional: bool
) -> Any:
    """``torch.compile(model, **kwargs)``, or its repeated blocks compiled in place (regional).

    Regional compilation uses ``Module.compile``, which keeps every module and parameter name;
    a model without repeated blocks is compiled whole, and the state's log says so.
    """
    import torch

    if regional:
        blocks = _repeated_blocks(model)
        if blocks:
            for block in blocks:
                block.compile(**kwargs)
            state.record(NAME, f"compiled {len(blocks)} repeated blocks in place")
            return model
        state.record(NAME, "no repeated blocks (nn.ModuleList) found: the whole model compiled")
    compiled = torch.compile(model, **kwargs)
    state.record(NAME, f"compiled {type(model).__name__} with backend {kwargs['backend']!r}")
    return compiled


def describe(kwargs: dict[str, Any], regional: bool) -> str:
    """The ``torch.compile`` call as text, for the plan."""
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    where = "each repeated block in place" if regional else "the outermost wrapper"
    return f"torch.compile({args}) on {where}"

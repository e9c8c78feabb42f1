"""Converting a model's linear layers to torchao's ``Float8Linear``, as Accelerate chooses them.

Accelerate's default filter keeps the first and the last ``nn.Linear`` of the model in high
precision (training is unstable otherwise) and every linear whose ``in_features`` or
``out_features`` is not a multiple of 16 (``torch._scaled_mm`` needs both); a user's
``module_filter_func(module, fqn)`` replaces that filter entirely. torch is imported inside the
functions: the plugin module stays torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelkw_fp8._params import ParameterSwaps

__all__ = ["convert_model", "default_filter", "linear_names", "plain_weights_hook"]

ModuleFilter = Callable[[Any, str], bool]


def linear_names(model: Any) -> list[str]:
    """The qualified names of every ``nn.Linear`` in ``model`` (subclasses too), in order."""
    import torch

    return [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


def default_filter(model: Any) -> ModuleFilter:
    """Accelerate's filter for ``model``: not its first or last linear, both dims divisible by 16."""
    import torch

    names = linear_names(model)
    kept = {names[0], names[-1]} if names else set()

    def keep_in_fp8(module: Any, fqn: str) -> bool:
        if isinstance(module, torch.nn.Linear) and (
            module.in_features % 16 != 0 or module.out_features % 16 != 0
        ):
            return False
        return fqn not in kept

    return keep_in_fp8


def plain_weights_hook(
    module: Any, state_dict: dict[str, Any], prefix: str, local_metadata: Any
) -> None:
    """A state-dict post-hook: a float8 weight wrapper saved as the plain tensor it wraps.

    With ``enable_fsdp_float8_all_gather`` (Accelerate's default) torchao wraps each converted
    weight in a tensor subclass that has no storage of its own, which safetensors cannot write
    (Accelerate 1.15's ``save_state`` fails there). The wrapped tensor is the same values, so a
    checkpoint holds the plain model's tensors and keys and loads into the model without fp8.
    """
    key = prefix + "weight"
    weight = state_dict.get(key)
    inner = getattr(weight, "_tensor", None)
    if inner is not None:
        state_dict[key] = inner.detach()


def convert_model(
    model: Any, config: Any, module_filter: ModuleFilter | None, swaps: ParameterSwaps
) -> list[str]:
    """Convert ``model``'s chosen linear layers in place; the qualified names converted.

    The weights the conversion replaced are recorded in ``swaps``, which re-points optimizers.
    """
    from torchao.float8 import convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear

    before = swaps.weights_of(model)
    chosen = default_filter(model) if module_filter is None else module_filter
    convert_to_float8_training(model, module_filter_fn=chosen, config=config)
    swaps.record(before, model)
    converted = []
    for name, module in model.named_modules():
        if isinstance(module, Float8Linear) and name in before:
            converted.append(name)
            # torch leaves this public hook registration unannotated.
            module.register_state_dict_post_hook(plain_weights_hook)  # type: ignore[no-untyped-call]
    return converted

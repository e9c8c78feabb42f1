"""The ``accelkw`` entry point of accelkw-fp8: registers the four fp8 recipe handlers."""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_fp8.ao import AORecipeKwargs
from accelkw_fp8.recipes import FP8RecipeKwargs, MSAMPRecipeKwargs, TERecipeKwargs

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``ao_recipe``, ``te_recipe``, ``msamp_recipe`` and ``fp8_recipe``."""
    for cls in (AORecipeKwargs, TERecipeKwargs, MSAMPRecipeKwargs, FP8RecipeKwargs):
        register(cls)

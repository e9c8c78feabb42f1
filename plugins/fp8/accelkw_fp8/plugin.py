"""The ``accelkw`` entry point of accelkw-fp8: registers the four fp8 recipe handlers."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any

from accelkw_core.plugin import KwargsHandler, hookimpl
from accelkw_fp8.ao import AORecipeKwargs
from accelkw_fp8.recipes import FP8RecipeKwargs, MSAMPRecipeKwargs, TERecipeKwargs

__all__ = ["accelkw_env_info", "accelkw_register_handlers"]

# The libraries the recipes train with, by the distribution names pip knows them by.
_LIBRARIES = ("torchao", "transformer-engine", "msamp")


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``ao_recipe``, ``te_recipe``, ``msamp_recipe`` and ``fp8_recipe``."""
    for cls in (AORecipeKwargs, TERecipeKwargs, MSAMPRecipeKwargs, FP8RecipeKwargs):
        register(cls)


@hookimpl
def accelkw_env_info(info: dict[str, Any]) -> None:
    """Name the version of each fp8 library installed (read from metadata: nothing imported)."""
    for dist in _LIBRARIES:
        try:
            info[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            info[dist] = "not installed"

"""accelkw-fp8: fp8 training, ``AORecipeKwargs`` (torchao) and Accelerate's other fp8 recipes."""

from accelkw_fp8.ao import AORecipeKwargs
from accelkw_fp8.recipes import FP8RecipeKwargs, MSAMPRecipeKwargs, TERecipeKwargs

__all__ = ["AORecipeKwargs", "FP8RecipeKwargs", "MSAMPRecipeKwargs", "TERecipeKwargs"]

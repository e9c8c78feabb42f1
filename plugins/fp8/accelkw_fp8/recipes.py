"""Accelerate's other fp8 recipes: ``TERecipeKwargs``, ``MSAMPRecipeKwargs``, ``FP8RecipeKwargs``.

Their fields, defaults, environment variables and validation are Accelerate 1.15's. Each trains
with a CUDA-only library (NVIDIA Transformer Engine, Microsoft MS-AMP); without it, a run that
asks for the recipe stops in one line naming what to install. They are opt-in (composed when
passed in code, or named by ``ACCELERATE_FP8_BACKEND``), and a requested one leaves the default
``AORecipeKwargs`` out.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from accelkw_core.plugin import (
    AccelerateEnv,
    ConfigError,
    KwargsHandler,
    Plan,
    accelerate_flag,
    handler_field,
    read_declared,
)
from accelkw_fp8._backends import is_available, require
from accelkw_fp8.ao import BACKEND_VAR, backend_requested, not_fp8

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["FP8RecipeKwargs", "MSAMPRecipeKwargs", "TERecipeKwargs"]

FP8_FORMATS = ("HYBRID", "E4M3", "E5M2")
AMAX_COMPUTE_ALGOS = ("max", "most_recent")
OPT_LEVELS = ("O1", "O2")
BACKENDS = ("MSAMP", "TE")
_OVERRIDES = (
    "ACCELERATE_FP8_OVERRIDE_FPROP",
    "ACCELERATE_FP8_OVERRIDE_DGRAD",
    "ACCELERATE_FP8_OVERRIDE_WGRAD",
)


def _one_of(handler: str, field: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(handler, field, value, "one of " + ", ".join(repr(c) for c in choices))


def _read_recipe_env(declared: Mapping[str, str], env: Mapping[str, str]) -> AccelerateEnv:
    """The declared variables, and Accelerate's three ``OVERRIDE_*`` switches as one tuple."""
    reading = read_declared(declared, env)
    if not any(env.get(var, "").strip() for var in _OVERRIDES):
        return reading
    flags = tuple(accelerate_flag(env.get(var, "false")) is True for var in _OVERRIDES)
    fields = {**reading.fields, "override_linear_precision": (", ".join(_OVERRIDES), flags)}
    return reading._replace(fields=fields)


def _not_built(plan: Plan, cls: str, backend: str) -> Plan:
    """The recipe's library is here, but accelkw-fp8 does not drive it (GPU-only, unverified)."""
    raise ConfigError(
        plan.handler,
        "mixed_precision",
        "fp8",
        f"AORecipeKwargs (torchao): accelkw-fp8 validates {cls} but does not train with the "
        f"{backend} backend yet",
    )


def _library_plan(
    recipe: TERecipeKwargs | MSAMPRecipeKwargs, state: AcceleratorState, library: str
) -> Plan:
    """A recipe of one library's (``recipe.backend_name``): a note without fp8; else refused
    in one line, naming what to install when the library is missing."""
    plan = Plan(recipe.name)
    if state.mixed_precision != "fp8":
        return plan.note(not_fp8(recipe, state, "no fp8 recipe"))
    require(recipe.name, type(recipe).__name__, recipe.backend_name)
    return _not_built(plan, type(recipe).__name__, library)


@dataclass
class TERecipeKwargs(KwargsHandler):
    """The Transformer Engine fp8 recipe (Accelerate's ``TERecipeKwargs``, field for field).

    Unset fields take Accelerate's defaults when used (``margin=0``, ``interval=1``,
    ``fp8_format="HYBRID"``, ``amax_history_len=1024``, ``amax_compute_algo="most_recent"``,
    ``override_linear_precision=(False, False, False)``) or the ``ACCELERATE_FP8_*`` variables.
    ``fp8_format`` is upper-cased and ``amax_compute_algo`` lower-cased, as in Accelerate.
    Needs ``transformer_engine`` (CUDA): without it a run with ``mixed_precision="fp8"`` that
    asks for this recipe stops in one line naming what to install.
    """

    name: ClassVar[str] = "te_recipe"
    opt_in: ClassVar[bool] = True
    conflicts: ClassVar[tuple[str, ...]] = ("ao_recipe", "msamp_recipe", "fp8_recipe")
    backend_name: ClassVar[str] = "TE"
    accelerate_env: ClassVar[dict[str, str]] = {
        "ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL": "use_autocast_during_eval",
        "ACCELERATE_FP8_MARGIN": "margin",
        "ACCELERATE_FP8_INTERVAL": "interval",
        "ACCELERATE_FP8_FORMAT": "fp8_format",
        "ACCELERATE_FP8_AMAX_HISTORY_LEN": "amax_history_len",
        "ACCELERATE_FP8_AMAX_COMPUTE_ALGO": "amax_compute_algo",
        "ACCELERATE_FP8_USE_MXFP8_BLOCK_SCALING": "use_mxfp8_block_scaling",
    }

    use_autocast_during_eval: bool | None = handler_field(
        None, doc="Run fp8 autocast in eval mode too (None: False)."
    )
    margin: int | None = handler_field(None, doc="The margin of the scaling factor (None: 0).")
    interval: int | None = handler_field(
        None, doc="How often the scaling factor is recomputed, in steps (None: 1)."
    )
    fp8_format: str | None = handler_field(
        None, doc="'HYBRID', 'E4M3' or 'E5M2' (None: 'HYBRID'); upper-cased."
    )
    amax_history_len: int | None = handler_field(
        None, doc="The length of the amax history of the scaling factor (None: 1024)."
    )
    amax_compute_algo: str | None = handler_field(
        None, doc="'max' or 'most_recent' (None: 'most_recent'); lower-cased."
    )
    override_linear_precision: tuple[bool, bool, bool] | None = handler_field(
        None, doc="Run the fprop, dgrad and wgrad GEMMs in higher precision (None: all False)."
    )
    use_mxfp8_block_scaling: bool | None = handler_field(
        None, doc="Use MXFP8 block scaling (None: False)."
    )

    @classmethod
    def from_accelerate_env(cls, env: Mapping[str, str]) -> AccelerateEnv:
        """``ACCELERATE_FP8_*``, the three ``OVERRIDE_*`` switches as one tuple; the backend
        variable naming this recipe's backend asks for it."""
        reading = _read_recipe_env(cls.accelerate_env, env)
        return reading._replace(requested=backend_requested(env, cls.backend_name))

    def check_values(self) -> None:
        """Accelerate's checks: the format and the amax algorithm, case-folded as it does."""
        super().check_values()
        if self.fp8_format is not None:
            self.fp8_format = self.fp8_format.upper()
            _one_of(self.name, "fp8_format", self.fp8_format, FP8_FORMATS)
        if self.amax_compute_algo is not None:
            self.amax_compute_algo = self.amax_compute_algo.lower()
            _one_of(self.name, "amax_compute_algo", self.amax_compute_algo, AMAX_COMPUTE_ALGOS)

    def plan(self, state: AcceleratorState) -> Plan:
        """Refuse in one line without Transformer Engine; nothing without fp8."""
        return _library_plan(self, state, "Transformer Engine")


@dataclass
class MSAMPRecipeKwargs(KwargsHandler):
    """The MS-AMP fp8 recipe (Accelerate's ``MSAMPRecipeKwargs``): ``opt_level`` 'O1' or 'O2'.

    ``opt_level`` unset takes ``ACCELERATE_FP8_OPT_LEVEL``, else 'O2', as in Accelerate. Needs
    ``msamp`` (CUDA): without it a run with ``mixed_precision="fp8"`` that asks for this recipe
    stops in one line naming what to install.
    """

    name: ClassVar[str] = "msamp_recipe"
    opt_in: ClassVar[bool] = True
    conflicts: ClassVar[tuple[str, ...]] = ("ao_recipe", "te_recipe", "fp8_recipe")
    backend_name: ClassVar[str] = "MSAMP"
    accelerate_env: ClassVar[dict[str, str]] = {
        "ACCELERATE_FP8_OPT_LEVEL": "opt_level",
    }

    opt_level: str | None = handler_field(None, doc="'O1' or 'O2' (None: 'O2').")

    @classmethod
    def from_accelerate_env(cls, env: Mapping[str, str]) -> AccelerateEnv:
        """``ACCELERATE_FP8_OPT_LEVEL``; ``ACCELERATE_FP8_BACKEND=MSAMP`` asks for this recipe."""
        reading = super().from_accelerate_env(env)
        return reading._replace(requested=backend_requested(env, cls.backend_name))

    def check_values(self) -> None:
        """Accelerate's check: ``opt_level`` is 'O1' or 'O2' (case as given)."""
        super().check_values()
        if self.opt_level is not None:
            _one_of(self.name, "opt_level", self.opt_level, OPT_LEVELS)

    def plan(self, state: AcceleratorState) -> Plan:
        """Refuse in one line without MS-AMP; nothing without fp8."""
        return _library_plan(self, state, "MS-AMP")


@dataclass
class FP8RecipeKwargs(TERecipeKwargs, MSAMPRecipeKwargs):
    """Accelerate's deprecated recipe that picks its backend: ``backend`` 'MSAMP' or 'TE'.

    ``backend`` unset takes ``ACCELERATE_FP8_BACKEND``, else 'MSAMP' when MS-AMP is installed
    and 'TE' otherwise, as in Accelerate; it is upper-cased. The fields of both recipes apply.
    Using it warns (``FutureWarning``), as Accelerate does: prefer ``TERecipeKwargs`` or
    ``MSAMPRecipeKwargs``.
    """

    name: ClassVar[str] = "fp8_recipe"
    opt_in: ClassVar[bool] = True
    conflicts: ClassVar[tuple[str, ...]] = ("ao_recipe", "te_recipe", "msamp_recipe")
    accelerate_env: ClassVar[dict[str, str]] = {
        **TERecipeKwargs.accelerate_env,
        **MSAMPRecipeKwargs.accelerate_env,
        BACKEND_VAR: "backend",
    }

    backend: str | None = handler_field(
        None, doc="'MSAMP' or 'TE' (None: 'MSAMP' when msamp is installed, else 'TE')."
    )

    @classmethod
    def from_accelerate_env(cls, env: Mapping[str, str]) -> AccelerateEnv:
        """Both recipes' variables and the backend; Accelerate never builds this class from the
        environment alone, so the variables only fill an instance passed in code. A backend
        variable naming another backend (``AO``) is not this class's value."""
        reading = _read_recipe_env(cls.accelerate_env, env)
        backend = reading.fields.get("backend")
        if backend is None or str(backend[1]).upper() in BACKENDS:
            return reading
        fields = {k: v for k, v in reading.fields.items() if k != "backend"}
        named = str(backend[1]).upper()
        why = f"names the {named} backend, which FP8RecipeKwargs does not take" + (
            ": it asks for AORecipeKwargs (ao_recipe), the default recipe" if named == "AO" else ""
        )
        unused = {**reading.unused, backend[0]: why}
        return reading._replace(fields=fields, unused=unused)

    def check_values(self) -> None:
        """Both recipes' checks, and ``backend`` upper-cased in 'MSAMP' or 'TE'."""
        TERecipeKwargs.check_values(self)
        MSAMPRecipeKwargs.check_values(self)
        if self.backend is not None:
            self.backend = self.backend.upper()
            _one_of(self.name, "backend", self.backend, BACKENDS)

    @property
    def chosen_backend(self) -> str:
        """``backend``, or Accelerate's default: 'MSAMP' when msamp is installed, else 'TE'."""
        if self.backend is not None:
            return self.backend
        return "MSAMP" if is_available("MSAMP") else "TE"

    def plan(self, state: AcceleratorState) -> Plan:
        """Warn that the class is deprecated; refuse without the chosen backend's library."""
        plan = Plan(self.name)
        if state.mixed_precision != "fp8":
            return plan.note(not_fp8(self, state, "no fp8 recipe"))
        warnings.warn(
            "FP8RecipeKwargs is deprecated (as in Accelerate 1.15): use TERecipeKwargs or "
            "MSAMPRecipeKwargs",
            FutureWarning,
            stacklevel=2,
        )
        backend = self.chosen_backend
        require(self.name, type(self).__name__, backend)
        return _not_built(plan, type(self).__name__, backend)

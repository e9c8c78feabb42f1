"""``SeedKwargs``: seed Python, NumPy and torch per rank, and optionally make torch deterministic."""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from accelkw_core.plugin import ATTRIBUTE, TEARDOWN, KwargsHandler, Plan, handler_field

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["SeedKwargs", "Seeded"]

# NumPy's legacy seeding accepts 0 <= seed < 2**32; the effective seed is kept in that range so
# one number seeds every generator.
_SEED_RANGE = 2**32
# What cuBLAS needs to be deterministic on CUDA >= 10.2 (torch's reproducibility notes).
_CUBLAS_VAR, _CUBLAS_VALUE = "CUBLAS_WORKSPACE_CONFIG", ":4096:8"


@dataclass(frozen=True)
class Seeded:
    """What a run was seeded with: ``accelerator.extra("seed", Seeded)``."""

    seed: int
    seeded: tuple[str, ...]


@dataclass
class SeedKwargs(KwargsHandler):
    """Make a run repeatable: the same seed gives the same random numbers, run after run.

    Applied, it seeds Python's ``random``, NumPy's global generator (when NumPy is installed) and
    torch (every device) with ``seed``, plus the process rank when ``per_rank`` is on, so ranks
    draw different numbers (data order, dropout) yet each rank repeats itself. With
    ``deterministic``, torch switches to deterministic algorithms; the previous setting comes
    back when the run ends.

    Example::

        from accelkw_seed import SeedKwargs

        accelerator = Accelerator(kwargs_handlers=[SeedKwargs(seed=1234, deterministic=True)])
        model = build_model()  # after the Accelerator: initial weights are seeded too

    Opt-in: installing the plugin seeds nothing (seeding changes a run's numbers); a run is
    seeded when it asks, in code, through ``[handlers.seed]`` or ``ACCELKW_SEED__SEED=1234``.
    """

    name: ClassVar[str] = "seed"
    opt_in: ClassVar[bool] = True

    seed: int = handler_field(
        42, ge=0, lt=_SEED_RANGE, doc="The base seed, 0 <= seed < 2**32 (NumPy's range)."
    )
    per_rank: bool = handler_field(
        True,
        doc="Seed each process with seed + rank (modulo 2**32), so ranks differ; "
        "False seeds every rank with the same number.",
    )
    deterministic: bool = handler_field(
        False,
        doc="Call torch.use_deterministic_algorithms(True), set cudnn.deterministic and turn "
        "cudnn.benchmark off; on CUDA also set CUBLAS_WORKSPACE_CONFIG if it is unset.",
    )
    warn_only: bool = handler_field(
        True,
        doc="With deterministic=True, warn instead of raising when an operation has no "
        "deterministic implementation.",
    )

    def effective_seed(self, state: AcceleratorState) -> int:
        """The number this process is seeded with."""
        return (self.seed + state.rank) % _SEED_RANGE if self.per_rank else self.seed

    def _origin(self, state: AcceleratorState) -> str:
        if self.per_rank:
            return f"seed {self.seed} + rank {state.rank}"
        return f"seed {self.seed}, the same on every rank"

    def plan(self, state: AcceleratorState) -> Plan:
        """Seed every generator, and with ``deterministic`` switch torch to deterministic mode.

        Planning touches no generator and no setting: the seeding and the switch are actions
        that run when the plan is carried out, each with a teardown for what it changes.
        """
        plan = Plan(self.name)
        seed = self.effective_seed(state)
        seeded = ["random", "torch"]
        if importlib.util.find_spec("numpy") is None:
            plan.note("numpy is not installed: not seeded")
        else:
            seeded.insert(1, "numpy")
        plan.run(
            functools.partial(self._seed, seed, tuple(seeded)),
            f"seed {', '.join(seeded)} with {seed} ({self._origin(state)})",
        )
        if self.deterministic:
            mode = "warn" if self.warn_only else "raise"
            plan.run(
                self._make_deterministic,
                f"deterministic algorithms on ({mode} on a nondeterministic op), "
                "cudnn.deterministic on, cudnn.benchmark off; restored when the run ends",
            )
            if state.device_type == "cuda":
                self._plan_cublas(plan)
        elif "warn_only" in self.explicit_fields():
            plan.note("warn_only is not used: deterministic=False")
        return plan

    def _seed(self, seed: int, seeded: tuple[str, ...], state: AcceleratorState) -> None:
        import random

        import torch

        random.seed(seed)
        torch.manual_seed(seed)  # every device's generator, CUDA included
        if "numpy" in seeded:
            import numpy

            numpy.random.seed(seed)
        # Shared through the attribute point, so a user reads it typed from the Accelerator.
        state.contribute(ATTRIBUTE, self.name, Seeded(seed, tuple(seeded)), key="seed")

    def _make_deterministic(self, state: AcceleratorState) -> None:
        import torch

        cudnn = torch.backends.cudnn
        before = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            cudnn.deterministic,
            cudnn.benchmark,
        )
        torch.use_deterministic_algorithms(True, warn_only=self.warn_only)
        cudnn.deterministic = True
        cudnn.benchmark = False

        def restore() -> None:
            torch.use_deterministic_algorithms(before[0], warn_only=before[1])
            cudnn.deterministic, cudnn.benchmark = before[2], before[3]

        state.contribute(TEARDOWN, self.name, restore)

    def _plan_cublas(self, plan: Plan) -> None:
        current = os.environ.get(_CUBLAS_VAR)
        if current is not None:
            plan.note(f"{_CUBLAS_VAR}={current} kept (set by the user)")
            return
        plan.run(
            _set_cublas_workspace,
            f"set {_CUBLAS_VAR}={_CUBLAS_VALUE} (cuBLAS reads it when its handle is created: "
            "build the Accelerator before any CUDA matmul); unset when the run ends",
        )


def _set_cublas_workspace(state: AcceleratorState) -> None:
    if _CUBLAS_VAR in os.environ:
        return  # set by the user since the plan was made: theirs wins, and stays
    os.environ[_CUBLAS_VAR] = _CUBLAS_VALUE

    def unset() -> None:
        os.environ.pop(_CUBLAS_VAR, None)

    state.contribute(TEARDOWN, SeedKwargs.name, unset)

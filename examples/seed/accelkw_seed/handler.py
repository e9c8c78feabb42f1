"""``SeedKwargs``: seed Python, NumPy and torch per rank, and optionally make torch deterministic."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from accelkw_core import KwargsHandler, handler_field

if TYPE_CHECKING:
    from accelkw_core import AcceleratorState

__all__ = ["SeedKwargs"]

# NumPy's legacy seeding accepts 0 <= seed < 2**32; the effective seed is kept in that range so
# one number seeds every generator.
_SEED_RANGE = 2**32
# What cuBLAS needs to be deterministic on CUDA >= 10.2 (torch's reproducibility notes).
_CUBLAS_VAR, _CUBLAS_VALUE = "CUBLAS_WORKSPACE_CONFIG", ":4096:8"


@dataclass
class SeedKwargs(KwargsHandler):
    """Make a run repeatable: the same seed gives the same random numbers, run after run.

    ``apply`` seeds Python's ``random``, NumPy's global generator (when NumPy is installed) and
    torch (every device) with ``seed``, plus the process rank when ``per_rank`` is on, so ranks
    draw different numbers (data order, dropout) yet each rank repeats itself. With
    ``deterministic``, torch switches to deterministic algorithms; the previous setting comes
    back when the run ends.

    Example::

        from accelkw_seed import SeedKwargs

        accelerator = Accelerator(kwargs_handlers=[SeedKwargs(seed=1234, deterministic=True)])
        model = build_model()  # after the Accelerator: initial weights are seeded too
    """

    name: ClassVar[str] = "seed"

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

    def apply(self, state: AcceleratorState) -> None:
        """Seed every generator; record the seed and what was (or could not be) seeded."""
        import random

        import torch

        seed = self.effective_seed(state)
        random.seed(seed)
        torch.manual_seed(seed)  # every device's generator, CUDA included
        seeded = ["random", "torch"]
        numpy = _import_numpy()
        if numpy is None:
            state.record(self.name, "numpy is not installed: not seeded", applied=False)
        else:
            numpy.random.seed(seed)
            seeded.insert(1, "numpy")
        state.extras[self.name] = {"seed": seed, "seeded": seeded}
        state.record(self.name, f"seeded {', '.join(seeded)} with {seed} ({self._origin(state)})")
        if self.deterministic:
            self._make_deterministic(state)
        elif "warn_only" in self.explicit_fields():
            state.record(self.name, "warn_only is not used: deterministic=False", applied=False)

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

        state.add_teardown(self.name, restore)
        mode = "warn" if self.warn_only else "raise"
        state.record(
            self.name,
            f"deterministic algorithms on ({mode} on a nondeterministic op), cudnn.deterministic "
            "on, cudnn.benchmark off; restored when the run ends",
        )
        if state.device_type == "cuda":
            self._configure_cublas(state)

    def _configure_cublas(self, state: AcceleratorState) -> None:
        current = os.environ.get(_CUBLAS_VAR)
        if current is not None:
            state.record(self.name, f"{_CUBLAS_VAR}={current} kept (set by the user)")
            return
        os.environ[_CUBLAS_VAR] = _CUBLAS_VALUE

        def unset() -> None:
            os.environ.pop(_CUBLAS_VAR, None)

        state.add_teardown(self.name, unset)
        state.record(
            self.name,
            f"set {_CUBLAS_VAR}={_CUBLAS_VALUE} (cuBLAS reads it when its handle is created: "
            "build the Accelerator before any CUDA matmul)",
        )

    def describe(self, state: AcceleratorState) -> str:
        """What ``apply`` would seed, without touching any generator."""
        seeded = ["random", "torch"]
        if importlib.util.find_spec("numpy") is not None:
            seeded.insert(1, "numpy")
        text = f"would seed {', '.join(seeded)} with {self.effective_seed(state)}"
        text += f" ({self._origin(state)})"
        if self.deterministic:
            mode = "warn" if self.warn_only else "raise"
            text += f"; deterministic algorithms on ({mode} on a nondeterministic op)"
        return text


def _import_numpy() -> Any:
    # NumPy is optional: a run without it is seeded all the same, and the log says so.
    try:
        import numpy
    except ImportError:
        return None
    return numpy

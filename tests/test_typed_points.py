"""``mypy --strict`` checks what a plugin contributes: the points are ``ExtensionPoint[T]`` constants.

One mypy run (through ``mypy.api``) over a small plugin module written to ``tmp_path``: the right
contributions pass, a wrong one is an error on its line. torch and the core's layers a plugin
does not touch are not followed, so the run stays a few seconds; the cache lives under the
repository's ``.mypy_cache`` and makes reruns faster still.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

REPO = Path(__file__).resolve().parent.parent

PLUGIN = """
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from accelkw_core.plugin import (
    AROUND_STEP,
    CHECKPOINT,
    FORWARD_CONTEXT,
    LOSS,
    MODEL_WRAPPER,
    AcceleratorState,
    KwargsHandler,
    Plan,
    StepContext,
)


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count = int(state["count"])


def around(step: StepContext, proceed: Any) -> Any:
    return proceed() if not step.agree(False) else None


@dataclass
class Handler(KwargsHandler):
    name: ClassVar[str] = "typed"

    def plan(self, state: AcceleratorState) -> Plan:
        plan = Plan(self.name)
        plan.contribute(FORWARD_CONTEXT, contextlib.nullcontext, "a context")
        plan.contribute(LOSS, lambda loss: loss * 2, "losses doubled")
        plan.contribute(AROUND_STEP, around, "around the step")
        plan.contribute(CHECKPOINT, Counter(), "a counter saved with the run")
        plan.contribute(MODEL_WRAPPER, 3, "an int is no model wrapper")  # line WRONG
        plan.contribute(CHECKPOINT, object(), "no state_dict")  # line NO_STATE
        plan.contribute("loss", lambda loss: loss, "by name, deprecated")  # line BY_NAME
        return plan


def read(state: AcceleratorState) -> torch.nn.Module:
    model = torch.nn.Linear(1, 1)
    for wrap in state.values(MODEL_WRAPPER):
        model = wrap(model)
    state.contribute("loss", "typed", lambda loss: loss)  # line STATE_BY_NAME
    return model
"""


@pytest.mark.xdist_group("mypy")
def test_mypy_strict_rejects_a_wrong_contribution_and_accepts_the_right_ones(
    tmp_path: Path,
) -> None:
    source = textwrap.dedent(PLUGIN)
    lines = source.splitlines()
    wrong = next(i for i, line in enumerate(lines, 1) if "# line WRONG" in line)
    no_state = next(i for i, line in enumerate(lines, 1) if "# line NO_STATE" in line)
    by_name = next(i for i, line in enumerate(lines, 1) if "# line BY_NAME" in line)
    state_by_name = next(i for i, line in enumerate(lines, 1) if "# line STATE_BY_NAME" in line)
    (tmp_path / "typed_plugin.py").write_text(source)
    skipped = ",".join(
        [
            "torch.*",
            "numpy.*",
            *(
                f"accelkw_core.{name}"
                for name in (
                    "discovery.*",
                    "config.*",
                    "cli.*",
                    "tools.*",
                    "testing.*",
                    "runtime.*",
                )
            ),
        ]
    )
    # torch and the layers above the contract are not followed (their types become Any), the
    # runtime included: a plugin is checked against the contract alone.
    (tmp_path / "mypy.ini").write_text(
        f"[mypy]\nstrict = True\n\n[mypy-{skipped}]\nfollow_imports = skip\n"
    )
    stdout, stderr, status = mypy_api.run(
        [
            "--config-file",
            str(tmp_path / "mypy.ini"),
            "--cache-dir",
            str(REPO / ".mypy_cache" / "typed-points"),
            "--no-error-summary",
            str(tmp_path / "typed_plugin.py"),
        ]
    )
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert status == 1, stdout + stderr
    assert [int(line.split(":")[1]) for line in errors] == [
        wrong,
        no_state,
        by_name,
        state_by_name,
    ], stdout
    # A point by name (deprecated) is reported against public names a plugin author can look
    # up in accelkw_core.plugin, never a private type.
    assert 'incompatible type "str"; expected "PlanPoint[' in errors[2], errors[2]
    assert 'incompatible type "str"; expected "StatePoint[' in errors[3], errors[3]
    assert not any('"_' in error or "._" in error for error in errors), errors
    # Reported against the point's own type (torch is not followed here, so Module is Any).
    assert (
        'Argument 2 to "contribute" of "Plan" has incompatible type "int"; '
        'expected "Callable[[Any], Any]"'
    ) in errors[0], errors[0]

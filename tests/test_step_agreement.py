"""``agree_value``: a number agreed across processes, beside ``agree`` for a flag (single-process
rules and bad input here; two gloo processes in test_accelerator_multiprocess.py)."""

from __future__ import annotations

import pytest

from accelkw_core.plugin import StepContext
from accelkw_core.testing import make_state


def test_with_one_process_the_value_is_its_own_and_a_float() -> None:
    state = make_state()
    for op in ("sum", "mean", "max", "min"):
        assert state.agree_value(3, op=op) == 3.0 and isinstance(state.agree_value(3), float)
    assert StepContext(None, None, 0, state).agree_value(2.5, op="max") == 2.5
    # A context built by hand has no run: it acts as one process.
    assert StepContext(None, None, 0).run is None
    assert StepContext(None, None, 0).agree_value(7) == 7.0


def test_bad_input_names_what_is_expected() -> None:
    state = make_state()
    with pytest.raises(ValueError, match=r"op='median', expected one of 'sum', 'mean', 'max'"):
        state.agree_value(1.0, op="median")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got bool True, expected a number.*agree\(flag\)"):
        state.agree_value(True)
    with pytest.raises(TypeError, match="got str '1', expected a number"):
        state.agree_value("1")  # type: ignore[arg-type]

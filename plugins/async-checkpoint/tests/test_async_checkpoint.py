"""accelkw-async-checkpoint on its own: the handler's contract, its plan, the executor's order.

The saves themselves (kills, a full disk, resumes on one and two processes) are tested against
the core's checkpoint suite in tests/test_checkpoint_async.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
import torch
from accelkw_async_checkpoint import AsyncCheckpointKwargs, BackgroundSaves

from accelkw_core import Accelerator
from accelkw_core.errors import ConfigError
from accelkw_core.plugin import CHECKPOINT_EXECUTOR
from accelkw_core.testing import HandlerContract, apply_handler, isolated_registry, plugin_of


class TestAsyncCheckpointContract(HandlerContract):
    handler_class = AsyncCheckpointKwargs
    plugin_module = "accelkw_async_checkpoint.plugin"
    examples: ClassVar = ({"max_pending": 1}, {"max_pending": 3})


def test_it_contributes_the_checkpoint_executor() -> None:
    state = apply_handler(AsyncCheckpointKwargs(max_pending=2))
    executors = state.values(CHECKPOINT_EXECUTOR)
    assert len(executors) == 1 and isinstance(executors[0], BackgroundSaves)
    assert executors[0].max_pending == 2
    state.run_teardowns()


def test_max_pending_below_one_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="max_pending"):
        AsyncCheckpointKwargs(max_pending=0)


def test_saves_commit_in_order_and_at_most_max_pending_are_held(tmp_path: Path) -> None:
    registry = isolated_registry([plugin_of(AsyncCheckpointKwargs)])
    acc = Accelerator(
        cpu=True, registry=registry, kwargs_handlers=[AsyncCheckpointKwargs(max_pending=2)]
    )
    model = acc.prepare(torch.nn.Linear(64, 64))
    saves = acc.state.values(CHECKPOINT_EXECUTOR)[0]
    assert isinstance(saves, BackgroundSaves)
    for i in range(4):
        with torch.no_grad():
            model.weight.fill_(float(i))
        acc.save_state(tmp_path / f"c{i}")
        assert len(saves._pending) <= 2
    acc.wait_for_checkpoints()
    from safetensors.torch import load_file

    for i in range(4):
        assert torch.all(load_file(tmp_path / f"c{i}" / "model.safetensors")["weight"] == i)
    assert saves.peak_staged_bytes >= 64 * 64 * 4
    acc.end_training()

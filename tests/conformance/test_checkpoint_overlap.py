"""A buffer that is a view of part of another tensor's storage moves between the frameworks.

A model registers ``full`` and ``upper = full[5:]`` (a view of part of it, not a plain tie):
each framework loads the other's checkpoint (safetensors, the default), the values and the view
kept. Overlapping views none of which covers its storage cannot be written so that either
framework reads them back: accelkw refuses such a save in one line naming the tensor, before
anything is written.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import accelkw_core
from accelkw_core import CheckpointError
from tests.conformance.differences import listed


def _model(seed: int) -> Any:
    class Windowed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(3, 3)
            self.register_buffer("full", torch.arange(10.0))
            self.register_buffer("upper", self.full[5:])

        def forward(self, x: Any) -> Any:
            return self.proj(x) + self.upper[:3]

    torch.manual_seed(seed)
    return Windowed()


def _saved(framework: Any, folder: Path) -> dict[str, list[float]]:
    acc = framework.Accelerator(cpu=True)
    model = acc.prepare(_model(1))
    with torch.no_grad():
        model.full.mul_(3).add_(1)  # the run changed the buffer (and so its view)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Accelerate's note that it left `upper` out
        acc.save_state(folder)
    found = {k: v.flatten().tolist() for k, v in model.state_dict().items()}
    if framework is accelkw_core:
        acc.end_training()
    return found


def _loaded(framework: Any, folder: Path) -> dict[str, Any]:
    acc = framework.Accelerator(cpu=True)
    model = acc.prepare(_model(2))
    acc.load_state(folder)
    found: dict[str, Any] = {k: v.flatten().tolist() for k, v in model.state_dict().items()}
    # Still a view of the buffer's second half, as the model made it.
    found["view"] = model.upper.data_ptr() == model.full[5:].data_ptr()
    if framework is accelkw_core:
        acc.end_training()
    return found


def test_a_view_of_part_of_a_buffer_loads_both_ways(accelerate: ModuleType, tmp_path: Path) -> None:
    ours = _saved(accelkw_core, tmp_path / "ours")
    theirs = _saved(accelerate, tmp_path / "theirs")
    assert ours["upper"] == ours["full"][5:] != list(range(5, 10))
    # The view is left out of the file, as Accelerate leaves it out: the whole buffer holds it.
    from safetensors import safe_open

    for name in ("ours", "theirs"):
        with safe_open(str(tmp_path / name / "model.safetensors"), framework="pt") as fh:
            assert "upper" not in set(fh.keys()) and "full" in set(fh.keys())
    # accelkw's load checks the names (the view's filled from the buffer) and shapes of every
    # model from the file's header before anything is applied, and copies the weights in last.
    listed("checkpoint-load-stages")
    for loader in (accelkw_core, accelerate):
        for source, expected in (("ours", ours), ("theirs", theirs)):
            found = _loaded(loader, tmp_path / source)
            assert found.pop("view"), (loader.__name__, source)
            assert found == expected, (loader.__name__, source)


def test_overlapping_views_no_name_covers_are_refused_at_save_naming_the_tensor(
    tmp_path: Path,
) -> None:
    class Overlapping(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            base = torch.arange(9.0)
            self.register_buffer("head", base[:6])
            self.register_buffer("tail", base[3:])

    acc = accelkw_core.Accelerator(cpu=True)
    acc.prepare(Overlapping())
    with pytest.raises(CheckpointError) as caught:
        acc.save_state(tmp_path / "ckpt")
    message = str(caught.value)
    assert "\n" not in message and "'tail'" in message and "'head'" in message
    assert "safe_serialization=False" in message
    assert not (tmp_path / "ckpt").exists()
    # Pickled (safe_serialization=False), the views keep their storage and load back.
    acc.save_state(tmp_path / "ckpt", safe_serialization=False)
    acc.load_state(tmp_path / "ckpt")
    acc.end_training()

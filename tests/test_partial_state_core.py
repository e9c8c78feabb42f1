"""``accelkw_core.state`` with no plugin installed (issue 42, item 1): ``PartialState()`` starts
the process group through whichever installed handler's plan provides it (here the test's own,
on two real gloo processes), shares one run between instances, and ``GradientState`` reads the
running ``Accelerator``'s."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime_helpers as rh

from accelkw_core import Accelerator
from accelkw_core.state import GradientState, PartialState
from accelkw_core.testing import run_workers
from tests.partial_state_workers import partial_state_worker


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    rh.clean_env(monkeypatch, tmp_path)
    yield
    PartialState._reset_state()  # no shared run left to the next test


@pytest.mark.multiprocess
def test_partial_state_alone_starts_the_group_through_the_providing_handler() -> None:
    ranks = run_workers(partial_state_worker, 2, timeout=120)
    for rank, out in enumerate(ranks):
        assert out["group"] and out["started"] == [30.0], out  # the keyword reached its field
        assert out["same"] and out["after"] is False
        assert out["on_local_process"] == ("here" if rank == 1 else None)
        assert out["gradients"] == [True, 1]
    assert [r["ids"] for r in ranks] == [[1, 2], [3, 3]]  # padded with the last element
    assert [r["x"] for r in ranks] == [[[0, 1], [2, 3]], [[4, 5], [4, 5]]]


def test_on_one_process_every_decorated_function_runs_and_nothing_is_split() -> None:
    state = PartialState()
    assert state.on_process(lambda: 1, process_index=3)() == 1  # as in Accelerate
    assert state.on_last_process(lambda: 2)() == 2
    with state.split_between_processes([1, 2, 3], apply_padding=True) as share:
        assert share == [1, 2, 3]
    assert state.default_device.type in ("cpu", "cuda")
    state.set_device()  # the CPU: nothing to set


def test_gradient_state_reads_the_running_accelerator() -> None:
    with Accelerator(cpu=True, registry=rh.registry()) as accelerator:
        view = GradientState()
        assert view.sync_gradients and view.num_steps == 1
        view.sync_gradients = False
        assert accelerator.gradient_state.sync_gradients is False
        assert view.dataloader_references == [None] and view.active_dataloader is None
        assert not view.in_dataloader and view.remainder == -1
        assert view.plugin_kwargs["num_steps"] == 1

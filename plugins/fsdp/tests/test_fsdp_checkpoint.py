"""save_state/load_state under FSDP2 on two gloo processes: every rank's state saved, resumed exactly.

One run saves (before any step, then after three AdamW steps) and takes three more steps; a new
run loads both checkpoints and takes the last three steps: its weights equal the first run's,
bit for bit. Then a damaged file makes ``load_state`` fail on every rank, changing nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsdp_workers as workers
import pytest
import torch

from accelkw_core.testing import run_workers

pytestmark = pytest.mark.multiprocess

# state_dict_type -> the file the damage test truncates (a DCP shard under SHARDED_STATE_DICT).
DAMAGED = {
    "FULL_STATE_DICT": "optimizer.bin",
    "SHARDED_STATE_DICT": "pytorch_model_fsdp_0/__0_0.distcp",
}
COMMON = ["accelkw_checkpoint.json", "random_states_0.pkl", "random_states_1.pkl"]
LAYOUT = {
    "FULL_STATE_DICT": sorted([*COMMON, "optimizer.bin", "pytorch_model_fsdp.bin"]),
    "SHARDED_STATE_DICT": sorted(
        [
            *COMMON,
            *(
                f"{d}/{f}"
                for d in ("optimizer_0", "pytorch_model_fsdp_0")
                for f in (
                    ".metadata",
                    "__0_0.distcp",
                    "__1_0.distcp",
                )
            ),
        ]
    ),
}


@pytest.fixture(scope="module", params=sorted(DAMAGED))
def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    kind = request.param
    root = tmp_path_factory.mktemp(kind.lower())
    fresh, folder = str(root / "fresh"), str(root / "after_steps")
    saved = run_workers(workers.train_and_save, 2, args=(kind, fresh, folder), timeout=120)
    resumed = run_workers(workers.resume, 2, args=(kind, fresh, folder, DAMAGED[kind]), timeout=120)
    for result in saved + resumed:
        for key in ("weights", "initial", "loaded"):
            if key in result:
                result[key] = workers.from_bytes(result[key])
    return {"kind": kind, "folder": Path(folder), "saved": saved, "resumed": resumed}


def test_every_rank_state_is_in_the_manifest_and_saving_changes_nothing(
    runs: dict[str, Any],
) -> None:
    files = runs["saved"][0]["files"]
    assert files == LAYOUT[runs["kind"]]
    manifest = json.loads((runs["folder"] / "accelkw_checkpoint.json").read_text())
    assert sorted(manifest["files"]) == [f for f in files if f != "accelkw_checkpoint.json"]
    # Saved before the first step and in the middle: the run still trains like one process
    # (an optimizer given zero state by the save would take other steps).
    weights = runs["saved"][0]["weights"]
    torch.testing.assert_close(weights, workers.adamw_reference(), rtol=1e-5, atol=1e-6)
    assert runs["saved"][1]["weights"] == {}, "full weights are gathered on rank 0"


def test_a_new_run_resumes_bit_for_bit(runs: dict[str, Any]) -> None:
    uninterrupted = runs["saved"][0]["weights"]
    resumed = runs["resumed"][0]["weights"]
    assert resumed.keys() == uninterrupted.keys()
    for key, value in uninterrupted.items():
        assert torch.equal(resumed[key], value), key


def test_a_checkpoint_saved_before_any_step_loads_without_optimizer_state(
    runs: dict[str, Any],
) -> None:
    assert all(result["stateless"] for result in runs["resumed"])
    initial = runs["resumed"][0]["initial"]
    for key, value in workers.make_model().state_dict().items():
        assert torch.equal(initial[key], value), key


def test_a_damaged_file_fails_the_load_on_every_rank_and_changes_nothing(
    runs: dict[str, Any],
) -> None:
    damaged = f"{runs['folder']}_damaged/{DAMAGED[runs['kind']]}"
    for rank, result in enumerate(runs["resumed"]):
        assert damaged in result["error"], (rank, result["error"])
        assert "truncated" in result["error"], (rank, result["error"])
        assert result["unchanged"], rank


def test_three_processes_load_what_two_saved_whatever_the_state_dict_type(
    runs: dict[str, Any],
) -> None:
    # DCP reshards the two ranks' shards over three; full files are broadcast into any number;
    # load_state reads the layout the checkpoint holds, not the one the run would save.
    other = next(kind for kind in DAMAGED if kind != runs["kind"])
    three = run_workers(workers.load_only, 3, args=(other, str(runs["folder"])), timeout=120)
    assert_equal(workers.from_bytes(three[0]), runs["resumed"][0]["loaded"])


def assert_equal(actual: Any, expected: Any, where: str = "") -> None:
    """Nested dicts, lists and tensors equal bit for bit."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and torch.equal(actual, expected), where
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_equal(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_equal(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, where

"""Resumes where the loader draws ahead of the loop are bit-identical to the uninterrupted run.

``tests/draw_resume_script.py`` runs, through ``accelkw launch`` on one process and on two
(gloo), loops shaped like run_mlm_no_trainer.py (a collate function masking tokens with torch's
generator; resumed with ``skip_first_batches``, or by iterating the loader and passing over the
done batches), run_clm_no_trainer.py (a save after leaving the loop with ``break``, resumed by
the script's arithmetic) and diffusers' image scripts (two worker processes, random transforms
in ``__getitem__`` drawing from torch, NumPy and Python; saved inside a round of workers, after
one, and inside the first). Each case's stopped and resumed runs together see the uninterrupted
run's batches, and end with its weights, bit for bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.multiprocess

SCRIPT = Path(__file__).resolve().parent / "draw_resume_script.py"
CASES = [
    "mlm_step_5",
    "mlm_continue_step_10",
    "mlm_stream_step_5",
    "mlm_noise_step_5",
    "clm_step_4",
    "mlm_eval_epoch_0",
    "workers_step_1",
    "workers_step_4",
    "workers_step_3",
]


@pytest.mark.parametrize("world_size", [1, 2])
def test_resumes_with_draws_ahead_of_the_loop_are_bit_identical(
    tmp_path: Path, world_size: int
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "TORCHELASTIC_"))}
    env["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, "-m", "accelkw_core", "launch", "--nproc-per-node", str(world_size)]
    run = subprocess.run(
        [*command, "--cpu", str(SCRIPT), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for rank in range(world_size):
        results = json.loads((tmp_path / f"result_{rank}.json").read_text())
        assert sorted(results) == sorted(CASES)
        for case in CASES:
            result = results[case]
            assert result["chain"] == result["whole"], f"{case}, rank {rank}"
            assert result["resumed"] == result["weights"], f"{case}, rank {rank}"


def _prepared_with_workers(**options: Any) -> tuple[Any, Any]:
    import torch

    from accelkw_core import Accelerator

    acc = Accelerator(cpu=True)
    data = torch.utils.data.TensorDataset(torch.arange(24.0).unsqueeze(1))
    loader = torch.utils.data.DataLoader(data, batch_size=2, num_workers=2, **options)
    return acc, acc.prepare(loader)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"persistent_workers": True}, "persistent_workers=True"),
        ({"in_order": False}, "in_order=False"),
    ],
)
def test_a_loader_whose_workers_cannot_resume_exactly_warns_at_load(
    tmp_path: Path, options: dict[str, object], named: str
) -> None:
    from accelkw_core.errors import CheckpointWarning

    acc, loader = _prepared_with_workers(**options)
    batches = iter(loader)
    next(batches)
    next(batches)
    acc.save_state(str(tmp_path / "mid"))
    del batches
    with pytest.warns(CheckpointWarning, match=named) as caught:
        acc.load_state(str(tmp_path / "mid"))
    assert "not its workers' random draws" in str(caught[0].message)
    acc.end_training()


def test_skipping_with_workers_reads_the_rest_of_a_round_and_counts_only_what_it_yields() -> None:
    from accelkw_core.runtime.data.data_loader import skip_first_batches

    acc, loader = _prepared_with_workers()
    for done in (0, 3, 4):
        skipped = skip_first_batches(loader, done)
        got = [int(x) for (batch,) in skipped for x in batch.flatten().tolist()]
        assert got == list(range(2 * done, 24)), done
        assert len(skipped) == 12 - done
    acc.end_training()

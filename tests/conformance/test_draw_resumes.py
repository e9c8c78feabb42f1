"""A collate function that draws: accelkw's resume is the uninterrupted run, Accelerate's is not.

``tests/draw_resume_script.py`` runs its ``mlm_step_5`` case (run_mlm_no_trainer.py's shape:
``DataCollatorForLanguageModeling`` masking with torch's generator, a save inside the loop, a
resume with ``skip_first_batches``) on one process under each framework. accelkw's stopped and
resumed runs see the uninterrupted run's batches; Accelerate's loader fetched the next batch
before the save, so its resumed run masks that batch again from generators that already drew
it: the deliberate difference ``checkpoint-draws-ahead-of-the-loop``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conformance.differences import listed

SCRIPT = Path(__file__).resolve().parent.parent / "draw_resume_script.py"
CASE = "mlm_step_5"


def _run(folder: Path, framework: str) -> dict[str, object]:
    folder.mkdir()
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(folder), framework, CASE],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, object] = json.loads((folder / "result_0.json").read_text())[CASE]
    return result


def test_a_collate_that_draws_resumes_exactly_unlike_accelerate(tmp_path: Path) -> None:
    ours = _run(tmp_path / "accelkw", "accelkw")
    theirs = _run(tmp_path / "accelerate", "accelerate")
    # Uninterrupted, the frameworks draw the same masks and train the same weights.
    assert ours["whole"] == theirs["whole"]
    assert ours["weights"] == theirs["weights"]
    assert ours["chain"] == ours["whole"]
    assert ours["resumed"] == ours["weights"]
    # Accelerate's resumed run sees the batches up to the save, then other masks.
    assert theirs["chain"] != theirs["whole"]
    chain, whole = theirs["chain"], theirs["whole"]
    assert isinstance(chain, list) and isinstance(whole, list)
    assert chain[:5] == whole[:5]
    listed("checkpoint-draws-ahead-of-the-loop")

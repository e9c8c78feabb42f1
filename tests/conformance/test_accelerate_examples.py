"""Accelerate 1.15's own example scripts, run under Accelerate and under accelkw: the same output.

The scripts in ``accelerate_examples/`` are Accelerate's ``examples/`` and
``examples/by_feature/`` files with only the imports of what they download swapped for
``accelerate_examples/stand_ins.py`` (its docstring says how: synthetic GLUE MRPC pairs, a real
tokenizer built in memory, a real tiny ``BertForSequenceClassification``, synthetic pet
images, a small convolutional net; identical on both sides), and ``by_feature/checkpointing``
without its block that swaps in Accelerate's own test fixtures when ``TESTING_MOCKED_DATALOADERS``
is set (they download a tokenizer; the variable is unset here anyway). Under accelkw each script first
goes through ``accelkw_core.tools.porting.port_imports``, which changes its ``accelerate``
imports and nothing else. Both run on one CPU process and on two (torchrun, gloo), one launch per
framework (each script in a fork of a process that imported torch and transformers once); what
every process prints and the final weights of every model each script built must be equal,
bit for bit.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from accelkw_core.testing import free_port
from accelkw_core.tools.porting import port_imports
from tests.conformance.differences import listed

EXAMPLES = Path(__file__).resolve().parent / "accelerate_examples"
# The built-ins these scripts use (gradient_accumulation_steps= is grad_accum's keyword).
# tracking's log_with="all" means every installed tracker: both built-in tracker plugins here,
# TensorBoard and MLflow under Accelerate too.
PLUGINS = "autocast,ddp,profile,grad_scaler,process_group,grad_accum,tensorboard,mlflow"

# Each script with the arguments it runs with besides --cpu (chosen so that its feature acts
# within the few steps of the synthetic data).
SCRIPTS = {
    "nlp_example": "",
    "complete_nlp_example": "",
    "cv_example": "--data_dir,{pets}",
    "complete_cv_example": "--data_dir,{pets}",
    "by_feature/automatic_gradient_accumulation": "",
    "by_feature/cross_validation": "",
    "by_feature/ddp_comm_hook": "",
    "by_feature/early_stopping": "",
    "by_feature/gradient_accumulation": "--gradient_accumulation_steps,2",
    "by_feature/gradient_accumulation_for_autoregressive_models": "--gradient_accumulation_steps,2",
    "by_feature/local_sgd": "--local_sgd_steps,2",
    "by_feature/memory": "",
    "by_feature/multi_process_metrics": "",
    "by_feature/profiler": "",
    "by_feature/schedule_free": "",
    "by_feature/tracking": "--with_tracking,--project_dir,{out}/project",
}
# Run after SCRIPTS, in order: the checkpointing example saves a checkpoint each epoch, then
# resumes from its first (``{out}``: a folder of the framework's own; Accelerate's and accelkw's
# loaders each read the checkpoint their framework wrote).
RESUMED = {
    "by_feature/checkpointing": "--checkpointing_steps,epoch,--output_dir,{out}",
    "by_feature/checkpointing:resumed": (
        "--checkpointing_steps,epoch,--output_dir,{out},--resume_from_checkpoint,{out}/epoch_0"
    ),
}
# The profiler example prints torch's table of operator timings, which no two runs share (and
# whose operator counts are the frameworks' own: Accelerate divides every loss by the
# accumulation steps, 1 included, and copies CPU batches to the CPU); its other lines and its
# weights are compared.
TIMINGS = {"by_feature/profiler"}


def _printed(spec: str, stdout: str) -> str:
    if spec.split(":")[0] not in TIMINGS:
        return stdout
    assert "Self CPU" in stdout or not stdout, stdout[:200]
    return "\n".join(line for line in stdout.splitlines() if line.startswith("epoch"))


def _run(framework: str, nproc: int, tmp_path: Path, specs: list[str]) -> list[dict[str, Any]]:
    """Every script of ``specs`` under ``framework`` on ``nproc`` processes: what each rank saw."""
    out = tmp_path / f"{framework}-{nproc}"
    launcher = [sys.executable]
    command = [str(EXAMPLES / "run_examples.py"), "--framework", framework]
    command += ["--out", str(out), "--work", str(out / "work")]
    given = {spec.replace("{out}", str(out / "checkpoints")): spec for spec in specs}
    specs = list(given)
    if nproc > 1:
        launcher += ["-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
        launcher += ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
        command += ["--ports", ",".join(str(free_port()) for _ in specs)]
    # Accelerate's MLflow tracker uses MLflow's file store, which MLflow 3 allows only so.
    env = dict(
        os.environ, ACCELKW_PLUGINS=PLUGINS, OMP_NUM_THREADS="1", MLFLOW_ALLOW_FILE_STORE="true"
    )
    env.pop("TESTING_MOCKED_DATALOADERS", None)
    proc = subprocess.run(
        launcher + command + specs,
        env=env,
        cwd=tmp_path,  # what a script leaves in its working folder (MLflow's mlflow.db) stays there
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
    for rank in ranks:  # the checkpoint folder, printed on resuming, is the framework's own
        for seen in rank.values():
            seen["stdout"] = seen["stdout"].replace(str(out / "checkpoints"), "{out}")
    return [{given[spec]: seen for spec, seen in rank.items()} for rank in ranks]


@pytest.fixture(scope="module")
def pets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import stand_ins
    finally:
        sys.path.remove(str(EXAMPLES))
    folder = tmp_path_factory.mktemp("pets")
    stand_ins.write_pets(folder)
    return folder


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_port_changes_the_accelerate_imports_only(script: str) -> None:
    source = (EXAMPLES / f"{script}.py").read_text()
    ported = port_imports(source)
    changed = [
        line[1:].strip()
        for line in difflib.unified_diff(source.splitlines(), ported.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed, "the script imports nothing from accelerate"
    assert all(line.startswith(("from accelerate", "from accelkw_core")) for line in changed)
    imported = {
        node.module
        for node in ast.walk(ast.parse(ported))
        if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(ast.parse(ported))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {m for m in imported if m.split(".")[0] == "accelerate"}, imported


@pytest.mark.parametrize("nproc", [1, 2])
def test_accelerates_examples_print_and_train_alike(
    accelerate: ModuleType, tmp_path: Path, pets: Path, nproc: int
) -> None:
    specs = [f"{s}:{a.replace('{pets}', str(pets))}" if a else s for s, a in SCRIPTS.items()]
    specs += [f"{s.split(':')[0]}:{a}" for s, a in RESUMED.items()]
    ref = _run("accelerate", nproc, tmp_path, specs)
    ours = _run("accelkw", nproc, tmp_path, specs)
    saved, resumed = specs[-2:]
    for rank, (r, o) in enumerate(zip(ref, ours, strict=True)):
        # Resumed from the end of epoch 0, accelkw ends where its uninterrupted run ended,
        # bit for bit, epochs 1 and 2 printing the same metrics.
        assert o[resumed]["models"] == o[saved]["models"], f"rank {rank}: resumed weights"
        after = [line for line in o[saved]["stdout"].splitlines() if not line.startswith("epoch 0")]
        assert [line for line in o[resumed]["stdout"].splitlines()[1:]] == after
        if nproc > 1:
            # Accelerate (no seedable sampler) does not restore a shuffled loader's generator,
            # so its resumed epochs draw other batches and end elsewhere.
            listed("checkpoint-data-loader-position")
            assert r[resumed]["models"] != r[saved]["models"]
        for spec in specs:
            if nproc > 1 and spec == resumed:
                continue
            assert r[spec]["models"], f"{spec} built no model"
            assert "epoch 2" in r[spec]["stdout"] or rank > 0, f"{spec}: {r[spec]['stdout']}"
            assert o[spec]["models"] == r[spec]["models"], f"rank {rank}, {spec}: weights"
            printed = _printed(spec, r[spec]["stdout"])
            assert _printed(spec, o[spec]["stdout"]) == printed, f"rank {rank}, {spec}: output"
    if nproc == 2:
        # Data parallel keeps the weights equal on both processes (local SGD averages them).
        for spec in specs:
            assert ours[0][spec]["models"] == ours[1][spec]["models"], spec

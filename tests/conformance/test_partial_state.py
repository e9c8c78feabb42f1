"""``PartialState`` on its own, as in Accelerate's distributed inference (issue 42, item 1).

``accelkw_core.state``'s three classes carry every public member Accelerate 1.15's have; and a
distributed-inference script of our own (``inference_scripts/split_inference.py``, written with
Accelerate's imports and ported by :func:`~accelkw_core.tools.porting.port_imports`), which uses
``PartialState(cpu=True)`` alone, ``split_between_processes`` over lists, dicts and tensors with
and without ``apply_padding``, ``gather``/``gather_object`` and ``in_order`` logging, writes the
same files byte for byte under ``accelerate launch`` and under ``accelkw launch``, on one, two and
three processes (and, ported, under ``accelerate launch`` too on two).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import accelkw_core.state as ours
from accelkw_core.testing import free_port
from accelkw_core.tools.porting import port_imports
from tests.conformance.runtime_programs import BUILTINS

SCRIPT = Path(__file__).resolve().parent / "inference_scripts" / "split_inference.py"
TIMEOUT = 300


def public(cls: type, instance: object | None = None) -> set[str]:
    names = {n for n in dir(cls) if not n.startswith("_")}
    if instance is not None:
        names |= {n for n in vars(instance) if not n.startswith("_")}
    return names


def test_the_state_classes_have_every_public_member_of_accelerates(
    accelerate: ModuleType,
) -> None:
    import accelerate.state as reference

    # The instance attributes Accelerate sets in __init__ (its shared state) count too: read
    # from the instances a one-process Accelerator makes, then Accelerate's state is reset.
    try:
        accelerate.Accelerator(cpu=True)
        expected = {
            "PartialState": public(reference.PartialState, reference.PartialState()),
            "AcceleratorState": public(reference.AcceleratorState, reference.AcceleratorState()),
            "GradientState": public(reference.GradientState, reference.GradientState()),
        }
    finally:
        reference.AcceleratorState._reset_state(True)
    for name, names in expected.items():
        missing = sorted(names - public(getattr(ours, name)))
        assert not missing, f"{name} lacks {missing}"


def _launch(framework: str, nproc: int, script: Path, out: Path) -> None:
    out.mkdir(parents=True)
    if framework == "accelerate":
        command = [str(Path(sys.executable).with_name("accelerate")), "launch"]
        if nproc > 1:
            command += ["--multi_gpu", "--main_process_port", str(free_port())]
    else:
        command = [sys.executable, "-m", "accelkw_core", "launch"]
        if nproc > 1:
            command += ["--master_port", str(free_port())]
    command += ["--num_processes", str(nproc), str(script), str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "ACCELERATE_"))}
    env.update(ACCELKW_PLUGINS=BUILTINS, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        command, cwd=out, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.parametrize("nproc", [1, 2, 3])
def test_a_partial_state_inference_script_writes_accelerates_bytes(
    accelerate: ModuleType, tmp_path: Path, nproc: int
) -> None:
    ported = tmp_path / "split_inference.py"
    ported.write_text(port_imports(SCRIPT.read_text()))
    _launch("accelerate", nproc, SCRIPT, tmp_path / "accelerate")
    _launch("accelkw", nproc, ported, tmp_path / "accelkw")
    names = ["log.txt", *(f"rank{r}.json" for r in range(nproc))]
    for name in names:
        ref = (tmp_path / "accelerate" / name).read_bytes()
        assert (tmp_path / "accelkw" / name).read_bytes() == ref, name
    if nproc == 2:
        # The ported script under Accelerate's launcher (its variables, torchrun underneath)
        # starts its processes the same way.
        _launch("accelerate", nproc, ported, tmp_path / "accelkw-under-accelerate")
        for name in names:
            ref = (tmp_path / "accelerate" / name).read_bytes()
            assert (tmp_path / "accelkw-under-accelerate" / name).read_bytes() == ref, name
    log = (tmp_path / "accelkw" / "log.txt").read_text().splitlines()
    # Every rank's lines, in rank order; one "main process only"; nothing of accelkw's own.
    assert [line for line in log if "prompts" in line] == [
        line
        for r in range(nproc)
        for line in log
        if line.startswith(f"INFO inference [RANK {r}] prompts")
    ]
    assert sum("main process only" in line for line in log) == 1
    assert not [line for line in log if " accelkw" in line], log

"""The training loop under Accelerate 1.15.0 and accelkw: the same programs, the same outcomes.

Each test runs a program of ``runtime_programs.py`` under both frameworks; where the outcomes
differ, the row of the table in docs/migrating.md that explains it is named with ``listed``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from accelkw_core.testing import run_workers
from tests.conformance import runtime_programs as programs
from tests.conformance.differences import listed

FRAMEWORKS = ("accelerate", "accelkw")


def both(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    return fn("accelerate", *args, **kwargs), fn("accelkw", *args, **kwargs)


def test_bf16_runs_a_prepared_models_forward_in_bf16_and_returns_fp32(
    accelerate: ModuleType,
) -> None:
    ref, ours = both(programs.forward_dtypes, "bf16")
    assert (
        ref == ours == {"inside": "torch.bfloat16", "output": "torch.float32", "scaler": "NoneType"}
    )


def test_fp16_on_cpu_autocasts_and_scales_where_accelerate_silently_trains_in_fp32(
    accelerate: ModuleType,
) -> None:
    ref, ours = both(programs.forward_dtypes, "fp16")
    assert ref == {"inside": "torch.float32", "output": "torch.float32", "scaler": "NoneType"}
    assert ours == {"inside": "torch.float16", "output": "torch.float32", "scaler": "GradScaler"}
    listed("fp16-on-cpu")


def test_the_scaler_has_the_handlers_settings_and_skips_a_step_with_inf_gradients(
    accelerate: ModuleType, tmp_path: Path
) -> None:
    from accelkw_core.discovery.registry import Registry

    settings = dict(init_scale=1024.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=7)
    # What Accelerate builds from the handler where it creates a scaler (CUDA): the same kwargs.
    reference = torch.amp.GradScaler(
        "cpu", **accelerate.utils.GradScalerKwargs(**settings).to_kwargs()
    )
    from accelkw_core import Accelerator
    from accelkw_core.utils import GradScalerKwargs

    acc = Accelerator(
        cpu=True,
        mixed_precision="fp16",
        kwargs_handlers=[GradScalerKwargs(**settings)],
        registry=Registry(allow=programs.BUILTINS.split(",")),
    )
    scaler = acc.scaler
    for attr in ("get_scale", "get_growth_factor", "get_backoff_factor", "get_growth_interval"):
        assert getattr(scaler, attr)() == getattr(reference, attr)()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, schedule = acc.prepare(model, optimizer, schedule)
    before = [p.detach().clone() for p in model.parameters()]
    acc.backward(model(torch.tensor([[float("inf"), 1.0]])).sum())
    optimizer.step()
    schedule.step()
    assert optimizer.step_was_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert scaler.get_scale() == 1024.0 * 0.25
    assert schedule.get_last_lr() == [0.1]  # a skipped step does not advance the schedule
    folder = acc.save_state(Path(tmp_path) / "ckpt")
    assert (folder / "grad_scaler.pt").is_file()
    listed("checkpoint-handler-files")
    acc.end_training()
    listed("fp16-on-cpu")  # Accelerate has no scaler on CPU to compare the skip with


def test_two_process_ddp_wraps_alike_and_synchronises_gradients(accelerate: ModuleType) -> None:
    env = {"ACCELKW_PLUGINS": programs.BUILTINS, "OMP_NUM_THREADS": "1"}
    ref = run_workers(programs.ddp_worker, 2, args=("accelerate",), env=env, timeout=180)
    ours = run_workers(programs.ddp_worker, 2, args=("accelkw",), env=env, timeout=180)
    assert ref == ours
    r0, r1 = ours
    assert r0["type"] == "DistributedDataParallel" and r0["distributed_type"] == "MULTI_CPU"
    assert r0["attrs"]["bucket_bytes_cap"] == 1024 * 1024
    assert r0["weight"] == r1["weight"] and r0["grad"] == r1["grad"]  # rank 0's weights, synced
    assert (r0["split"], r1["split"]) == (["a", "b"], ["c", "c"])
    assert r0["batches"] == [[0, 1], [4, 5], [8, 0]] and r1["batches"] == [[2, 3], [6, 7], [1, 2]]
    # The last round repeated 0, 1, 2 to even out the batches; gather_for_metrics drops them.
    assert [i for batch in r0["metrics"] for i in batch] == list(range(9))


def test_profiler_traces_are_written_alike(accelerate: ModuleType, tmp_path: Path) -> None:
    ref = programs.profile_run("accelerate", tmp_path / "ref")
    ours = programs.profile_run("accelkw", tmp_path / "ours")
    assert ref == ours == ["profile_0.json"]
    for folder in ("ref", "ours"):
        events = json.loads((tmp_path / folder / "profile_0.json").read_text())["traceEvents"]
        assert any(e.get("name") == "aten::linear" for e in events)


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "torch-save"])
def test_save_state_and_load_state_round_trip_alike(
    accelerate: ModuleType, tmp_path: Path, safe: bool
) -> None:
    ref = programs.checkpoint_run("accelerate", tmp_path / "ref", safe=safe)
    ours = programs.checkpoint_run("accelkw", tmp_path / "ours", safe=safe)
    weights = "model.safetensors" if safe else "pytorch_model.bin"
    assert ref.pop("files") == sorted(
        [weights, "optimizer.bin", "random_states_0.pkl", "scheduler.bin"]
    )
    assert ours.pop("files") == sorted(
        [
            weights,
            "optimizer.bin",
            "random_states_0.pkl",
            "scheduler.bin",
            "accelkw_checkpoint.json",
        ]
    )
    listed("checkpoint-manifest")
    assert ref == ours
    assert ours["first"] == ours["again"]  # resumed: the same losses and random draws


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "torch-save"])
def test_each_framework_resumes_from_the_others_checkpoint_bit_for_bit(
    accelerate: ModuleType, tmp_path: Path, safe: bool
) -> None:
    ref = programs.checkpoint_run("accelerate", tmp_path / "ref", safe=safe)
    ours = programs.checkpoint_run("accelkw", tmp_path / "ours", safe=safe)
    # Fresh objects from another seed, loaded from the other framework's folder, take the two
    # steps after the save exactly as the saver took them: losses, Python and NumPy draws.
    assert programs.resume_run("accelkw", tmp_path / "ref") == ref["first"]
    assert programs.resume_run("accelerate", tmp_path / "ours") == ours["first"]


def test_automatic_naming_continues_after_a_restart_where_accelerate_collides(
    accelerate: ModuleType, tmp_path: Path
) -> None:
    ref = programs.restarted_naming("accelerate", tmp_path / "ref")
    ours = programs.restarted_naming("accelkw", tmp_path / "ours")
    assert ref == ["checkpoint_0", "checkpoint_1", "ValueError"]  # checkpoint_0 exists
    assert ours == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
    listed("checkpoint-automatic-naming")


def test_a_state_weights_only_refuses_fails_at_save_where_accelerate_loads_it(
    accelerate: ModuleType, tmp_path: Path
) -> None:
    ref = programs.opaque_state("accelerate", tmp_path / "ref")
    ours = programs.opaque_state("accelkw", tmp_path / "ours")
    assert ref == "loaded PosixPath('somewhere')"
    assert (
        ours.startswith("CheckpointError: checkpoint: ") and "registered object 0 (Opaque)" in ours
    )
    assert not (tmp_path / "ours").exists()
    listed("checkpoint-weights-only")

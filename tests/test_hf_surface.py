"""The members Hugging Face's example scripts call, ``get_logger`` and ``accelkw_core.state``.

Two processes are exercised by the differential feature scripts (clm_no_trainer,
glue_no_trainer, lora_peft in tests/conformance/feature_scripts): the logger on every rank,
``str(accelerator.state)`` under gloo, ``save`` from the main process, ``pad_across_processes``
of different lengths. These are the one-process facts.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from accelkw_core import Accelerator
from accelkw_core.logging import get_logger
from accelkw_core.state import AcceleratorState, PartialState, is_initialized


def test_the_state_describes_the_run_as_accelerate_prints_it() -> None:
    accelerator = Accelerator(cpu=True)
    text = (
        "Distributed environment: DistributedType.NO\nNum processes: 1\nProcess index: 0\n"
        "Local process index: 0\nDevice: cpu\n\nMixed precision type: no\n"
    )
    assert str(accelerator.state) == text == repr(AcceleratorState())
    assert repr(PartialState()) == text.split("\n\n")[0] + "\n"
    assert is_initialized() and AcceleratorState().deepspeed_plugin is None
    assert AcceleratorState().num_processes == 1 and PartialState().is_main_process
    assert accelerator.is_last_process and accelerator.native_amp is False


def test_the_logger_logs_with_accelerates_keywords(caplog: pytest.LogCaptureFixture) -> None:
    Accelerator(cpu=True)
    logger = get_logger("accelkw-test-logger", log_level="INFO")
    with caplog.at_level(logging.INFO, logger="accelkw-test-logger"):
        logger.info("on main", main_process_only=False)
        logger.info("in order", in_order=True)
        logger.warning_once("once")
        logger.warning_once("once")
    assert [r.getMessage() for r in caplog.records] == [
        "[RANK 0] on main",
        "[RANK 0] in order",
        "[RANK 0] once",
    ]


def test_the_logger_refuses_to_log_before_a_state_exists() -> None:
    code = (
        "from accelkw_core.logging import get_logger\n"
        "log = get_logger('x')\n"
        "try:\n    log.warning('early')\nexcept RuntimeError as e:\n    print('refused:', e)\n"
        "from accelkw_core.state import PartialState\nPartialState()\nlog.warning('later')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "refused: get_logger's logger cannot log" in out.stdout
    assert "[RANK 0] later" in out.stderr


def test_save_on_process_and_the_rest_of_the_members(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.save(model.state_dict(), tmp_path / "w.bin")
    accelerator.save(dict(model.state_dict()), str(tmp_path / "w.safetensors"), True)
    loaded = torch.load(tmp_path / "w.bin", weights_only=True)
    assert torch.equal(loaded["weight"], model.weight)
    from safetensors.torch import load_file

    assert torch.equal(load_file(tmp_path / "w.safetensors")["bias"], model.bias)
    assert not list(tmp_path.glob(".*"))  # no temporary left
    assert accelerator.optimizer_step_was_skipped is False
    assert accelerator.on_process(lambda: 1, process_index=0)() == 1
    assert accelerator.on_process(process_index=1)(lambda: 1)() is None
    assert accelerator.on_local_process(lambda: 2, local_process_index=0)() == 2
    assert accelerator.on_last_process(lambda: 3)() == 3
    t = torch.arange(3)
    assert accelerator.pad_across_processes(t) is t
    with accelerator.join_uneven_inputs([model]) as joined:
        assert joined == [model]


def join_worker(rank: int) -> dict[str, Any]:
    import torch.distributed as dist

    from accelkw_core.runtime.data.data_loader import BatchShard
    from accelkw_core.runtime.processes.coordination import Processes
    from accelkw_core.runtime.run_state import RunState

    dist.init_process_group("gloo")
    # Join acts on accelerator devices only (as in Accelerate), and the device type is all it
    # reads: gloo CPU processes that call themselves CUDA's run the real Join.
    state = RunState(rank=rank, world_size=2, device_type="cuda")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = torch.utils.data.BatchSampler(range(10), batch_size=2, drop_last=False)
    shard = BatchShard(batches, 2, rank, even_batches=True)

    class Loader:
        batch_sampler = shard

    steps = 0
    with Processes(state).join_uneven_inputs([model], False, [Loader()]):
        for batch in shard:
            optimizer.zero_grad()
            model(torch.tensor(batch, dtype=torch.float32)[:, None].repeat(1, 2)).sum().backward()
            optimizer.step()
            steps += 1
    restored = shard.even_batches
    dist.destroy_process_group()
    return {"steps": steps, "restored": restored, "weight": model.module.weight.tolist()}


def test_join_uneven_inputs_joins_a_process_that_runs_out_of_batches() -> None:
    from accelkw_core.testing import run_workers

    r0, r1 = run_workers(join_worker, 2, timeout=120)
    # Five batches, uneven: three on rank 0, two on rank 1, which joins; no hang.
    assert (r0["steps"], r1["steps"]) == (3, 2)
    assert r0["restored"] is True and r1["restored"] is True
    assert r0["weight"] == r1["weight"]

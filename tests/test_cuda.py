"""Every CUDA path, run when CUDA is available and skipped otherwise: ``pytest -m cuda``.

nccl process group, CUDA autocast (fp16 and bf16) on a prepared model, the CUDA GradScaler
(compared with Accelerate's), the CUDA profiler activity, DDP ``device_ids``, the bf16
communication hook and a stream's batches placed on the device. The multi-process ones need two
GPUs (one nccl rank per device).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from accelkw_core.testing import run_workers
from tests import cuda_workers as workers

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
two_gpus = pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.device_count() < 2,
    reason="nccl needs one device per rank: two GPUs",
)


@pytest.mark.parametrize(("mixed_precision", "dtype"), [("fp16", "float16"), ("bf16", "bfloat16")])
def test_cuda_autocast_runs_a_prepared_models_forward_in_half_precision(
    mixed_precision: str, dtype: str
) -> None:
    seen = {}

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.linear(x)
            seen["inside"] = y.dtype
            return y

    acc = workers.accelerator(mixed_precision=mixed_precision)
    model = acc.prepare(Probe())
    out = model(torch.ones(2, 4, device=acc.device))
    assert acc.device.type == "cuda" and next(model.parameters()).is_cuda
    assert seen["inside"] == getattr(torch, dtype) and out.dtype == torch.float32
    acc.end_training()


def test_the_cuda_grad_scaler_matches_accelerates_and_skips_inf_steps() -> None:
    from accelerate import Accelerator as Reference
    from accelerate.utils import GradScalerKwargs as ReferenceKwargs

    from accelkw_core.utils import GradScalerKwargs

    settings = dict(init_scale=1024.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=7)
    ref = Reference(mixed_precision="fp16", kwargs_handlers=[ReferenceKwargs(**settings)]).scaler
    acc = workers.accelerator(
        mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(**settings)]
    )
    ours = acc.scaler
    assert ours._device == ref._device == "cuda"
    for attr in ("get_scale", "get_growth_factor", "get_backoff_factor", "get_growth_interval"):
        assert getattr(ours, attr)() == getattr(ref, attr)()
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    before = [p.detach().clone() for p in model.parameters()]
    acc.backward(model(torch.tensor([[float("inf"), 1.0]], device=acc.device)).sum())
    acc.clip_grad_norm_(model.parameters(), 1.0)  # unscales first
    opt.step()
    assert opt.step_was_skipped and ours.get_scale() == 256.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    acc.end_training()


def test_the_cuda_profiler_activity_records_kernels(tmp_path: Path) -> None:
    from accelkw_core.utils import ProfileKwargs

    handler = ProfileKwargs(activities=["cpu", "cuda"], output_trace_dir=str(tmp_path))
    acc = workers.accelerator(kwargs_handlers=[handler])
    model = acc.prepare(torch.nn.Linear(64, 64))
    with acc.profile() as prof:
        model(torch.ones(8, 64, device=acc.device)).sum().backward()
        torch.cuda.synchronize()
        prof.step()
    acc.end_training()
    events = json.loads((tmp_path / "profile_0.json").read_text())["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in events)


@two_gpus
@pytest.mark.multiprocess
@pytest.mark.parametrize("comm_hook", ["no", "bf16"])
def test_nccl_ddp_with_device_ids_and_comm_hooks(comm_hook: str) -> None:
    results = run_workers(workers.nccl_ddp_worker, 2, args=(comm_hook,), timeout=300)
    for rank, out in enumerate(results):
        assert out["backend"] == "nccl" and out["device"] == f"cuda:{rank}"
        assert out["device_ids"] == [rank] and out["distributed_type"] == "MULTI_GPU"
        assert out["synced"]


@pytest.mark.parametrize("dispatch", [True, False], ids=["dispatched", "read-in-place"])
def test_a_streams_batches_land_on_the_cuda_device(dispatch: bool) -> None:
    from accelkw_core.utils import DataLoaderConfiguration

    class Numbers(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            return (torch.tensor([float(i)]) for i in range(5))

    config = DataLoaderConfiguration(dispatch_batches=dispatch)
    accelerator = workers.accelerator(dataloader_config=config)
    loader = accelerator.prepare(torch.utils.data.DataLoader(Numbers(), batch_size=2))
    batches = list(loader)
    assert [b.device.type for b in batches] == ["cuda"] * 3
    assert torch.cat(batches).flatten().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    accelerator.end_training()

"""Worker functions for tests/test_builtins_composed.py (``run_workers`` imports them by name)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any


def five_builtins_worker(rank: int, trace_dir: str, steps: int) -> dict[str, Any]:
    """Train a small MLP with all five built-in handlers passed explicitly, bf16 on CPU."""
    import torch
    from accelkw_autocast import AutocastKwargs
    from accelkw_ddp import DistributedDataParallelKwargs
    from accelkw_grad_scaler import GradScalerKwargs
    from accelkw_process_group import InitProcessGroupKwargs
    from accelkw_profile import ProfileKwargs

    from accelkw_core import Accelerator

    torch.set_num_threads(1)
    torch.manual_seed(0)
    handlers = [
        ProfileKwargs(output_trace_dir=trace_dir, profile_ranks=[0], record_shapes=True),
        GradScalerKwargs(init_scale=1024.0),
        DistributedDataParallelKwargs(bucket_cap_mb=1),
        InitProcessGroupKwargs(backend="gloo", timeout=timedelta(seconds=60)),
        AutocastKwargs(cache_enabled=False),
    ]
    out: dict[str, Any] = {}
    with Accelerator(mixed_precision="bf16", cpu=True, kwargs_handlers=handlers) as acc:
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(64, 8, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
        inner = model[0]
        inner.register_forward_hook(lambda m, i, o: out.update(forward_dtype=str(o.dtype)))
        model, opt, loader = acc.prepare(model, opt, loader)
        losses = []
        with acc.profile() as prof:
            for _ in range(steps):
                for xb, yb in loader:
                    pred = model(xb)  # a prepared model autocasts its forward by itself
                    out["output_dtype"] = str(pred.dtype)
                    loss = torch.nn.functional.mse_loss(pred, yb)
                    acc.backward(loss)
                    opt.step()
                    opt.zero_grad()
                    losses.append(float(loss))
                prof.step()
        flat = torch.cat([p.detach().reshape(-1) for p in acc.unwrap_model(model).parameters()])
        gathered = acc.gather(flat.unsqueeze(0))
        out.update(
            applied=list(acc.state.handlers),
            order=[type(h).name for h in acc.handlers],
            wrapped=type(model).__name__,
            bucket_bytes_cap=getattr(model, "bucket_bytes_cap", None),
            scaler=acc.scaler is not None,
            ranks_equal=bool(torch.equal(gathered[0], gathered[1])),
            first_loss=losses[0],
            last_loss=losses[-1],
            log=acc.state.summary(),
            group_during=torch.distributed.is_initialized(),
        )
    out["group_after"] = torch.distributed.is_initialized()
    trace = Path(trace_dir) / f"profile_{rank}.json"
    out["trace"] = trace.exists()
    if trace.exists():
        names = {e.get("name", "") for e in json.loads(trace.read_text())["traceEvents"]}
        out["trace_has_linear"] = any(n in names for n in ("aten::linear", "aten::addmm"))
    return out

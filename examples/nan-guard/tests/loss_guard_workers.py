"""Worker functions for the two-process NaN-guard tests (run in spawned processes by ``run_workers``)."""

from __future__ import annotations

import math
import os
from typing import Any

NAN_RANK, NAN_STEP, STEPS = 0, 2, 5


def data(rank: int, step: int) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(100 * rank + step)
    return torch.randn(8, 4, generator=generator), torch.randn(8, 2, generator=generator)


def train(rank: int, clip: bool) -> dict[str, Any]:
    """fp16 with the gradient scaler, no DDP: rank 0's loss is NaN at step NAN_STEP."""
    import accelkw_autocast.plugin
    import accelkw_grad_scaler.plugin
    import accelkw_process_group.plugin
    import torch
    from accelkw_grad_scaler import GradScalerKwargs
    from accelkw_loss_guard import LossGuardKwargs, loss_guard, plugin

    from accelkw_core import Accelerator
    from accelkw_core.plugin import AROUND_STEP
    from accelkw_core.testing import isolated_registry

    torch.set_num_threads(1)
    for key in [k for k in os.environ if k.startswith("ACCELKW_")]:
        del os.environ[key]
    registry = isolated_registry(
        [accelkw_autocast.plugin, accelkw_grad_scaler.plugin, accelkw_process_group.plugin, plugin]
    )
    out: dict[str, Any] = {"losses": [], "seen": [], "skipped": [], "moved": [], "scale": []}
    # A scale small enough that no fp16 gradient overflows: every skip is the guard's.
    handlers = [LossGuardKwargs(), GradScalerKwargs(init_scale=256.0)]
    with Accelerator(
        mixed_precision="fp16", cpu=True, kwargs_handlers=handlers, registry=registry
    ) as acc:
        out["around_step"] = [c.handler for c in acc.state.contributions(AROUND_STEP)]
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
        guard = loss_guard(acc)
        assert guard is not None
        for step in range(STEPS):
            x, y = data(rank, step)
            loss = torch.nn.functional.mse_loss(model(x), y)
            if rank == NAN_RANK and step == NAN_STEP:
                loss = loss * float("nan")
            before = [p.detach().clone() for p in model.parameters()]
            acc.backward(loss)
            if clip:
                acc.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            out["losses"].append(loss.item())
            assert guard.last_loss is not None
            out["seen"].append(guard.last_loss.item())
            out["skipped"].append(opt.step_was_skipped)
            out["moved"].append(
                not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
            )
            out["scale"].append(acc.scaler.get_scale())
        out["nonfinite"] = guard.nonfinite_losses
        out["skipped_steps"] = guard.skipped_steps
        out["finite_weights"] = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    return out


def same_nan(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b

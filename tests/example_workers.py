"""Worker for tests/test_examples_composed.py (``run_workers`` imports it by name).

Each rank trains twice on the same data: through an ``Accelerator`` composing ddp, grad-scaler
(fp16), autocast, process-group and the example handlers, then with the hand-written torch loop
that does the same (DDP, ``torch.autocast`` fp16 on CPU, ``GradScaler``, ``clip_grad_norm_``
after ``unscale_``, an EMA updated by hand), and returns what both produced.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from accelkw_core.plugin import AROUND_STEP

LR, MOMENTUM = 0.1, 0.9
INIT_SCALE = 1024.0
MAX_NORM = 0.1
DECAY, UPDATE_EVERY = 0.8, 2


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _data(rank: int, steps: int, inf_step: int) -> list[tuple[Any, Any]]:
    import torch

    gen = torch.Generator().manual_seed(100 + rank)
    out = []
    for i in range(steps):
        x, y = torch.randn(8, 6, generator=gen), torch.randn(8, 3, generator=gen)
        # Only rank 0's batch overflows the fp16 backward; DDP's all-reduce carries the inf to
        # rank 1, so both ranks' scalers skip the step.
        out.append((x, y * 1e6 if i == inf_step and rank == 0 else y))
    return out


def _flat(tensors: Any) -> list[float]:
    import torch

    return torch.cat([t.detach().reshape(-1).float() for t in tensors]).tolist()


def composed_examples_worker(
    rank: int, examples: Sequence[str], steps: int, inf_step: int
) -> dict[str, Any]:
    """Train with the examples named in ``examples`` ("grad_clip", "ema"), both ways."""
    import accelkw_autocast.plugin
    import accelkw_ddp.plugin
    import accelkw_ema.plugin
    import accelkw_grad_clip.plugin
    import accelkw_grad_scaler.plugin
    import accelkw_process_group.plugin
    import torch
    from accelkw_ema import EmaKwargs, ema_of
    from accelkw_grad_clip import GradClipKwargs, grad_clip_of
    from accelkw_grad_scaler import GradScalerKwargs

    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry

    torch.set_num_threads(1)
    for key in [k for k in os.environ if k.startswith("ACCELKW_")]:
        del os.environ[key]
    registry = isolated_registry(
        [
            accelkw_autocast.plugin,
            accelkw_ddp.plugin,
            accelkw_grad_scaler.plugin,
            accelkw_process_group.plugin,
            accelkw_grad_clip.plugin,
            accelkw_ema.plugin,
        ]
    )
    handlers: list[Any] = [GradScalerKwargs(init_scale=INIT_SCALE)]
    if "grad_clip" in examples:
        handlers.append(GradClipKwargs(max_norm=MAX_NORM))
    if "ema" in examples:
        handlers.append(EmaKwargs(decay=DECAY, update_every=UPDATE_EVERY))
    data = _data(rank, steps, inf_step)
    x_eval = torch.randn(4, 6, generator=torch.Generator().manual_seed(7))
    out: dict[str, Any] = {}
    with Accelerator(
        mixed_precision="fp16", cpu=True, kwargs_handlers=handlers, registry=registry
    ) as acc:
        out["handlers"] = list(acc.state.handlers)
        out["around_step"] = [c.handler for c in acc.state.contributions(AROUND_STEP)]
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        model, opt = acc.prepare(model, opt)
        out["wrapped"] = type(model).__name__
        skipped, norms = [], []
        for x, y in data:
            loss = torch.nn.functional.mse_loss(model(x), y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            skipped.append(opt.step_was_skipped)
            if "grad_clip" in examples:
                norms.append(float(grad_clip_of(acc).last_norm))
        out["accelerated"] = {
            "skipped": skipped,
            "norms": norms,
            "weights": _flat(acc.unwrap_model(model).parameters()),
            "scale": acc.scaler.get_scale(),
        }
        if "grad_clip" in examples:
            out["accelerated"]["clipped_steps"] = grad_clip_of(acc).clipped_steps
        if "ema" in examples:
            assert ema_of(acc).models == [acc.unwrap_model(model)]
            out["accelerated"]["average"] = _flat(ema_of(acc).averages().values())
            out["accelerated"]["ema_steps"] = ema_of(acc).state_dict()["models"][0]["steps"]
            with torch.no_grad(), ema_of(acc).average_parameters():
                out["accelerated"]["eval"] = _flat([model(x_eval)])
            out["accelerated"]["weights_after_eval"] = _flat(acc.unwrap_model(model).parameters())
        # The hand-written loop, on the process group the Accelerator created.
        out["by_hand"] = _by_hand(data, x_eval, examples)
    return out


def _by_hand(data: list[tuple[Any, Any]], x_eval: Any, examples: Sequence[str]) -> dict[str, Any]:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    module = _model()
    model = DistributedDataParallel(module)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE)
    average = [p.detach().clone() for p in module.parameters()]
    skipped: list[bool] = []
    norms: list[float] = []
    ema_steps = 0
    last_norm = None
    for x, y in data:
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = None
        if "grad_clip" in examples:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        skipped.append(scaler.get_scale() < scale)
        if not skipped[-1]:
            last_norm = norm
            ema_steps += 1
            if ema_steps % UPDATE_EVERY == 0:
                with torch.no_grad():
                    for a, p in zip(average, module.parameters(), strict=True):
                        a.lerp_(p, 1 - DECAY)
        if "grad_clip" in examples:
            # On a skipped step the plugin does not clip: its last norm is the previous one.
            norms.append(float(last_norm) if last_norm is not None else float("nan"))
    result: dict[str, Any] = {
        "skipped": skipped,
        "norms": norms,
        "weights": _flat(module.parameters()),
        "scale": scaler.get_scale(),
    }
    if "ema" in examples:
        result["average"] = _flat(average)
        result["ema_steps"] = ema_steps
        with torch.no_grad():
            params = {n: a for (n, _), a in zip(module.named_parameters(), average, strict=True)}
            with torch.autocast("cpu", dtype=torch.float16):
                evaluated = torch.func.functional_call(module, params, (x_eval,))
        result["eval"] = _flat([evaluated])
    return result


def ema_under_fsdp_worker(rank: int, steps: int) -> dict[str, Any]:
    """EMA composed with FSDP2: it must track the sharded parameters, not the ones before."""
    import accelkw_ema.plugin
    import accelkw_fsdp.plugin
    import accelkw_process_group.plugin
    import torch
    from accelkw_ema import EmaKwargs, ema_of
    from accelkw_fsdp import FullyShardedDataParallelPlugin
    from torch.distributed.tensor import DTensor

    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry

    torch.set_num_threads(1)
    for key in [k for k in os.environ if k.startswith("ACCELKW_")]:
        del os.environ[key]
    registry = isolated_registry(
        [accelkw_process_group.plugin, accelkw_fsdp.plugin, accelkw_ema.plugin]
    )
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    with Accelerator(
        cpu=True,
        registry=registry,
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2),
        kwargs_handlers=[EmaKwargs(decay=DECAY)],
    ) as acc:
        model, opt = acc.prepare(model, opt)
        average = ema_of(acc).averages()
        # By hand: the full weights after each step, averaged as full tensors.
        expected = {n: p.full_tensor().clone() for n, p in model.named_parameters()}
        for x, y in _data(rank, steps, inf_step=-1):
            acc.backward(torch.nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
            with torch.no_grad():
                for n, p in model.named_parameters():
                    expected[n].lerp_(p.full_tensor(), 1 - DECAY)
        return {
            "order": list(acc.state.handlers),
            "sharded": all(isinstance(a, DTensor) for a in average.values()),
            "steps": ema_of(acc).state_dict()["models"][0]["steps"],
            "average": _flat(a.full_tensor() for a in average.values()),
            "expected": _flat(expected.values()),
        }

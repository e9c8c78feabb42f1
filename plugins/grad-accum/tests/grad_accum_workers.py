"""Training loops shared by the gradient-accumulation tests, and the workers ``run_workers`` spawns.

The workers live in a plain module because spawned processes unpickle their target by name.
"""

from __future__ import annotations

from typing import Any

import torch

SAMPLES = 32
MICRO = 2  # samples per micro-batch, per process


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def dataset() -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(7)
    return torch.utils.data.TensorDataset(
        torch.randn(SAMPLES, 4, generator=generator), torch.randn(SAMPLES, 2, generator=generator)
    )


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().float().clone() for p in model.parameters()]


def full_batch(batch_size: int, lr: float = 0.1) -> list[torch.Tensor]:
    """Plain torch: one SGD step per ``batch_size`` samples, in order, mean-squared error."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = dataset().tensors
    for start in range(0, SAMPLES, batch_size):
        optimizer.zero_grad()
        xs, ys = x[start : start + batch_size], y[start : start + batch_size]
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        optimizer.step()
    return params(model)


def registry(*names: str) -> Any:
    """A registry with only the named built-ins (plus grad_accum), read from no entry points."""
    import importlib

    from accelkw_core.testing import isolated_registry

    modules = ["accelkw_grad_accum.plugin"]
    modules += [f"accelkw_{name}.plugin" for name in names]
    return isolated_registry([importlib.import_module(m) for m in modules])


def accumulated(
    accelerator: Any, micro: int = MICRO, lr: float = 0.1
) -> tuple[list[torch.Tensor], list[bool], Any]:
    """Train over the prepared data set inside ``accumulate``; the parameters and sync flags."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = torch.utils.data.DataLoader(dataset(), batch_size=micro)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    syncs = []
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            syncs.append(accelerator.sync_gradients)
            optimizer.step()
            optimizer.zero_grad()
    return params(accelerator.unwrap_model(model)), syncs, model


def ddp_accumulation_worker(rank: int, num_steps: int, sync_each_batch: bool) -> dict[str, Any]:
    """Two processes under DDP: the parameters, the sync flags and how many all-reduces ran."""
    import torch.distributed as dist
    from accelkw_grad_accum import GradientAccumulationPlugin
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from accelkw_core import Accelerator

    plugin = GradientAccumulationPlugin(num_steps=num_steps, sync_each_batch=sync_each_batch)
    all_reduces = 0

    # No annotations: DDP checks them, and this module's are strings (postponed evaluation).
    def counting_hook(state, bucket):  # type: ignore[no-untyped-def]
        nonlocal all_reduces
        all_reduces += 1
        return default_hooks.allreduce_hook(state, bucket)

    with Accelerator(
        cpu=True, registry=registry("ddp", "process_group"), gradient_accumulation_plugin=plugin
    ) as acc:
        model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(dataset(), batch_size=MICRO)
        model, optimizer, loader = acc.prepare(model, optimizer, loader)
        assert isinstance(model, torch.nn.parallel.DistributedDataParallel)
        model.register_comm_hook(dist.group.WORLD, counting_hook)
        syncs = []
        for x, y in loader:
            with acc.accumulate(model):
                acc.backward(torch.nn.functional.mse_loss(model(x), y))
                syncs.append(acc.sync_gradients)
                optimizer.step()
                optimizer.zero_grad()
        return {
            # Plain lists: a tensor sent to the parent is shared through a file descriptor that
            # dies with this process.
            "params": [p.tolist() for p in params(acc.unwrap_model(model))],
            "syncs": syncs,
            "all_reduces": all_reduces,
            "distributed": acc.state.distributed,
        }


def fp16_against_torch(rank: int, num_steps: int = 4) -> dict[str, Any]:
    """fp16 accumulation through the Accelerator, the same by hand with torch, and the fp32
    large-batch reference; parameters as lists (tensors do not outlive a worker's queue)."""
    from accelkw_core import Accelerator

    acc = Accelerator(
        cpu=True,
        mixed_precision="fp16",
        registry=registry("autocast", "grad_scaler"),
        gradient_accumulation_steps=num_steps,
    )
    trained, _, _ = accumulated(acc)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    x, y = dataset().tensors
    for start in range(0, SAMPLES, MICRO):
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x[start : start + MICRO])
        loss = torch.nn.functional.mse_loss(out.float(), y[start : start + MICRO])
        scaler.scale(loss / num_steps).backward()
        if (start // MICRO + 1) % num_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    return {
        "scaler_present": acc.scaler is not None,
        "trained": [t.tolist() for t in trained],
        "by_hand": [t.tolist() for t in params(model)],
        "reference": [t.tolist() for t in full_batch(MICRO * num_steps)],
        "scale": acc.scaler.get_scale(),
        "scale_by_hand": scaler.get_scale(),
    }

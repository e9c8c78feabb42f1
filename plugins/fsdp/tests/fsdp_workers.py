"""Worker functions for the multi-process FSDP tests (run in spawned processes by ``run_workers``)."""

from __future__ import annotations

import io
from typing import Any

import accelkw_ddp.plugin
import accelkw_fsdp.plugin
import accelkw_process_group.plugin
import torch
from accelkw_fsdp import FullyShardedDataParallelPlugin

from accelkw_core import Accelerator
from accelkw_core.testing import isolated_registry

BATCH = 8
STEPS = 3
LR = 0.1
MAX_NORM = 0.5


class Block(torch.nn.Module):
    """A layer the transformer-based wrap policy can pick by class name."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(4, 6)
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.out = torch.nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.inp(x)))


def make_model(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def make_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randn(BATCH, 4, generator=generator), torch.randn(BATCH, 2, generator=generator)


def reference() -> dict[str, Any]:
    """One process, full batches: the steps, then one step accumulated over two batches."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    norms = []
    for step in range(STEPS):
        x, y = make_batch(step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
        optimizer.step()
        optimizer.zero_grad()
    for micro in (STEPS, STEPS + 1):
        x, y = make_batch(micro)
        torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    x, _ = make_batch(99)
    with torch.no_grad():
        out = model(x)
    return {"state": model.state_dict(), "norms": norms, "out": out}


def to_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def from_bytes(data: bytes) -> Any:
    return torch.load(io.BytesIO(data))


def _local(batch: tuple[torch.Tensor, torch.Tensor], rank: int) -> tuple[torch.Tensor, ...]:
    half = BATCH // 2
    return tuple(t[rank * half : (rank + 1) * half] for t in batch)


def train(rank: int, plugin_kwargs: dict[str, Any], differ: bool) -> dict[str, Any]:
    """The reference's loop under FSDP2 on this rank's half of every batch.

    With ``differ``, rank 1 builds other weights (``sync_module_states`` must replace them).
    """
    model = make_model(rank if differ else 0)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    registry = isolated_registry(
        [accelkw_process_group.plugin, accelkw_ddp.plugin, accelkw_fsdp.plugin]
    )
    accelerator = Accelerator(
        cpu=True,
        registry=registry,
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2, **plugin_kwargs),
    )
    # The optimizer first: it must still end up on the sharded parameters.
    optimizer, model = accelerator.prepare(optimizer, model)
    from torch.distributed.tensor import DTensor

    dtensors = all(isinstance(p, DTensor) for p in model.parameters())
    optimizer_dtensors = all(
        isinstance(p, DTensor) for g in optimizer.param_groups for p in g["params"]
    )
    norms = []
    for step in range(STEPS):
        x, y = _local(make_batch(step), rank)
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        norms.append(float(norm.full_tensor() if isinstance(norm, DTensor) else norm))
        optimizer.step()
        optimizer.zero_grad()
    suspend = accelerator.state.values("no_sync")[0]
    x, y = _local(make_batch(STEPS), rank)
    with suspend(model):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    x, y = _local(make_batch(STEPS + 1), rank)
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
    model_state = accelerator.state.values("model_state")[0]
    full = model_state.state_dict(model)
    x, _ = make_batch(99)
    with torch.no_grad():
        out = model(x)
    # Load the saved weights back (rank 0's dict is broadcast) after scrambling them.
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    model_state.load_state_dict(model, full if rank == 0 else {})
    with torch.no_grad():
        reloaded = model(x)
    result = {
        "handlers": list(accelerator.state.handlers),
        "messages": accelerator.state.messages("fsdp"),
        "dtensors": dtensors,
        "optimizer_dtensors": optimizer_dtensors,
        "norms": norms,
        # Tensors cross the result queue as bytes: shared-memory handles die with the worker.
        "tensors": to_bytes({"state": full, "out": out, "reloaded": reloaded}),
    }
    accelerator.end_training()
    return result

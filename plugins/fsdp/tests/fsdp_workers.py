"""Worker functions for the multi-process FSDP tests (run in spawned processes by ``run_workers``)."""

from __future__ import annotations

import io
import os
from typing import Any

import accelkw_ddp.plugin
import accelkw_fsdp.plugin
import accelkw_process_group.plugin
import torch
from accelkw_fsdp import FullyShardedDataParallelPlugin

from accelkw_core import Accelerator
from accelkw_core.plugin import MODEL_STATE, NO_SYNC
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
    suspend = accelerator.state.values(NO_SYNC)[0]
    x, y = _local(make_batch(STEPS), rank)
    with suspend(model):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    x, y = _local(make_batch(STEPS + 1), rank)
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
    model_state = accelerator.state.values(MODEL_STATE)[0]
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


# -- save_state / load_state ---------------------------------------------------------------

CKPT_LR = 0.01
CKPT_STEPS = 3


def _checkpoint_accelerator(state_dict_type: str) -> Accelerator:
    registry = isolated_registry(
        [accelkw_process_group.plugin, accelkw_ddp.plugin, accelkw_fsdp.plugin]
    )
    return Accelerator(
        cpu=True,
        registry=registry,
        fsdp_plugin=FullyShardedDataParallelPlugin(
            fsdp_version=2,
            state_dict_type=state_dict_type,
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["Block"],
        ),
    )


def _adamw_steps(
    accelerator: Accelerator, model: Any, optimizer: Any, rank: int, first: int
) -> None:
    for step in range(first, first + CKPT_STEPS):
        x, y = _local(make_batch(step), rank)
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()


def adamw_reference() -> dict[str, torch.Tensor]:
    """One process, full batches, ``2 * CKPT_STEPS`` AdamW steps: what the sharded runs approach."""
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=CKPT_LR)
    for step in range(2 * CKPT_STEPS):
        x, y = make_batch(step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.state_dict()


def _full_weights(model: Any) -> dict[str, torch.Tensor]:
    """The whole weights on rank 0 (``{}`` elsewhere), whatever ``state_dict_type`` says."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return dict(get_model_state_dict(model, options=options))


def _local_state(model: Any, optimizer: Any) -> dict[str, torch.Tensor]:
    """This rank's shards of the weights and of the optimizer state, copied."""
    from torch.distributed.tensor import DTensor

    def local(t: torch.Tensor) -> torch.Tensor:
        return (t.to_local() if isinstance(t, DTensor) else t).detach().clone()

    state = {name: local(p) for name, p in model.named_parameters()}
    names = {id(p): name for name, p in model.named_parameters()}
    for p, values in optimizer.state.items():
        for key, value in values.items():
            state[f"{names[id(p)]}.{key}"] = local(value)
    return state


def train_and_save(rank: int, state_dict_type: str, fresh: str, folder: str) -> dict[str, Any]:
    """Save before any step (``fresh``), take the steps, save (``folder``), take as many more.

    The saves must not change the run: its weights are those of an uninterrupted run.
    """
    accelerator = _checkpoint_accelerator(state_dict_type)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=CKPT_LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.save_state(fresh)
    _adamw_steps(accelerator, model, optimizer, rank, 0)
    accelerator.save_state(folder)
    _adamw_steps(accelerator, model, optimizer, rank, CKPT_STEPS)
    weights = _full_weights(model)
    files = sorted(
        os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs
    )
    accelerator.end_training()
    return {"weights": to_bytes(weights), "files": files}


def _loaded(model: Any, optimizer: Any) -> bytes:
    """The whole weights and optimizer state on rank 0, as bytes (``{}`` elsewhere)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    osd = get_optimizer_state_dict(model, optimizer.optimizer, options=options)
    return to_bytes({"weights": _full_weights(model), "optimizer": osd})


def resume(rank: int, state_dict_type: str, fresh: str, folder: str, damage: str) -> dict[str, Any]:
    """A new run: load the checkpoint saved before any step, then the one after the steps, and
    take the remaining steps; then ``damage`` (a file of a copy of the checkpoint, truncated by
    rank 0) must make ``load_state`` fail on every rank, changing nothing."""
    import shutil

    from accelkw_core import CheckpointError

    accelerator = _checkpoint_accelerator(state_dict_type)
    model = make_model(seed=7)  # other weights: the checkpoint must replace them
    optimizer = torch.optim.AdamW(model.parameters(), lr=CKPT_LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.load_state(fresh)
    initial = _full_weights(model)
    stateless = len(optimizer.state) == 0
    accelerator.load_state(folder)
    loaded = _loaded(model, optimizer)
    _adamw_steps(accelerator, model, optimizer, rank, CKPT_STEPS)
    weights = _full_weights(model)

    damaged = folder + "_damaged"
    if rank == 0:
        shutil.copytree(folder, damaged)
        target = os.path.join(damaged, damage)
        with open(target, "r+b") as fh:
            fh.truncate(os.path.getsize(target) // 2)
    accelerator.wait_for_everyone()
    before = _local_state(model, optimizer)
    error = ""
    try:
        accelerator.load_state(damaged)
    except CheckpointError as exc:
        error = str(exc)
    after = _local_state(model, optimizer)
    unchanged = before.keys() == after.keys() and all(
        torch.equal(before[k], after[k]) for k in before
    )
    accelerator.end_training()
    return {
        "initial": to_bytes(initial),
        "stateless": stateless,
        "loaded": loaded,
        "weights": to_bytes(weights),
        "error": error,
        "unchanged": unchanged,
    }


def load_only(rank: int, state_dict_type: str, folder: str) -> bytes:
    """Load the checkpoint (on however many processes): what ``_loaded`` reads back."""
    accelerator = _checkpoint_accelerator(state_dict_type)
    model = make_model(seed=7)
    optimizer = torch.optim.AdamW(model.parameters(), lr=CKPT_LR)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.load_state(folder)
    loaded = _loaded(model, optimizer)
    accelerator.end_training()
    return loaded

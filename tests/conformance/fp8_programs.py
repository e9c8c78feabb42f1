"""fp8 training programs run under Accelerate 1.15.0 and under accelkw (torchao on the CPU).

Each takes the framework's name and imports from it, as a ported script does; the workers of
``run_workers`` live here so child processes import them. accelkw runs with the built-ins a
training loop uses plus accelkw-fp8 (the plugin ``fp8``), so no other installed plugin can change
the outcome.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

BUILTINS = "autocast,ddp,grad_scaler,process_group,grad_accum,compile,fp8"


def framework(name: str) -> tuple[Any, Any]:
    """``(Accelerator, utils module)`` of the framework ``name``, each run starting afresh."""
    if name == "accelerate":
        import accelerate.utils as utils
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        return Accelerator, utils
    import functools

    import accelkw_core.utils as utils
    from accelkw_core import Accelerator
    from accelkw_core.discovery.registry import Registry

    return functools.partial(Accelerator, registry=Registry(allow=BUILTINS.split(","))), utils


def make_model(seed: int = 0) -> Any:
    """Six linears: Accelerate's filter keeps the first and last, and ``odd``/``proj`` (40 is
    not a multiple of 16); ``mid`` and ``mid2`` are converted."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = torch.nn.Linear(32, 64)
            self.mid = torch.nn.Linear(64, 64)
            self.mid2 = torch.nn.Linear(64, 64)
            self.odd = torch.nn.Linear(64, 40)
            self.proj = torch.nn.Linear(40, 48)
            self.head = torch.nn.Linear(48, 8)

        def forward(self, x: Any) -> Any:
            x = torch.relu(self.first(x))
            x = torch.relu(self.mid(x))
            x = torch.relu(self.mid2(x))
            x = torch.relu(self.odd(x))
            x = torch.relu(self.proj(x))
            return self.head(x)

    torch.manual_seed(seed)
    return Net()


def plain_state(model: Any) -> dict[str, Any]:
    """The model's tensors as plain tensors (a float8 weight wrapper gives the tensor it wraps)."""
    return {k: getattr(v, "_tensor", v).detach().clone() for k, v in model.state_dict().items()}


def digest(state: dict[str, Any]) -> str:
    """A hash of every tensor's bytes, in key order."""
    h = hashlib.sha256()
    for key, value in state.items():
        h.update(key.encode())
        h.update(value.float().contiguous().numpy().tobytes())
    return h.hexdigest()


def batches(rank: int, count: int) -> list[tuple[Any, Any]]:
    import torch

    g = torch.Generator().manual_seed(100 + rank)
    return [
        (torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)) for _ in range(count)
    ]


def train(
    name: str,
    rank: int = 0,
    steps: int = 4,
    accumulate: int = 1,
    clip: float | None = None,
    optimizer_first: bool = False,
    recipe: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """fp8 with ``AORecipeKwargs(**recipe)``: what was converted, each loss, the weights after.

    The optimizer is built from the prepared model, unless ``optimizer_first``: then it is built
    before and prepared with the model (``prepare(model, optimizer)``), where Accelerate keeps
    the converted layers' old weights in the optimizer (see the test of that difference).
    """
    import torch

    Accelerator, utils = framework(name)
    accelerator = Accelerator(
        cpu=True,
        mixed_precision="fp8",
        kwargs_handlers=[utils.AORecipeKwargs(**(recipe or {}))],
        gradient_accumulation_steps=accumulate,
    )
    model = make_model()
    if optimizer_first:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        model = accelerator.prepare(model)
        optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    bare = accelerator.unwrap_model(model)
    converted = [n for n, m in bare.named_modules() if type(m).__name__ == "Float8Linear"]
    start = plain_state(bare)
    losses = []
    for x, y in batches(rank, steps * accumulate):
        with accelerator.accumulate(model):
            out = model(x)
            loss = torch.nn.functional.mse_loss(out, y)
            accelerator.backward(loss)
            if clip is not None and accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.item().hex())
    result = {
        "frozen": [
            k
            for k, v in plain_state(bare).items()
            if k.endswith("weight") and bool((v == start[k]).all())
        ],
        "converted": converted,
        "losses": losses,
        "output_dtype": str(out.dtype),
        "weights": digest(plain_state(bare)),
    }
    accelerator.end_training()
    return result


def train_worker(rank: int, name: str) -> dict[str, Any]:
    """:func:`train` on one rank of a 2-process gloo run (DDP around the converted model)."""
    return train(name, rank)


def checkpoint_run(name: str, folder: Path, steps: int = 2, rank: int = 0) -> dict[str, Any]:
    """Train ``steps``, save, train ``steps`` more; the losses of the second half and the keys."""
    import torch

    Accelerator, utils = framework(name)
    accelerator = Accelerator(
        cpu=True, mixed_precision="fp8", kwargs_handlers=[utils.AORecipeKwargs()]
    )
    model = make_model()
    model = accelerator.prepare(model)
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    data = batches(rank, 2 * steps)
    losses = []
    for i, (x, y) in enumerate(data):
        if i == steps:
            accelerator.save_state(folder)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item().hex())
    out = {
        "after_save": losses[steps:],
        "weights": digest(plain_state(accelerator.unwrap_model(model))),
    }
    accelerator.end_training()
    return out


def resume_run(name: str, folder: Path, steps: int = 2, rank: int = 0) -> dict[str, Any]:
    """A fresh run that loads the checkpoint and trains the same ``steps`` batches after it."""
    import torch

    Accelerator, utils = framework(name)
    accelerator = Accelerator(
        cpu=True, mixed_precision="fp8", kwargs_handlers=[utils.AORecipeKwargs()]
    )
    model = make_model(seed=123)  # other weights: the checkpoint must replace them
    model = accelerator.prepare(model)
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-2))
    accelerator.load_state(folder)
    losses = []
    for x, y in batches(rank, 2 * steps)[steps:]:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item().hex())
    out = {"after_save": losses, "weights": digest(plain_state(accelerator.unwrap_model(model)))}
    accelerator.end_training()
    return out


def save_worker(rank: int, folder: str) -> dict[str, Any]:
    """accelkw on one rank of a 2-process run: the run with its save."""
    return checkpoint_run("accelkw", Path(folder), rank=rank)


def load_worker(rank: int, folder: str) -> dict[str, Any]:
    """accelkw on one rank of a 2-process job that resumes the run from its checkpoint."""
    return resume_run("accelkw", Path(folder), rank=rank)

"""Small programs the runtime conformance tests run under Accelerate and under accelkw.

Each takes the framework's name (``"accelerate"`` or ``"accelkw"``) and imports from it, exactly
as a ported script does; workers of ``run_workers`` live here so child processes import them.
accelkw runs with the five built-in plugins only (``BUILTINS`` below), so an installed
third-party plugin (one that seeds, say) cannot change the outcome.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BUILTINS = "autocast,ddp,profile,grad_scaler,process_group"


def framework(name: str) -> tuple[Any, Any]:
    """``(Accelerator, utils module)`` of the framework ``name``."""
    if name == "accelerate":
        import accelerate.utils as utils
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState, GradientState

        # Accelerate keeps its state in process-wide singletons; each program starts afresh.
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
    else:
        import functools

        import accelkw_core.utils as utils
        from accelkw_core import Accelerator
        from accelkw_core.discovery.registry import Registry

        Accelerator = functools.partial(Accelerator, registry=Registry(allow=BUILTINS.split(",")))
    return Accelerator, utils


def forward_dtypes(name: str, mixed_precision: str) -> dict[str, str]:
    """The dtype of a Linear's output inside a prepared model's forward, and of its output."""
    import torch

    Accelerator, _ = framework(name)
    seen: dict[str, str] = {}

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x: Any) -> Any:
            y = self.linear(x)
            seen["inside"] = str(y.dtype)
            return y

    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
    model = accelerator.prepare(Probe())
    seen["output"] = str(model(torch.ones(2, 4)).dtype)
    seen["scaler"] = type(accelerator.scaler).__name__
    accelerator.end_training()
    return seen


def ddp_worker(rank: int, name: str) -> dict[str, Any]:
    """A 2-process gloo DDP run: the wrapped model's attributes and its gradients."""
    import torch

    Accelerator, utils = framework(name)
    handler = utils.DistributedDataParallelKwargs(
        bucket_cap_mb=1, broadcast_buffers=False, gradient_as_bucket_view=True
    )
    accelerator = Accelerator(cpu=True, kwargs_handlers=[handler])
    torch.manual_seed(rank)  # different weights per rank: DDP must broadcast rank 0's
    model = torch.nn.Linear(3, 2)
    model = accelerator.prepare(model)
    x = torch.full((2, 3), float(rank + 1))
    accelerator.backward(model(x).sum())
    out = {
        "type": type(model).__name__,
        "distributed_type": str(accelerator.distributed_type.value),
        "attrs": {
            "broadcast_buffers": model.broadcast_buffers,
            "bucket_bytes_cap": model.bucket_bytes_cap,
            "find_unused_parameters": model.find_unused_parameters,
            "gradient_as_bucket_view": model.gradient_as_bucket_view,
            "static_graph": model.static_graph,
        },
        "weight": model.module.weight.tolist(),
        "grad": model.module.weight.grad.tolist(),
        "split": None,
    }
    with accelerator.split_between_processes(["a", "b", "c"], apply_padding=True) as part:
        out["split"] = list(part)
    loader = torch.utils.data.DataLoader(torch.arange(9), batch_size=2)
    loader = accelerator.prepare(loader)
    out["batches"] = [b.tolist() for b in loader]
    out["metrics"] = [accelerator.gather_for_metrics(b).tolist() for b in loader]
    accelerator.end_training()
    return out


def profile_run(name: str, trace_dir: Path) -> list[str]:
    """Profile two steps with a trace directory; the trace files written."""
    import torch

    Accelerator, utils = framework(name)
    handler = utils.ProfileKwargs(output_trace_dir=str(trace_dir), activities=["cpu"])
    accelerator = Accelerator(cpu=True, kwargs_handlers=[handler])
    model = accelerator.prepare(torch.nn.Linear(4, 4))
    with accelerator.profile() as prof:
        for _ in range(2):
            model(torch.ones(1, 4)).sum().backward()
            prof.step()
    accelerator.end_training()
    return sorted(p.name for p in trace_dir.iterdir())


def _checkpoint_objects(name: str, seed: int) -> tuple[Any, ...]:
    import random

    import numpy as np
    import torch

    Accelerator, _ = framework(name)
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return accelerator, *accelerator.prepare(model, optimizer, scheduler)


def _checkpoint_step(accelerator: Any, model: Any, optimizer: Any, scheduler: Any) -> list[float]:
    import random

    import numpy as np
    import torch

    loss = model(torch.randn(3, 4)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return [loss.item(), random.random(), float(np.random.rand())]


def checkpoint_run(name: str, folder: Path, *, safe: bool) -> dict[str, Any]:
    """Train a step, save_state, train on, load_state, train again: the numbers and files."""
    accelerator, model, optimizer, scheduler = _checkpoint_objects(name, 0)
    objects = (accelerator, model, optimizer, scheduler)
    _checkpoint_step(*objects)
    accelerator.save_state(folder, safe_serialization=safe)
    first = [_checkpoint_step(*objects), _checkpoint_step(*objects)]
    accelerator.load_state(folder)
    again = [_checkpoint_step(*objects), _checkpoint_step(*objects)]
    out = {
        "files": sorted(p.name for p in folder.iterdir()),
        "first": first,
        "again": again,
        "lr": scheduler.get_last_lr(),
        "state_keys": sorted(accelerator.get_state_dict(model)),
    }
    accelerator.end_training()
    return out


def resume_run(name: str, folder: Path) -> list[list[float]]:
    """Fresh objects (another seed) loaded from ``folder``, then two steps: what they give."""
    accelerator, model, optimizer, scheduler = _checkpoint_objects(name, 123)
    accelerator.load_state(folder)
    out = [_checkpoint_step(accelerator, model, optimizer, scheduler) for _ in range(2)]
    accelerator.end_training()
    return out


def restarted_naming(name: str, project: Path) -> list[str]:
    """Two saves, a restart with a fresh ProjectConfiguration, a third save: what each gave."""
    import torch

    Accelerator, utils = framework(name)
    outcomes = []
    for run in range(2):
        config = utils.ProjectConfiguration(
            project_dir=str(project), automatic_checkpoint_naming=True
        )
        accelerator = Accelerator(cpu=True, project_config=config)
        accelerator.prepare(torch.nn.Linear(2, 1))
        for _ in range(2 if run == 0 else 1):
            try:
                outcomes.append(Path(accelerator.save_state()).name)
            except Exception as exc:
                outcomes.append(type(exc).__name__)
        accelerator.end_training()
    return outcomes


class Opaque:
    """A registered object whose state holds an object, not tensors and numbers."""

    def __init__(self) -> None:
        self.value: Any = None

    def state_dict(self) -> dict[str, Any]:
        return {"value": Path("somewhere")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = state["value"]


def opaque_state(name: str, folder: Path) -> str:
    """save_state then load_state with an Opaque registered: what happened."""
    Accelerator, _ = framework(name)
    accelerator = Accelerator(cpu=True)
    obj = Opaque()
    accelerator.register_for_checkpointing(obj)
    try:
        accelerator.save_state(folder)
        accelerator.load_state(folder)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        accelerator.end_training()
    return f"loaded {obj.value!r}"

"""Worker functions for the multi-process DDP tests (run in spawned processes by ``run_workers``)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from accelkw_ddp import DistributedDataParallelKwargs

from accelkw_core import ConfigError, KwargsHandler, RunState
from accelkw_core.plugin import MODEL_WRAPPER
from accelkw_core.testing import apply_handler

BATCH = 8


class TwoLayer(torch.nn.Module):
    """A small model with a layer forward never uses (so DDP needs find_unused_parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(4, 4)
        self.out = torch.nn.Linear(4, 2)
        self.unused = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(x)))


def make_model(seed: int = 0) -> TwoLayer:
    torch.manual_seed(seed)
    return TwoLayer()


def make_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randn(BATCH, 4, generator=generator), torch.randn(BATCH, 2, generator=generator)


def wrap(state: RunState, model: torch.nn.Module) -> Any:
    """``model`` through the state's ``model_wrapper`` contributions, in order, as prepare does."""
    for wrapper in state.values(MODEL_WRAPPER):
        model = wrapper(model)
    return model


def train(
    model: Any, steps: int, rank: int | None, world_size: int, device: str = "cpu"
) -> list[torch.Tensor]:
    """SGD steps; each rank takes its slice of the batch (``rank=None``: the whole batch).

    Returns the gradients of every step, flattened, on the CPU, as the optimizer saw them.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    grads = []
    for step in range(steps):
        x, y = make_batch(step)
        if rank is not None:
            part = BATCH // world_size
            x, y = x[rank * part : (rank + 1) * part], y[rank * part : (rank + 1) * part]
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        grads.append(
            torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).cpu()
        )
        optimizer.step()
    return grads


def params_of(model: torch.nn.Module) -> list[list[float]]:
    return [p.detach().flatten().tolist() for p in model.parameters()]


def wrap_and_train(rank: int, steps: int) -> dict[str, Any]:
    """DDP with settings from the handler: attributes on the model, then training parity."""
    dist.init_process_group("gloo")
    try:
        state = RunState.from_env(cpu=True)
        apply_handler(
            DistributedDataParallelKwargs(bucket_cap_mb=1, find_unused_parameters=True), state
        )
        model = wrap(state, make_model())
        out: dict[str, Any] = {
            "type": type(model).__name__,
            "bucket_bytes_cap": model.bucket_bytes_cap,
            "find_unused_parameters": model.find_unused_parameters,
        }
        train(model, steps, rank, dist.get_world_size())
        out["params"] = params_of(model.module)
        if rank == 0:
            reference = make_model()
            train(reference, steps, None, 1)
            out["reference"] = params_of(reference)
        try:
            apply_handler(
                DistributedDataParallelKwargs(comm_hook="power_sgd", find_unused_parameters=True),
                RunState.from_env(cpu=True),
            )
            out["power_sgd_find_unused_error"] = None
        except ConfigError as exc:
            out["power_sgd_find_unused_error"] = (exc.field, str(exc))
        frozen = torch.nn.Linear(2, 2).requires_grad_(False)
        out["frozen_unwrapped"] = wrap(state, frozen) is frozen
        out["log"] = state.summary()
        return out
    finally:
        dist.destroy_process_group()


def comm_hook_gradients(
    rank: int, combos: list[tuple[str, str, dict[str, Any]]], steps: int, backend: str = "gloo"
) -> dict[str, float]:
    """Max |gradient difference| from plain DDP, over ``steps`` steps, for each hook setting.

    ``backend="nccl"``: each rank trains on its own GPU (``cuda:<rank>``), where torch's bf16
    hooks run; ``"gloo"``: on the CPU.
    """
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend)
    try:
        world_size = dist.get_world_size()

        def grads_with(handler: KwargsHandler) -> torch.Tensor:
            facts = RunState.from_env(cpu=backend != "nccl")
            state = apply_handler(handler, facts)
            # No unused parameters, so no find_unused_parameters: with it, DDP all-reduces its
            # used-parameter map from the autograd thread while PowerSGD's callbacks issue
            # all-reduces from gloo's threads, and the two can be ordered differently per rank.
            base = make_model().to(device)
            base.unused.requires_grad_(False)
            return torch.stack(train(wrap(state, base), steps, rank, world_size, device))

        baseline = grads_with(DistributedDataParallelKwargs())
        out = {}
        for hook, wrapper, options in combos:
            handler = DistributedDataParallelKwargs(
                comm_hook=hook,
                comm_wrapper=wrapper,
                comm_state_option=options,
            )
            diff = (grads_with(handler) - baseline).abs().max().item()
            out[f"{hook}+{wrapper}"] = diff
        return out
    finally:
        dist.destroy_process_group()


def composed_run(rank: int, steps: int) -> dict[str, Any]:
    """compose() with the process-group and DDP plugins, train, then tear the group down."""
    import accelkw_ddp.plugin
    import accelkw_process_group.plugin
    from accelkw_process_group import InitProcessGroupKwargs

    # Not ``from accelkw_core import compose``: once accelkw_core.testing has imported the submodule
    # accelkw_core.runtime.composing.composition, that name on the package is the module, not the
    # function.
    from accelkw_core.runtime.composing.composition import compose
    from accelkw_core.testing import isolated_registry

    state = RunState.from_env(cpu=True)
    registry = isolated_registry([accelkw_ddp.plugin, accelkw_process_group.plugin])
    # DDP first on purpose: its ``after`` constraint must put the process group first.
    applied = compose(
        state,
        [DistributedDataParallelKwargs(bucket_cap_mb=1), InitProcessGroupKwargs(backend="gloo")],
        registry=registry,
    )
    # find_unused_parameters is off here, so every parameter DDP sees must get a gradient.
    base = make_model()
    base.unused.requires_grad_(False)
    model = wrap(state, base)
    out: dict[str, Any] = {
        "order": [type(h).name for h in applied],
        "type": type(model).__name__,
        "bucket_bytes_cap": model.bucket_bytes_cap,
        "backend": str(dist.get_backend()),
    }
    train(model, steps, rank, dist.get_world_size())
    out["params"] = params_of(model.module)
    out["teardown_failures"] = [repr(exc) for _, exc in state.run_teardowns()]
    out["initialised_after_teardown"] = dist.is_initialized()
    out["log"] = state.summary()
    return out

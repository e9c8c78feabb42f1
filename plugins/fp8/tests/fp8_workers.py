"""Two-process fp8 runs for the multiprocess tests (spawned by ``run_workers``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 8),
    )


def train(rank: int, sharded: bool, folder: str | None = None) -> dict[str, Any]:
    """fp8 over DDP, or over FSDP2 (``sharded``): the losses, the converted layers, whether the
    converted weights changed, and (with ``folder``) a save and a load of the state."""
    import warnings

    import torch

    warnings.simplefilter("ignore")
    from accelkw_core import Accelerator
    from accelkw_core.discovery.registry import Registry

    plugins = ["fp8", "ddp", "process_group", "fsdp"]
    keywords: dict[str, Any] = {}
    if sharded:
        from accelkw_fsdp import FullyShardedDataParallelPlugin

        keywords["fsdp_plugin"] = FullyShardedDataParallelPlugin()
    accelerator = Accelerator(
        cpu=True, mixed_precision="fp8", registry=Registry(allow=plugins), **keywords
    )
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    bare = accelerator.unwrap_model(model)
    converted = [n for n, m in bare.named_modules() if type(m).__name__ == "Float8Linear"]
    before = accelerator.get_state_dict(model)
    g = torch.Generator().manual_seed(10 + rank)
    losses = []
    for _ in range(3):
        x, y = torch.randn(8, 32, generator=g), torch.randn(8, 8, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    after = accelerator.get_state_dict(model)
    changed = sorted(k for k in before if not torch.equal(before[k], after[k]))
    out: dict[str, Any] = {"losses": losses, "converted": converted, "changed": changed}
    if folder is not None:
        accelerator.save_state(Path(folder))
        accelerator.load_state(Path(folder))
        out["reloaded_equal"] = all(
            torch.equal(after[k], v) for k, v in accelerator.get_state_dict(model).items()
        )
    accelerator.end_training()
    return out

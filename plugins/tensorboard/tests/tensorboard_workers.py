"""The run the TensorBoard tests compare: Accelerate's by_feature/tracking.py in miniature.

Spawned by ``run_workers`` (one or two processes): each rank gets its own ``project_dir``
(``<root>/rank<r>``), so what a rank other than 0 writes would show as files in its folder.
``framework`` is ``"accelerate"`` (Accelerate 1.15's ``TensorBoardTracker``) or ``"accelkw"``
(this plugin), imported exactly as a ported script does.
"""

from __future__ import annotations

import os
from typing import Any

PROJECT = "tracking_example"
CONFIG = {"lr": 0.02, "num_epochs": 2, "seed": 42, "batch_size": 4}
EPOCHS, STEPS = 2, 3


def tracking_run(rank: int, framework: str, root: str) -> dict[str, Any]:
    """Train a tiny regression as by_feature/tracking.py does, logging through ``log_with``."""
    import torch

    project_dir = os.path.join(root, f"rank{rank}")
    if framework == "accelerate":
        from accelerate import Accelerator

        accelerator: Any = Accelerator(cpu=True, log_with="tensorboard", project_dir=project_dir)
    else:
        import accelkw_tensorboard.plugin

        from accelkw_core import Accelerator as Ours
        from accelkw_core.testing import isolated_registry

        accelerator = Ours(
            cpu=True,
            log_with="tensorboard",
            project_dir=project_dir,
            registry=isolated_registry([accelkw_tensorboard.plugin]),
        )
    accelerator.init_trackers(PROJECT, config=dict(CONFIG))
    torch.manual_seed(CONFIG["seed"])
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"])
    x = torch.randn(EPOCHS * STEPS, CONFIG["batch_size"], 2)
    y = x.sum(-1, keepdim=True) * 3 + 1
    overall_step = 0
    for epoch in range(EPOCHS):
        total_loss = 0.0
        for step in range(STEPS):
            loss = torch.nn.functional.mse_loss(model(x[overall_step]), y[overall_step])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            accelerator.log({"train_loss": loss.item(), "step_in_epoch": step}, step=overall_step)
            overall_step += 1
        accelerator.log(
            {"epoch_loss": total_loss / STEPS, "epoch": epoch, "note": f"epoch {epoch} done"},
            step=overall_step,
        )
    writer = accelerator.get_tracker("tensorboard", unwrap=True)
    accelerator.end_training()
    written = sorted(
        os.path.relpath(os.path.join(d, f), project_dir)
        for d, _, files in os.walk(project_dir)
        for f in files
    )
    return {
        "rank": rank,
        "writer": type(writer).__name__ if rank == 0 else None,
        "files": written,
    }

"""The run the MLflow tests compare: Accelerate's by_feature/tracking.py in miniature.

Spawned by ``run_workers`` (one or two processes), each rank in its own working directory and
with its own ``project_dir`` (``<root>/rank<r>``), so anything a rank other than 0 wrote would
show as files there. ``framework`` is ``"accelerate"`` (Accelerate 1.15's ``MLflowTracker``) or
``"accelkw"`` (this plugin), imported exactly as a ported script does.
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
    os.makedirs(project_dir, exist_ok=True)
    os.chdir(project_dir)  # MLflow's defaults are relative to the working directory
    if framework == "accelerate":
        from accelerate import Accelerator

        accelerator: Any = Accelerator(cpu=True, log_with="mlflow", project_dir=project_dir)
    else:
        import accelkw_mlflow.plugin

        from accelkw_core import Accelerator as Ours
        from accelkw_core.testing import isolated_registry

        accelerator = Ours(
            cpu=True,
            log_with="mlflow",
            project_dir=project_dir,
            registry=isolated_registry([accelkw_mlflow.plugin]),
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
        for _ in range(STEPS):
            loss = torch.nn.functional.mse_loss(model(x[overall_step]), y[overall_step])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            accelerator.log({"train_loss": loss.item()}, step=overall_step)
            overall_step += 1
        # The string is not a metric: both trackers leave it out.
        accelerator.log(
            {"epoch_loss": total_loss / STEPS, "epoch": epoch, "note": "done"}, step=overall_step
        )
    run = accelerator.get_tracker("mlflow", unwrap=True)
    run_id = run.info.run_id if rank == 0 else None
    accelerator.end_training()
    written = sorted(
        os.path.relpath(os.path.join(d, f), project_dir)
        for d, _, files in os.walk(project_dir)
        for f in files
    )
    return {"rank": rank, "run_id": run_id, "files": written}

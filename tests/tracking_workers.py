"""The runs the tracking tests compare under Accelerate 1.15 and accelkw (spawned by ``run_workers``).

``framework`` is ``"accelerate"`` or ``"accelkw"``; each program imports from it exactly as a
ported script does: ``Accelerator``, ``GeneralTracker`` and ``on_main_process``.
"""

from __future__ import annotations

import json
import os
from typing import Any

PROJECT = "tracking_example"
CONFIG = {"lr": 0.02, "num_epochs": 2, "seed": 42}
EPOCHS, STEPS = 2, 3


def framework(name: str) -> tuple[Any, Any, Any]:
    """``(Accelerator, GeneralTracker, on_main_process)`` of the framework ``name``."""
    if name == "accelerate":
        from accelerate import Accelerator
        from accelerate.tracking import GeneralTracker, on_main_process

        return Accelerator, GeneralTracker, on_main_process
    import functools

    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry
    from accelkw_core.tracking import GeneralTracker, on_main_process

    # No installed plugin takes part: the run is the core's tracking API alone.
    return (
        functools.partial(Accelerator, registry=isolated_registry()),
        GeneralTracker,
        on_main_process,
    )


def tracker_classes(base: Any, on_main_process: Any) -> tuple[type, type]:
    """Two custom trackers as a user writes them: one main-process only, one on every process."""

    class JsonLines(base):  # type: ignore[misc, valid-type]
        name = "jsonl"
        requires_logging_directory = False

        def __init__(self, path: str) -> None:
            super().__init__()
            self.path = path
            self.calls: list[Any] = []

        @property
        def tracker(self) -> list[Any]:
            return self.calls

        @on_main_process
        def start(self) -> None:
            self.calls.append(["start"])

        @on_main_process
        def store_init_configuration(self, values: dict[str, Any]) -> None:
            self.calls.append(["config", values])

        @on_main_process
        def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
            self.calls.append(["log", values, step, kwargs])
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(json.dumps([step, values]) + "\n")

        @on_main_process
        def finish(self) -> None:
            self.calls.append(["finish"])

    class EveryProcess(JsonLines):
        name = "every"
        main_process_only = False

    return JsonLines, EveryProcess


def custom_tracker_run(rank: int, name: str, root: str) -> dict[str, Any]:
    """by_feature/tracking.py with two custom GeneralTrackers: what each tracker saw, per rank."""
    import torch

    Accelerator, base, on_main_process = framework(name)
    jsonl_cls, every_cls = tracker_classes(base, on_main_process)
    jsonl = jsonl_cls(os.path.join(root, f"jsonl-rank{rank}.txt"))
    every = every_cls(os.path.join(root, f"every-rank{rank}.txt"))
    accelerator = Accelerator(cpu=True, log_with=[jsonl, every])
    accelerator.init_trackers(PROJECT, config=dict(CONFIG))
    torch.manual_seed(CONFIG["seed"])
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"])
    x = torch.randn(EPOCHS * STEPS, 4, 2)
    y = x.sum(-1, keepdim=True)
    overall_step = 0
    for epoch in range(EPOCHS):
        for _ in range(STEPS):
            loss = torch.nn.functional.mse_loss(model(x[overall_step]), y[overall_step])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            accelerator.log({"train_loss": round(loss.item(), 6)}, step=overall_step)
            overall_step += 1
        accelerator.log(
            {"epoch": epoch}, step=overall_step, log_kwargs={"jsonl": {"phase": "eval"}}
        )
    got = accelerator.get_tracker("jsonl")
    unwrapped = accelerator.get_tracker("jsonl", unwrap=True)
    try:
        accelerator.get_tracker("nope")
        missing = "no error"
    except ValueError as exc:
        missing = type(exc).__name__
    accelerator.end_training()
    files = sorted(f for f in os.listdir(root) if f.endswith(f"rank{rank}.txt"))
    return {
        "trackers": [t.name for t in accelerator.trackers],
        "get_tracker": type(got).__name__,
        "unwrapped": unwrapped if isinstance(unwrapped, list) else type(unwrapped).__name__,
        "missing": missing,
        "jsonl": jsonl.calls,
        "every": every.calls,
        "files": files,
    }


def mlflow_default_store(rank: int, name: str, root: str) -> list[str]:
    """A run logged to MLflow with ``project_dir="logs"`` and no tracking URI set: the files made."""
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.makedirs(root, exist_ok=True)
    os.chdir(root)
    if name == "accelerate":
        from accelerate import Accelerator

        accelerator: Any = Accelerator(cpu=True, log_with="mlflow", project_dir="logs")
    else:
        import accelkw_mlflow.plugin

        from accelkw_core import Accelerator as Ours
        from accelkw_core.testing import isolated_registry

        accelerator = Ours(
            cpu=True,
            log_with="mlflow",
            project_dir="logs",
            registry=isolated_registry([accelkw_mlflow.plugin]),
        )
    accelerator.init_trackers(PROJECT)
    accelerator.log({"loss": 0.5}, step=1)
    accelerator.end_training()
    return sorted(
        os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
    )


def all_installed_run(rank: int, root: str) -> dict[str, Any]:
    """``log_with="all"`` with the installed trackers (read from the entry points)."""
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.chdir(root)
    from accelkw_core import Accelerator
    from accelkw_core.discovery.registry import Registry

    registry = Registry(allow=["tensorboard", "mlflow"])
    accelerator = Accelerator(cpu=True, log_with="all", project_dir="logs", registry=registry)
    accelerator.init_trackers(PROJECT, config={"lr": 0.5})
    for step in range(3):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    run = accelerator.get_tracker("mlflow", unwrap=True)
    out = {
        "log_with": list(accelerator.log_with),
        "trackers": [type(t).__name__ for t in accelerator.trackers],
        "run_id": run.info.run_id,
    }
    accelerator.end_training()
    return out

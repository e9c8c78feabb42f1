"""accelkw's ``Accelerator`` inside Ray Train: Ray starts the workers, accelkw trains.

``ray.train.torch.TorchTrainer`` starts the workers, sets up their process group (gloo on CPU,
NCCL on GPUs) and restarts the whole group when a worker dies (``FailureConfig``). Inside each
worker the training loop is an ordinary Accelerate-style loop (only the imports name accelkw):

- ``Accelerator()`` uses the process group Ray initialised as it is (it initialises none) and
  takes the device Ray chose (``ACCELERATE_TORCH_DEVICE``); DDP, or FSDP2 with ``--fsdp``,
  wraps the model in ``prepare``.
- Every ``--save-every`` steps, ``save_state`` writes a checkpoint into a folder every worker
  can reach, and ``ray.train.report(..., checkpoint=Checkpoint.from_directory(folder))`` hands
  it to Ray (rank 0 passes the folder, the others ``None``: the folder is one checkpoint).
- At start, ``ray.train.get_checkpoint()`` is the newest reported checkpoint after a restart;
  ``load_state`` resumes from it, and the loop skips the steps already taken. A resumed run
  ends with the weights of a run nobody interrupted, bit for bit.

Run it (a local Ray cluster of 2 CPU workers)::

    python examples/ray/train.py --storage /tmp/ray-run --out /tmp/ray-run/final.pt

Rank 0 writes the final weights to ``--out`` and what the run did beside them (``OUT.json``: Ray's
process group kept, the model's wrapper, the step a restart resumed at).
``--fail-at-step N`` kills worker 1 with SIGKILL at step ``N`` of the first attempt, to watch
Ray restart the group and the run resume (tests/test_ray_train.py does, and compares the
weights with an uninterrupted run's).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
from collections.abc import Sequence
from typing import Any

import torch

from accelkw_core import Accelerator


def train_loop(config: dict[str, Any]) -> None:
    """What every Ray worker runs."""
    import ray.train
    import torch.distributed as dist

    group = dist.group.WORLD  # the process group Ray set up
    kwargs: dict[str, Any] = {}
    if config["fsdp"]:
        from accelkw_core.utils import FullyShardedDataParallelPlugin

        kwargs["fsdp_plugin"] = FullyShardedDataParallelPlugin(fsdp_version=2)
    torch.manual_seed(0)  # the initial weights: the same in every worker and every attempt
    accelerator = Accelerator(**kwargs)
    facts: dict[str, Any] = {"process_group_kept": dist.group.WORLD is group}
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(config["samples"], 8, generator=generator)
    y = (x @ torch.linspace(-1, 1, 8)).unsqueeze(1)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=config["batch_size"]
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    facts["model"] = type(model).__name__  # DistributedDataParallel, or FSDP2's sharded class
    facts["sharded"] = type(next(model.parameters())).__name__ == "DTensor"
    # The optimizer steps taken, saved and loaded with each checkpoint: a module's buffer.
    progress = torch.nn.Module()
    progress.register_buffer("step", torch.zeros((), dtype=torch.long))
    accelerator.register_for_checkpointing(progress)

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            accelerator.load_state(folder)
        accelerator.print(f"resumed at step {int(progress.step)}")
        facts["resumed_at"] = int(progress.step)
    first_epoch, done = divmod(int(progress.step), len(loader))
    for epoch in range(first_epoch, config["epochs"]):
        for i, (xb, yb) in enumerate(loader):
            if epoch == first_epoch and i < done:
                continue  # taken before the checkpoint
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            progress.step += 1
            step = int(progress.step)
            _maybe_fail(config, step, accelerator.process_index)
            if step % config["save_every"] == 0:
                _save_and_report(accelerator, config, step, loss.item())
    accelerator.wait_for_everyone()
    state = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        torch.save(state, config["out"])
        with open(config["out"] + ".json", "w") as fh:
            json.dump(facts | {"steps": int(progress.step)}, fh)  # what the run did, for a look
    accelerator.end_training()


def _save_and_report(
    accelerator: Accelerator, config: dict[str, Any], step: int, loss: float
) -> None:
    import ray.train
    from ray.train import Checkpoint

    folder = os.path.join(config["scratch"], f"step_{step}")
    accelerator.save_state(folder)
    checkpoint = Checkpoint.from_directory(folder) if accelerator.is_main_process else None
    ray.train.report({"step": step, "loss": loss}, checkpoint=checkpoint)


def _maybe_fail(config: dict[str, Any], step: int, rank: int) -> None:
    """Kill worker 1 at ``fail_at_step`` of the first attempt (a marker file says it happened)."""
    marker = os.path.join(config["scratch"], "failed-once")
    if step == config["fail_at_step"] and rank == 1 and not os.path.exists(marker):
        with open(marker, "w") as fh:
            fh.write(str(step))
        os.kill(os.getpid(), signal.SIGKILL)


def fit(config: dict[str, Any], storage: str, *, name: str, workers: int = 2) -> Any:
    """Run ``train_loop`` on ``workers`` Ray workers; a failed group is restarted once when
    ``config["fail_at_step"]`` asks for a failure. Returns Ray's ``Result``."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(
        train_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=torch.cuda.is_available()),
        run_config=RunConfig(
            name=name,
            storage_path=storage,
            failure_config=FailureConfig(max_failures=1 if config["fail_at_step"] else 0),
        ),
    )
    return trainer.fit()


def make_config(storage: str, out: str, **given: Any) -> dict[str, Any]:
    """The loop's settings (``given`` overrides the defaults), with a scratch folder under
    ``storage`` for the checkpoints ``save_state`` writes before Ray keeps them."""
    config: dict[str, Any] = {
        "epochs": 3,
        "samples": 48,
        "batch_size": 4,
        "save_every": 4,
        "fsdp": False,
        "fail_at_step": 0,
    }
    config.update(given)
    config["out"] = os.path.abspath(out)
    config["scratch"] = tempfile.mkdtemp(prefix="scratch-", dir=storage)
    return config


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", required=True, help="Ray's storage_path (checkpoints)")
    parser.add_argument("--out", required=True, help="file for the final weights")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save-every", type=int, default=4, help="steps between checkpoints")
    parser.add_argument("--fsdp", action="store_true", help="shard the model with FSDP2")
    parser.add_argument("--fail-at-step", type=int, default=0, help="kill worker 1 once, there")
    args = parser.parse_args(argv)

    import ray

    storage = os.path.abspath(args.storage)
    os.makedirs(storage, exist_ok=True)
    # A small local cluster: a CPU for each worker and one for Ray's controller, 100 MB of
    # object store (the checkpoints go through the file system, not the object store).
    ray.init(
        num_cpus=args.workers + 1, object_store_memory=100 * 1024 * 1024, include_dashboard=False
    )
    config = make_config(
        storage,
        args.out,
        epochs=args.epochs,
        save_every=args.save_every,
        fsdp=args.fsdp,
        fail_at_step=args.fail_at_step,
    )
    result = fit(config, storage, name="accelkw", workers=args.workers)
    print(f"done: step {result.metrics.get('step')}, checkpoint {result.checkpoint}")
    ray.shutdown()


if __name__ == "__main__":
    main()

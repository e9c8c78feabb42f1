"""Training that survives killed workers: resume from the newest checkpoint after a restart.

Run it under the launcher's elastic restart; when a worker dies, every worker is restarted and
the script carries on from its newest complete checkpoint, ending with the weights an
uninterrupted run would have::

    accelkw launch --nproc-per-node 2 --max-restarts 3 examples/resume/train.py \
        --project-dir run --out run/final

The pattern, written with Accelerate's calls (only the imports name accelkw):

1. ``ProjectConfiguration(project_dir=..., automatic_checkpoint_naming=True, total_limit=2)``:
   ``save_state()`` writes ``run/checkpoints/checkpoint_<i>``, whole or not at all, keeping
   the newest two.
2. The position in the run (the optimizer steps taken) is an object registered with
   ``register_for_checkpointing``, so it is saved and restored with the weights.
3. At start, ``load_state()`` loads the newest complete checkpoint; with none there yet it
   raises ``FileNotFoundError`` and the run starts fresh.
4. The loop starts at the saved position: the epoch, then the batches of that epoch already
   used are skipped. The data order is fixed by the seed and the epoch alone (a sampler that
   draws each epoch's order from ``seed + epoch``), so a resumed epoch sees the batches it
   would have seen.

tests/test_restarts.py kills workers with SIGKILL at chosen moments (during a save, between
saves, just after one) and checks that the final weights equal an uninterrupted run's, bit for
bit, with ``--async-saves`` too (``AsyncCheckpointKwargs``: each save written in the background
while training goes on). ``main`` takes two optional arguments for those tests: objects to register with the run and
a function called after each step; a training script needs neither.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from accelkw_core import Accelerator
from accelkw_core.utils import ProjectConfiguration


class Progress:
    """The optimizer steps taken, saved with each checkpoint (``register_for_checkpointing``)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = int(state["step"])


class EpochShuffle(torch.utils.data.Sampler[int]):  # type: ignore[misc]
    """A random order of ``n`` samples drawn from ``seed + epoch``: the same in every process,
    and the same again when the epoch is resumed (``set_epoch`` is called by the loader)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=generator).tolist())


def dataset(n: int, seed: int) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    y = (x @ torch.linspace(-1, 1, 8)).unsqueeze(1) + 0.1 * torch.randn(n, 1, generator=generator)
    return torch.utils.data.TensorDataset(x, y)


def main(
    argv: Sequence[str] | None = None,
    *,
    checkpointed: Sequence[Any] = (),
    after_step: Callable[[int, bool], None] | None = None,
) -> None:
    """Train, saving every ``--save-every`` steps and resuming from the newest checkpoint.

    ``checkpointed``: more objects to save with the run; ``after_step(step, saved)``: called
    after each optimizer step (and its save, when ``saved``).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project-dir", required=True, help="where checkpoints/ is kept")
    parser.add_argument("--out", required=True, help="folder for the final weights")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--save-every", type=int, default=4, help="steps between checkpoints")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU")
    parser.add_argument(
        "--async-saves",
        action="store_true",
        help="save in the background (accelkw-async-checkpoint): save_state returns once staged",
    )
    args = parser.parse_args(argv)

    torch.manual_seed(0)  # the initial weights: the same in every process and every attempt
    handlers = []
    if args.async_saves:  # imported only then: the plugin (accelkw-async-checkpoint) is optional
        from accelkw_core.utils import AsyncCheckpointKwargs

        handlers.append(AsyncCheckpointKwargs())
    accelerator = Accelerator(
        cpu=args.cpu,
        kwargs_handlers=handlers,
        project_config=ProjectConfiguration(
            project_dir=args.project_dir, automatic_checkpoint_naming=True, total_limit=2
        ),
    )
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.8)
    data = dataset(args.samples, seed=1)
    loader = torch.utils.data.DataLoader(
        data, batch_size=args.batch_size, sampler=EpochShuffle(len(data), seed=2)
    )
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    progress = Progress()
    accelerator.register_for_checkpointing(progress, *checkpointed)

    # torchrun counts the restarts of the worker group; 0 on the first attempt.
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    try:
        accelerator.load_state()
        accelerator.print(f"resumed at step {progress.step} (restart {restart})")
    except FileNotFoundError:
        accelerator.print(f"no checkpoint yet: starting fresh (restart {restart})")

    steps_per_epoch = len(loader)
    first_epoch, done_in_epoch = divmod(progress.step, steps_per_epoch)
    model.train()
    for epoch in range(first_epoch, args.epochs):
        loader.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            if epoch == first_epoch and i < done_in_epoch:
                continue  # used before the checkpoint was saved
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            progress.step += 1
            saved = progress.step % args.save_every == 0
            if saved:
                accelerator.save_state()
            if after_step is not None:
                after_step(progress.step, saved)

    accelerator.wait_for_everyone()
    accelerator.save_model(model, args.out)
    accelerator.print(f"done: {progress.step} steps")
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""A training script with streamed loaders and an evaluated one, for tests/test_data_resumes.py.

Each epoch trains one model on an ``IterableDataset`` (deterministic, reordered by ``set_epoch``)
dispatched from the main process, under ``accumulate``; one on a second stream that every
process reads, keeping its share (``dispatch_batches=False``; the dataset draws its order from
its own ``generator``); and one on a shuffled map-style loader, then evaluates the last over an
evaluation loader (whose pass draws from torch's generator, as every pass does), as a Hugging
Face ``*_no_trainer.py`` script does. The models have dropout, so any difference in torch's
generator shows in the weights. The uninterrupted run saves ``epoch_0`` after the first epoch's
evaluation, ``mid`` inside the second epoch's dispatched stream and ``mid_sharded`` inside its
sharded one; the resumed runs start from each. At its end it checks that a dispatched stream
that cannot be cut or read fails on every process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

EPOCHS = 2
MID = 2  # batches of the second epoch's stream before the ``mid`` checkpoint (a sync step)


class Stream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """13 fixed samples in an order drawn from ``seed + epoch`` (as a streaming shuffle does)."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(5)
        self.x = torch.randn(13, 4, generator=generator)
        self.y = torch.randn(13, 1, generator=generator)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        order = torch.randperm(13, generator=torch.Generator().manual_seed(100 + self.epoch))
        return ((self.x[i], self.y[i]) for i in order.tolist())


class SeededStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """The same samples in an order drawn from its own ``generator``, with no ``set_epoch``: a
    sharded loader seeds that generator with the epoch at each pass (Accelerate's rule)."""

    def __init__(self) -> None:
        self.samples = Stream()
        self.generator = torch.Generator()

    def __iter__(self) -> Any:
        x, y = self.samples.x, self.samples.y
        order = torch.randperm(13, generator=self.generator)
        return ((x[i], y[i]) for i in order.tolist())


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.ReLU(), torch.nn.Linear(8, 1)
    )


def train(rank: int, folder: str, resume: str | None) -> dict[str, Any]:
    """Train; the final weights, the dispatched stream's sync flags per epoch, the refusals."""
    from accelkw_core import Accelerator
    from accelkw_core.discovery.registry import Registry
    from accelkw_core.utils import DataLoaderConfiguration, set_seed

    accelerator = Accelerator(
        cpu=True,
        gradient_accumulation_steps=2,
        registry=Registry(allow=["ddp", "process_group", "grad_accum"]),
    )
    set_seed(11)
    streamed, shuffled, sharded = _model(), _model(), _model()
    opt_a = torch.optim.SGD(streamed.parameters(), lr=0.05)
    opt_b = torch.optim.SGD(shuffled.parameters(), lr=0.05)
    opt_c = torch.optim.SGD(sharded.parameters(), lr=0.05)
    table = torch.utils.data.TensorDataset(torch.randn(22, 4), torch.randn(22, 1))
    stream = torch.utils.data.DataLoader(Stream(), batch_size=2)
    train_loader = torch.utils.data.DataLoader(table, batch_size=3, shuffle=True)
    eval_loader = torch.utils.data.DataLoader(table, batch_size=4)
    streamed, shuffled, opt_a, opt_b, stream, train_loader, eval_loader = accelerator.prepare(
        streamed, shuffled, opt_a, opt_b, stream, train_loader, eval_loader
    )
    # A second stream read by every process, each keeping its share (not dispatched).
    accelerator.dataloader_config = DataLoaderConfiguration(dispatch_batches=False)
    sharded, opt_c, shards = accelerator.prepare(
        sharded, opt_c, torch.utils.data.DataLoader(SeededStream(), batch_size=2)
    )
    start, skip_a, skip_c = 0, 0, 0
    if resume is not None:
        accelerator.load_state(str(Path(folder) / resume))
        # Where each stream of the second epoch was when the checkpoint was saved.
        start, skip_a, skip_c = {"epoch_0": (1, 0, 0), "mid": (1, MID, 0)}.get(
            resume, (1, None, MID)
        )
    synced: list[list[bool]] = []
    for epoch in range(start, EPOCHS):
        streamed.train()
        shuffled.train()
        flags = []
        source = accelerator.skip_first_batches(stream, skip_a) if skip_a else stream
        for step, (x, y) in enumerate(source if skip_a is not None else (), start=skip_a or 0):
            with accelerator.accumulate(streamed):
                accelerator.backward(torch.nn.functional.mse_loss(streamed(x), y))
                opt_a.step()
                opt_a.zero_grad()
            flags.append(accelerator.sync_gradients)
            if resume is None and epoch == 1 and step == MID - 1:
                accelerator.save_state(str(Path(folder) / "mid"))
        source = accelerator.skip_first_batches(shards, skip_c) if skip_c else shards
        for step, (x, y) in enumerate(source, start=skip_c):
            accelerator.backward(torch.nn.functional.mse_loss(sharded(x), y))
            opt_c.step()
            opt_c.zero_grad()
            if resume is None and epoch == 1 and step == MID - 1:
                accelerator.save_state(str(Path(folder) / "mid_sharded"))
        skip_a, skip_c = 0, 0
        synced.append(flags)
        for x, y in train_loader:
            accelerator.backward(torch.nn.functional.mse_loss(shuffled(x), y))
            opt_b.step()
            opt_b.zero_grad()
        shuffled.eval()
        with torch.no_grad():
            for x, _ in eval_loader:
                accelerator.gather_for_metrics(shuffled(x))
        if resume is None and epoch == 0:
            accelerator.save_state(str(Path(folder) / "epoch_0"))
    weights = [
        p.detach().clone()
        for model in (streamed, shuffled, sharded)
        for p in accelerator.unwrap_model(model).parameters()
    ]
    refused = _dispatch_refusals(accelerator) if resume is None else []
    accelerator.end_training()
    return {"weights": [w.tolist() for w in weights], "synced": synced, "refused": refused}


class Words(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Strings, which a default collate leaves as lists: nothing to cut among processes."""

    def __iter__(self) -> Any:
        return iter(["a", "b", "c", "d"])


def _dispatch_refusals(accelerator: Any) -> list[str]:
    """This process's error for a stream of strings dispatched, then for one that raises."""
    accelerator.dataloader_config = type(accelerator.dataloader_config)()
    errors = []
    for dataset in (Words(), Broken()):
        loader = accelerator.prepare(torch.utils.data.DataLoader(dataset, batch_size=2))
        try:
            list(loader)
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}")
    return errors


class Broken(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """A stream whose reading fails on its second sample."""

    def __iter__(self) -> Any:
        yield torch.zeros(1)
        raise OSError("the shard went away")

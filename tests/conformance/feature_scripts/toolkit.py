"""What the feature scripts share: synthetic data, tiny models, a metric, the common loops.

Nothing here imports the framework under test: the scripts do, and pass their ``Accelerator`` to
the two loops here that most of them run (:func:`train_epoch`, :func:`evaluate`). Every row is drawn from a fixed ``random.Random`` (never the global generators the
scripts seed), so both frameworks see the same data; every model is initialised from torch's
global generator, which the scripts seed, and is kept in :data:`MODELS` so the runner can digest
its final weights.

- token rows: ``{"tokens": [...], "label": 0 or 1}``, 3 to 9 tokens over :data:`VOCAB` ids (0 is
  padding); the label says whether even ids outnumber odd ones. :func:`pad` collates them.
- :class:`BagOfTokens`: mean of embeddings, a linear layer; returns ``{"logits", "loss"}``.
- :class:`NextToken`: a causal model as small as one gets (an embedding, a running mean of the
  embeddings so far, a linear head); its loss is a sum over the tokens it is told to count, divided
  by a number the caller gives, as a token-normalised loss is.
- picture rows: ``{"pixels": 3x12x12 float, "label": 0..2}`` with a bright square whose corner
  names the class; :class:`SquareNet` is a strided convolution and a linear head.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import torch

VOCAB = 20
MODELS: list[torch.nn.Module] = []


def parser() -> argparse.ArgumentParser:
    """The command line every script takes: ``--cpu`` and ``--mixed_precision``, as Accelerate's
    examples do; a script adds its own options."""
    made = argparse.ArgumentParser()
    made.add_argument("--cpu", action="store_true")
    made.add_argument("--mixed_precision", default=None)
    return made


def token_loaders(
    train: int, held: int, seed: int, batch_size: int, held_batch_size: int
) -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    """A shuffled loader of ``train`` token rows (from ``seed``) and one of ``held`` rows (from
    ``seed + 1``), both collated by :func:`pad`."""
    loader = torch.utils.data.DataLoader
    return (
        loader(token_rows(train, seed), batch_size, shuffle=True, collate_fn=pad),
        loader(token_rows(held, seed + 1), held_batch_size, collate_fn=pad),
    )


def token_rows(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        tokens = [rng.randrange(1, VOCAB) for _ in range(rng.randint(3, 9))]
        even = sum(1 for t in tokens if t % 2 == 0)
        rows.append({"tokens": tokens, "label": int(2 * even > len(tokens))})
    return rows


def _padded(rows: list[dict[str, Any]]) -> torch.Tensor:
    """The rows' token ids, padded with 0 to the longest row."""
    width = max(len(row["tokens"]) for row in rows)
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row["tokens"])] = torch.tensor(row["tokens"])
    return tokens


def pad(rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """A batch of token rows: ids padded with 0 to the longest row, and the labels."""
    return {"tokens": _padded(rows), "labels": torch.tensor([row["label"] for row in rows])}


class BagOfTokens(torch.nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, width, padding_idx=0)
        self.head = torch.nn.Linear(width, 2)
        MODELS.append(self)

    def forward(
        self, tokens: torch.Tensor, labels: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        mask = (tokens != 0).unsqueeze(-1).float()
        pooled = (self.embed(tokens) * mask).sum(1) / mask.sum(1).clamp(min=1)
        logits = self.head(pooled)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


def sequence_rows(count: int, seed: int) -> list[dict[str, Any]]:
    """Rows for :class:`NextToken`: every third one is empty (only padding counts there)."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        length = 0 if i % 3 == 2 else rng.randint(2, 8)
        rows.append({"tokens": [rng.randrange(1, VOCAB) for _ in range(length)] or [0]})
    return rows


def shift(rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Inputs and next-token targets; a target of -100 (padding, the end) is not counted."""
    tokens = _padded(rows)
    targets = torch.full_like(tokens, -100)
    targets[:, :-1] = torch.where(tokens[:, 1:] == 0, -100, tokens[:, 1:])
    return {"tokens": tokens, "targets": targets}


class NextToken(torch.nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.mix = torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, VOCAB)
        MODELS.append(self)

    def forward(
        self, tokens: torch.Tensor, targets: torch.Tensor, counted: float | None = None
    ) -> torch.Tensor:
        """The summed cross-entropy over counted targets, divided by ``counted`` (default: their
        number here)."""
        seen = self.embed(tokens).cumsum(1) / torch.arange(1, tokens.shape[1] + 1)[:, None]
        logits = self.head(torch.tanh(self.mix(seen)))
        total = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum"
        )
        return total / (counted if counted is not None else (targets != -100).sum().clamp(min=1))


def picture_rows(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        label = rng.randrange(3)
        pixels = torch.rand(3, 12, 12, generator=generator) * 0.5
        top, left = [(0, 0), (0, 6), (6, 0)][label]
        pixels[:, top : top + 6, left : left + 6] += 0.5
        rows.append({"pixels": pixels, "label": label})
    return rows


class Jitter:
    """A training transform: shifts the picture by up to one pixel, drawn from torch's generator
    (as image augmentations draw), so the scripts' seeding of it matters."""

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        dy, dx = (int(v) for v in torch.randint(-1, 2, (2,)))
        return {"pixels": torch.roll(row["pixels"], (dy, dx), dims=(1, 2)), "label": row["label"]}


class Transformed(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, rows: list[dict[str, Any]], transform: Any = None) -> None:
        self.rows, self.transform = rows, transform

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = self.rows[index]
        return self.transform(row) if self.transform else row


class SquareNet(torch.nn.Module):
    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, kernel_size=6, stride=6)
        self.head = torch.nn.Linear(16, classes)
        MODELS.append(self)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(pixels)).flatten(1))


def scores(predictions: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Accuracy and, for two classes, the F1 of class 1."""
    hits = predictions == labels
    out = {"accuracy": round(hits.float().mean().item(), 6)}
    if int(labels.max()) <= 1:
        tp = int((hits & (labels == 1)).sum())
        wrong = int((~hits).sum())
        out["f1"] = round(2 * tp / (2 * tp + wrong), 6) if tp else 0.0
    return out


def optimizer_and_schedule(model: torch.nn.Module, steps: int, lr: float = 0.05) -> tuple[Any, Any]:
    """AdamW and a learning rate falling linearly towards zero over ``steps``."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / (steps + 1))
    return optimizer, schedule


def train_epoch(accelerator: Any, model: Any, optimizer: Any, schedule: Any, loader: Any) -> float:
    """One pass over ``loader``; the mean of this process's losses."""
    model.train()
    losses = []
    for batch in loader:
        loss = model(**batch)["loss"]
        accelerator.backward(loss)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return round(sum(losses) / max(len(losses), 1), 6)


def evaluate(accelerator: Any, model: Any, loader: Any) -> dict[str, float]:
    """The scores of ``model`` on every row of ``loader`` once (``gather_for_metrics``)."""
    model.eval()
    predicted, expected = [], []
    for batch in loader:
        with torch.no_grad():
            logits = model(batch["tokens"])["logits"]
        guesses, labels = accelerator.gather_for_metrics((logits.argmax(-1), batch["labels"]))
        predicted.append(guesses)
        expected.append(labels)
    result = scores(torch.cat(predicted), torch.cat(expected))
    result["rows"] = len(torch.cat(expected))
    return result

"""Training loops shaped like transformers' and diffusers' no-trainer scripts, for
tests/test_draw_resumes.py; run with ``accelkw launch --cpu --nproc-per-node N`` as
``draw_resume_script.py FOLDER``.

Three shapes, each drawing randomness where the real scripts do, with a dropout model so that
any difference in torch's generator shows in the weights:

- ``mlm`` (run_mlm_no_trainer.py): the collate function masks tokens
  (``DataCollatorForLanguageModeling`` over a word-level tokenizer built here, drawing from
  torch's global generator); the run saves ``step_N`` inside the loop every few steps; the
  resumed run loads one and skips the pass's done batches with ``skip_first_batches`` (the
  script's arithmetic), or (``mlm_continue``) iterates the loader and passes over them
  (``continue``), as older scripts do; ``mlm_stream`` streams the lines (an
  ``IterableDataset``, dispatched from the main process by default); ``mlm_noise``'s collate
  function also draws from NumPy's and Python's generators.
- ``clm`` (run_clm_no_trainer.py, gradient accumulation 2): the run leaves the loop with
  ``break`` at ``max_train_steps`` in the middle of a pass and saves after the loop; the
  resumed run, with a larger ``max_train_steps``, continues by the script's arithmetic.
- ``mlm_eval``: the mlm loop evaluating two batches after each epoch (leaving the evaluation
  loader's pass with ``break``) and saving ``epoch_N`` after it; resumed at the next epoch.
- ``workers`` (diffusers' image scripts): two worker processes, each sample given a random
  transform in ``__getitem__`` (torch, NumPy and Python draws), saved mid-pass after a batch
  that starts a round of workers and after one that does not.

Each run starts as a fresh process would (seeded, new objects prepared); the uninterrupted run
and every stopped-then-resumed pair run in this process, one after the other. Writes
``FOLDER/result_<rank>.json``: per case, the batches each run saw and the final weights.
``draw_resume_script.py FOLDER accelerate CASE...`` runs the named cases under Accelerate
(tests/conformance/test_draw_resumes.py).
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

VOCAB = [f"w{i}" for i in range(12)]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL + VOCAB)}
    model = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=model,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


class Texts(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """24 tokenized lines of 6 words (what ``tokenize_function`` and ``group_texts`` give)."""

    def __init__(self, tokenizer: Any) -> None:
        words = torch.randint(0, len(VOCAB), (24, 6), generator=torch.Generator().manual_seed(3))
        self.rows = [tokenizer(" ".join(VOCAB[i] for i in row.tolist())) for row in words]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return {"input_ids": list(self.rows[i]["input_ids"])}


class Images(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """24 "images" of 4 values, each read with a random flip, jitter and crop offset."""

    def __init__(self) -> None:
        self.pixels = torch.randn(24, 4, generator=torch.Generator().manual_seed(4))

    def __len__(self) -> int:
        return len(self.pixels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = self.pixels[i]
        if torch.rand(()) < 0.5:  # torchvision's RandomHorizontalFlip draws from torch
            x = x.flip(0)
        jitter = float(np.random.uniform(-0.1, 0.1))  # an augmentation library's NumPy draw
        shift = random.randint(0, 3)  # a crop offset from Python's generator
        return {"pixel_values": x.roll(shift) + jitter}


class TextStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """The same lines streamed in order (a streaming dataset): dispatched by default."""

    def __init__(self, tokenizer: Any) -> None:
        self.texts = Texts(tokenizer)

    def __len__(self) -> int:  # the scripts' step arithmetic needs it
        return len(self.texts)

    def __iter__(self) -> Any:
        return (self.texts[i] for i in range(len(self.texts)))


class WithNoise:
    """A collate function that also draws from NumPy's and Python's generators (a noise level,
    as an augmentation library would), in the main process."""

    def __init__(self, collate_fn: Any) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> Any:
        batch = self.collate_fn(samples)
        batch["noise"] = torch.tensor([float(np.random.uniform()), random.random()])
        return batch


class AsDict:
    """A collate function's ``BatchEncoding`` as a plain dict (what a dispatched batch holds)."""

    def __init__(self, collate_fn: Any) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> dict[str, torch.Tensor]:
        return dict(self.collate_fn(samples))


def _model(inputs: int, outputs: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(inputs, 16),
        torch.nn.Dropout(0.3),
        torch.nn.ReLU(),
        torch.nn.Linear(16, outputs),
    )


def _flat(batch: dict[str, torch.Tensor]) -> list[float]:
    return [float(v) for key in sorted(batch) for v in batch[key].flatten().tolist()]


def run(
    acc: Any,
    case: str,
    folder: Path,
    *,
    max_steps: int,
    save_every: int | None = None,
    save_after: bool = False,
    save_epochs: bool = False,
    resume: str | None = None,
) -> tuple[list[list[float]], list[float]]:
    """One run of ``case``: the batches it trained on and its final weights.

    It stops after ``max_steps`` optimizer steps (``break``), saving every ``save_every`` steps
    inside the loop, or once after it (``save_after``), or after each epoch's evaluation
    (``save_epochs``); with ``resume``, it starts from that checkpoint of ``folder``.
    """
    from accelkw_core.utils import set_seed

    acc.free_memory()
    set_seed(7)
    accumulation = 2 if case == "clm" else 1
    acc.gradient_accumulation_steps = accumulation
    if case == "workers":
        loader = torch.utils.data.DataLoader(Images(), batch_size=2, shuffle=True, num_workers=2)
        model = _model(4, 1)
    else:
        from transformers import DataCollatorForLanguageModeling

        tokenizer = _tokenizer()
        collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.3)
        if case == "mlm_stream":
            loader = torch.utils.data.DataLoader(
                TextStream(tokenizer), batch_size=2, collate_fn=AsDict(collator)
            )
        else:
            loader = torch.utils.data.DataLoader(
                Texts(tokenizer),
                batch_size=2,
                shuffle=True,
                collate_fn=WithNoise(collator) if case == "mlm_noise" else collator,
            )
        model = _model(17, 8)
        # Evaluated with the same collate function, as run_mlm_no_trainer.py does, for two
        # batches (a script's max_eval_steps: the loop leaves the pass with ``break``).
        evaluation = torch.utils.data.DataLoader(
            Texts(tokenizer), batch_size=2, collate_fn=collator
        )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    if case == "mlm_eval":
        evaluation = acc.prepare(evaluation)
    per_epoch = math.ceil(len(loader) / accumulation)
    epochs = math.ceil(max_steps / per_epoch)
    completed, start, resume_step = 0, 0, None
    if resume is not None:
        # The scripts' own arithmetic on the checkpoint's name.
        acc.load_state(str(folder / resume))
        if resume.startswith("epoch_"):
            start = int(resume.replace("epoch_", "")) + 1
            completed = start * per_epoch
        else:
            resume_step = int(resume.replace("step_", "")) * accumulation
            start = resume_step // len(loader)
            completed = resume_step // accumulation
            resume_step -= start * len(loader)
    seen: list[list[float]] = []
    for epoch in range(start, epochs):
        model.train()
        active = loader
        skip = resume_step if resume is not None and epoch == start else None
        if skip and case != "mlm_continue":
            active = acc.skip_first_batches(loader, skip)
        for step, batch in enumerate(active):
            if case == "mlm_continue" and skip and step < skip:
                continue
            with acc.accumulate(model):
                if case == "workers":
                    x = batch["pixel_values"]
                    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
                else:
                    x = torch.nn.functional.one_hot(batch["input_ids"], 17).float()
                    labels = batch["labels"].clamp(min=0) % 8
                    loss = torch.nn.functional.cross_entropy(model(x).transpose(1, 2), labels)
                acc.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            seen.append(_flat(batch))
            if acc.sync_gradients:
                completed += 1
                if save_every and completed % save_every == 0:
                    acc.save_state(str(folder / f"step_{completed}"))
            if completed >= max_steps:
                break
        if case == "mlm_eval":
            model.eval()
            with torch.no_grad():
                for step, batch in enumerate(evaluation):
                    model(torch.nn.functional.one_hot(batch["input_ids"], 17).float())
                    seen.append(_flat(batch))
                    if step == 1:
                        break
        if save_epochs:
            acc.save_state(str(folder / f"epoch_{epoch}"))
        if completed >= max_steps:
            break
    if save_after:
        # run_clm_no_trainer.py saves after the loop (named by step here, so that the resumed
        # run's arithmetic continues the pass the loop left).
        acc.save_state(str(folder / f"step_{completed}"))
    weights = [float(v) for p in acc.unwrap_model(model).parameters() for v in p.detach().flatten()]
    return seen, weights


def main(folder: Path, framework: str = "accelkw", only: tuple[str, ...] = ()) -> None:
    """Run every case (those named in ``only``), under accelkw or (``"accelerate"``)
    Accelerate, whose API the loops use unchanged."""
    if framework == "accelerate":
        from accelerate import Accelerator
    else:
        from accelkw_core import Accelerator  # type: ignore[assignment]

    acc = Accelerator(cpu=True)
    total = 30 if acc.num_processes == 1 else 15  # steps: 12 batches a pass on 1, 6 on 2
    results: dict[str, Any] = {}
    # (case, where the stopped run saves (steps), the checkpoint resumed)
    cases = [
        ("mlm", {"save_every": 5}, "step_5"),
        ("mlm_continue", {"save_every": 5}, "step_10"),
        ("mlm_stream", {"save_every": 5}, "step_5"),
        ("mlm_noise", {"save_every": 5}, "step_5"),
        ("clm", {"save_after": True}, "step_4"),
        ("mlm_eval", {"save_epochs": True}, "epoch_0"),
        # Worker rounds of 2 batches: inside the first round, after one, inside one.
        ("workers", {"save_every": 1}, "step_1"),
        ("workers", {"save_every": 4}, "step_4"),
        ("workers", {"save_every": 3}, "step_3"),
    ]
    for case, stop, checkpoint in cases:
        if only and f"{case}_{checkpoint}" not in only:
            continue
        where = folder / f"{case}_{checkpoint}"
        where.mkdir(parents=True, exist_ok=True)
        whole, weights = run(acc, case, where, max_steps=total)
        # The stopped run ends at its checkpoint: the steps it names, or the first epoch.
        per_pass = 24 // (2 * acc.num_processes)
        stopped_steps = per_pass if checkpoint == "epoch_0" else int(checkpoint[5:])
        first, _ = run(acc, case, where, max_steps=stopped_steps, **stop)  # type: ignore[arg-type]
        rest, resumed = run(acc, case, where, max_steps=total, resume=checkpoint)
        results[f"{case}_{checkpoint}"] = {
            "whole": whole,
            "chain": first + rest,
            "weights": weights,
            "resumed": resumed,
        }
    (folder / f"result_{acc.process_index}.json").write_text(json.dumps(results))
    acc.end_training()


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3], tuple(sys.argv[3:]))

"""What recording the loader's draws ahead of the loop costs: per batch, and in the checkpoint.

A prepared loader reads the process's global generators (Python, NumPy, torch) before each
batch it fetches, so that a checkpoint can replay the batch it had fetched ahead. Timed here on
the worst case, batches that cost almost nothing to make (8 samples of 4 floats, default
collate, no workers): a pass of accelkw's prepared loader, Accelerate's prepared loader and the
plain ``DataLoader``, interleaved, ``--repeats`` rounds, one CPU thread. Prints the median
microseconds per batch of each, accelkw's extra over Accelerate's, and the size of a loader's
mid-pass position in ``random_states_<rank>.pkl`` (with and without two workers).

    python bench/bench_loader_draws.py [--repeats 15] [--batches 2000]
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from typing import Any

import torch


def mask_tokens(samples: list[tuple[torch.Tensor]]) -> dict[str, torch.Tensor]:
    """What ``DataCollatorForLanguageModeling`` draws: 15% of the tokens chosen, 80% of those
    masked, half the rest replaced by random tokens (from torch's global generator)."""
    ids = torch.stack([s[0] for s in samples])
    labels = ids.clone()
    chosen = torch.bernoulli(torch.full(ids.shape, 0.15)).bool()
    labels[~chosen] = -100
    masked = torch.bernoulli(torch.full(ids.shape, 0.8)).bool() & chosen
    ids[masked] = 4
    swapped = torch.bernoulli(torch.full(ids.shape, 0.5)).bool() & chosen & ~masked
    ids[swapped] = torch.randint(1000, ids.shape)[swapped]
    return {"input_ids": ids, "labels": labels}


def _loader(
    workers: int = 0, batches: int = 2000, masking: bool = False
) -> torch.utils.data.DataLoader[Any]:
    if masking:  # 8 lines of 128 tokens a batch
        tokens = torch.randint(1000, (8 * batches, 128))
        data = torch.utils.data.TensorDataset(tokens)
        return torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, collate_fn=mask_tokens)
    data = torch.utils.data.TensorDataset(torch.randn(8 * batches, 4))
    return torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, num_workers=workers)


def _per_batch_us(loader: Any) -> float:
    start = time.perf_counter()
    count = sum(1 for _ in loader)
    return (time.perf_counter() - start) / count * 1e6


def _position_bytes(accelerator: Any, workers: int) -> int:
    loader = accelerator.prepare(_loader(workers, batches=20))
    batches = iter(loader)
    for _ in range(5):
        next(batches)
    buffer = io.BytesIO()
    torch.save(loader.position(), buffer)
    return len(buffer.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--batches", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)

    import accelerate

    from accelkw_core import Accelerator

    ours = Accelerator(cpu=True)
    theirs = accelerate.Accelerator(cpu=True)
    for masking in (False, True):
        shape = "masking collate, 8 x 128 tokens" if masking else "default collate, 8 x 4 floats"
        print(f"{shape}:")
        loaders = {
            "torch": _loader(batches=args.batches, masking=masking),
            "accelkw": ours.prepare(_loader(batches=args.batches, masking=masking)),
            "accelerate": theirs.prepare(_loader(batches=args.batches, masking=masking)),
        }
        times: dict[str, list[float]] = {name: [] for name in loaders}
        for round_ in range(args.repeats):
            names = list(loaders) if round_ % 2 == 0 else list(reversed(loaders))
            for name in names:
                times[name].append(_per_batch_us(loaders[name]))
        medians = {name: statistics.median(values) for name, values in times.items()}
        for name, value in medians.items():
            print(f"  {name:>10}: {value:7.1f} us per batch (min {min(times[name]):.1f})")
        extra = medians["accelkw"] - medians["accelerate"]
        ratio = medians["accelkw"] / medians["accelerate"]
        print(f"  accelkw - accelerate: {extra:+.1f} us per batch (ratio {ratio:.3f})")
    for workers in (0, 2):
        size = _position_bytes(ours, workers)
        print(f"mid-pass position, num_workers={workers}: {size / 1024:.1f} KiB")


if __name__ == "__main__":
    main()

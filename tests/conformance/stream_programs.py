"""A program the stream conformance test runs under Accelerate and under accelkw, on 2 processes.

It prepares loaders over an ``IterableDataset`` with every combination of ``split_batches`` and
``dispatch_batches`` and records what each process sees. A worker of ``run_workers`` lives here
so child processes import it.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.conformance.runtime_programs import framework


class Numbers(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """``0 .. length-1`` as one-element float tensors (with ``len`` when ``sized``)."""

    def __init__(self, length: int, sized: bool) -> None:
        self.length = length
        self.sized = sized

    def __iter__(self) -> Any:
        return (torch.tensor([float(i)]) for i in range(self.length))

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("a stream without a length")
        return self.length


# (name, batch size, drop_last, dataset length, sized): 11 and 13 samples do not divide by 2
# processes, nor by a global batch.
LOADERS = (("sized", 4, False, 11, True), ("unsized-drop-last", 2, True, 13, False))


def _seen(accelerator: Any, loader: Any, skip: bool = True) -> dict[str, Any]:
    batches, ends, metrics = [], [], []
    for batch in loader:
        batches.append(batch.flatten().tolist())
        ends.append(bool(accelerator.gradient_state.end_of_dataloader))
        metrics.append(accelerator.gather_for_metrics(batch).flatten().tolist())
    skipped = (
        [b.flatten().tolist() for b in accelerator.skip_first_batches(loader, 1)] if skip else None
    )
    try:
        length = len(loader)
    except TypeError:
        length = None
    return {
        "batches": batches,
        "ends": ends,
        "metrics": metrics,
        "skipped": skipped,
        "len": length,
    }


def stream_worker(rank: int, name: str) -> dict[str, Any]:
    """What this process sees of each loader, for each (split_batches, dispatch_batches)."""
    Accelerator, utils = framework(name)
    accelerator = Accelerator(cpu=True)
    out: dict[str, Any] = {}
    for split in (False, True):
        for dispatch in (False, True, None):
            accelerator.dataloader_config = utils.DataLoaderConfiguration(
                split_batches=split, dispatch_batches=dispatch
            )
            for label, size, drop_last, length, sized in LOADERS:
                loader = torch.utils.data.DataLoader(
                    Numbers(length, sized), batch_size=size, drop_last=drop_last
                )
                loader = accelerator.prepare(loader)
                out[f"{label} split={split} dispatch={dispatch}"] = _seen(accelerator, loader)
            if dispatch:
                # A map-style loader dispatched too (skip_first_batches counts differently: the
                # dataloader-config-refused row).
                for drop_last in (False, True):
                    table = torch.arange(13, dtype=torch.float32).unsqueeze(1)
                    loader = torch.utils.data.DataLoader(table, batch_size=4, drop_last=drop_last)
                    loader = accelerator.prepare(loader)
                    seen = _seen(accelerator, loader, skip=False)
                    out[f"map-style split={split} drop_last={drop_last}"] = seen
    # skip_first_batches of a loader prepare() did not make: a plain loader that drops them.
    plain = torch.utils.data.DataLoader(Numbers(7, False), batch_size=2)
    out["plain skipped"] = [b.flatten().tolist() for b in accelerator.skip_first_batches(plain, 2)]
    accelerator.end_training()
    return out

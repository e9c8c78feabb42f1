"""A stream's loader per pass on 2 gloo processes: accelkw against Accelerate 1.15.

Each launch prepares loaders over an ``IterableDataset`` (``--samples`` samples of 128 floats,
batches of 32) with ``dispatch_batches=True`` (the default for a stream: the main process reads
and broadcasts) and ``False`` (every process reads the stream and keeps its share), and times
``--passes`` passes of each on rank 0 between barriers (one CPU thread per process). Launches
alternate between the frameworks for ``--rounds`` rounds. Printed: the median milliseconds per
pass, min and max, and the median ratio accelkw/Accelerate per mode.

    python bench/bench_streams.py [--rounds 3] [--passes 5] [--samples 4096]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from accelkw_core.testing import run_workers

MODES = {"dispatched": True, "read in place": False}


class Floats(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    def __init__(self, samples: int) -> None:
        self.data = torch.randn(samples, 128, generator=torch.Generator().manual_seed(0))

    def __iter__(self) -> Any:
        return iter(self.data)


def passes(rank: int, name: str, count: int, samples: int) -> dict[str, list[float]]:
    """Seconds per pass of each mode (rank 0's clock, between barriers)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    if name == "accelerate":
        from accelerate import Accelerator, DataLoaderConfiguration
    else:
        from accelkw_core import Accelerator
        from accelkw_core.utils import DataLoaderConfiguration
    accelerator = Accelerator(cpu=True)
    times: dict[str, list[float]] = {}
    for mode, dispatch in MODES.items():
        accelerator.dataloader_config = DataLoaderConfiguration(dispatch_batches=dispatch)
        loader = accelerator.prepare(torch.utils.data.DataLoader(Floats(samples), batch_size=32))
        for _ in loader:  # warm up
            pass
        times[mode] = []
        for _ in range(count):
            dist.barrier()
            start = time.perf_counter()
            for _ in loader:
                pass
            dist.barrier()
            times[mode].append(time.perf_counter() - start)
    accelerator.end_training()
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()
    env = {"OMP_NUM_THREADS": "1", "ACCELKW_PLUGINS": "ddp,process_group"}
    seen: dict[str, dict[str, list[float]]] = {"accelerate": {}, "accelkw": {}}
    for _ in range(args.rounds):
        for name in ("accelerate", "accelkw"):
            got = run_workers(
                passes, 2, args=(name, args.passes, args.samples), env=env, timeout=600
            )[0]
            for mode, values in got.items():
                seen[name].setdefault(mode, []).extend(values)
    print(f"{args.samples} samples, batches of 32, 2 gloo processes, ms per pass")
    for mode in MODES:
        for name in ("accelerate", "accelkw"):
            ms = [v * 1000 for v in seen[name][mode]]
            print(
                f"  {mode:14} {name:10} median {statistics.median(ms):8.1f}"
                f"  min {min(ms):8.1f}  max {max(ms):8.1f}"
            )
        ratio = statistics.median(seen["accelkw"][mode]) / statistics.median(
            seen["accelerate"][mode]
        )
        print(f"  {mode:14} accelkw/Accelerate {ratio:.2f}")


if __name__ == "__main__":
    main()

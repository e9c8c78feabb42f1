"""What the save rendezvous costs a save that every process makes (issue 33).

Before its first collective, ``save_state`` finds out in the process group's store whether every
process is saving or the main process alone (``accelkw_core.runtime.checkpoints.participants``).
This times that meeting on two gloo processes, ``--meetings`` times in a row, as every process's
``save_state`` makes it, and prints the median and the 90th percentile on each process. A lone
main process waits ``ACCELKW_SAVE_JOIN_TIMEOUT`` (5 s by default) instead: that is by design.

    python bench/bench_save_rendezvous.py [--meetings 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _meetings(rank: int, count: int) -> list[float]:
    import torch.distributed as dist

    from accelkw_core.runtime.checkpoints.participants import Participation, meet

    dist.init_process_group("gloo")
    state: Any = SimpleNamespace(
        rank=rank, local_rank=rank, world_size=2, distributed=True, is_main_process=rank == 0
    )
    took = []
    try:
        for _ in range(count):
            dist.barrier()  # every process reaches save_state together, as in a script
            start = time.perf_counter()
            assert meet(state) is Participation.ALL
            took.append(time.perf_counter() - start)
    finally:
        dist.destroy_process_group()
    return took


def main() -> None:
    from accelkw_core.testing import run_workers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meetings", type=int, default=200)
    args = parser.parse_args()
    results = run_workers(_meetings, 2, args=(args.meetings,), timeout=600)
    for rank, took in enumerate(results):
        ms = sorted(t * 1000 for t in took)
        p90 = ms[int(0.9 * (len(ms) - 1))]
        print(
            f"rank {rank}: {len(ms)} meetings, median {statistics.median(ms):.2f} ms, "
            f"p90 {p90:.2f} ms, max {ms[-1]:.2f} ms"
        )


if __name__ == "__main__":
    main()

"""What a save of replicated state costs each process when the processes reach it apart (issue 39).

Two gloo processes, a DDP model of about 16 MB with Adam. Three patterns, ``--rounds`` times
each, every save into its own folder, and the median of each process's ``save_state`` time:

- every process saves at once (the usual save);
- the main process saves alone (``if accelerator.is_main_process: accelerator.save_state()``);
- every process saves, the other one ``--late`` seconds after the main process.

The main process's save should cost the same in the three (it waits for no one): the script
prints each median and its ratio to the first. It waited 5 s alone, and the late process's
``--late`` seconds, before issue 39.

    python bench/bench_save_no_wait.py [--rounds 5] [--late 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _saves(rank: int, folder: str, rounds: int, late: float) -> dict[str, list[float]]:
    import torch

    from accelkw_core import Accelerator
    from accelkw_core.testing import isolated_registry, plugin_of
    from tests.runtime_helpers import GroupKwargs, SyncKwargs

    acc = Accelerator(cpu=True, registry=isolated_registry([plugin_of(GroupKwargs, SyncKwargs)]))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024))
    optimizer = torch.optim.Adam(model.parameters())
    model, optimizer = acc.prepare(model, optimizer)
    acc.backward(model(torch.randn(4, 1024)).pow(2).mean())
    optimizer.step()
    took: dict[str, list[float]] = {"every": [], "main-only": [], "late": []}
    out = Path(folder)

    def timed(kind: str, i: int) -> None:
        start = time.perf_counter()
        acc.save_state(out / f"{kind}-{i}")
        took[kind].append(time.perf_counter() - start)

    for i in range(rounds):
        acc.wait_for_everyone()
        timed("every", i)
        acc.wait_for_everyone()
        if acc.is_main_process:
            timed("main-only", i)
        acc.wait_for_everyone()
        if rank == 1:
            time.sleep(late)
        timed("late", i)
    acc.wait_for_everyone()
    acc.end_training()
    return took


def main() -> None:
    from accelkw_core.testing import run_workers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--late", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="accelkw-bench-") as folder:
        results: list[Any] = run_workers(
            _saves, 2, args=(folder, args.rounds, args.late), timeout=1200
        )
    main = results[0]
    base = statistics.median(main["every"])
    for kind in ("every", "main-only", "late"):
        median = statistics.median(main[kind])
        print(
            f"main process, {kind:9}: median {median * 1000:7.1f} ms "
            f"({len(main[kind])} saves), {median / base:.2f}x the save every process makes"
        )
    late = statistics.median(results[1]["late"])
    print(f"the other process, its late save: median {late * 1000:.1f} ms (its part only)")


if __name__ == "__main__":
    main()

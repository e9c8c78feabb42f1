"""save_state and load_state of ~300 MB (weights and AdamW state): accelkw beside Accelerate 1.15.

accelkw's save is durable (every file and folder fsynced, a manifest with each file's XXH3-64
hash, the folder renamed into place under the folder's writer lock); its load checks every file
against the manifest before it changes anything. Accelerate's save writes the files and returns
(no fsync): it is timed made durable the fair way, its files and folders fsynced after it returns.
Its load reads the files. Both write ``model.safetensors`` (the default) and ``optimizer.bin``.

Before each timed save the script calls ``os.sync()`` (not timed), so every save starts with an
idle disk: otherwise what one save left in the page cache unwritten (Accelerate's, which does not
fsync) is written during the next save, whichever framework it is.

Each round runs each framework in a fresh process, in turn (A, B, A, B, ...): build a
25M-parameter model (100 MB of float32 weights), take one AdamW step (200 MB of optimizer
state), then time ``save_state`` to a new folder ``--saves`` times (each into a new folder) and
``load_state`` of the last one ``--saves`` times. Printed: the median of every round's median,
with min and max, and the median of the rounds' paired ratios accelkw / Accelerate (both
measured in the same round, so a noisy minute weighs on both).

    python bench/bench_checkpoint.py [--rounds 5] [--saves 3] [--dir /path/on/the/disk]

Targets (issue 25): save at most 1.3x Accelerate's made durable; load at most 1.2x Accelerate's,
the hash check included.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHILD = r"""
import json, os, shutil, sys, time
from pathlib import Path
import torch

folder, framework, saves = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1)
torch.manual_seed(0)
if framework == "accelkw":
    from accelkw_core import Accelerator
else:
    from accelerate import Accelerator
acc = Accelerator(cpu=True)
model = torch.nn.Sequential(torch.nn.Linear(5000, 2500), torch.nn.Linear(2500, 5000))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, opt = acc.prepare(model, opt)
model(torch.randn(2, 5000)).sum().backward()
opt.step()
opt.zero_grad()
save, load = [], []
for i in range(saves):
    target = folder / f"ckpt{i}"
    # The disk starts each save idle: data an earlier save left unwritten (Accelerate's, which
    # does not fsync) would otherwise be flushed during the next one, whoever it is.
    os.sync()
    start = time.perf_counter()
    acc.save_state(target)
    if framework == "accelerate":
        # Made durable the fair way: its files, its folder and the folder's parent fsynced
        # once it returns (what accelkw's save does before it returns).
        for path in [p for p in target.rglob("*") if p.is_file()] + [target, target.parent]:
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    save.append(time.perf_counter() - start)
    if i < saves - 1:
        shutil.rmtree(target)
size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
os.sync()
for _ in range(saves):
    start = time.perf_counter()
    acc.load_state(target)
    load.append(time.perf_counter() - start)
print(json.dumps({"save": save, "load": load, "bytes": size}))
"""

# The disk's floor for a durable save: the same number of bytes, already in memory, written to a
# new file in 8 MiB writes and fdatasync'ed, after os.sync(), as often as a child saves. No
# framework can save durably in less; it tells the disk's share of a ratio from the framework's.
FLOOR = r"""
import json, os, sys, time
folder, size, saves = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = os.urandom(8 * 2**20)
times = []
for i in range(saves):
    path = os.path.join(folder, f"floor{i}")
    os.sync()
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    left = size
    while left > 0:
        left -= os.write(fd, block[: min(left, len(block))])
    os.fdatasync(fd)
    os.close(fd)
    times.append(time.perf_counter() - start)
    os.remove(path)
print(json.dumps(times))
"""

FRAMEWORKS = ("accelerate", "accelkw")


def run_in_folder(base: Path, prefix: str, code: str, *args: str) -> Any:
    """Run ``code`` in a fresh interpreter with a new folder under ``base`` as its first argument;
    the JSON of its last printed line. The folder is removed afterwards."""
    folder = Path(tempfile.mkdtemp(dir=base, prefix=prefix))
    try:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELKW_PLUGINS": "process_group"}
        out = subprocess.run(
            [sys.executable, "-c", code, str(folder), *args],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_child(framework: str, base: Path, saves: int) -> dict[str, list[float] | int]:
    result: dict[str, list[float] | int] = run_in_folder(
        base, f"{framework}-", CHILD, framework, str(saves)
    )
    return result


def run_floor(base: Path, size: int, saves: int) -> list[float]:
    times: list[float] = run_in_folder(base, "floor-", FLOOR, str(size), str(saves))
    return times


def show(samples: list[float]) -> str:
    return (
        f"median {statistics.median(samples) * 1000:7.0f} ms "
        f"(min {min(samples) * 1000:.0f}, max {max(samples) * 1000:.0f}, n={len(samples)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    medians: dict[str, dict[str, list[float]]] = {fw: {"save": [], "load": []} for fw in FRAMEWORKS}
    ratios: dict[str, list[float]] = {"save": [], "load": []}
    floors: list[float] = []
    over_floor: list[float] = []
    size = 0
    started = time.time()
    for _ in range(args.rounds):
        this_round = {}
        for fw in FRAMEWORKS:
            result = run_child(fw, args.dir, args.saves)
            size = int(result["bytes"])  # type: ignore[arg-type]
            this_round[fw] = result
            for what in ("save", "load"):
                medians[fw][what].append(statistics.median(result[what]))  # type: ignore[arg-type]
        floor = statistics.median(run_floor(args.dir, size, args.saves))
        floors.append(floor)
        over_floor.append(statistics.median(this_round["accelkw"]["save"]) / floor)  # type: ignore[arg-type]
        for what in ("save", "load"):
            ratios[what].append(
                statistics.median(this_round["accelkw"][what])  # type: ignore[arg-type]
                / statistics.median(this_round["accelerate"][what])  # type: ignore[arg-type]
            )
    print(
        f"checkpoint of {size / 2**20:.0f} MiB, {args.rounds} rounds, {time.time() - started:.0f} s"
    )
    for what, target in (("save", 1.3), ("load", 1.2)):
        for fw in FRAMEWORKS:
            print(f"  {what} {fw:10s} {show(medians[fw][what])}")
        ratio = statistics.median(ratios[what])
        verdict = "OK" if ratio <= target else "MISSED"
        print(
            f"  {what} accelkw / Accelerate: median of paired ratios {ratio:.2f} "
            f"(min {min(ratios[what]):.2f}, max {max(ratios[what]):.2f}; target <= {target}) "
            f"{verdict}"
        )
        if what == "save":
            print(f"  save the disk's floor (write + fdatasync) {show(floors)}")
            print(
                f"  save accelkw / the disk's floor: median of paired ratios "
                f"{statistics.median(over_floor):.2f} (min {min(over_floor):.2f}, "
                f"max {max(over_floor):.2f})"
            )


if __name__ == "__main__":
    main()

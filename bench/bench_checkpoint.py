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
``load_state`` of the last one ``--saves`` times; the two frameworks' order alternates from
round to round. Printed, for the *first* save of each process (what a run that saves once pays),
the *warm* saves after it (their median) and the loads: the median over rounds, with min and
max, and the median of the rounds' paired ratios accelkw / Accelerate (both measured in the
same round, so a noisy minute weighs on both); and the load average before and after.

    python bench/bench_checkpoint.py [--rounds 5] [--saves 3] [--dir /path/on/the/disk]
    python bench/bench_checkpoint.py --interleaved [--saves 16]
    python bench/bench_checkpoint.py --async [--rounds 3] [--every 20] [--steps 50]
    python bench/bench_checkpoint.py --async --segments [--rounds 4] [--every 50]

With ``--interleaved``, one process builds the same model and optimizer for each framework and
alternates their saves (ABBA order, each into a new folder, removed after it): paired save by
save, seconds apart, the warm ratio no longer depends on which minute each framework's process
ran in. A virtual machine whose host takes back the memory the guest left free (free page
reporting: this project's machines) makes a write into pages the host took back several times
slower than one into pages freed a moment ago; each run starts and ends with a probe of that
(``page cache``: 200 MB written into a file right after 200 MB were freed, and again after 3 s
idle), so a run's noise can be told from the frameworks' difference.

Targets (issues 25 and 32): the first save and the warm saves each at most 1.3x Accelerate's made
durable; load at most 1.2x Accelerate's, the hash check included.

With ``--async`` (issue 27, accelkw-async-checkpoint), each round runs, in turn: Accelerate's
``save_state`` as it returns (not durable), accelkw's asynchronous ``save_state`` (the time it
blocks the loop: until the state is staged; each save is waited for, untimed, before the next),
then a loop of ``--steps`` AdamW steps of the same model with no save, and the same loop with an
asynchronous save every ``--every`` steps (into one folder, each replacing the last). Printed:
blocked / Accelerate's save (median of paired ratios; target <= 0.5), the loop with saves / the
loop without (target <= 1.05 with ``--every`` large enough for a write to finish in between),
and the staging copy's size (the memory an asynchronous save holds).

With ``--async --segments``, one process alternates ``--rounds`` pairs of segments of ``--every``
steps, one beginning with an asynchronous save and one without (ABBA order), each with a save
timed until that save is committed: the loop's cost of a save every ``--every`` steps, measured
minutes apart at most, for a machine shared with other jobs whose load drifts more than that.
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

# What the save children share: the model with its AdamW state (one step taken), and a save
# timed from an idle disk, made durable the fair way where the framework does not fsync.
COMMON = r"""
import json, os, shutil, sys, time
from pathlib import Path
import torch

torch.set_num_threads(1)


def build(accelerator_class):
    torch.manual_seed(0)
    acc = accelerator_class(cpu=True)
    model = torch.nn.Sequential(torch.nn.Linear(5000, 2500), torch.nn.Linear(2500, 5000))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = acc.prepare(model, opt)
    model(torch.randn(2, 5000)).sum().backward()
    opt.step()
    opt.zero_grad()
    return acc


def timed_save(acc, target, made_durable):
    # The disk starts each save idle: data an earlier save left unwritten (Accelerate's, which
    # does not fsync) would otherwise be flushed during the next one, whoever it is.
    os.sync()
    start = time.perf_counter()
    acc.save_state(target)
    if made_durable:
        # Its files, its folder and the folder's parent fsynced once it returns (what
        # accelkw's save does before it returns).
        for path in [p for p in target.rglob("*") if p.is_file()] + [target, target.parent]:
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    return time.perf_counter() - start
"""

CHILD = (
    COMMON
    + r"""
folder, framework, saves = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
if framework == "accelkw":
    from accelkw_core import Accelerator
else:
    from accelerate import Accelerator
acc = build(Accelerator)
save, load = [], []
for i in range(saves):
    target = folder / f"ckpt{i}"
    save.append(timed_save(acc, target, made_durable=framework == "accelerate"))
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
)

# accelkw's asynchronous save: "blocked" times save_state (it returns once staged); "loop" times
# --steps AdamW steps with a save every --every steps (0: none). The loop's clock stops at its
# last step; the wait for the last save is printed apart.
ASYNC_CHILD = r"""
import json, os, shutil, sys, time
from pathlib import Path
import torch
from accelkw_core import Accelerator
from accelkw_core.plugin import CHECKPOINT_EXECUTOR
from accelkw_core.utils import AsyncCheckpointKwargs

folder, mode, a, b = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
torch.manual_seed(0)
acc = Accelerator(cpu=True, kwargs_handlers=[AsyncCheckpointKwargs()])
model = torch.nn.Sequential(torch.nn.Linear(5000, 2500), torch.nn.Linear(2500, 5000))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, opt = acc.prepare(model, opt)
x = torch.randn(2, 5000)

def step():
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()

step()
out = {}
if mode == "blocked":
    blocked = []
    for i in range(a):
        target = folder / f"ckpt{i}"
        os.sync()
        start = time.perf_counter()
        acc.save_state(target)
        blocked.append(time.perf_counter() - start)
        acc.wait_for_checkpoints()
        if i < a - 1:
            shutil.rmtree(target)
    out["save"] = blocked
elif mode == "segments":
    # Pairs of segments of `every` steps, one with a save at its start and one without, in
    # alternating order (ABBA...): a machine whose load drifts slows both alike. A segment with
    # a save is timed until its save is committed, so a write that outlasts it is counted.
    every, pairs = a, b
    with_save, without = [], []
    for i in range(pairs):
        for saving in ((False, True) if i % 2 == 0 else (True, False)):
            os.sync()
            start = time.perf_counter()
            if saving:
                acc.save_state(folder / "ckpt")
            for _ in range(every):
                step()
            acc.wait_for_checkpoints()
            (with_save if saving else without).append(time.perf_counter() - start)
    out["with"], out["without"] = with_save, without
else:
    every, steps = a, b
    os.sync()
    start = time.perf_counter()
    for i in range(steps):
        step()
        if every and (i + 1) % every == 0:
            acc.save_state(folder / "ckpt")
    out["loop"] = time.perf_counter() - start
    start = time.perf_counter()
    acc.wait_for_checkpoints()
    out["tail"] = time.perf_counter() - start
out["staged"] = acc.state.values(CHECKPOINT_EXECUTOR)[0].peak_staged_bytes
acc.end_training()
print(json.dumps(out))
"""

# Both frameworks in one process, their saves alternated (ABBA): each pair of saves runs
# seconds apart, under the same load and the same state of the host's memory.
INTERLEAVED = (
    COMMON
    + r"""
import accelerate
import accelkw_core

folder, saves = Path(sys.argv[1]), int(sys.argv[2])
accs = {"accelerate": build(accelerate.Accelerator), "accelkw": build(accelkw_core.Accelerator)}
times = {name: [] for name in accs}
for i in range(saves):
    order = ("accelerate", "accelkw") if i % 4 in (0, 3) else ("accelkw", "accelerate")
    for name in order:
        target = folder / f"{name}{i}"
        times[name].append(timed_save(accs[name], target, made_durable=name == "accelerate"))
        shutil.rmtree(target)
print(json.dumps(times))
"""
)

# The host's share of the noise: 200 MB written into a new file (no sync) right after 200 MB
# of memory were freed, then again after 3 s idle. On a machine whose host takes back free
# memory, the second is several times the first; elsewhere they are alike.
PAGE_CACHE = r"""
import json, os, sys, time
folder = sys.argv[1]
block = os.urandom(8 * 2**20)

def write(path):
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for _ in range(25):
        os.write(fd, block)
    os.close(fd)
    return time.perf_counter() - start

path = os.path.join(folder, "probe")
write(path)
os.remove(path)  # 200 MB of page cache freed
hot = write(path)
os.remove(path)
time.sleep(3)
cold = write(path)
os.remove(path)
print(json.dumps([hot, cold]))
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


def run_in_folder(
    base: Path, prefix: str, code: str, *args: str, plugins: str = "process_group"
) -> Any:
    """Run ``code`` in a fresh interpreter with a new folder under ``base`` as its first argument;
    the JSON of its last printed line. The folder is removed afterwards."""
    folder = Path(tempfile.mkdtemp(dir=base, prefix=prefix))
    try:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELKW_PLUGINS": plugins}
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


def page_cache_probe(base: Path) -> str:
    hot, cold = run_in_folder(base, "probe-", PAGE_CACHE)
    return f"page cache: 200 MB written in {hot * 1000:.0f} ms after a free, {cold * 1000:.0f} ms after 3 s idle"


def show(samples: list[float]) -> str:
    return (
        f"median {statistics.median(samples) * 1000:7.0f} ms "
        f"(min {min(samples) * 1000:.0f}, max {max(samples) * 1000:.0f}, n={len(samples)})"
    )


def run_async(base: Path, mode: str, a: int, b: int) -> dict[str, Any]:
    result: dict[str, Any] = run_in_folder(
        base,
        f"async-{mode}-",
        ASYNC_CHILD,
        mode,
        str(a),
        str(b),
        plugins="process_group,async_checkpoint",
    )
    return result


def paired(name: str, ratios: list[float], target: float) -> str:
    ratio = statistics.median(ratios)
    return (
        f"  {name}: median of paired ratios {ratio:.2f} (min {min(ratios):.2f}, "
        f"max {max(ratios):.2f}; target <= {target}) {'OK' if ratio <= target else 'MISSED'}"
    )


def main_async(args: argparse.Namespace) -> None:
    """Issue 27: the time an asynchronous save blocks the loop, and what saves cost a loop."""
    samples: dict[str, list[float]] = {"accelerate": [], "blocked": [], "plain": [], "saving": []}
    blocked_ratio: list[float] = []
    loop_ratio: list[float] = []
    tails: list[float] = []
    staged = 0
    started = time.time()
    for _ in range(args.rounds):
        accelerate = statistics.median(run_child("accelerate", args.dir, args.saves)["save"])  # type: ignore[arg-type]
        blocked = run_async(args.dir, "blocked", args.saves, 0)
        plain = run_async(args.dir, "loop", 0, args.steps)
        saving = run_async(args.dir, "loop", args.every, args.steps)
        staged = max(staged, int(blocked["staged"]), int(saving["staged"]))
        samples["accelerate"].append(accelerate)
        samples["blocked"].append(statistics.median(blocked["save"]))
        samples["plain"].append(plain["loop"])
        samples["saving"].append(saving["loop"])
        tails.append(saving["tail"])
        blocked_ratio.append(samples["blocked"][-1] / accelerate)
        loop_ratio.append(saving["loop"] / plain["loop"])
    saves = args.steps // args.every
    print(f"asynchronous saves, {args.rounds} rounds, {time.time() - started:.0f} s")
    print(f"  save Accelerate (returns, not durable) {show(samples['accelerate'])}")
    print(f"  save accelkw async, blocked            {show(samples['blocked'])}")
    print(paired("blocked / Accelerate's save", blocked_ratio, 0.5))
    print(f"  loop of {args.steps} steps, no save        {show(samples['plain'])}")
    print(
        f"  loop of {args.steps} steps, {saves} async saves (every {args.every}) "
        f"{show(samples['saving'])}"
    )
    print(paired("loop with saves / loop without", loop_ratio, 1.05))
    print(f"  the last save's wait after the loop    {show(tails)}")
    print(f"  staging copy: {staged / 2**20:.0f} MiB (peak, one save in flight)")


def main_segments(args: argparse.Namespace) -> None:
    """Issue 27: a save every N steps against none, in alternating segments of one process."""
    started = time.time()
    result = run_async(args.dir, "segments", args.every, args.rounds)
    ratios = [w / o for w, o in zip(result["with"], result["without"], strict=True)]
    print(
        f"asynchronous saves every {args.every} steps, {args.rounds} pairs of segments, "
        f"{time.time() - started:.0f} s"
    )
    print(f"  {args.every} steps, no save                {show(result['without'])}")
    print(f"  {args.every} steps, one async save         {show(result['with'])}")
    print(paired("with a save / without", ratios, 1.05))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument(
        "--interleaved",
        action="store_true",
        help="both frameworks in one process, --saves saves each, alternated (warm saves only)",
    )
    parser.add_argument("--async", dest="asynchronous", action="store_true")
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument(
        "--segments",
        action="store_true",
        help="with --async: --rounds pairs of --every steps, with and without a save, "
        "alternating in one process (for a machine whose load drifts)",
    )
    args = parser.parse_args()
    if args.asynchronous and args.segments:
        main_segments(args)
        return
    if args.asynchronous:
        main_async(args)
        return
    if args.interleaved:
        main_interleaved(args)
        return
    main_sync(args)


def main_interleaved(args: argparse.Namespace) -> None:
    """Issue 32: warm saves of both frameworks alternated in one process, paired save by save."""
    started = time.time()
    load_before = os.getloadavg()[0]
    probe_before = page_cache_probe(args.dir)
    times: dict[str, list[float]] = run_in_folder(
        args.dir, "interleaved-", INTERLEAVED, str(args.saves)
    )
    # The first save of each is dropped: the one that went first also paid the allocator's
    # first touch of a checkpoint's size, which the per-process rounds measure.
    warm = {fw: t[1:] for fw, t in times.items()}
    ratios = [k / a for k, a in zip(warm["accelkw"], warm["accelerate"], strict=True)]
    print(
        f"interleaved warm saves, {len(ratios)} pairs in one process, "
        f"{time.time() - started:.0f} s, load average {load_before:.1f} -> "
        f"{os.getloadavg()[0]:.1f}"
    )
    print(f"  {probe_before}")
    for fw in FRAMEWORKS:
        print(f"  warm save  {fw:10s} {show(warm[fw])}")
    print(paired("warm save accelkw / Accelerate", ratios, 1.3))
    print(f"  {page_cache_probe(args.dir)}")


# What each round reports of a child's saves: the first of its process (imports, thread pools
# and the allocator's first touch of the state's size included: what a run that saves once
# pays) and the later, warm ones (their median), and the loads' median.
MEASURES = ("first save", "warm save", "load")


def _measures(result: dict[str, Any]) -> dict[str, float]:
    saves: list[float] = result["save"]
    return {
        "first save": saves[0],
        "warm save": statistics.median(saves[1:] or saves),
        "load": statistics.median(result["load"]),
    }


def main_sync(args: argparse.Namespace) -> None:
    """Issues 25 and 32: accelkw's durable save and checked load beside Accelerate's."""
    samples: dict[str, dict[str, list[float]]] = {
        fw: {m: [] for m in MEASURES} for fw in FRAMEWORKS
    }
    ratios: dict[str, list[float]] = {m: [] for m in MEASURES}
    floors: list[float] = []
    over_floor: list[float] = []
    size = 0
    started = time.time()
    load_before = os.getloadavg()[0]
    probe_before = page_cache_probe(args.dir)
    for i in range(args.rounds):
        this_round = {}
        # The order alternates, so neither framework always runs on the disk the other dirtied.
        for fw in FRAMEWORKS if i % 2 == 0 else FRAMEWORKS[::-1]:
            result = run_child(fw, args.dir, args.saves)
            size = int(result["bytes"])  # type: ignore[arg-type]
            this_round[fw] = _measures(result)
            for m in MEASURES:
                samples[fw][m].append(this_round[fw][m])
        floor = statistics.median(run_floor(args.dir, size, args.saves))
        floors.append(floor)
        over_floor.append(this_round["accelkw"]["warm save"] / floor)
        for m in MEASURES:
            ratios[m].append(this_round["accelkw"][m] / this_round["accelerate"][m])
    print(
        f"checkpoint of {size / 2**20:.0f} MiB, {args.rounds} rounds of {args.saves} saves, "
        f"{time.time() - started:.0f} s, load average {load_before:.1f} -> "
        f"{os.getloadavg()[0]:.1f}"
    )
    print(f"  {probe_before}")
    for m, target in (("first save", 1.3), ("warm save", 1.3), ("load", 1.2)):
        for fw in FRAMEWORKS:
            print(f"  {m:10s} {fw:10s} {show(samples[fw][m])}")
        ratio = statistics.median(ratios[m])
        verdict = "OK" if ratio <= target else "MISSED"
        print(
            f"  {m} accelkw / Accelerate: median of paired ratios {ratio:.2f} "
            f"(min {min(ratios[m]):.2f}, max {max(ratios[m]):.2f}; target <= {target}) "
            f"{verdict}"
        )
    print(f"  save the disk's floor (write + fdatasync) {show(floors)}")
    print(
        f"  warm save accelkw / the disk's floor: median of paired ratios "
        f"{statistics.median(over_floor):.2f} (min {min(over_floor):.2f}, "
        f"max {max(over_floor):.2f})"
    )
    print(f"  {page_cache_probe(args.dir)}")


if __name__ == "__main__":
    main()

"""load_state's peak extra host memory and time: accelkw beside Accelerate 1.15 (issue 40).

Each framework first saves its checkpoint of the same run (a 24M-parameter model, 96 MB of
float32 weights, with one AdamW step taken: 192 MB of optimizer state) in a child process of its
own. Then each round runs, for each framework in turn (the order alternating from round to
round), a fresh child process that builds the same model and optimizer (one step taken, so the
optimizer holds a state the load replaces, as in a run that resumes after training) and loads
that framework's checkpoint ``--loads`` times. Around each load the child resets the kernel's
high-water mark of its resident memory (``/proc/self/clear_refs``, then ``VmHWM`` in
``/proc/self/status``): the load's peak extra host memory is that high-water mark minus the
resident memory just before the load, every page the load touched counted (copies, buffers, the
checkpoint's files mapped in) however short-lived, which sampling would miss.

With ``--hook``, a load-state pre-hook is registered (one that loads nothing, as a script's hook
does for a run without the models it handles): a hook must cost no copy of the models.

Printed for the first load of each process and for the repeated loads after it: the median over
rounds (min, max) of the peak extra memory, of the time and of the CPU time (user and system,
every thread: on a machine shared with other jobs the wall time stretches while a process waits
for a core, its CPU time much less), each framework's, and the median of the rounds' paired
ratios accelkw / Accelerate. Targets (issue 40): memory at most 1.25x,
time at most 1.1x, with and without a hook.

    python bench/bench_load_memory.py [--rounds 5] [--loads 3] [--hook] [--dir /path]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

COMMON = r"""
import gc, json, os, resource, sys, time
from pathlib import Path
import torch

torch.set_num_threads(1)


def build(accelerator_class):
    torch.manual_seed(0)
    acc = accelerator_class(cpu=True)
    model = torch.nn.Sequential(torch.nn.Linear(4000, 3000), torch.nn.Linear(3000, 4000))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = acc.prepare(model, opt)
    model(torch.randn(2, 4000)).sum().backward()
    opt.step()
    opt.zero_grad()
    return acc


def framework(name):
    if name == "accelkw":
        from accelkw_core import Accelerator
    else:
        from accelerate import Accelerator
    return Accelerator
"""

SAVE = (
    COMMON
    + r"""
folder, name = Path(sys.argv[1]), sys.argv[2]
acc = build(framework(name))
acc.save_state(folder)
"""
)

LOAD = (
    COMMON
    + r"""
folder, name, loads, hook = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
acc = build(framework(name))
if hook:
    acc.register_load_state_pre_hook(lambda models, input_dir: None)


def kib(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


out = []
for _ in range(loads):
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the high-water mark of resident memory starts again from here
    before = kib("VmRSS")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    acc.load_state(folder)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    out.append({"seconds": seconds, "cpu": cpu, "extra_mb": (kib("VmHWM") - before) / 1024})
print(json.dumps(out))
"""
)

FRAMEWORKS = ("accelkw", "accelerate")
WHAT = {"extra_mb": "peak extra host memory", "seconds": "time", "cpu": "CPU time (all threads)"}


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args], check=True, capture_output=True, text=True
    )
    return done.stdout


def _spread(values: list[float], unit: str, digits: int) -> str:
    return (
        f"{statistics.median(values):.{digits}f} {unit} "
        f"(min {min(values):.{digits}f}, max {max(values):.{digits}f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--hook", action="store_true", help="register a load-state pre-hook")
    parser.add_argument("--dir", default=None, help="where the checkpoints are written")
    args = parser.parse_args()
    if not Path("/proc/self/clear_refs").exists():
        sys.exit("needs Linux's /proc/self/clear_refs to reset the memory high-water mark")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folders = {name: Path(tmp) / name for name in FRAMEWORKS}
        for name in FRAMEWORKS:
            _run(SAVE, str(folders[name]), name)
        os.sync()
        results: dict[str, list[list[dict[str, float]]]] = {name: [] for name in FRAMEWORKS}
        for i in range(args.rounds):
            order = FRAMEWORKS if i % 2 == 0 else FRAMEWORKS[::-1]
            for name in order:
                found = _run(LOAD, str(folders[name]), name, str(args.loads), str(int(args.hook)))
                results[name].append(json.loads(found.strip().splitlines()[-1]))
    _report(results, args)


def _report(results: dict[str, list[list[dict[str, float]]]], args: Any) -> None:
    hook = " with a load-state pre-hook" if args.hook else ""
    print(f"load_state of 96 MB of weights + 192 MB of AdamW state{hook}, {args.rounds} rounds")
    kinds = [("first load", lambda r: r[:1])]
    if args.loads > 1:
        kinds.append((f"repeated loads ({args.loads - 1} per process)", lambda r: r[1:]))
    for label, pick in kinds:
        print(f"{label}:")
        for key, unit, digits in (("extra_mb", "MB", 0), ("seconds", "s", 3), ("cpu", "s", 3)):
            per_round: dict[str, list[float]] = {}
            for name in FRAMEWORKS:
                per_round[name] = [
                    statistics.median(x[key] for x in pick(rounds)) for rounds in results[name]
                ]
                print(f"  {name:10} {WHAT[key]}: {_spread(per_round[name], unit, digits)}")
            ratios = [
                a / b if b else float("inf")
                for a, b in zip(per_round["accelkw"], per_round["accelerate"], strict=True)
            ]
            target = 1.25 if key == "extra_mb" else 1.1
            print(
                f"  accelkw / Accelerate ({WHAT[key]}): {_spread(ratios, 'x', 2)}; target <= {target}x"
            )


if __name__ == "__main__":
    main()

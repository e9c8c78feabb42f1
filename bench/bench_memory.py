"""Peak memory (max RSS) of a 200-step bf16 run: plain torch, accelkw and Accelerate.

Each run is a fresh process started by a fresh, small wrapper process that reports
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` once its only child has exited: the child's
own peak, never a parent's (``wait4`` in a large parent would start at the parent's size). The
loop is ``bench_step.py``'s (4x256 MLP, batch 64, AdamW, bf16, 1 thread); the three variants
run interleaved, ``--repeats`` times each. Printed: the median peak of each and the extra over
plain torch.

    python bench/bench_memory.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from _timing import precompile

STEPS = 200
LOOP = f"""
import sys, torch
torch.set_num_threads(1)
torch.manual_seed(0)
mode = sys.argv[1]
layers = []
for i in range(4):
    layers.append(torch.nn.Linear(256, 256 if i < 3 else 1))
    if i < 3:
        layers.append(torch.nn.ReLU())
model = torch.nn.Sequential(*layers)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 256), torch.randn(64, 1)
if mode == "plain":
    for _ in range({STEPS}):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
else:
    if mode == "accelkw":
        from accelkw_core import Accelerator
    else:
        from accelerate import Accelerator
    acc = Accelerator(cpu=True, mixed_precision="bf16")
    model, opt = acc.prepare(model, opt)
    for _ in range({STEPS}):
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
"""
# The wrapper: a small fresh interpreter whose only child is the run.
WRAPPER = (
    "import resource, subprocess, sys\n"
    "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def peak_kib(script: str, mode: str, env: dict[str, str]) -> int:
    out = subprocess.run(
        [sys.executable, "-c", WRAPPER, sys.executable, script, mode],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return int(out.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    precompile(["accelkw_core", "accelkw_autocast", "accelerate"])
    work = tempfile.mkdtemp(prefix="accelkw-memory-")
    script = os.path.join(work, "loop.py")
    with open(script, "w") as fh:
        fh.write(LOOP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env["OMP_NUM_THREADS"] = "1"
    os.chdir(work)
    modes = ["plain", "accelkw", "accelerate"]
    peaks: dict[str, list[int]] = {m: [] for m in modes}
    for r in range(args.repeats + 1):
        for mode in modes if r % 2 == 0 else reversed(modes):
            value = peak_kib(script, mode, env)
            if r:  # round 0 warms the page cache
                peaks[mode].append(value)
    print(f"peak RSS of a {STEPS}-step bf16 run (child's own ru_maxrss), {args.repeats} runs each")
    base = statistics.median(peaks["plain"]) / 1024
    for mode in modes:
        med = statistics.median(peaks[mode]) / 1024
        lo, hi = min(peaks[mode]) / 1024, max(peaks[mode]) / 1024
        print(
            f"  {mode:<11} median {med:7.1f} MiB (min {lo:.1f}, max {hi:.1f})   "
            f"{med - base:+6.1f} MiB over plain torch"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

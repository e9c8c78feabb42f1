"""2-process gloo DDP on CPU: raw torchrun, ``accelkw launch`` and ``accelerate launch``.

The same training (an MLP, SGD, per-rank data from a fixed seed, fp32) written three ways:
plain torch DDP under ``torchrun``; accelkw's ``Accelerator(cpu=True)`` under ``accelkw launch
--nproc-per-node 2``; Accelerate's ``Accelerator(cpu=True)`` under ``accelerate launch
--multi_gpu --num_processes 2`` (Accelerate's ``--cpu --num_processes 2`` silently starts one
process, so ``--multi_gpu`` it is; with ``cpu=True`` it runs gloo on CPU). Rank 0 writes the
wall-clock moment the first step ended on every rank, the steps per second of the following
``STEPS`` steps, and the final loss. Printed: time to first step (from starting the launcher),
steps/s (and rank 0's CPU time per step, which a busy machine stretches less), and whether the
three final losses are bit-identical; runs interleaved, a warm-up round first. Targets: accelkw launch adds <= 0.2 s to torchrun's time to first step; steps/s
within 3% of torchrun's.

    python bench/bench_launch.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _timing import precompile, verdict

TARGET_S = 0.2
STEPS = 200

SCRIPT = """
import json, sys, time
import torch

mode, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
if mode == "torch":
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(model)
    backward, barrier = (lambda loss: loss.backward()), dist.barrier
else:
    if mode == "accelkw":
        from accelkw_core import Accelerator
    else:
        from accelerate import Accelerator
    acc = Accelerator(cpu=True)
    model, opt = acc.prepare(model, opt)
    rank, backward, barrier = acc.process_index, acc.backward, acc.wait_for_everyone
gen = torch.Generator().manual_seed(1 + rank)
data = [(torch.randn(64, 256, generator=gen), torch.randn(64, 1, generator=gen))
        for _ in range(steps + 1)]

def step(x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    backward(loss)
    opt.step()
    opt.zero_grad()
    return loss

step(*data[0])
barrier()
first = time.time()
start, cpu = time.perf_counter(), time.process_time()
for x, y in data[1:]:
    loss = step(x, y)
barrier()
rate = steps / (time.perf_counter() - start)
cpu_ms = (time.process_time() - cpu) / steps * 1000
if rank == 0:
    with open(out, "w") as fh:
        json.dump({"first": first, "rate": rate, "cpu": cpu_ms, "loss": loss.item().hex()}, fh)
"""


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def bin_of(name: str) -> list[str] | None:
    exe = shutil.which(name, path=os.path.dirname(sys.executable))
    return [exe] if exe else None


def torchrun(script: Path, out: Path) -> list[str]:
    return [
        *(bin_of("torchrun") or [sys.executable, "-m", "torch.distributed.run"]),
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        free_port(),
        str(script),
        "torch",
        str(out),
        str(STEPS),
    ]


def accelkw(script: Path, out: Path) -> list[str]:
    head = bin_of("accelkw") or [sys.executable, "-m", "accelkw_core"]
    return [*head, "launch", "--nproc-per-node", "2", str(script), "accelkw", str(out), str(STEPS)]


def accelerate(script: Path, out: Path) -> list[str]:
    head = bin_of("accelerate") or [sys.executable, "-m", "accelerate.commands.accelerate_cli"]
    return [
        *head,
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--dynamo_backend",
        "no",
        "--mixed_precision",
        "no",
        "--main_process_port",
        free_port(),
        str(script),
        "accelerate",
        str(out),
        str(STEPS),
    ]


def run(cmd: list[str], out: Path, env: dict[str, str]) -> dict[str, float | str]:
    """Run one launch; its time to first step, steps/s and final loss."""
    for attempt in (1, 2):
        out.unlink(missing_ok=True)
        start = time.time()
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if done.returncode == 0:
            data = json.loads(out.read_text())
            return {
                "first": data["first"] - start,
                "rate": data["rate"],
                "cpu": data["cpu"],
                "loss": data["loss"],
            }
        # A port taken between choosing it and binding it is the usual cause: try once more.
        tail = done.stderr.decode(errors="replace")[-800:]
        print(f"  (run failed with status {done.returncode}, attempt {attempt}): {tail}")
    raise SystemExit(f"{cmd[:4]} failed twice")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    precompile(["accelkw_core", "accelkw_ddp", "accelkw_process_group", "accelerate"])
    work = Path(tempfile.mkdtemp())
    script = work / "ddp_steps.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = work / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env["OMP_NUM_THREADS"] = "1"  # silences torchrun's banner; same for all
    env["HF_HOME"] = str(work / "hf")  # no accelerate config file of this machine's user is read
    os.chdir(work)
    builders = {"torchrun": torchrun, "accelkw launch": accelkw, "accelerate launch": accelerate}
    if bin_of("accelerate") is None:
        del builders["accelerate launch"]
    samples: dict[str, list[dict[str, float | str]]] = {name: [] for name in builders}
    for r in range(args.repeats + 1):
        names = list(builders) if r % 2 == 0 else list(reversed(builders))
        for name in names:
            value = run(builders[name](script, out), out, env)
            if r > 0:  # round 0 warms the page cache
                samples[name].append(value)
    print(f"2 processes, gloo, {STEPS} steps after the first; {args.repeats} interleaved runs each")
    for name, values in samples.items():
        first = [float(v["first"]) for v in values]
        rate = [float(v["rate"]) for v in values]
        cpu = [float(v["cpu"]) for v in values]
        print(
            f"  {name:<18} first step {statistics.median(first):6.3f} s "
            f"(min {min(first):.3f}, max {max(first):.3f})   "
            f"{statistics.median(rate):7.1f} steps/s (min {min(rate):.1f}, max {max(rate):.1f})"
            f"   rank-0 CPU {statistics.median(cpu):.3f} ms/step"
        )
    base = samples["torchrun"]
    for name in list(builders)[1:]:
        pairs = [
            float(b["first"]) - float(a["first"]) for a, b in zip(base, samples[name], strict=True)
        ]
        rates = [
            float(b["rate"]) / float(a["rate"]) for a, b in zip(base, samples[name], strict=True)
        ]
        extra, rate = statistics.median(pairs), statistics.median(rates)
        note = (
            f"target <= +{TARGET_S} s   {verdict(extra <= TARGET_S)}" if "accelkw" in name else ""
        )
        print(
            f"  {name} adds {extra:+.3f} s to the first step (median of paired differences) {note}"
        )
        cpus = [float(b["cpu"]) / float(a["cpu"]) for a, b in zip(base, samples[name], strict=True)]
        cpu = statistics.median(cpus)
        rnote = f"target >= 0.97   {verdict(rate >= 0.97)}" if "accelkw" in name else ""
        print(f"  {name} steps/s {rate:.3f}x torchrun's (median of paired ratios) {rnote}")
        print(f"  {name} rank-0 CPU per step {cpu:.3f}x torchrun's (median of paired ratios)")
    losses = {name: {str(v["loss"]) for v in values} for name, values in samples.items()}
    same = len(set().union(*losses.values())) == 1
    shown = {name: float.fromhex(next(iter(v))) for name, v in losses.items()}
    print(f"  final losses {shown}: bit-identical across launchers and runs: {same}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

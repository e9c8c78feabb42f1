"""Time to first step: ``accelkw launch --nproc-per-node 2`` against raw ``torchrun``.

Both run the same plain-torch DDP script (gloo process group, one DDP training step, a barrier);
rank 0 writes the wall-clock time at which the first step finished on every rank. Time to first
step is that moment minus the moment the launcher was started. Runs are interleaved, a warm-up
round first. Target: accelkw launch adds <= 0.2 s.

    python bench/bench_launch.py [--repeats 3]
"""

from __future__ import annotations

import argparse
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

TARGET_S = 0.2

SCRIPT = """
import sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 16)).sum().backward()
opt.step()
dist.barrier()
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as fh:
        fh.write(repr(time.time()))
dist.destroy_process_group()
"""


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def torchrun(script: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        free_port(),
        str(script),
        str(out),
    ]


def accelkw_head() -> list[str]:
    """The ``accelkw`` console script next to this Python, else ``python -m accelkw_core``."""
    exe = shutil.which("accelkw", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "accelkw_core"]


def accelkw(script: Path, out: Path) -> list[str]:
    return [*accelkw_head(), "launch", "--nproc-per-node", "2", str(script), str(out)]


def first_step(cmd: list[str], out: Path, env: dict[str, str]) -> float:
    """Seconds from starting ``cmd`` to the end of its first training step on every rank."""
    for attempt in (1, 2):
        out.unlink(missing_ok=True)
        start = time.time()
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if done.returncode == 0:
            return float(out.read_text()) - start
        # A port taken between choosing it and binding it is the usual cause: try once more.
        tail = done.stderr.decode(errors="replace")[-800:]
        print(f"  (run failed with status {done.returncode}, attempt {attempt}): {tail}")
    raise SystemExit(f"{cmd[:4]} failed twice")


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def precompile(package: str) -> None:
    """Write bytecode for ``package`` as ``pip install`` would (editable installs run from
    source, and with PYTHONDONTWRITEBYTECODE set every start would recompile it)."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        compileall.compile_dir(folder, quiet=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    precompile("accelkw_core")
    work = Path(tempfile.mkdtemp())
    script = work / "ddp_step.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = work / "first_step"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env["OMP_NUM_THREADS"] = "1"  # silences torchrun's banner; same for both
    os.chdir(work)
    builders = {"torchrun": torchrun, "accelkw launch": accelkw}
    samples: dict[str, list[float]] = {name: [] for name in builders}
    for r in range(args.repeats + 1):
        names = list(builders) if r % 2 == 0 else list(reversed(builders))
        for name in names:
            value = first_step(builders[name](script, out), out, env)
            if r > 0:  # round 0 warms the page cache
                samples[name].append(value)
    print(f"time to first step, 2 processes, {args.repeats} interleaved runs each")
    for name, values in samples.items():
        print(
            f"  {name:<15} median {statistics.median(values):6.3f} s "
            f"(min {min(values):.3f}, max {max(values):.3f})"
        )
    pairs = [b - a for a, b in zip(samples["torchrun"], samples["accelkw launch"], strict=True)]
    medians = statistics.median(samples["accelkw launch"]) - statistics.median(samples["torchrun"])
    # Runs back to back share the machine's load; their difference is the robust figure.
    extra = statistics.median(pairs)
    ok = "OK" if extra <= TARGET_S else "MISSED"
    print(
        f"  accelkw launch adds {extra:+.3f} s (median of paired differences; difference of "
        f"medians {medians:+.3f} s)   target <= +{TARGET_S} s   {ok}"
    )
    startup = [_wall([*accelkw_head(), "--version"], env) for _ in range(5)]
    print(f"  the accelkw process's own start-up: median {statistics.median(startup):.3f} s")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

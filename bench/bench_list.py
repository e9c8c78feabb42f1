"""Time ``accelkw plugins list`` against the floor: a bare entry-point scan in a fresh interpreter.

Both commands run as fresh processes, interleaved A/B so machine noise hits both alike; the script
prints the median and spread of each and their ratio. Target: ratio <= 1.5 with the built-ins
installed, and torch never imported.

    python bench/bench_list.py [--repeats 21]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

FLOOR = [sys.executable, "-c", "import importlib_metadata as m; m.entry_points(group='accelkw')"]
LIST = [sys.executable, "-m", "accelkw_core", "plugins", "list"]
TORCH_CHECK = (
    "import sys, io, contextlib\n"
    "from accelkw_core.cli.main import main\n"
    "with contextlib.redirect_stdout(io.StringIO()): main(['plugins', 'list'])\n"
    "print('torch' in sys.modules)"
)


NO_CACHE = {**os.environ, "ACCELKW_NO_CACHE": "1"}


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def summary(samples: list[float]) -> str:
    med = statistics.median(samples) * 1000
    lo, hi = min(samples) * 1000, max(samples) * 1000
    return f"median {med:7.1f} ms  (min {lo:.1f}, max {hi:.1f})"


def precompile() -> None:
    """Write bytecode for accelkw's packages, as a regular ``pip install`` does.

    Editable installs run from source; with PYTHONDONTWRITEBYTECODE set (as on CI machines)
    every start would recompile them, which no installed package pays.
    """
    import compileall
    import importlib.util

    names = ["accelkw_core"] + [p["entry_point"].split(":")[0].split(".")[0] for p in PLUGINS]
    for name in dict.fromkeys(names):
        spec = importlib.util.find_spec(name)
        if spec and spec.submodule_search_locations:
            for folder in spec.submodule_search_locations:
                compileall.compile_dir(folder, quiet=1)


PLUGINS: list[dict] = []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()

    plugins = json.loads(
        subprocess.run([*LIST, "--json"], capture_output=True, text=True, check=True).stdout
    )
    PLUGINS.extend(p for p in plugins if p["entry_point"])
    loaded = sorted(p["name"] for p in plugins if p["status"] == "loaded")
    print(f"plugins loaded: {len(loaded)} ({', '.join(loaded) or 'none'})")
    precompile()

    for cmd in (FLOOR, LIST):  # warm the page cache
        timed(cmd)
    floor, listing, uncached = [], [], []
    for _ in range(args.repeats):
        floor.append(timed(FLOOR))
        listing.append(timed(LIST))
        uncached.append(timed(LIST, NO_CACHE))
    for label, samples in (("cached", listing), ("uncached", uncached)):
        ratio = statistics.median(samples) / statistics.median(floor)
        verdict = "OK" if ratio <= 1.5 else "MISSED"
        print(f"ratio {label}/floor: {ratio:.2f}x   (target <= 1.50x)  {verdict}")
    print(f"floor (entry-point scan)  {summary(floor)}")
    print(f"accelkw plugins list      {summary(listing)}")
    print(
        f"  ACCELKW_NO_CACHE=1      {summary(uncached)}   (as the first listing after an install)"
    )

    imported = subprocess.run(
        [sys.executable, "-c", TORCH_CHECK], capture_output=True, text=True, check=True
    )
    print(f"torch imported by listing: {imported.stdout.strip()}   (target: False)")

    accelerate = shutil.which("accelerate")
    if accelerate:
        peer = [timed([accelerate, "env"]) for _ in range(3)]
        speedup = statistics.median(peer) / statistics.median(listing)
        print(
            f"accelerate env            {summary(peer)}   accelkw is {speedup:.1f}x faster (target >= 15x)"
        )
    else:
        print("accelerate env            not installed (pip install accelerate==1.15.0 to compare)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

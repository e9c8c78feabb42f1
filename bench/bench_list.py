"""``accelkw plugins list`` against the floor (a bare entry-point scan) and ``accelerate env``.

Every command runs as a fresh process, interleaved round by round, with its wall and CPU time
(user + system of the child). Four listings:

- *warm*: nothing changed since the last listing, so it answers from the kept listing and
  imports no plugin, no ``importlib_metadata`` and no ``packaging`` (target <= 1.0x the floor);
- *after an install*: the cache empty (a fresh ``XDG_CACHE_HOME`` each run), as on the first
  listing after ``pip install``: the entry points found by ``importlib_metadata``, every
  distribution's metadata read, its core range judged by ``packaging``, every plugin imported,
  the listing kept (target <= 1.8x the floor);
- ``--refresh``: the same real load, with each handler's fields resolved (reported);
- ``ACCELKW_NO_CACHE=1``: a real load, nothing read or kept (reported).

Then ``accelerate env`` (Accelerate's nearest command) in the same rounds, and whether a listing
imports torch or any plugin module.

    python bench/bench_list.py [--repeats 21] [--accelerate-every N] [--phases N]
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
from pathlib import Path

from _timing import precompile, timed_with_cpu, verdict

FLOOR = [sys.executable, "-c", "import importlib_metadata as m; m.entry_points(group='accelkw')"]
LIST = [sys.executable, "-m", "accelkw_core", "plugins", "list"]
WARM_TARGET, INSTALL_TARGET = 1.0, 1.8
PROBE = (
    "import sys, io, contextlib, json\n"
    "from accelkw_core.cli.main import main\n"
    "before = set(sys.modules)\n"
    "with contextlib.redirect_stdout(io.StringIO()): main(['plugins', 'list'])\n"
    "print(json.dumps(sorted(set(sys.modules) - before)))"
)


# The first listing after an install, phase by phase (CPU time), in one fresh interpreter. The
# registry's load reads the entry points and metadata again (the imports already done): that
# second reading is timed apart, so the plugins' own cost is the load less it.
PHASES = """
import json, sys, time
T = time.process_time
r = {}
t = T(); import argparse; from accelkw_core.cli import main, plugins_cmd, strict
r["accelkw_core.cli, argparse"] = T() - t
from accelkw_core.discovery import listing_cache
t = T(); snap = listing_cache.snapshot(); r["the stamp"] = T() - t
t = T(); import importlib_metadata; eps = list(importlib_metadata.entry_points(group="accelkw"))
r["import importlib_metadata, entry_points() (the floor's work)"] = T() - t
t = T(); metadata = {id(e.dist): (e.dist, e.dist.metadata) for e in eps}
r["Distribution.metadata of each (the email parser)"] = T() - t
t = T(); import packaging.requirements
r["import packaging.requirements"] = T() - t
from accelkw_core._version import __version__
from accelkw_core.discovery import compat, entry_points
t = T()
for dist, md in metadata.values():
    compat.verdict(compat.core_requirement(md.get_all("Requires-Dist")), __version__)
r["judging the ranges"] = T() - t
t = T(); import pluggy; from accelkw_core.discovery.registry import Registry
r["pluggy, the registry"] = T() - t
t = T(); entry_points.find_entry_points("accelkw"); again = T() - t
t = T(); records = Registry().plugins()
r["importing and registering the plugins"] = T() - t - again
t = T()
listing = {"plugins": [plugins_cmd.plugin_json(p, False) for p in records], "typos": [],
           "autoload": True, "fields": False}
files = listing_cache.module_files(list(sys.modules), [p.entry_point or "" for p in records])
if snap is not None:
    listing_cache.write(snap, listing, files or [])
r["keeping the listing"] = T() - t
print(json.dumps(r))
"""


def phases(rounds: int, env: dict[str, str], cache: Path) -> None:
    """Print the median CPU time of each phase of the first listing after an install."""
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        shutil.rmtree(cache, ignore_errors=True)
        out = subprocess.run(
            [sys.executable, "-c", PHASES], capture_output=True, text=True, check=True, env=env
        ).stdout
        for name, seconds in json.loads(out).items():
            times.setdefault(name, []).append(seconds * 1000)
    start = [timed_with_cpu([sys.executable, "-c", "pass"], env)[1] * 1000 for _ in range(rounds)]
    print(f"phases of the first listing after an install, CPU medians of {rounds} processes:")
    print(
        f"  {'the interpreter start (python -c pass), also in the floor':<62} {statistics.median(start):6.1f} ms"
    )
    for name, samples in times.items():
        print(f"  {name:<62} {statistics.median(samples):6.1f} ms")


def accelerate_env() -> list[str] | None:
    exe = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or shutil.which(
        "accelerate"
    )
    return [exe, "env"] if exe else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument(
        "--accelerate-every", type=int, default=1, help="run `accelerate env` every Nth round"
    )
    parser.add_argument(
        "--phases",
        type=int,
        default=0,
        metavar="N",
        help="also time the first listing after an install phase by phase, in N processes",
    )
    args = parser.parse_args()

    base = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    work = Path(tempfile.mkdtemp(prefix="accelkw-list-"))
    warm_env = {**base, "XDG_CACHE_HOME": str(work / "warm")}
    cold_cache = work / "cold"
    cold_env = {**base, "XDG_CACHE_HOME": str(cold_cache)}
    plugins = json.loads(
        subprocess.run(
            [*LIST, "--json"], capture_output=True, text=True, check=True, env=warm_env
        ).stdout
    )
    modules = {p["entry_point"].split(":")[0].split(".")[0] for p in plugins if p["entry_point"]}
    precompile(["accelkw_core", *sorted(modules)])
    precompile(["accelerate"])
    loaded = sorted(p["name"] for p in plugins if p["status"] == "loaded")
    print(f"plugins loaded: {len(loaded)} ({', '.join(loaded)})")

    peer = accelerate_env()
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "floor": (FLOOR, base),
        "list (warm)": (LIST, warm_env),
        "list (after an install)": (LIST, cold_env),
        "list --refresh": ([*LIST, "--refresh"], warm_env),
        "list, ACCELKW_NO_CACHE=1": (LIST, {**base, "ACCELKW_NO_CACHE": "1"}),
    }
    if peer:
        commands["accelerate env"] = (peer, base)
    for cmd, env in commands.values():  # warm-up round: page cache, the warm listing's caches
        timed_with_cpu(cmd, env)
    wall: dict[str, list[float]] = {k: [] for k in commands}
    cpu: dict[str, list[float]] = {k: [] for k in commands}
    for r in range(args.repeats):
        names = list(commands) if r % 2 == 0 else list(reversed(commands))
        for name in names:
            if name == "accelerate env" and r % args.accelerate_every:
                continue
            shutil.rmtree(cold_cache, ignore_errors=True)  # untimed: the install's effect
            w, c = timed_with_cpu(*commands[name])
            wall[name].append(w)
            cpu[name].append(c)

    def med(samples: list[float]) -> float:
        return statistics.median(samples) * 1000

    print(f"{'command':<28} {'wall median (min-max)':>26} {'cpu median':>11}  n")
    for name in commands:
        w, c = wall[name], cpu[name]
        print(
            f"{name:<28} {med(w):8.1f} ms ({min(w) * 1000:6.1f}-{max(w) * 1000:6.1f}) "
            f"{med(c):8.1f} ms  {len(w)}"
        )

    def paired(name: str, times: dict[str, list[float]]) -> float:
        # Each round's ratio to that round's floor (the two ran back to back), then the median.
        return statistics.median(t / f for t, f in zip(times[name], times["floor"], strict=True))

    print("ratios: median over rounds of each round's ratio to its floor (ratio of medians)")
    for name, target in (
        ("list (warm)", WARM_TARGET),
        ("list (after an install)", INSTALL_TARGET),
        ("list --refresh", None),
        ("list, ACCELKW_NO_CACHE=1", None),
    ):
        rw, rc = paired(name, wall), paired(name, cpu)
        plain = f"({med(wall[name]) / med(wall['floor']):.2f}x, {med(cpu[name]) / med(cpu['floor']):.2f}x)"
        goal = (
            f"target <= {target}x   wall {verdict(rw <= target)}, cpu {verdict(rc <= target)}"
            if target
            else "(reported)"
        )
        print(f"{name} / floor: wall {rw:.2f}x, cpu {rc:.2f}x {plain}   {goal}")
    if peer:
        w = med(wall["accelerate env"]) / med(wall["list (warm)"])
        c = med(cpu["accelerate env"]) / med(cpu["list (warm)"])
        print(f"accelerate env / list (warm): wall {w:.1f}x, cpu {c:.1f}x slower")
    else:
        print("accelerate env: not installed (pip install accelerate==1.15.0)")

    for _ in range(2):  # the first may fill this command line's own cache (its sys.path differs)
        probe = subprocess.run(
            [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, env=warm_env
        )
    new = json.loads(probe.stdout)
    torch = [m for m in new if m == "torch" or m.startswith("torch.")]
    plugin_mods = [m for m in new if m.split(".")[0] in modules]
    libraries = [m for m in ("pluggy", "importlib_metadata", "packaging") if m in new]
    print(
        f"a warm listing imports torch: {bool(torch)}, plugin modules: {len(plugin_mods)}, "
        f"pluggy, importlib_metadata or packaging: {', '.join(libraries) or 'none'}   "
        f"(target: none)  {verdict(not torch and not plugin_mods and not libraries)}"
    )
    if args.phases:
        phases(args.phases, cold_env, cold_cache)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``accelkw plugins list`` with 100, 500 and 2,000 installed plugin distributions.

Each synthetic distribution is what pip leaves behind: a ``*.dist-info`` folder (METADATA,
entry_points.txt, RECORD) and a module whose ``accelkw_register_handlers`` hook registers one
handler dataclass. They live in a temporary folder put on ``PYTHONPATH``, next to the installed
built-ins. Five commands run at each size (and with none), as fresh processes: the floor (a bare
entry-point scan), ``plugins list`` and ``plugins list --json`` (nothing changed since the last
listing, the normal case: answered from the kept listing, no plugin imported), ``plugins list
--refresh`` (entry points and metadata read, every plugin imported, fields resolved, the listing
kept) and ``plugins list`` with ``ACCELKW_NO_CACHE=1`` (the same load, nothing kept, as on the
first listing after an install). Each round runs every command at every size, so noise on the shared
machine falls on all of them alike. Targets: time grows linearly in the number of plugins (the
cost per added plugin from 500 to 2,000 at most 1.5x that from 100 to 500), and
``plugins list`` takes <= 0.5 s at 500. Each run's CPU time is printed beside its wall time: on a
busy machine the wall time stretches while a process waits for a core, the CPU time much less.

    python bench/bench_many_plugins.py [--repeats 3] [--sizes 100 500 2000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _timing import Cmd, interleaved_with_cpu, median_ms, precompile, spread, timed, verdict

from accelkw_core.discovery.catalog import BUILTINS as CATALOG

FLOOR = [sys.executable, "-c", "import importlib_metadata as m; m.entry_points(group='accelkw')"]
LIST = [sys.executable, "-m", "accelkw_core", "plugins", "list"]
BUILTINS = [b.module for b in CATALOG]  # the built-in plugin modules, from the one catalog
TARGET_500_S = 0.5

MODULE = """\
from dataclasses import dataclass

from accelkw_core.plugin import KwargsHandler, handler_field, hookimpl


@dataclass
class Synth{i:04d}Kwargs(KwargsHandler):
    \"\"\"Synthetic handler {i} of the many-plugins benchmark.\"\"\"

    name = "synth_{i:04d}"
    level: int = handler_field(1, doc="how much", ge=0)


@hookimpl
def accelkw_register_handlers(register):
    register(Synth{i:04d}Kwargs)
"""


def write_plugins(site: Path, count: int) -> None:
    """``count`` distributions ``accelkw-synth-NNNN`` 1.0.<i>, one plugin module each."""
    site.mkdir(parents=True)
    for i in range(count):
        module = f"accelkw_synth_{i:04d}"
        (site / f"{module}.py").write_text(MODULE.format(i=i))
        info = site / f"{module}-1.0.{i}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: accelkw-synth-{i:04d}\nVersion: 1.0.{i}\n"
        )
        (info / "entry_points.txt").write_text(f"[accelkw]\nsynth_{i:04d} = {module}\n")
        (info / "RECORD").write_text("")
    precompile(folders=[site])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of every command")
    parser.add_argument("--sizes", type=int, nargs=3, default=[100, 500, 2000])
    args = parser.parse_args()
    sizes = [0, *args.sizes]
    precompile(["accelkw_core", *BUILTINS])

    with tempfile.TemporaryDirectory(prefix="accelkw-many-") as tmp:
        commands: dict[tuple[int, str], Cmd] = {}
        for size in sizes:
            site = Path(tmp) / f"site{size}"
            write_plugins(site, size)
            env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
            # One cache folder per size: they share an interpreter, so they would share a file.
            env.update(PYTHONPATH=str(site), XDG_CACHE_HOME=str(Path(tmp) / f"cache{size}"))
            commands[size, "floor"] = Cmd(FLOOR, env)
            commands[size, "list"] = Cmd(LIST, env)
            commands[size, "list --json"] = Cmd([*LIST, "--json"], env)
            commands[size, "list --refresh"] = Cmd([*LIST, "--refresh"], env)
            commands[size, "list no-cache"] = Cmd(LIST, {**env, "ACCELKW_NO_CACHE": "1"})
        for size in sizes:  # fill each cache (the kept listing with fields) and the page cache
            timed(*commands[size, "list --json"])
        # Every round runs every command at every size, so machine noise hits all sizes alike.
        wall, cpu = interleaved_with_cpu(commands, args.repeats, warmup=0)

    names = ["floor", "list", "list --json", "list --refresh", "list no-cache"]
    med = {key: median_ms(s) / 1000 for key, s in wall.items()}
    med_cpu = {key: median_ms(s) / 1000 for key, s in cpu.items()}
    for size in sizes:
        print(f"\n{size} synthetic plugins (+ the installed built-ins)")
        for name in names:
            print(
                f"  {name:<14} wall {spread(wall[size, name])}"
                f"   cpu median {med_cpu[size, name] * 1000:7.1f} ms"
            )

    print("\nms per plugin above the built-ins alone, (t(N) - t(0)) / N, wall (cpu)")
    print("  " + "".join(f"{h:>18}" for h in ["N", *names]))
    for size in args.sizes:
        cells = [
            f"{(med[size, n] - med[0, n]) * 1000 / size:7.3f} ({(med_cpu[size, n] - med_cpu[0, n]) * 1000 / size:5.3f})"
            for n in names
        ]
        print("  " + f"{size:>18}" + "".join(f"{c:>18}" for c in cells))

    small, mid, large = args.sizes
    print(f"\nlinear growth: ms per added plugin from {small} to {mid}, then from {mid} to {large}")
    for name in ("list", "list --refresh", "list no-cache"):
        for label, m in (("wall", med), ("cpu", med_cpu)):
            first = (m[mid, name] - m[small, name]) * 1000 / (mid - small)
            second = (m[large, name] - m[mid, name]) * 1000 / (large - mid)
            growth = second / first if first > 0 else float("inf")
            print(
                f"  {name:<14} {label:<4} {first:.3f} then {second:.3f} ms/plugin: {growth:.2f}x"
                f"   (target: linear, <= 1.5x)  {verdict(growth <= 1.5)}"
            )
    if 500 in args.sizes:
        for name in ("list", "list --refresh", "list no-cache"):
            w, c = med[500, name], med_cpu[500, name]
            print(
                f"{name} at 500 plugins: wall {w:.3f} s {verdict(w <= TARGET_500_S)}, "
                f"cpu {c:.3f} s {verdict(c <= TARGET_500_S)}   (target <= {TARGET_500_S} s)"
            )
    for name in ("list", "list --refresh", "list no-cache"):
        w = med[0, name] / med[0, "floor"]
        c = med_cpu[0, name] / med_cpu[0, "floor"]
        print(
            f"built-ins only, {name} / floor: wall {w:.2f}x, "
            f"cpu {c:.2f}x   (bench_list.py measures these against their targets)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

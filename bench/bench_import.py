"""Import cost of the core and of every installed plugin module, and proof that none imports torch.

Each module is imported in a fresh interpreter under ``python -X importtime``, which asserts that
``torch`` is not in ``sys.modules`` afterwards. The total is the sum of the self times of every
module that the import pulled in (the interpreter's own start-up excluded: ``typing``,
``dataclasses``, ``pluggy`` and the like count for whichever import comes first), and *own* is the
part spent in the module's own package; medians of ``--repeats`` runs, with the largest
contributors of the median run.

Then, side by side in fresh processes (interleaved, wall and CPU, the bare interpreter's start
subtracted): ``import accelkw_core``, ``from accelkw_core import Accelerator`` (torch included),
``import accelerate`` and ``import torch``.

    python bench/bench_import.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from _timing import Cmd, interleaved_with_cpu, precompile, verdict

CORE = ["accelkw_core", "accelkw_core.discovery.registry", "accelkw_core.accelerator"]
CHECK = (
    "import sys, importlib; importlib.import_module({name!r}); "
    "leaked = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')); "
    "assert not leaked, f'torch imported: {{leaked[:3]}}'"
)


def plugin_modules() -> list[str]:
    """The module of every installed ``accelkw`` entry point."""
    import importlib_metadata

    eps = importlib_metadata.entry_points(group="accelkw")
    return sorted({ep.value.split(":")[0].strip() for ep in eps})


def import_profile(name: str) -> tuple[bool, float, list[tuple[float, str]]]:
    """(torch stayed out, total ms, [(self ms, module)]) for one import in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CHECK.format(name=name)],
        capture_output=True,
        text=True,
    )
    rows: list[tuple[float, str]] = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, module = line[len("import time:") :].split("|")
        if module.strip() == "site" and not module.startswith("  "):
            rows = []  # everything so far was the interpreter's start-up
            continue
        rows.append((int(self_us) / 1000, module.strip()))
    return proc.returncode == 0, sum(ms for ms, _ in rows), sorted(rows, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    plugins = plugin_modules()
    precompile([name.split(".")[0] for name in ["accelkw_core", *plugins]])

    print(f"{'module':<30} {'torch-free':>10} {'total':>9} {'own':>8}   largest self times (ms)")
    all_clean = True
    for name in [*CORE, *plugins]:
        runs = [import_profile(name) for _ in range(args.repeats)]
        clean = all(ok for ok, _, _ in runs)
        all_clean &= clean
        package = name.split(".")[0]
        own = statistics.median(
            sum(ms for ms, m in rows if m.split(".")[0] == package) for _, _, rows in runs
        )
        runs.sort(key=lambda run: run[1])
        _, total, rows = runs[len(runs) // 2]  # the median run, and what it spent most on
        top = ", ".join(f"{m} {ms:.1f}" for ms, m in rows[:4])
        print(f"{name:<30} {verdict(clean):>10} {total:6.1f} ms {own:5.1f} ms   {top}")
    print(f"torch imported by none of them (target)  {verdict(all_clean)}")
    side_by_side(args.repeats)
    return 0


def side_by_side(repeats: int) -> None:
    """Fresh-process import times of accelkw and Accelerate, less a bare interpreter's start."""
    precompile(["accelerate"])
    statements = {
        "python -c pass": "pass",
        "import accelkw_core": "import accelkw_core",
        "from accelkw_core import Accelerator": "from accelkw_core import Accelerator",
        "import accelerate": "import accelerate",
        "import torch": "import torch",
    }
    commands = {name: Cmd([sys.executable, "-c", code]) for name, code in statements.items()}
    wall, cpu = interleaved_with_cpu(commands, repeats)
    bare_w = statistics.median(wall["python -c pass"])
    bare_c = statistics.median(cpu["python -c pass"])
    print(f"\nfresh processes, {repeats} interleaved rounds; the bare start subtracted")
    print(f"  {'python -c pass':<38} wall {bare_w * 1000:7.1f} ms, cpu {bare_c * 1000:7.1f} ms")
    for name in list(statements)[1:]:
        w = statistics.median(wall[name]) - bare_w
        c = statistics.median(cpu[name]) - bare_c
        print(f"  {name:<38} wall {w * 1000:+7.1f} ms, cpu {c * 1000:+7.1f} ms")
    ours = statistics.median(cpu["import accelkw_core"]) - bare_c
    theirs = statistics.median(cpu["import accelerate"]) - bare_c
    print(
        f"  import accelerate / import accelkw_core (cpu, start subtracted): {theirs / ours:.0f}x"
    )


if __name__ == "__main__":
    raise SystemExit(main())

"""Shared by the bench scripts: interleaved A/B timing of fresh processes, medians and spread.

The machine these run on is shared and noisy, so every comparison runs its commands in turn
(A, B, C, A, B, C, ...) rather than in blocks, and reports the median with the min and max.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import resource
import statistics
import subprocess
import time
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple, TypeVar

__all__ = [
    "Cmd",
    "interleaved",
    "interleaved_with_cpu",
    "median_ms",
    "precompile",
    "spread",
    "timed",
    "timed_with_cpu",
    "verdict",
]


K = TypeVar("K", bound=Hashable)


class Cmd(NamedTuple):
    """A command line and the environment it runs in (``None``: this process's)."""

    argv: Sequence[str]
    env: Mapping[str, str] | None = None


def timed(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> float:
    """Wall time in seconds of one run of ``cmd`` in a fresh process (which must exit 0)."""
    return timed_with_cpu(cmd, env)[0]


def timed_with_cpu(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[float, float]:
    """Wall time and CPU time (user + system) in seconds of one run of ``cmd``.

    On a machine shared with other jobs the wall time stretches while the process waits for a
    core; its CPU time much less so, which tells a slow program from a busy machine.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        list(cmd), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def interleaved(commands: Mapping[K, Cmd], repeats: int, warmup: int = 1) -> dict[K, list[float]]:
    """Run every command ``repeats`` times, in turn; return each one's wall times in seconds.

    ``warmup`` rounds first, not kept: they fill the page cache and any on-disk cache.
    """
    return interleaved_with_cpu(commands, repeats, warmup)[0]


def interleaved_with_cpu(
    commands: Mapping[K, Cmd], repeats: int, warmup: int = 1
) -> tuple[dict[K, list[float]], dict[K, list[float]]]:
    """:func:`interleaved`, returning the CPU times of the same runs as well."""
    for _ in range(warmup):
        for cmd in commands.values():
            timed(*cmd)
    wall: dict[K, list[float]] = {name: [] for name in commands}
    cpu: dict[K, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, cmd in commands.items():
            w, c = timed_with_cpu(*cmd)
            wall[name].append(w)
            cpu[name].append(c)
    return wall, cpu


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000


def spread(samples: Sequence[float]) -> str:
    """``median 81.2 ms (min 77.0, max 96.1, n=11)``."""
    lo, hi = min(samples) * 1000, max(samples) * 1000
    return f"median {median_ms(samples):8.1f} ms (min {lo:.1f}, max {hi:.1f}, n={len(samples)})"


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def precompile(
    packages: Iterable[str] = (), folders: Iterable[str | os.PathLike[str]] = ()
) -> None:
    """Write bytecode for ``packages`` (by import name) and ``folders``, as ``pip install`` does.

    Editable installs run from source; with ``PYTHONDONTWRITEBYTECODE`` set (as on this machine
    and many CI runners) every start would recompile them, a cost no installed package pays.
    """
    for name in dict.fromkeys(packages):
        spec = importlib.util.find_spec(name)
        if spec and spec.submodule_search_locations:
            for folder in spec.submodule_search_locations:
                compileall.compile_dir(folder, quiet=1)
        elif spec and spec.origin and spec.origin.endswith(".py"):
            compileall.compile_file(spec.origin, quiet=1)
    for folder in folders:
        compileall.compile_dir(os.fspath(folder), quiet=1, workers=1)

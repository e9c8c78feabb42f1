"""Construction cost: ``Accelerator(...)`` with the built-ins, and composition of many handlers.

1. ``Accelerator(cpu=True)`` over the installed plugins (the built-ins), in one process: the
   first construction (which discovers and loads the plugins) and then the median of repeated
   constructions (each one resolves settings, composes, applies and ends the run).
2. The same with 50, 100 and 200 synthetic handlers registered in code (an isolated registry,
   one plugin object; every other handler must come after an earlier one, so ordering has work
   to do). Target: cost per handler at 200 no worse than at 50 (linear), reported alongside.

3. Per-step cost with every per-step extension point populated: 10, 25 and 50 synthetic handlers,
   each contributing a forward context (``contextlib.nullcontext``), a forward-output converter
   (identity), an ``around_step`` (calls ``proceed``) and an ``after_step`` (no-op), against the
   same loop with none; a tiny model so the points' cost shows. Target: linear in the number of
   handlers (the cost per handler at 50 no worse than 1.5x that at 10), quoted per handler.

When the runtime (``Accelerator``) is missing, ``compose`` over the registry is measured instead.
Runs in a temporary working folder so no ``accelkw.toml``/``pyproject.toml`` is read.

    python bench/bench_compose.py [--repeats 100] [--step-repeats 15]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _timing import verdict

from accelkw_core.discovery.registry import Registry
from accelkw_core.plugin import (
    AFTER_STEP,
    AROUND_STEP,
    FORWARD_CONTEXT,
    FORWARD_OUTPUT,
    KwargsHandler,
    handler_field,
    hookimpl,
)
from accelkw_core.runtime.composing.composition import compose
from accelkw_core.testing import isolated_registry, make_state

SIZES = (50, 100, 200)


def synthetic_handlers(count: int) -> list[type[KwargsHandler]]:
    """``count`` handler dataclasses; handler ``i`` (odd) must be applied after handler ``i // 2``."""

    def apply(self: KwargsHandler, state: Any) -> None:
        state.record(self.name, f"level {self.level}")

    classes = []
    for i in range(count):
        namespace = {
            "name": f"synth_{i:03d}",
            "after": (f"synth_{i // 2:03d}",) if i % 2 else (),
            "apply": apply,
        }
        field = handler_field(1, doc="how much", ge=0)
        cls = dataclasses.make_dataclass(
            f"Synth{i:03d}Kwargs",
            [("level", int, field)],
            bases=(KwargsHandler,),
            namespace=namespace,
        )
        classes.append(cls)
    return classes


class SyntheticPlugin:
    """One plugin object that contributes every synthetic handler."""

    def __init__(self, classes: list[type[KwargsHandler]]) -> None:
        self.classes = classes

    @hookimpl
    def accelkw_register_handlers(self, register: Callable[[type[KwargsHandler]], None]) -> None:
        for cls in self.classes:
            register(cls)


def builder(registry: Registry | None) -> Callable[[], int]:
    """One construction (and shutdown); returns how many handlers were applied."""
    try:
        from accelkw_core import Accelerator
    except ImportError:
        Accelerator = None

    if Accelerator is None:

        def build() -> int:
            state = make_state()
            applied = compose(state, [], registry=registry)
            state.run_teardowns()
            return len(applied)

        return build

    def build_accelerator() -> int:
        acc = Accelerator(cpu=True, registry=registry)
        acc.end_training()
        return len(acc.handlers)

    return build_accelerator


def point_handlers(count: int) -> list[type[KwargsHandler]]:
    """``count`` handlers, each contributing to every per-step extension point."""
    import contextlib

    from accelkw_core.plugin import Plan

    def around(step: Any, proceed: Callable[[], Any]) -> Any:
        return proceed()

    def after(step: Any) -> None:
        return None

    def identity(outputs: Any) -> Any:
        return outputs

    def plan(self: KwargsHandler, state: Any) -> Plan:
        out = Plan(self.name)
        out.contribute(FORWARD_CONTEXT, contextlib.nullcontext, "a no-op forward context")
        out.contribute(FORWARD_OUTPUT, identity, "outputs unchanged")
        out.contribute(AROUND_STEP, around, "proceeds")
        out.contribute(AFTER_STEP, after, "nothing")
        return out

    return [
        dataclasses.make_dataclass(
            f"Point{i:03d}Kwargs",
            [("level", int, handler_field(1, doc="unused", ge=0))],
            bases=(KwargsHandler,),
            namespace={"name": f"point_{i:03d}", "after": (), "plan": plan},
        )
        for i in range(count)
    ]


def per_step_cost(repeats: int, steps: int = 200) -> None:
    """Per-step time of a tiny loop with 0/10/25/50 handlers on every per-step point."""
    import torch

    from accelkw_core import Accelerator

    torch.set_num_threads(1)
    sizes = (0, 10, 25, 50)
    loops = {}
    for size in sizes:
        registry = isolated_registry([SyntheticPlugin(point_handlers(size))])
        acc = Accelerator(cpu=True, registry=registry)
        model = torch.nn.Linear(8, 1)
        model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01))
        x, y = torch.randn(4, 8), torch.randn(4, 1)

        def step(
            acc: Any = acc, model: Any = model, opt: Any = opt, x: Any = x, y: Any = y
        ) -> None:
            loss = torch.nn.functional.mse_loss(model(x), y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()

        loops[size] = step
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    for r in range(repeats + 1):
        for size in sizes if r % 2 == 0 else reversed(sizes):
            start = time.thread_time()
            for _ in range(steps):
                loops[size]()
            if r:  # round 0 warms up
                samples[size].append((time.thread_time() - start) / steps)
    print(
        f"per step, tiny model, every per-step point (forward_context, forward_output, "
        f"around_step, after_step) populated; thread CPU, {repeats} x {steps} steps; the cost "
        "per handler is the median over rounds of (t(N) - t(0)) / N within each round"
    )
    per: dict[int, float] = {}
    for size in sizes:
        med = statistics.median(samples[size])
        pairs = [(t - t0) / max(size, 1) for t, t0 in zip(samples[size], samples[0], strict=True)]
        extra = statistics.median(pairs) if size else 0.0
        per[size] = extra
        print(
            f"  {size:>3} handlers/point: {med * 1e6:8.1f} us/step "
            f"(min {min(samples[size]) * 1e6:.1f})"
            + (f"   +{extra * 1e6:.2f} us per handler per step" if size else "")
        )
    growth = per[50] / per[10] if per[10] > 0 else float("inf")
    print(
        f"growth: per-handler per-step cost at 50 is {growth:.2f}x that at 10"
        f"   (target: linear, <= 1.5x)  {verdict(growth <= 1.5)}"
    )


def median_of(fn: Callable[[], int], repeats: int) -> tuple[float, list[float], int]:
    """Median, samples and handler count of ``repeats`` calls; the collector paused, as timeit does."""
    samples = []
    applied = 0
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            applied = fn()
            samples.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return statistics.median(samples), samples, applied


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--step-repeats", type=int, default=15)
    args = parser.parse_args()
    os.chdir(tempfile.mkdtemp(prefix="accelkw-compose-"))

    try:
        from accelkw_core import Accelerator  # noqa: F401

        what = "Accelerator(cpu=True)"
    except ImportError:
        what = "compose(state, [])"
    print(f"measuring: {what}, then end of run (teardowns)")

    registry = Registry()
    build = builder(registry)
    start = time.perf_counter()
    applied = build()
    first = time.perf_counter() - start
    med, samples, applied = median_of(build, args.repeats)
    print(
        f"built-ins ({applied} handlers): first {ms(first)} (discovers and loads the plugins), "
        f"then median {ms(med)} (min {min(samples) * 1000:.3f}, max {max(samples) * 1000:.3f}, "
        f"n={len(samples)})"
    )

    per: dict[int, float] = {}
    for size in SIZES:
        registry = isolated_registry([SyntheticPlugin(synthetic_handlers(size))])
        build = builder(registry)
        build()  # warm: the registry resolves its handlers once
        med, samples, applied = median_of(build, args.repeats)
        assert applied == size, (applied, size)
        per[size] = med / size
        print(
            f"{size:>4} synthetic handlers: median {ms(med)} (min {min(samples) * 1000:.3f}, "
            f"max {max(samples) * 1000:.3f})   per handler {per[size] * 1e6:6.1f} us"
        )
    growth = per[SIZES[-1]] / per[SIZES[0]]
    print(
        f"growth: per-handler cost at {SIZES[-1]} is {growth:.2f}x that at {SIZES[0]}"
        f"   (target: not worse than linear, <= 1.5x)  {verdict(growth <= 1.5)}"
    )
    if what.startswith("Accelerator"):
        per_step_cost(args.step_repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

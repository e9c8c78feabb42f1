"""Per-step time of an ``Accelerator`` loop against the same loop written in plain torch.

One process, one CPU thread, a 4-layer width-256 MLP, batch 64, AdamW, bf16 autocast (the grad
scaler only applies under fp16, so the bf16 loop has none; ``--fp16`` adds an fp16 pair with a
real ``GradScaler``), profiler off. The two loops run interleaved, A/B then B/A, in blocks of
``--steps`` steps, ``--repeats`` times; each block's per-step time (wall and thread CPU) is one
sample. Printed: the median and spread of each, and the per-step ratio, the median over adjacent
block pairs of Accelerator/plain (target <= 1.03; Hugging Face Accelerate measures about 1.22 on
such a loop). Then the cost of entering and leaving
``accelerator.autocast()`` against a bare ``torch.autocast`` (target <= 1 us over it).

    python bench/bench_step.py [--repeats 40] [--steps 10] [--fp16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

WIDTH, LAYERS, BATCH = 256, 4, 64
STEP_TARGET = 1.03
AUTOCAST_TARGET_US = 1.0


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for i in range(LAYERS):
        layers.append(torch.nn.Linear(WIDTH, WIDTH if i < LAYERS - 1 else 1))
        if i < LAYERS - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def plain_loop(dtype: torch.dtype, scaled: bool) -> Callable[[Any, Any], None]:
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu") if scaled else None

    def step(x: Any, y: Any) -> None:
        with torch.autocast("cpu", dtype=dtype):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        opt.zero_grad()

    return step


def accelerator_loop(mixed_precision: str) -> tuple[Callable[[Any, Any], None], Any]:
    from accelkw_core import Accelerator

    acc = Accelerator(mixed_precision=mixed_precision, cpu=True)
    model = mlp()
    model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))

    def step(x: Any, y: Any) -> None:
        # As in an Accelerate script: the prepared model autocasts its own forward and returns
        # float32 outputs.
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()

    return step, acc


def per_step(step: Callable[[Any, Any], None], x: Any, y: Any, n: int) -> tuple[float, float]:
    """Wall and thread-CPU seconds per step over ``n`` steps."""
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(n):
        step(x, y)
    return (time.perf_counter() - wall) / n, (time.thread_time() - cpu) / n


def compare(name: str, plain: Any, accel: Any, steps: int, repeats: int) -> float:
    """Interleaved blocks; the headline is the median over adjacent block pairs of B/A."""
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
    for fn in (plain, accel):  # warm up: allocator, autocast caches, AdamW state
        per_step(fn, x, y, 5)
    a: list[tuple[float, float]] = []
    b: list[tuple[float, float]] = []
    for r in range(repeats):
        order = [(a, plain), (b, accel)] if r % 2 == 0 else [(b, accel), (a, plain)]
        for samples, fn in order:
            samples.append(per_step(fn, x, y, steps))
    print(name)
    ratios = {}
    for i, kind in enumerate(("wall", "cpu")):
        wa, wb = [s[i] for s in a], [s[i] for s in b]
        # Adjacent blocks share the machine's load, so their ratio cancels most of its drift.
        ratios[kind] = statistics.median(bi / ai for ai, bi in zip(wa, wb, strict=True))
        print(f"  {kind:<4} plain torch   {_spread(wa)}")
        print(f"  {kind:<4} Accelerator   {_spread(wb)}")
        print(
            f"  {kind:<4} ratio {ratios[kind]:.3f} (paired blocks; ratio of medians "
            f"{statistics.median(wb) / statistics.median(wa):.3f})"
        )
    ok = "OK" if ratios["wall"] <= STEP_TARGET else "MISSED"
    print(f"  per-step ratio {ratios['wall']:.3f}   target <= {STEP_TARGET}   {ok}")
    return ratios["wall"]


def _spread(samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    return (
        f"median {statistics.median(ms):7.3f} ms/step "
        f"(min {min(ms):.3f}, max {max(ms):.3f}, n={len(ms)})"
    )


def autocast_overhead(acc: Any, repeats: int, n: int = 20000) -> float:
    def raw() -> None:
        for _ in range(n):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                pass

    def ours() -> None:
        autocast = acc.autocast
        for _ in range(n):
            with autocast():
                pass

    raw(), ours()
    a: list[float] = []
    b: list[float] = []
    for r in range(repeats):
        for samples, fn in [(a, raw), (b, ours)] if r % 2 == 0 else [(b, ours), (a, raw)]:
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) / n * 1e6)
    extra = statistics.median(b) - statistics.median(a)
    print("autocast enter/exit")
    print(f"  torch.autocast          median {statistics.median(a):6.2f} us (min {min(a):.2f})")
    print(f"  accelerator.autocast()  median {statistics.median(b):6.2f} us (min {min(b):.2f})")
    ok = "OK" if extra <= AUTOCAST_TARGET_US else "MISSED"
    print(f"  overhead {extra:+.2f} us per enter/exit   target <= {AUTOCAST_TARGET_US} us   {ok}")
    return extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--fp16", action="store_true", help="also compare fp16 with a scaler")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    # Training on random targets drifts into denormal floats, which slow CPU matmuls by an
    # amount that depends on the history of each model, not on the loop around it.
    torch.set_flush_denormal(True)
    os.chdir(tempfile.mkdtemp())  # no stray accelkw.toml changes what is composed
    for key in [k for k in os.environ if k.startswith("ACCELKW_")]:
        del os.environ[key]
    accel, acc = accelerator_loop("bf16")
    print(f"torch {torch.__version__}, 1 thread; handlers: {', '.join(acc.state.handlers)}")
    print(f"MLP {LAYERS}x{WIDTH}, batch {BATCH}, AdamW, {args.steps} steps x {args.repeats}")
    plain = plain_loop(torch.bfloat16, False)
    compare("bf16 autocast, no scaler (profiler off)", plain, accel, args.steps, args.repeats)
    if args.fp16:
        accel16, acc16 = accelerator_loop("fp16")
        scaled = acc16.scaler is not None
        compare(
            f"fp16 autocast, {'GradScaler' if scaled else 'no scaler installed'}",
            plain_loop(torch.float16, scaled),
            accel16,
            args.steps,
            args.repeats,
        )
        acc16.end_training()
    autocast_overhead(acc, args.repeats)
    acc.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-step time of the same training loop in plain torch, accelkw and Hugging Face Accelerate.

One process, one CPU thread, a 4-layer width-256 MLP, batch 64, AdamW, bf16 autocast (the grad
scaler only applies under fp16, so the bf16 loop has none; ``--fp16`` adds an fp16 round, each
loop reported with what actually ran: the dtype its first Linear computed in and whether a
``GradScaler`` scaled the loss; Accelerate 1.15 with ``cpu=True, mixed_precision="fp16"``
neither autocasts nor scales on CPU, so its fp16 figure is an fp32 loop). The accelkw and
Accelerate loops are written as an Accelerate script is: the prepared model autocasts its own
forward. The three loops run interleaved in blocks of ``--steps`` steps, the order rotating
each round, ``--repeats`` rounds; each block's per-step time (wall and thread CPU) is one
sample. The headline ratios are medians over the rounds of each round's ratio (blocks of one
round share the machine's load). Target: accelkw/plain <= 1.03. Then entering and leaving
``accelerator.autocast()`` against a bare ``torch.autocast`` (target <= 1 us over it), for both.

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
    """The benchmark's MLP (``WIDTH``, ``LAYERS``; :func:`fixed_overhead` shrinks them)."""
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


def accelerator_loop(
    mixed_precision: str, accelerate: bool = False
) -> tuple[Callable[[Any, Any], None], Any, list[torch.dtype]]:
    """The loop of an Accelerate script on accelkw's ``Accelerator`` (or Accelerate's)."""
    if accelerate:
        from accelerate import Accelerator as HFAccelerator
        from accelerate.state import AcceleratorState

        # Accelerate keeps one process-wide state; a second mixed precision needs it reset.
        AcceleratorState._reset_state(True)
        acc: Any = HFAccelerator(mixed_precision=mixed_precision, cpu=True)
    else:
        from accelkw_core import Accelerator

        acc = Accelerator(mixed_precision=mixed_precision, cpu=True)
    model = mlp()
    seen = watch_dtype(model)
    model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))

    def step(x: Any, y: Any) -> None:
        # As in an Accelerate script: the prepared model autocasts its own forward and returns
        # float32 outputs.
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()

    return step, acc, seen


def watch_dtype(model: torch.nn.Module) -> list[torch.dtype]:
    """The dtype of the first Linear's output at its last call (what the forward computed in)."""
    seen: list[torch.dtype] = []

    def hook(module: Any, inputs: Any, output: Any) -> None:
        seen[:] = [output.dtype]

    next(m for m in model.modules() if isinstance(m, torch.nn.Linear)).register_forward_hook(hook)
    return seen


def per_step(step: Callable[[Any, Any], None], x: Any, y: Any, n: int) -> tuple[float, float]:
    """Wall and thread-CPU seconds per step over ``n`` steps."""
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(n):
        step(x, y)
    return (time.perf_counter() - wall) / n, (time.thread_time() - cpu) / n


def compare(name: str, loops: dict[str, Any], steps: int, repeats: int) -> dict[str, float]:
    """Interleaved blocks, the order rotating each round; ratios of each round's blocks."""
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
    for fn in loops.values():  # warm up: allocator, autocast caches, AdamW state
        per_step(fn, x, y, 5)
    names = list(loops)
    samples: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        if r // len(names) % 2:
            order.reverse()
        for n in order:
            samples[n].append(per_step(loops[n], x, y, steps))
    print(name)
    ratios: dict[str, float] = {}
    base = names[0]
    for i, kind in enumerate(("wall", "cpu")):
        for n in names:
            print(f"  {kind:<4} {n:<12} {_spread([s[i] for s in samples[n]])}")
        pairs = [(n, base) for n in names[1:]] + [("accelkw", "Accelerate")]
        for top, bottom in pairs:
            if top not in samples or bottom not in samples:
                continue
            each = [t[i] / b[i] for t, b in zip(samples[top], samples[bottom], strict=True)]
            ratios[f"{top}/{bottom} {kind}"] = statistics.median(each)
            print(
                f"  {kind:<4} {top}/{bottom} {statistics.median(each):.3f} (per round; ratio "
                f"of medians {_median(samples[top], i) / _median(samples[bottom], i):.3f})"
            )
    ours = ratios[f"accelkw/{base} wall"]
    ok = "OK" if ours <= STEP_TARGET else "MISSED"
    print(
        f"  accelkw/{base} per step {ours:.3f} wall, {ratios[f'accelkw/{base} cpu']:.3f} cpu"
        f"   target <= {STEP_TARGET}   {ok}"
    )
    return ratios


def _median(samples: list[tuple[float, float]], i: int) -> float:
    return statistics.median(s[i] for s in samples)


def _spread(samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    return (
        f"median {statistics.median(ms):7.3f} ms/step "
        f"(min {min(ms):.3f}, max {max(ms):.3f}, n={len(ms)})"
    )


def autocast_overhead(accs: dict[str, Any], repeats: int, n: int = 20000) -> float:
    """Enter+exit of each ``accelerator.autocast()`` against ``torch.autocast``, interleaved.

    Accelerate's costs ~100x more, so it runs n/20 times a block (its per-call figure stands).
    """

    def raw(k: int) -> None:
        for _ in range(k):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                pass

    def make(acc: Any) -> Callable[[int], None]:
        def ours(k: int) -> None:
            autocast = acc.autocast
            for _ in range(k):
                with autocast():
                    pass

        return ours

    fns: dict[str, tuple[Callable[[int], None], int]] = {"torch.autocast": (raw, n)}
    for label, acc in accs.items():
        fns[f"{label} autocast()"] = (make(acc), n if label == "accelkw" else max(n // 20, 1))
    for fn, k in fns.values():
        fn(k)
    us: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            fn, k = fns[name]
            start = time.perf_counter()
            fn(k)
            us[name].append((time.perf_counter() - start) / k * 1e6)
    print("autocast enter/exit (bf16)")
    base = statistics.median(us["torch.autocast"])
    for name, values in us.items():
        print(
            f"  {name:<24} median {statistics.median(values):7.2f} us (min {min(values):.2f}) "
            f"  {statistics.median(values) - base:+7.2f} us over torch.autocast"
        )
    extra = statistics.median(us["accelkw autocast()"]) - base
    ok = "OK" if extra <= AUTOCAST_TARGET_US else "MISSED"
    print(
        f"  accelkw overhead {extra:+.2f} us per enter/exit   target <= {AUTOCAST_TARGET_US} us   {ok}"
    )
    return extra


def fixed_overhead(repeats: int, steps: int = 200) -> None:
    """Per-step time the loop itself adds, on a model small enough for the loop to dominate.

    A ``Linear(8, 1)``, batch 4: the difference to plain torch is what accelkw's (and
    Accelerate's) Python adds to every step, whatever the model; divided by the large model's
    step time it is the overhead ratio, free of the noise two big loops show on a busy machine.
    """
    global WIDTH, LAYERS, BATCH
    saved = WIDTH, LAYERS, BATCH
    WIDTH, LAYERS, BATCH = 8, 1, 4
    try:
        loops = {
            "plain": plain_loop(torch.bfloat16, False),
            "accelkw": accelerator_loop("bf16")[0],
            "Accelerate": accelerator_loop("bf16", accelerate=True)[0],
        }
        x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
        for fn in loops.values():
            per_step(fn, x, y, 20)
        us: dict[str, list[float]] = {n: [] for n in loops}
        for r in range(repeats):
            for n in loops if r % 2 == 0 else reversed(list(loops)):
                us[n].append(per_step(loops[n], x, y, steps)[1] * 1e6)
    finally:
        WIDTH, LAYERS, BATCH = saved
    base = statistics.median(us["plain"])
    print(f"fixed per-step cost (Linear(8, 1), batch 4, bf16; thread CPU, {repeats} x {steps})")
    for n, values in us.items():
        print(
            f"  {n:<11} median {statistics.median(values):7.1f} us/step "
            f"(min {min(values):.1f})   {statistics.median(values) - base:+6.1f} us over plain"
        )


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
    import accelerate

    accel, acc, _ = accelerator_loop("bf16")
    hf, hf_acc, _ = accelerator_loop("bf16", accelerate=True)
    print(
        f"torch {torch.__version__}, accelerate {accelerate.__version__}, 1 thread; "
        f"accelkw handlers: {', '.join(acc.state.handlers)}"
    )
    print(f"MLP {LAYERS}x{WIDTH}, batch {BATCH}, AdamW, {args.steps} steps x {args.repeats}")
    loops = {
        "plain": plain_loop(torch.bfloat16, False),
        "accelkw": accel,
        "Accelerate": hf,
        "plain again": plain_loop(torch.bfloat16, False),
    }
    ratios = compare("bf16 autocast, no scaler (profiler off)", loops, args.steps, args.repeats)
    # A second, identical plain loop: how far two copies of one loop drift apart on this
    # machine, the resolution of the ratios above.
    print(
        f"  resolution: plain again/plain {ratios['plain again/plain wall']:.3f} wall, "
        f"{ratios['plain again/plain cpu']:.3f} cpu (identical loops)"
    )
    fixed_overhead(args.repeats)
    autocast_overhead({"accelkw": acc, "Accelerate": hf_acc}, args.repeats)
    if args.fp16:
        accel16, acc16, seen16 = accelerator_loop("fp16")
        hf16, hf_acc16, hf_seen16 = accelerator_loop("fp16", accelerate=True)
        plain16 = plain_loop(torch.float16, True)
        x = torch.randn(BATCH, WIDTH)
        accel16(x, torch.randn(BATCH, 1)), hf16(x, torch.randn(BATCH, 1))
        print("fp16: what ran (the first Linear's output dtype; loss scaling)")
        print("  plain       torch.float16, GradScaler")
        print(f"  accelkw     {seen16[0]}, {'GradScaler' if acc16.scaler else 'no scaler'}")
        print(
            f"  Accelerate  {hf_seen16[0]}, {'GradScaler' if hf_acc16.scaler else 'no scaler'}"
            + (
                "   <- cpu=True fp16 does not autocast: an fp32 loop"
                if hf_seen16[0] == torch.float32
                else ""
            )
        )
        loops16 = {"plain": plain16, "accelkw": accel16, "Accelerate": hf16}
        compare("fp16 (as each ran, above)", loops16, args.steps, args.repeats)
        acc16.end_training()
    acc.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())

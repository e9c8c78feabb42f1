"""Per-step time of an fp8 training step: accelkw-fp8 beside Accelerate 1.15's, and beside bf16.

One process, one CPU thread, torchao 0.18's float8 training on the CPU (``torch._scaled_mm``),
a width-512 MLP of six linears (Accelerate's filter converts the four inner ones), batch 256,
AdamW built from the prepared model (so both frameworks update every layer). Three loops run interleaved in
blocks of ``--steps`` steps, the order rotating each round, ``--repeats`` rounds: accelkw fp8
(``AORecipeKwargs()``), Accelerate fp8 (``AORecipeKwargs()``) and accelkw bf16. Each block's
per-step time (thread CPU) is one sample; the headline ratios are medians over the rounds of
each round's ratio (the blocks of one round share the machine's load). Target: accelkw fp8 /
Accelerate fp8 <= 1.03. The bf16 ratio is what fp8 costs on a CPU, where float8 matmuls are
emulated (on an H100 they are the faster ones): a figure, not a target.

Why the optimizer is built after ``prepare(model)``: one built before it keeps, under
Accelerate, the weights torchao replaced, so its converted layers skip their AdamW update (the
``fp8-converted-layers-train`` row of docs/migrating.md) and its step does less work than
accelkw's, which updates them; ``--optimizer-first`` times that case too.

    python bench/bench_fp8.py [--repeats 15] [--steps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

WIDTH, LAYERS, BATCH = 512, 6, 256
TARGET = 1.03


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def loop(framework: str, precision: str, optimizer_first: bool) -> Callable[[int], None]:
    """A prepared model, optimizer and batch; the returned function runs ``n`` steps."""
    if framework == "accelerate":
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState, GradientState
        from accelerate.utils import AORecipeKwargs

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        handlers: list[Any] = [AORecipeKwargs()] if precision == "fp8" else []
        accelerator: Any = Accelerator(
            cpu=True, mixed_precision=precision, kwargs_handlers=handlers
        )
    else:
        from accelkw_core import Accelerator as Ours

        accelerator = Ours(cpu=True, mixed_precision=precision)
    model = mlp()
    if optimizer_first:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        model = accelerator.prepare(model)
        optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-4))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g)

    def run(n: int) -> None:
        for _ in range(n):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--optimizer-first", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    # Each loop built and run once before timing (torchao's first call, allocator warm-up).
    loops = {
        "accelkw fp8": loop("accelkw", "fp8", args.optimizer_first),
        "accelerate fp8": loop("accelerate", "fp8", args.optimizer_first),
        "accelkw bf16": loop("accelkw", "bf16", args.optimizer_first),
    }
    for run in loops.values():
        run(2)
    names = list(loops)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.repeats):
        order = names[r % 3 :] + names[: r % 3]
        for name in order:
            start = time.thread_time()
            loops[name](args.steps)
            samples[name].append((time.thread_time() - start) / args.steps)
    load = os.getloadavg()[0]
    when = "before prepare" if args.optimizer_first else "after prepare(model)"
    print(
        f"fp8 step, {args.repeats} rounds of {args.steps} steps, 1 thread, optimizer built "
        f"{when}, load {load:.1f}"
    )
    for name in names:
        print(f"  {name:15s} median {statistics.median(samples[name]) * 1e3:8.2f} ms/step (CPU)")
    vs_acc = statistics.median(
        a / b for a, b in zip(samples["accelkw fp8"], samples["accelerate fp8"], strict=True)
    )
    vs_bf16 = statistics.median(
        a / b for a, b in zip(samples["accelkw fp8"], samples["accelkw bf16"], strict=True)
    )
    ok = "ok" if vs_acc <= TARGET else "ABOVE TARGET"
    print(f"  accelkw fp8 / Accelerate fp8: {vs_acc:.3f}x (target <= {TARGET}: {ok})")
    print(f"  accelkw fp8 / accelkw bf16:   {vs_bf16:.3f}x (a figure: float8 is emulated on a CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

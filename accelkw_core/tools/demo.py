"""The training script of ``accelkw demo``: a small MLP on synthetic data, every handler composed.

Run on each worker by ``accelkw launch`` (``python -m accelkw_core.tools.demo``). Rank 0 prints progress
and, with ``--summary-file``, writes a JSON summary that ``accelkw demo`` prints at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from accelkw_core.contract.points import PROFILER

__all__ = ["main", "train"]

FEATURES, HIDDEN, SAMPLES = 32, 64, 4096


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m accelkw_core.tools.demo")
    p.add_argument("--steps", type=int, default=60, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=32, help="samples per step per process")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--mixed-precision", choices=("no", "fp16", "bf16"), default=None)
    p.add_argument("--gpu", action="store_true", help="use CUDA when available (default: CPU)")
    p.add_argument("--profile-steps", type=int, default=5, help="steps run under profile()")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--summary-file", help="rank 0 writes the JSON summary here")
    p.add_argument(
        "--fsdp", action="store_true", help="pass fsdp_plugin= (the handler that claims it)"
    )
    return p.parse_args(argv)


def sharding_keywords(sharded: bool) -> dict[str, Any]:
    """``{"fsdp_plugin": <instance>}`` of the installed handler that claims Accelerate's keyword.

    Raises :class:`~accelkw_core.errors.ConfigError` with the pip line when none is installed.
    """
    if not sharded:
        return {}
    from accelkw_core.discovery.catalog import ACCELERATE_KEYWORDS, install_hint
    from accelkw_core.discovery.default_registry import get_registry
    from accelkw_core.errors import ConfigError

    keyword = "fsdp_plugin"
    for info in get_registry().handlers().values():
        if keyword in info.cls.accelerator_keywords:
            return {keyword: info.cls()}
    raise ConfigError(
        "demo", "--fsdp", True, install_hint(ACCELERATE_KEYWORDS[keyword][0]) + " to shard"
    )


def _data(torch: Any) -> Any:
    # A fixed random "teacher" network makes the regression targets: learnable, not trivial.
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=gen)
    w1 = torch.randn(FEATURES, HIDDEN, generator=gen) / FEATURES**0.5
    w2 = torch.randn(HIDDEN, 1, generator=gen) / HIDDEN**0.5
    y = torch.tanh(x @ w1) @ w2
    return torch.utils.data.TensorDataset(x, y)


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Train with an ``Accelerator``; return the summary (identical keys on every rank)."""
    import torch

    from accelkw_core import Accelerator

    torch.set_num_threads(1)  # one core per process: N processes on N cores do not fight
    torch.manual_seed(0)
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision, cpu=not args.gpu, **sharding_keywords(args.fsdp)
    )
    with accelerator:
        model = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, HIDDEN),
            torch.nn.ReLU(),
            torch.nn.Linear(HIDDEN, HIDDEN),
            torch.nn.ReLU(),
            torch.nn.Linear(HIDDEN, 1),
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        loader = torch.utils.data.DataLoader(
            _data(torch), batch_size=args.batch_size, shuffle=True, drop_last=True
        )
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        return _loop(accelerator, model, optimizer, loader, args, torch)


def _loop(
    acc: Any, model: Any, optimizer: Any, loader: Any, args: Any, torch: Any
) -> dict[str, Any]:
    from accelkw_core.runtime.collectives import has_group

    losses: list[tuple[int, float]] = []
    global_batch = args.batch_size * acc.num_processes
    step, skipped, start, window = 0, 0, time.perf_counter(), (0, time.perf_counter())
    steady: tuple[int, float] | None = None
    window_loss: Any = 0.0
    # Profile the first steps only when a profiler is configured (the profile plugin).
    profile = args.profile_steps > 0 and bool(acc.state.values(PROFILER))
    # Without a process group (no process-group plugin) the ranks cannot talk: report locally.
    grouped = acc.num_processes == 1 or has_group()
    with contextlib.ExitStack() as profiling:
        profiler = profiling.enter_context(acc.profile()) if profile else None
        while step < args.steps:
            for x, y in loader:
                # The prepared model's forward autocasts (mixed precision) by itself.
                loss = torch.nn.functional.mse_loss(model(x), y)
                acc.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                skipped += int(optimizer.step_was_skipped)
                step += 1
                if profiler is not None:
                    profiler.step()
                    if step == args.profile_steps:
                        profiling.close()  # trace exported; the rest runs unprofiled
                        profiler, steady = None, (step, time.perf_counter())
                window_loss = loss.detach().float() + window_loss
                if step == 1 or step % args.log_every == 0 or step == args.steps:
                    # The mean over the steps since the last line, and over every process.
                    value = window_loss / (step - window[0])
                    mean = (acc.reduce(value, "mean") if grouped else value).item()
                    window_loss = 0.0
                    losses.append((step, mean))
                    now = time.perf_counter()
                    rate = (step - window[0]) * global_batch / max(now - window[1], 1e-9)
                    window = (step, now)
                    acc.print(
                        f"step {step:>4}/{args.steps}  loss {mean:.4f}  samples/s {rate:,.0f}",
                        flush=True,
                    )
                if step >= args.steps:
                    break
    elapsed = time.perf_counter() - start
    base_step, base_time = steady if steady and steady[0] < step else (0, start)
    throughput = (step - base_step) * global_batch / max(time.perf_counter() - base_time, 1e-9)
    from torch.distributed.tensor import DTensor

    params = list(acc.unwrap_model(model).parameters())
    # Sharded parameters (DTensors) differ per rank by design: there is nothing to compare.
    sharded = any(isinstance(p, DTensor) for p in params)
    spread = None
    if grouped and not sharded:
        flat = torch.cat([p.detach().reshape(-1).float() for p in params])
        everyone = acc.gather(flat.unsqueeze(0))
        spread = float((everyone - everyone[0]).abs().max())
    return {
        "world_size": acc.num_processes,
        "device": str(acc.device),
        "mixed_precision": acc.mixed_precision,
        # Whether a handler applied it: without an autocast plugin the run is float32.
        "mixed_precision_applied": "mixed_precision" in acc.state.capabilities,
        "handlers": list(acc.state.handlers),
        "log": [
            {"handler": e.handler, "message": e.message, "applied": e.applied}
            for e in acc.state.log
        ],
        "timings": acc.state.timings,
        "steps": step,
        "global_batch": global_batch,
        "losses": losses,
        "loss_first": losses[0][1],
        "loss_last": losses[-1][1],
        "samples_per_s": throughput,
        "seconds": elapsed,
        "param_spread": spread,
        "sharded": sharded,
        "skipped_steps": skipped,
        "profiled_steps": args.profile_steps if profile else 0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    summary = train(args)
    if args.summary_file and int(os.environ.get("RANK", "0")) == 0:
        with open(args.summary_file, "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

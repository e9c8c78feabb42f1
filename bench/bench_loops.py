"""The newer loops against the same loops written by hand with torch, each in one run.

- ``accum``: gradient accumulation, 4 micro-steps, 2 gloo processes: accelkw's
  ``Accelerator(gradient_accumulation_steps=4)`` with ``accumulate``/``backward``/``step`` as an
  Accelerate script writes it, against DDP with ``no_sync`` on the first three micro-steps and
  the loss divided by 4 by hand.
- ``ddp``: one DDP step (fp32) against ``DistributedDataParallel`` by hand, 2 gloo processes.
- ``fsdp``: FSDP2 on 2 gloo processes: ``Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin())``
  against ``fully_shard`` applied by hand to the same modules the plugin sharded.
- ``compile``: one process, ``Accelerator(dynamo_backend=B)`` against ``torch.compile(model,
  backend=B)`` (``--backends``, default ``aot_eager``; ``inductor`` if asked).
- ``forward``: the forward autocast of a prepared model (accelkw and Accelerate, bf16) against
  ``with torch.autocast(...)`` and ``.float()`` by hand, on a small model so the wrapper shows:
  per-forward cost over the hand-written one (target <= 1 us).

Each loop pair runs interleaved in blocks of ``--steps`` steps (order alternating every round)
with a second, identical hand-written loop ("hand again", whose ratio to the first is the
resolution of the figures on this machine),
``--repeats`` rounds, one CPU thread per process; the multi-process pairs time rank 0 between
barriers. Per-step ratio: median over rounds of accelkw/hand (wall and thread CPU). Target each
<= 1.03.

    python bench/bench_loops.py [--repeats 20] [--steps 10] [--only accum ddp fsdp compile forward]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

WIDTH, LAYERS, BATCH, MICRO = 256, 4, 64, 4
STEP_TARGET, FORWARD_TARGET_US = 1.03, 1.0


def mlp(width: int = WIDTH, layers: int = LAYERS) -> torch.nn.Module:
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = []
    for i in range(layers):
        mods.append(torch.nn.Linear(width, width if i < layers - 1 else 1))
        if i < layers - 1:
            mods.append(torch.nn.ReLU())
    return torch.nn.Sequential(*mods)


def mse(out: Any, y: Any) -> Any:
    return torch.nn.functional.mse_loss(out, y)


def plain_step(model: Any, x: Any, y: Any) -> Callable[[], None]:
    """One step written by hand with torch: forward, loss, backward, AdamW step, zero_grad."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        loss = mse(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    return step


def block(step: Callable[[], None], n: int, sync: Callable[[], None]) -> tuple[float, float]:
    """Wall and thread-CPU seconds per step over ``n`` steps, between two barriers."""
    sync()
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(n):
        step()
    sync()
    return (time.perf_counter() - wall) / n, (time.thread_time() - cpu) / n


def interleave(
    loops: dict[str, Callable[[], None]], steps: int, repeats: int, sync: Callable[[], None]
) -> dict[str, list[tuple[float, float]]]:
    for fn in loops.values():
        block(fn, 3, sync)
    names = list(loops)
    out: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(repeats):
        for n in names if r % 2 == 0 else reversed(names):
            out[n].append(block(loops[n], steps, sync))
    return out


# -- the loops ---------------------------------------------------------------------------------


def accum_loops() -> dict[str, Callable[[], None]]:
    import torch.distributed as dist

    from accelkw_core import Accelerator

    acc = Accelerator(cpu=True, gradient_accumulation_steps=MICRO)
    model = mlp()
    model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    assert dist.is_initialized(), "the accelkw loop did not start a process group"
    rank = dist.get_rank()
    data = [(torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)) for _ in range(MICRO)]
    torch.manual_seed(rank)

    def ours() -> None:
        for x, y in data:
            with acc.accumulate(model):
                loss = mse(model(x), y)
                acc.backward(loss)
                opt.step()
                opt.zero_grad()

    def by_hand() -> Callable[[], None]:
        raw = torch.nn.parallel.DistributedDataParallel(mlp())
        raw_opt = torch.optim.AdamW(raw.parameters(), lr=1e-3)

        def hand() -> None:
            for i, (x, y) in enumerate(data):
                ctx = raw.no_sync() if i < MICRO - 1 else contextlib.nullcontext()
                with ctx:
                    loss = mse(raw(x), y) / MICRO
                    loss.backward()
            raw_opt.step()
            raw_opt.zero_grad()

        return hand

    return {"hand": by_hand(), "accelkw": ours, "hand again": by_hand()}


def ddp_loops() -> dict[str, Callable[[], None]]:
    """One DDP step a call, fp32: the loop of bench_launch.py, timed in the same processes."""
    import torch.distributed as dist

    from accelkw_core import Accelerator

    acc = Accelerator(cpu=True)
    model = mlp()
    model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    assert dist.is_initialized(), "the accelkw loop did not start a process group"
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)

    def ours() -> None:
        loss = mse(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()

    def by_hand() -> Callable[[], None]:
        return plain_step(torch.nn.parallel.DistributedDataParallel(mlp()), x, y)

    return {"hand": by_hand(), "accelkw": ours, "hand again": by_hand()}


def fsdp_loops() -> dict[str, Callable[[], None]]:
    from accelkw_fsdp import FullyShardedDataParallelPlugin
    from torch.distributed.fsdp import FSDPModule, fully_shard

    from accelkw_core import Accelerator

    acc = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
    model = mlp()
    model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    inner = acc.unwrap_model(model)
    # Shard by hand exactly the modules the plugin sharded, innermost first, as it does.
    sharded = [name for name, mod in inner.named_modules() if isinstance(mod, FSDPModule)]
    # The plugin passes Accelerate's default, reshard_after_forward=True, for every module; so
    # does the hand-written loop. torch's own default (None) keeps the root's parameters
    # gathered between forward and backward, one all-gather fewer a step: "hand, torch default".
    raw, auto = mlp(), mlp()
    for name in sorted(sharded, key=lambda n: -n.count(".") - (n != "")):
        fully_shard(raw.get_submodule(name) if name else raw, reshard_after_forward=True)
        fully_shard(auto.get_submodule(name) if name else auto)
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
    hand, hand_auto = plain_step(raw, x, y), plain_step(auto, x, y)

    def ours() -> None:
        loss = mse(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()

    ours(), hand(), hand_auto()

    def resharded(module: Any) -> bool:  # does the root free its parameters after forward?
        group = module._get_fsdp_state()._fsdp_param_group
        return group is not None and group.post_forward_mesh_info is not None

    if int(os.environ.get("RANK", "0")) == 0:
        print(
            f"  fsdp: sharded modules {sharded or ['(root)']}, the same by hand; root resharded "
            f"after forward: accelkw {resharded(inner)}, hand {resharded(raw)}, "
            f"hand with torch's default {resharded(auto)}"
        )
    return {"hand": hand, "accelkw": ours, "hand, torch default": hand_auto}


def compile_loops(backend: str) -> dict[str, Callable[[], None]]:
    from accelkw_core import Accelerator

    acc = Accelerator(cpu=True, dynamo_backend=backend)
    model = mlp()
    model, opt = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)

    def ours() -> None:
        loss = mse(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()

    def by_hand() -> Callable[[], None]:
        return plain_step(torch.compile(mlp(), backend=backend), x, y)

    return {"hand": by_hand(), "accelkw": ours, "hand again": by_hand()}


def forward_overhead(repeats: int, n: int = 5000) -> None:
    """Per-forward cost of a prepared model's own autocast over a hand-written one."""
    from accelerate import Accelerator as HFAccelerator

    from accelkw_core import Accelerator

    x = torch.randn(4, 8)
    raw = torch.nn.Linear(8, 8)
    ours = Accelerator(cpu=True, mixed_precision="bf16").prepare(torch.nn.Linear(8, 8))
    theirs = HFAccelerator(cpu=True, mixed_precision="bf16").prepare(torch.nn.Linear(8, 8))
    assert ours(x).dtype == torch.float32 and theirs(x).dtype == torch.float32

    def hand() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = raw(x)
        out.float()

    fns = {"hand": hand, "accelkw": lambda: ours(x), "Accelerate": lambda: theirs(x)}
    with torch.no_grad():
        samples = interleave(fns, n, repeats, lambda: None)
    print(f"forward of a prepared Linear(8, 8), bf16, {n} forwards x {repeats} blocks, no grad")
    base = statistics.median(s[0] for s in samples["hand"]) * 1e6
    for name, values in samples.items():
        med = statistics.median(s[0] for s in values) * 1e6
        cpu = statistics.median(s[1] for s in values) * 1e6
        print(
            f"  {name:<11} {med:7.2f} us wall, {cpu:7.2f} us cpu   {med - base:+6.2f} us over hand"
        )
    pairs = [(a[0] - h[0]) * 1e6 for a, h in zip(samples["accelkw"], samples["hand"], strict=True)]
    extra = statistics.median(pairs)
    verdict = "OK" if extra <= FORWARD_TARGET_US else "MISSED"
    print(
        f"  accelkw forward autocast costs {extra:+.2f} us per forward over the hand-written one"
        f" (median of paired blocks)   target <= {FORWARD_TARGET_US} us   {verdict}"
    )


# -- reporting ---------------------------------------------------------------------------------


def report(title: str, samples: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    print(title)
    ratios = {}
    for i, kind in enumerate(("wall", "cpu")):
        for name, values in samples.items():
            ms = [v[i] * 1000 for v in values]
            print(
                f"  {kind:<4} {name:<18} median {statistics.median(ms):8.3f} ms/step "
                f"(min {min(ms):.3f}, max {max(ms):.3f}, n={len(ms)})"
            )
        each = [o[i] / h[i] for o, h in zip(samples["accelkw"], samples["hand"], strict=True)]
        ratios[kind] = statistics.median(each)
    for other in [n for n in samples if n not in ("hand", "accelkw")]:
        wall, cpu = (
            statistics.median(
                o[i] / h[i] for o, h in zip(samples[other], samples["hand"], strict=True)
            )
            for i in (0, 1)
        )
        what = "the resolution: identical loops" if other == "hand again" else "reported"
        print(f"  {other}/hand {wall:.3f} wall, {cpu:.3f} cpu ({what})")
    ok = "OK" if ratios["wall"] <= STEP_TARGET else "MISSED"
    print(
        f"  accelkw/hand {ratios['wall']:.3f} wall, {ratios['cpu']:.3f} cpu (median of paired "
        f"blocks)   target <= {STEP_TARGET}   {ok}"
    )
    return ratios


def worker(kind: str, steps: int, repeats: int, out: str) -> None:
    """One rank of a 2-process pair (RANK, WORLD_SIZE, MASTER_* in the environment)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    loops = {"accum": accum_loops, "ddp": ddp_loops, "fsdp": fsdp_loops}[kind]()
    samples = interleave(loops, steps, repeats, dist.barrier)
    if os.environ.get("BENCH_PROFILE"):  # where the accelkw loop's time goes, on rank 0
        import cProfile
        import pstats

        for name in ("hand", "accelkw"):
            prof = cProfile.Profile()
            prof.runcall(block, loops[name], steps * repeats, dist.barrier)
            if dist.get_rank() == 0:
                print(f"--- {kind} {name}: cProfile, {steps * repeats} steps, rank 0")
                pstats.Stats(prof).sort_stats("tottime").print_stats(14)
    if dist.get_rank() == 0:
        with open(out, "w") as fh:
            json.dump(samples, fh)
    dist.barrier()
    dist.destroy_process_group()


def two_processes(kind: str, steps: int, repeats: int) -> dict[str, list[tuple[float, float]]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    out = os.path.join(tempfile.mkdtemp(), "samples.json")
    procs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            OMP_NUM_THREADS="1",
        )
        cmd = [sys.executable, __file__, "--worker", kind, "--steps", str(steps)]
        procs.append(subprocess.Popen([*cmd, "--repeats", str(repeats), "--out", out], env=env))
    codes = [p.wait(timeout=900) for p in procs]
    if any(codes):
        raise SystemExit(f"{kind} workers failed: {codes}")
    with open(out) as fh:
        data = json.load(fh)
    return {name: [tuple(v) for v in values] for name, values in data.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--backends", nargs="+", default=["aot_eager"])
    parser.add_argument(
        "--only",
        nargs="+",
        default=["accum", "ddp", "fsdp", "compile", "forward"],
        metavar="LOOP",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.chdir(tempfile.mkdtemp())  # no stray accelkw.toml changes what is composed
    if args.worker:
        worker(args.worker, args.steps, args.repeats, args.out)
        return 0
    for key in [k for k in os.environ if k.startswith("ACCELKW_")]:
        del os.environ[key]
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    print(f"torch {torch.__version__}, 1 thread per process; MLP {LAYERS}x{WIDTH}, batch {BATCH}")
    if "accum" in args.only:
        samples = two_processes("accum", args.steps, args.repeats)
        report(f"gradient accumulation, {MICRO} micro-steps per step, 2-process DDP", samples)
    if "ddp" in args.only:
        samples = two_processes("ddp", args.steps, args.repeats)
        report("DDP, one step a call, fp32, 2 processes (bench_launch.py's loop)", samples)
    if "fsdp" in args.only:
        samples = two_processes("fsdp", args.steps, args.repeats)
        report("FSDP2 (fully_shard), 2 processes", samples)
    if "compile" in args.only:
        for backend in args.backends:
            loops = compile_loops(backend)
            samples = interleave(loops, args.steps, args.repeats, lambda: None)
            report(f"torch.compile, backend {backend!r}, 1 process", samples)
    if "forward" in args.only:
        forward_overhead(args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

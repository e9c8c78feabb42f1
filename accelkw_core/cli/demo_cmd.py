"""``accelkw demo``: train a small model with every installed handler and summarise the run.

The training script is :mod:`accelkw_core.tools.demo`, run on N CPU processes through the same
machinery as ``accelkw launch``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["add_parser", "cmd_demo", "format_summary"]


def add_parser(sub: Any) -> None:
    demo = sub.add_parser(
        "demo",
        help="train a small MLP on synthetic data with every installed handler",
        description="Train a small MLP on synthetic data on N processes (default 2, CPU) "
        "through accelkw launch, with every installed handler composed; print progress, "
        "export a profiler trace when the profile plugin is installed, and summarise.",
    )
    demo.add_argument("--config", help="config file for the run (sets ACCELKW_CONFIG)")
    demo.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        type=int,
        default=2,
        metavar="N",
        help="processes to train on, each on one CPU thread (default 2)",
    )
    demo.add_argument("--steps", type=int, default=60, help="optimizer steps (default 60)")
    demo.add_argument(
        "--trace-dir",
        help="where the profiler traces are written and kept (default: a temporary folder, "
        "removed at the end of the run)",
    )
    demo.add_argument(
        "--mixed-precision",
        choices=("no", "fp16", "bf16"),
        help="default: the config's or ACCELKW_MIXED_PRECISION, else bf16",
    )
    demo.add_argument("--gpu", action="store_true", help="train on CUDA when available")
    demo.add_argument(
        "--fsdp",
        action="store_true",
        help="shard the model: Accelerator(fsdp_plugin=...) of the installed handler that "
        "claims it (accelkw-fsdp); its [handlers] table and environment still apply",
    )
    demo.add_argument(
        "--json",
        action="store_true",
        help="print only the summary, as JSON, on stdout (progress goes to stderr)",
    )
    demo.set_defaults(func=cmd_demo)


def _tracer(settings: Any) -> Any:
    # Any composed handler with an output_trace_dir field (the profile plugin's does).
    for hs in settings.handlers:
        if "output_trace_dir" in hs.handler.field_values():
            return hs
    return None


def _trace_dir(args: argparse.Namespace, tracer: Any) -> tuple[str | None, bool]:
    """Where the traces go, and whether that is a temporary folder to remove after the run."""
    if tracer is None:
        return None, False
    if args.trace_dir:
        return os.path.abspath(str(args.trace_dir)), False
    configured = tracer.handler.output_trace_dir
    if configured:
        return os.path.abspath(str(configured)), False
    import tempfile

    return tempfile.mkdtemp(prefix="accelkw-demo-trace-"), True


def cmd_demo(args: argparse.Namespace) -> int:
    import json
    import tempfile

    from accelkw_core.cli.launch_cmd import PASSTHROUGH, build_command, run_child
    from accelkw_core.cli.render import print_json
    from accelkw_core.config.settings import resolve_settings
    from accelkw_core.errors import ConfigError

    if args.nproc_per_node < 1 or args.steps < 1:
        bad = ("nproc_per_node", args.nproc_per_node) if args.nproc_per_node < 1 else None
        field, value = bad or ("steps", args.steps)
        raise ConfigError("demo", field, value, "an integer >= 1")
    from accelkw_core.tools.demo import sharding_keywords

    # A bad config, or --fsdp with nothing that shards, fails here, not per worker.
    settings = resolve_settings(list(sharding_keywords(args.fsdp).values()), config=args.config)
    env = dict(os.environ)
    # The demo trains on one thread per process; saying so also spares torchrun's banner.
    env.setdefault("OMP_NUM_THREADS", "1")
    # torch's profiler (kineto) prints a probe line at every start and stop; the demo's output
    # is meant to be read, so it stays quiet unless the user chose a log level.
    env.setdefault("KINETO_LOG_LEVEL", "99")
    tracer = _tracer(settings)
    trace_dir, temporary = _trace_dir(args, tracer)
    if trace_dir is not None:
        env[f"ACCELKW_{tracer.name.upper()}__OUTPUT_TRACE_DIR"] = trace_dir
    mixed = args.mixed_precision
    if mixed is None and settings.accelerator_sources.get("mixed_precision") == "default":
        mixed = "bf16"  # show autocast at work unless the user chose a precision
    fd, summary_file = tempfile.mkstemp(prefix="accelkw-demo-", suffix=".json")
    os.close(fd)
    script = ["--steps", str(args.steps), "--summary-file", summary_file]
    script += ["--mixed-precision", mixed] if mixed else []
    script += ["--gpu"] if args.gpu else []
    script += ["--fsdp"] if args.fsdp else []
    launch = argparse.Namespace(nproc_per_node=str(args.nproc_per_node), config=args.config)
    for key in PASSTHROUGH:
        setattr(launch, key, None)
    cmd, env = build_command(launch, "accelkw_core.tools.demo", script, module=True, env=env)
    names = ", ".join(h.name for h in settings.handlers) or "none installed"
    device = "CUDA" if args.gpu else "CPU"
    # With --json, stdout carries the JSON alone: the progress (ours and the workers') goes
    # to stderr.
    progress = sys.stderr if args.json else sys.stdout
    print(
        f"accelkw demo: MLP on synthetic data, {args.nproc_per_node} {device} process(es), "
        f"{args.steps} steps; handlers: {names}",
        file=progress,
        flush=True,
    )
    try:
        code = run_child(
            cmd, env, direct=args.nproc_per_node == 1, stdout=progress if args.json else None
        )
        if code != 0:
            print(f"accelkw demo: the training run failed (exit status {code})", file=sys.stderr)
            return code
        with open(summary_file, encoding="utf-8") as fh:
            summary = json.load(fh)
        summary["trace_dir"] = trace_dir
        summary["traces"] = sorted(os.listdir(trace_dir)) if trace_dir else []
        summary["trace_kept"] = bool(trace_dir) and not temporary
    finally:
        os.unlink(summary_file)
        if temporary and trace_dir is not None:
            import shutil

            shutil.rmtree(trace_dir, ignore_errors=True)
    if args.json:
        print_json(summary)
    else:
        print(format_summary(summary))
    return 0


def _precision_note(summary: dict[str, Any]) -> str:
    if summary["mixed_precision"] == "no" or summary.get("mixed_precision_applied", True):
        return ""
    return " (not applied: no installed handler autocasts, so it trained in float32)"


def format_summary(summary: dict[str, Any]) -> str:
    """The end-of-run summary as text."""
    lines = [
        "",
        "summary",
        f"  processes:       {summary['world_size']} on {summary['device']}, "
        f"mixed precision {summary['mixed_precision']!r}{_precision_note(summary)}",
        "  handlers applied (in order) and what each did:",
    ]
    for entry in summary["log"]:
        mark = "" if entry["applied"] else " [not applied]"
        lines.append(f"    {entry['handler']}: {entry['message']}{mark}")
    timings = summary.get("timings") or {}
    if timings:
        applied = ", ".join(
            f"{name} {t['apply_ms']:.1f} ms" for name, t in timings.items() if "apply_ms" in t
        )
        lines.append(f"  apply time:      {applied} (rank 0)")
    lines.append(
        f"  loss:            {summary['loss_first']:.4f} -> {summary['loss_last']:.4f} "
        f"over {summary['steps']} steps (global batch {summary['global_batch']})"
    )
    if summary.get("skipped_steps"):
        lines.append(f"  skipped steps:   {summary['skipped_steps']} (gradient scaler: inf/NaN)")
    lines.append(f"  throughput:      {summary['samples_per_s']:,.0f} samples/s")
    spread = summary.get("param_spread")
    if summary.get("sharded"):
        sync = f"sharded across {summary['world_size']} processes (each rank holds DTensor shards)"
    elif spread is None:
        sync = "not checked (no process group)"
    else:
        sync = "identical on every rank" if spread == 0 else f"differ by up to {spread:.3g}"
    lines.append(f"  parameters:      {sync}")
    if summary.get("trace_dir") is None:
        lines.append("  trace:           none (no profiler installed: pip install accelkw-profile)")
    elif summary["traces"] and not summary.get("trace_kept", True):
        files = ", ".join(summary["traces"])
        lines.append(
            f"  trace:           {files}, written to a temporary folder and removed "
            "(--trace-dir DIR keeps them)"
        )
    elif summary["traces"]:
        files = ", ".join(summary["traces"])
        lines.append(f"  trace:           {summary['trace_dir']} ({files})")
    else:
        lines.append(f"  trace:           none written to {summary['trace_dir']}")
    lines.append(f"  time:            {summary['seconds']:.1f} s of training")
    return "\n".join(lines)

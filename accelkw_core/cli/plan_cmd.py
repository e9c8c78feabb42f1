"""``accelkw plan``: what a run would compose and do here, without doing any of it."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from accelkw_core.facts.precision import MIXED_PRECISION_MODES

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from accelkw_core.config.settings import Settings
    from accelkw_core.contract.handler import KwargsHandler
    from accelkw_core.discovery.registry import Registry
    from accelkw_core.errors import PointConflictError

__all__ = [
    "Conflict",
    "add_parser",
    "build_plan",
    "cmd_plan",
    "conflict_json",
    "default_conflict_runs",
    "default_conflicts",
    "denied_plugins",
    "launch_conflicts",
    "planned_conflicts",
]

PRECISIONS = ("no", "fp16", "bf16")


def add_parser(sub: Any) -> None:
    plan = sub.add_parser(
        "plan",
        help="dry run: the handlers a run would apply, their values and what each would do",
        description="Show the handlers a run would compose, in apply order, with their effective "
        "values (* marks a value that differs from the default, with where it came from) and "
        "what each would do on this machine and world size. Applies nothing and creates no "
        "process group. Exit status 1 when two handlers would contribute to an extension point "
        "that takes one (each contributor named, with how to leave it out).",
    )
    plan.add_argument("--config", help="the config file (default: the usual lookup)")
    plan.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        type=int,
        default=None,
        help="the world size to plan for (default: WORLD_SIZE, else 1)",
    )
    plan.add_argument(
        "--mixed-precision",
        "--mixed_precision",
        choices=MIXED_PRECISION_MODES,
        default=None,
        help="the mixed precision to plan for (default: ACCELKW_MIXED_PRECISION, the config "
        "file, else 'no')",
    )
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.set_defaults(func=cmd_plan)


def build_plan(
    config: str | None, nproc: int | None, mixed_precision: str | None = None
) -> tuple[Settings, dict[str, Any]]:
    """The settings and the plan as JSON data; raises ``AccelkwError`` for a bad config."""
    from accelkw_core.cli.settings_view import settings_json
    from accelkw_core.config.settings import resolve_settings
    from accelkw_core.discovery.default_registry import get_registry
    from accelkw_core.errors import ConfigError
    from accelkw_core.facts.environment import env_int
    from accelkw_core.runtime.composing.planning import plan_conflicts, plan_run
    from accelkw_core.runtime.run_state import RunState

    registry = get_registry()
    settings = resolve_settings(config=config, registry=registry, mixed_precision=mixed_precision)
    world_size = nproc if nproc is not None else env_int(os.environ, "WORLD_SIZE", 1, 1)
    if world_size < 1:
        raise ConfigError("plan", "nproc_per_node", world_size, "an integer >= 1")
    state = RunState(
        mixed_precision=settings.mixed_precision,
        cpu=settings.cpu,
        world_size=world_size,
        local_world_size=world_size,
    )
    installed = registry.handlers()
    versions = {name: info.version for name, info in installed.items()}
    data = settings_json(settings, versions)
    with _launch_rendezvous(world_size):
        plans, gaps = plan_run(settings, state, registry)
    for entry, planned in zip(data["handlers"], plans, strict=True):
        entry["plan"] = planned.summary
        entry["plan_ms"] = round(planned.ms, 3)
        entry["steps"] = (
            [
                {"message": step.message, "point": step.point, "provides": list(step.provides)}
                for step in planned.plan.steps
            ]
            if planned.plan is not None
            else []
        )
    data["world_size"] = world_size
    data["device_type"] = state.device_type
    data["warnings"] = gaps
    who = {hs.name: (hs.distribution, hs.origin) for hs in settings.handlers}
    data["conflicts"] = [conflict_json(c) for c in plan_conflicts(plans, who)]
    data["disabled"].update(denied_plugins(registry))
    return settings, data


def conflict_json(error: PointConflictError) -> dict[str, Any]:
    """A point conflict as the JSON views give it: the point, key, contributors and message."""
    return {
        "point": error.point,
        "key": error.key,
        "handlers": [
            {"name": c.handler, "distribution": c.distribution, "origin": c.origin}
            for c in error.contributors
        ],
        "message": str(error),
    }


def denied_plugins(registry: Registry) -> dict[str, str]:
    """The installed plugins an allow- or deny-list keeps from loading: name -> why.

    They were never imported, so their handlers are unknown: the plugin is named instead.
    """
    from accelkw_core.discovery.records import DISABLED

    return {
        f"plugin {r.name}": f"{r.distribution or 'code'}: {r.reason}"
        for r in registry.plugins()
        if r.status == DISABLED
    }


def planned_conflicts(settings: Settings, registry: Registry) -> list[PointConflictError]:
    """The point conflicts a run with ``settings`` would meet (world size from ``WORLD_SIZE``),
    for the commands that check a setup without planning it in full."""
    from accelkw_core.facts.environment import env_int
    from accelkw_core.runtime.composing.planning import plan_conflicts, plan_run
    from accelkw_core.runtime.run_state import RunState

    world_size = env_int(os.environ, "WORLD_SIZE", 1, 1)
    state = RunState(
        mixed_precision=settings.mixed_precision,
        cpu=settings.cpu,
        world_size=world_size,
        local_world_size=world_size,
        device_type=None if not settings.cpu and _torch_installed() else "cpu",
    )
    with _launch_rendezvous(world_size):
        plans, _ = plan_run(settings, state, registry)
    who = {hs.name: (hs.distribution, hs.origin) for hs in settings.handlers}
    return plan_conflicts(plans, who)


class Conflict:
    """A point conflict and the runs it appears on: ``(mixed_precision, world_size)`` pairs.

    ``condition`` says what makes the handlers conflict when it is not every run planned
    (``"only under mixed_precision='fp16'"``); ``message`` is the error's, with it.
    """

    __slots__ = ("error", "occurs", "planned")

    def __init__(
        self,
        error: PointConflictError,
        occurs: set[tuple[str, int]],
        planned: set[tuple[str, int]],
    ) -> None:
        self.error = error
        self.occurs = occurs
        self.planned = planned

    @property
    def handlers(self) -> list[str]:
        return [c.handler for c in self.error.contributors]

    @property
    def condition(self) -> str:
        precisions = [p for p in PRECISIONS if any(p == q for q, _ in self.occurs)]
        planned_precisions = {p for p, _ in self.planned}
        worlds = {w for _, w in self.occurs}
        parts = []
        if set(precisions) != planned_precisions:
            parts.append("mixed_precision=" + " or ".join(repr(p) for p in precisions))
        if worlds != {w for _, w in self.planned}:
            parts.append("several processes" if min(worlds) > 1 else f"{min(worlds)} process(es)")
        return f"only under {' on '.join(parts)}" if parts else ""

    @property
    def message(self) -> str:
        condition = self.condition
        return f"{self.error} ({condition})" if condition else str(self.error)

    def json(self) -> dict[str, Any]:
        return {
            **conflict_json(self.error),
            "message": self.message,
            "condition": self.condition,
        }


def _plan_conflicts_under(
    handlers: Sequence[tuple[str, KwargsHandler]],
    who: Mapping[str, tuple[str | None, str | None]],
    runs: Sequence[tuple[str, int]],
    cpu: bool = False,
) -> list[Conflict]:
    """The conflicts of ``handlers`` planned on each run of ``runs``, each once, with the runs
    it appears on."""
    from accelkw_core.runtime.composing.planning import plan_conflicts, plan_handler
    from accelkw_core.runtime.run_state import RunState

    found: dict[tuple[str, str | None, tuple[str, ...]], Conflict] = {}
    device = None if not cpu and _torch_installed() else "cpu"
    for precision, world_size in runs:
        state = RunState(
            mixed_precision=precision,
            world_size=world_size,
            local_world_size=world_size,
            device_type=device,
        )
        with _launch_rendezvous(world_size):
            plans = [plan_handler(name, h, state) for name, h in handlers]
        for error in plan_conflicts(plans, who):
            key = (error.point, error.key, tuple(c.handler for c in error.contributors))
            entry = found.setdefault(key, Conflict(error, set(), set(runs)))
            entry.occurs.add((precision, world_size))
    return list(found.values())


def default_conflicts(registry: Registry) -> list[PointConflictError]:
    """The point conflicts among the installed handlers on by default (no config read), planned
    in each mixed precision on one and two processes: what ``plugins list --strict`` reports,
    a function of what is installed only. Each conflict once, by its point, key and handlers."""
    return [c.error for c in default_conflict_runs(registry)]


def default_conflict_runs(registry: Registry) -> list[Conflict]:
    """:func:`default_conflicts`, each with the runs it appears on (its ``condition``)."""
    from accelkw_core.config.selection import handler_key, resolve_handlers

    handlers = resolve_handlers((), registry=registry)
    who: dict[str, tuple[str | None, str | None]] = {}
    for handler in handlers:
        info = registry.info_for(type(handler))
        who[handler_key(handler)] = (info.distribution if info else None, "default")
    runs = [(p, w) for w in (1, 2) for p in PRECISIONS]
    return _plan_conflicts_under([(handler_key(h), h) for h in handlers], who, runs)


def launch_conflicts(settings: Settings, registry: Registry, world_size: int) -> list[Conflict]:
    """The point conflicts a launch with ``settings`` on ``world_size`` processes would meet
    in its workers, each saying what makes them conflict: planned in the launcher, before any
    worker starts, in every mixed precision (the run's own decides which are errors)."""
    handlers = [(hs.name, hs.handler) for hs in settings.handlers]
    who = {hs.name: (hs.distribution, hs.origin) for hs in settings.handlers}
    own = (settings.mixed_precision, world_size)
    # Planned for the CPU: the launcher imports no torch to ask for CUDA (3 s on a busy
    # machine, every launch), and the device changes the points a handler contributes to
    # little. The other precisions are planned only to explain a conflict found.
    if not _plan_conflicts_under(handlers, who, [own], cpu=True):
        return []
    runs = [(p, world_size) for p in PRECISIONS]
    found = _plan_conflicts_under(handlers, who, runs, cpu=True)
    return [c for c in found if own in c.occurs]


def _torch_installed() -> bool:
    # Without torch (a torch-free install checking its config) no run can start, and the device
    # changes which points a handler contributes to little: plan for the CPU, importing nothing.
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except ImportError:
        return False


@contextlib.contextmanager
def _launch_rendezvous(world_size: int) -> Iterator[None]:
    # Plan the rendezvous a run will really use: `accelkw launch` (torchrun) hands workers
    # env:// with MASTER_ADDR and a free MASTER_PORT it picks, unless they are set already.
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
    if world_size <= 1 or not missing:
        yield
        return
    stand_in = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "<a free port accelkw launch picks>"}
    for var in missing:
        os.environ[var] = stand_in[var]
    try:
        yield
    finally:
        for var in missing:
            os.environ.pop(var, None)


def cmd_plan(args: argparse.Namespace) -> int:
    from accelkw_core.cli.render import print_json
    from accelkw_core.cli.settings_view import accelerator_lines, handler_lines

    settings, data = build_plan(args.config, args.nproc_per_node, args.mixed_precision)
    failed = 1 if data["conflicts"] else 0
    if args.json:
        print_json(data)
        return failed
    print(
        f"plan: world size {data['world_size']}, device {data['device_type']}, "
        f"config {settings.config.label}"
    )
    print("accelerator:")
    for line in accelerator_lines(settings):
        print(line)
    if not data["handlers"]:
        print("handlers: none (pip install accelkw-autocast accelkw-ddp ... to add some)")
    else:
        print("handlers, in apply order:")
    for i, (entry, hs) in enumerate(zip(data["handlers"], settings.handlers, strict=True), 1):
        for line in handler_lines(hs, i, entry["version"]):
            print(f"  {line}")
        if not entry["steps"]:
            print(f"     -> {entry['plan']}")
        for step in entry["steps"]:
            # Each step names the extension point it contributes to (or that it is a note).
            where = step["point"] or ("run" if step["provides"] else "note")
            print(f"     -> [{where}] {step['message']}")
    for name, reason in data["disabled"].items():
        print(f"disabled: {name} ({reason})")
    for note in data["notes"]:
        print(f"note: {note}")
    for warning in data["warnings"]:
        print(f"warning: {warning}")
    for conflict in data["conflicts"]:
        print(f"accelkw: error: {conflict['message']}", file=sys.stderr)
    return failed

"""``ProfileKwargs``: a configured ``torch.profiler.profile``, chosen ranks, Chrome trace export."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from accelkw_core.plugin import PROFILER, ConfigError, KwargsHandler, Plan, handler_field, suggest
from accelkw_profile.trace import NoOpProfiler, check_overwritable, export_trace, prepare_trace_dir

if TYPE_CHECKING:
    import torch

    from accelkw_core.plugin import AcceleratorState

__all__ = ["SCHEDULE_KEYS", "TRACE_NAME", "ProfileKwargs"]

# The keys torch.profiler.schedule takes that the reference documents, in its order.
SCHEDULE_KEYS = ("wait", "warmup", "active", "repeat", "skip_first")
# Accelerate's PROFILE_PATTERN_NAME: one trace per process, named by its global rank.
TRACE_NAME = "profile_{rank}.json"
# Our activity names and the torch.profiler.ProfilerActivity member each stands for.
# Boolean fields named as torch.profiler.profile's keywords.
_TORCH_SWITCHES = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules")
_ACTIVITIES = {"cpu": "CPU", "xpu": "XPU", "mtia": "MTIA", "cuda": "CUDA", "hpu": "HPU"}


@dataclass
class ProfileKwargs(KwargsHandler):
    """Customise the profiler of ``Accelerator.profile()`` (Accelerate's ``ProfileKwargs``).

    :meth:`build` returns the configured profiler; :meth:`context` is what ``profile()`` enters:
    on a selected rank it profiles the block and, with ``output_trace_dir`` set, writes a Chrome
    trace ``profile_{rank}.json`` there on exit; on other ranks it yields a
    :class:`~accelkw_profile.NoOpProfiler`.

    Example::

        from accelkw_profile import ProfileKwargs

        handler = ProfileKwargs(
            activities=["cpu"],
            schedule_option={"wait": 1, "warmup": 1, "active": 2, "repeat": 1},
            output_trace_dir="traces",
            profile_ranks=[0],
        )
        accelerator = Accelerator(kwargs_handlers=[handler])
        with accelerator.profile() as prof:
            for batch in loader:
                train_step(batch)
                prof.step()
    """

    name: ClassVar[str] = "profile"

    # RUF009 below: handler_field returns a dataclasses.Field with a None default, like
    # dataclasses.field; ruff only knows it as a call.

    activities: list[Literal["cpu", "xpu", "mtia", "cuda", "hpu"]] | None = handler_field(
        None, doc="What to profile: 'cpu', 'cuda', 'xpu', 'mtia', 'hpu'; None lets torch choose."
    )
    schedule_option: dict[str, int] | None = handler_field(
        None,
        doc="torch.profiler.schedule arguments: wait, warmup, active (all three required, as "
        "torch requires them), repeat, skip_first.",
    )
    on_trace_ready: Callable[..., Any] | None = handler_field(
        None, doc="Called with the profiler each time a schedule cycle's trace is ready."
    )
    record_shapes: bool = handler_field(False, doc="Record the input shapes of operators.")
    profile_memory: bool = handler_field(False, doc="Track tensor memory allocation and release.")
    with_stack: bool = handler_field(False, doc="Record the source location of operators.")
    with_flops: bool = handler_field(False, doc="Estimate FLOPs of matrix multiplications, convs.")
    with_modules: bool = handler_field(False, doc="Record the module hierarchy of operators.")
    output_trace_dir: str | None = handler_field(
        None, doc="Write a Chrome trace profile_{rank}.json here when profiling ends."
    )
    profile_ranks: list[int] | None = handler_field(
        None, doc="The global ranks that profile; None profiles every rank, as Accelerate does."
    )

    def check_values(self) -> None:
        if self.activities is not None:
            seen: set[str] = set()
            for activity in self.activities:
                if activity in seen:
                    raise ConfigError(
                        self.name, "activities", self.activities, "each activity at most once"
                    )
                seen.add(activity)
        if self.schedule_option is not None:
            _check_schedule(self.name, self.schedule_option)
        if self.output_trace_dir is not None and (
            not self.output_trace_dir.strip() or "\x00" in self.output_trace_dir
        ):
            raise ConfigError(
                self.name, "output_trace_dir", self.output_trace_dir, "a path (no NUL characters)"
            )
        for i, rank in enumerate(self.profile_ranks or ()):
            if rank < 0:
                raise ConfigError(self.name, f"profile_ranks[{i}]", rank, "a rank >= 0")

    # -- building ------------------------------------------------------------------------------

    def profiler_activities(self) -> list[torch.profiler.ProfilerActivity] | None:
        """``activities`` as ``ProfilerActivity`` members; a ConfigError names an unsupported one."""
        if self.activities is None:
            return None
        import torch

        # torch leaves supported_activities() unannotated; it returns a set of ProfilerActivity.
        supported = torch.profiler.supported_activities()  # type: ignore[no-untyped-call]
        available = [n for n, m in _ACTIVITIES.items() if _member(torch, m) in supported]
        out = []
        for activity in self.activities:
            member = _member(torch, _ACTIVITIES[activity])
            if member is None or member not in supported:
                raise ConfigError(
                    self.name,
                    "activities",
                    activity,
                    "an activity this machine supports: " + ", ".join(map(repr, available)),
                )
            out.append(member)
        return out

    def profiler_schedule(self) -> Callable[[int], Any] | None:
        """``torch.profiler.schedule`` from ``schedule_option``."""
        if self.schedule_option is None:
            return None
        import torch

        schedule: Callable[[int], Any] = torch.profiler.schedule(**self.schedule_option)
        return schedule

    def build(self) -> torch.profiler.profile:
        """A new ``torch.profiler.profile`` configured by every field (not started)."""
        import torch

        # The boolean fields carry torch's keyword names, so they pass through by name.
        switches = {name: getattr(self, name) for name in _TORCH_SWITCHES}
        return torch.profiler.profile(
            activities=self.profiler_activities(),
            schedule=self.profiler_schedule(),
            on_trace_ready=self.on_trace_ready,
            **switches,
        )

    # -- running -------------------------------------------------------------------------------

    def selects(self, rank: int) -> bool:
        """Whether the process of global rank ``rank`` profiles."""
        return self.profile_ranks is None or rank in self.profile_ranks

    def trace_path(self, rank: int) -> str | None:
        """Where rank ``rank`` writes its trace, or ``None`` when no trace is written."""
        if self.output_trace_dir is None:
            return None
        return os.path.join(self.output_trace_dir, TRACE_NAME.format(rank=rank))

    def context(self, state: AcceleratorState) -> contextlib.AbstractContextManager[Any]:
        """The context ``Accelerator.profile()`` enters on ``state``'s rank; it yields the profiler.

        On a selected rank: the trace path is checked before profiling starts (so a long run
        never ends in a refused export), the built profiler runs for the block, and on a clean
        exit the Chrome trace is exported. On other ranks it yields a ``NoOpProfiler``.
        Synchronising ranks after export is the runtime's job.
        """
        return self._profiling(state.rank)

    @contextlib.contextmanager
    def _profiling(self, rank: int) -> Iterator[Any]:
        if not self.selects(rank):
            yield NoOpProfiler()
            return
        path = self.trace_path(rank)
        if path is not None:
            prepare_trace_dir(os.path.dirname(path))
            check_overwritable(path)
        with self.build() as profiler:
            yield profiler
        if path is not None:
            export_trace(profiler, path)

    def plan(self, state: AcceleratorState) -> Plan:
        """What ``profile()`` will do on ``state``'s rank; builds no profiler.

        Activities set explicitly are checked against this machine (which imports torch), so
        ``accelkw plan`` shows ``ProfileKwargs(activities=["cuda"])`` failing on a CPU machine.
        """
        text = self._plan(state)
        if self.activities is not None and self.selects(state.rank):
            try:
                self.profiler_activities()
            except ConfigError as exc:
                # Accelerate fails when profile() is entered, not when the run is set up: the
                # profiler is still contributed, and entering it raises this error (without a
                # contribution, profile() would run unprofiled with only a warning).
                text = f"would fail when profile() is entered: {exc}"
        return Plan(self.name).contribute(PROFILER, functools.partial(self.context, state), text)

    def _plan(self, state: AcceleratorState) -> str:
        # Said for the whole run, then for this rank: the demo and `accelkw plan` show one
        # rank's plan, which must not read as if only that rank profiled.
        ranks = [r for r in range(state.world_size) if self.selects(r)]
        missing = [r for r in self.profile_ranks or () if r >= state.world_size]
        note = (
            f" (profile_ranks {missing} name no rank of world size {state.world_size})"
            if missing
            else ""
        )
        if state.world_size == 1 or len(ranks) == 1:
            who = f"rank {ranks[0]} profiles" if ranks else "no rank profiles"
        elif len(ranks) == state.world_size:
            who = f"every rank (0-{state.world_size - 1}) profiles"
        else:
            who = f"ranks {', '.join(map(str, ranks))} profile" if ranks else "no rank profiles"
        if not self.selects(state.rank):
            return (
                f"{who} in profile(); rank {state.rank} is not in profile_ranks "
                f"{self.profile_ranks}, so its profile() yields a no-op profiler{note}"
            )
        parts = [f"activities {self.activities}" if self.activities else "torch's activities"]
        if self.schedule_option is not None:
            parts.append(f"schedule {self.schedule_option}")
        flags = [f for f in ("record_shapes", "profile_memory", "with_stack", "with_flops",
                             "with_modules") if getattr(self, f)]  # fmt: skip
        if flags:
            parts.append(", ".join(flags))
        if self.on_trace_ready is not None:
            parts.append(f"on_trace_ready {getattr(self.on_trace_ready, '__name__', 'callable')}")
        if self.output_trace_dir is None:
            parts.append("no trace file")
        elif len(ranks) == 1:
            parts.append(f"Chrome trace to {self.trace_path(ranks[0])}")
        else:
            names = ", ".join(os.path.basename(str(self.trace_path(r))) for r in ranks)
            parts.append(f"Chrome traces to {self.output_trace_dir} ({names})")
        return f"{who} in profile(): {'; '.join(parts)}{note}"


def _member(torch: Any, name: str) -> Any:
    return getattr(torch.profiler.ProfilerActivity, name, None)


def _check_schedule(handler: str, options: dict[str, int]) -> None:
    for key, value in options.items():
        if key not in SCHEDULE_KEYS:
            raise ConfigError(
                handler,
                f"schedule_option[{key!r}]",
                value,
                "a key among " + ", ".join(SCHEDULE_KEYS),
                suggestion=suggest(key, SCHEDULE_KEYS),
            )
        least = 1 if key == "active" else 0
        if value < least:
            raise ConfigError(handler, f"schedule_option[{key!r}]", value, f"an integer >= {least}")
    missing = [k for k in ("wait", "warmup", "active") if k not in options]
    if missing:
        # torch.profiler.schedule requires all three, and so does Accelerate's build(): a
        # schedule Accelerate refuses is refused here too, at construction.
        raise ConfigError(
            handler,
            "schedule_option",
            options,
            "a mapping with 'wait', 'warmup' and 'active' step counts (torch.profiler.schedule "
            f"requires them; missing: {', '.join(missing)})",
        )

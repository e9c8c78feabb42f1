"""``RunState``: the facts of the run and what handlers contributed to its extension points."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, cast, overload

from accelkw_core.contract.extension_point import Contribution
from accelkw_core.contract.points import KEYED, POINTS, TEARDOWN, ExtensionPoint, single_slot
from accelkw_core.contract.state_view import LogEntry, StatePoint
from accelkw_core.errors import ConfigError, Contributor, PointConflictError
from accelkw_core.facts.environment import env_int
from accelkw_core.facts.precision import MIXED_PRECISION_MODES

# Imported for its effect: the ``accelkw`` logger quiet (WARNING) unless asked, before any
# handler records a line through ``accelkw.<handler>``.
from accelkw_core.log_setup import LOGGER as _LOGGER  # noqa: F401

if TYPE_CHECKING:
    import torch

    from accelkw_core.contract.handler import KwargsHandler

__all__ = [
    "MIXED_PRECISION_MODES",
    "RunState",
    "current_gradients",
    "current_state",
    "make_current",
]


Teardown = Callable[[], None]
T = TypeVar("T")
P = ParamSpec("P")


class RunState:
    """The facts of a run (rank, world size, device, mixed precision) and what handlers set up.

    Handlers take part in the run only through the extension points of
    :mod:`accelkw_core.contract.points`: :meth:`contribute` adds to one (checking its
    cardinality), :meth:`values` reads one in order; an undo action is a contribution to
    ``TEARDOWN`` like any other (from a plan, or from a ``plan.run`` action that created what it
    undoes). :meth:`record` keeps a log of what each handler did or why it did nothing;
    :attr:`capabilities` says which handler provides what (``"gradient_sync"``, ...). What a
    handler shares with the user is an ``ATTRIBUTE`` contribution, read typed with
    ``accelerator.extra(name, kind)``.

    It implements :class:`accelkw_core.contract.state_view.AcceleratorState`, the protocol a
    handler is typed against (``accelkw_core.plugin.AcceleratorState``).
    """

    def __init__(
        self,
        *,
        mixed_precision: str = "no",
        cpu: bool = False,
        rank: int = 0,
        local_rank: int = 0,
        world_size: int = 1,
        local_world_size: int = 1,
        master_addr: str | None = None,
        master_port: int | None = None,
        device_type: str | None = None,
    ) -> None:
        if mixed_precision not in MIXED_PRECISION_MODES:
            raise ConfigError(
                "accelerator",
                "mixed_precision",
                mixed_precision,
                "one of " + ", ".join(repr(m) for m in MIXED_PRECISION_MODES),
            )
        if world_size < 1:
            raise ConfigError("accelerator", "world_size", world_size, "an integer >= 1")
        if not 0 <= rank < world_size:
            raise ConfigError("accelerator", "rank", rank, f"an integer in [0, {world_size})")
        self.mixed_precision = mixed_precision
        self.cpu = cpu
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size
        self.local_world_size = local_world_size
        self.master_addr = master_addr
        self.master_port = master_port
        self.device_type = device_type if device_type is not None else _detect_device(cpu)

        self.handlers: dict[str, KwargsHandler] = {}
        self.distributions: dict[str, str | None] = {}
        self.capabilities: dict[str, str] = {}
        self._points: dict[str, list[Contribution]] = {}
        #: Grows with every contribution, so a reader may cache what it read (the hot paths).
        self.version = 0
        self.log: list[LogEntry] = []
        self.timings: dict[str, dict[str, float]] = {}

    @classmethod
    def from_env(
        cls,
        *,
        mixed_precision: str = "no",
        cpu: bool = False,
        env: Mapping[str, str] | None = None,
        device_type: str | None = None,
    ) -> RunState:
        """Read the run's facts from the variables torchrun sets (``RANK``, ``WORLD_SIZE``, …)."""
        env = os.environ if env is None else env
        world_size = env_int(env, "WORLD_SIZE", 1, 1)
        rank = env_int(env, "RANK", 0, 0)
        local_rank = env_int(env, "LOCAL_RANK", 0, 0)
        local_world_size = env_int(env, "LOCAL_WORLD_SIZE", world_size, 1)
        port = env.get("MASTER_PORT")
        master_port = env_int(env, "MASTER_PORT", 0, 0) if port else None
        return cls(
            mixed_precision=mixed_precision,
            cpu=cpu,
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            local_world_size=local_world_size,
            master_addr=env.get("MASTER_ADDR") or None,
            master_port=master_port,
            device_type=device_type,
        )

    @property
    def distributed(self) -> bool:
        """Whether more than one process takes part in the run."""
        return self.world_size > 1

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        """The ``torch.device`` of this process (``cuda:LOCAL_RANK`` on CUDA)."""
        import torch

        if self.device_type == "cpu":
            return torch.device("cpu")
        return torch.device(self.device_type, self.local_rank)

    def agree(self, flag: bool, *, how: Literal["any", "all"] = "any") -> bool:
        """``flag`` agreed by every process: ``True`` everywhere when it is on any process
        (``how="all"``: when it is on all). Every process calls it; with one, it is ``flag``."""
        if not self.distributed:
            return bool(flag)
        from accelkw_core.runtime.collectives import agree

        return agree(flag, self, how)

    def agree_value(
        self, value: float, *, op: Literal["sum", "mean", "max", "min"] = "mean"
    ) -> float:
        """``value`` combined over every process by ``op``: the same number on every rank
        (``"mean"``: the average, ``"sum"``, ``"max"``, ``"min"``). Every process calls it, as
        often; with one, it is ``float(value)``."""
        from accelkw_core.runtime.collectives import agree_value

        return agree_value(value, self, op)

    def record(self, handler: str, message: str, *, applied: bool = True) -> None:
        """Log what ``handler`` did (``applied=True``) or why it did nothing.

        The line also goes to the standard ``logging`` logger ``accelkw.<handler>`` (INFO when
        applied, DEBUG otherwise), quiet unless the application or ``ACCELKW_LOG_LEVEL`` says
        (:mod:`accelkw_core.log_setup`).
        """
        self.log.append(LogEntry(handler, message, applied))
        import logging  # here, not at module level: plugins import this tier when listed

        logger = logging.getLogger(f"accelkw.{handler}")
        level = logging.INFO if applied else logging.DEBUG
        if logger.isEnabledFor(level):
            logger.log(level, "rank %d: %s", self.rank, message)

    def timed(self, handler: str, what: str, started: float) -> float:
        """Record in :attr:`timings` that ``handler``'s ``what`` (``"apply"``, ``"teardown"``)
        took since ``started`` (a ``time.perf_counter()``); returns the milliseconds."""
        ms = (time.perf_counter() - started) * 1000
        times = self.timings.setdefault(handler, {})
        # A handler may stack several teardowns: their times add up.
        times[f"{what}_ms"] = times.get(f"{what}_ms", 0.0) + ms
        import logging

        logging.getLogger(f"accelkw.{handler}").debug(
            "rank %d: %s took %.2f ms", self.rank, what, ms
        )
        return ms

    def messages(self, handler: str) -> list[str]:
        """The log lines recorded by ``handler``."""
        return [e.message for e in self.log if e.handler == handler]

    def contribute(self, point: StatePoint[P], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """``state.contribute(POINT, handler, value, key=None)``: add ``handler``'s ``value``
        to ``POINT``, checking its cardinality.

        ``POINT`` is a constant of :mod:`accelkw_core.plugin` (``MODEL_WRAPPER``), which types
        ``value``; a keyed point's ``key`` defaults to the handler's name. Raises
        :class:`~accelkw_core.errors.PointConflictError` for a second contribution to a point
        of cardinality one (whatever its key) or to one key of a keyed point, naming both
        handlers.
        """
        spec = POINTS.get(str(point))
        if spec is None:
            raise ValueError(
                f"unknown extension point {str(point)!r}; the points are: {', '.join(POINTS)}"
            )
        # The registered point makes the entry: the constant itself, or the one a name (the
        # deprecated, untyped form) names; the arguments were typed against that point.
        made = cast("StatePoint[P]", spec).entry(*args, **kwargs)
        entries = self._points.setdefault(spec.name, [])
        # A point of cardinality one takes one contribution, whatever key it was given: the
        # runtime reads one value, so a second would be silently ignored.
        mine = single_slot(spec, made.handler, made.key)
        clash = [o for o in entries if mine and single_slot(spec, o.handler, o.key) == mine]
        if clash:
            raise PointConflictError.of(
                spec.name,
                [Contributor(c.handler, self.distributions.get(c.handler)) for c in (*clash, made)],
                made.key if spec.cardinality == KEYED else None,
            )
        entries.append(made)
        self.version += 1

    def contributions(self, point: ExtensionPoint[Any] | str) -> list[Contribution]:
        """The contributions to ``point``, in the order they were made."""
        return list(self._points.get(str(point), ()))

    @overload
    def values(self, point: ExtensionPoint[T]) -> list[T]: ...

    @overload
    def values(self, point: str) -> list[Any]: ...

    def values(self, point: ExtensionPoint[Any] | str) -> list[Any]:
        """The contributed values of ``point``, in order (empty when nobody contributed).

        ``state.values(FORWARD_CONTEXT)`` is a ``list[ForwardContext]``; a name gives ``list[Any]``.
        """
        return [c.value for c in self._points.get(str(point), ())]

    @overload
    def keyed(self, point: ExtensionPoint[T]) -> dict[str, T]: ...

    @overload
    def keyed(self, point: str) -> dict[str, Any]: ...

    def keyed(self, point: ExtensionPoint[Any] | str) -> dict[str, Any]:
        """The contributions of a keyed point (``CHECKPOINT``, ``ATTRIBUTE``) by key."""
        return {str(c.key): c.value for c in self._points.get(str(point), ())}

    def provide(self, capability: str, handler: str) -> None:
        """Record that ``handler`` provides ``capability`` (read by the runtime's gap checks)."""
        self.capabilities.setdefault(capability, handler)

    @property
    def teardowns(self) -> list[tuple[str, Teardown]]:
        """The ``TEARDOWN`` contributions not run yet, as ``(handler, undo)`` in the order made."""
        return [(c.handler, c.value) for c in self._points.get(TEARDOWN.name, ())]

    def run_teardowns(self) -> list[tuple[str, BaseException]]:
        """Run every teardown in reverse order, once; return the ones that raised.

        A failing teardown never stops the others: each is tried, and its error returned. An
        interruption (Ctrl-C) in one does not stop the others either: it is raised once every
        teardown has run.
        """
        failures: list[tuple[str, BaseException]] = []
        interrupted: BaseException | None = None
        stack = self._points.get(TEARDOWN.name, [])
        while stack:
            name, fn, _ = stack.pop()
            started = time.perf_counter()
            try:
                fn()
                self.timed(name, "teardown", started)
            except Exception as exc:
                failures.append((name, exc))
                self.record(name, f"teardown failed: {type(exc).__name__}: {exc}", applied=False)
            except BaseException as exc:
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted
        return failures

    def reset_points(self) -> None:
        """Drop every contribution (used after a failed composition, once teardowns ran)."""
        self._points = {}
        self.version += 1
        self.capabilities = {}
        self.handlers = {}

    def scratch(self) -> RunState:
        """A state with this one's facts and nothing contributed: for a handler passed per call.

        ``accelerator.autocast(autocast_handler=...)`` plans its handler on a scratch state and
        enters what it contributes, so a per-call override goes through the same points.
        """
        other = RunState.__new__(RunState)
        other.__dict__.update(self.__dict__)
        other.handlers, other.distributions, other.capabilities = {}, {}, {}
        other._points, other.log, other.timings = {}, [], {}
        return other

    def summary(self) -> list[str]:
        """The log as printable lines."""
        return [str(e) for e in self.log]

    # -- Accelerate's names for the facts (``accelerator.state.num_processes``, ...) -------------

    @property
    def num_processes(self) -> int:
        return self.world_size

    @property
    def process_index(self) -> int:
        return self.rank

    @property
    def local_process_index(self) -> int:
        return self.local_rank

    @property
    def is_local_main_process(self) -> bool:
        return self.local_rank == 0

    @property
    def is_last_process(self) -> bool:
        return self.rank == self.world_size - 1

    @property
    def deepspeed_plugin(self) -> None:
        """Always ``None``: accelkw runs no DeepSpeed (scripts test it to pick their code path)."""
        return None

    @property
    def backend(self) -> str | None:
        """The process group's backend (``"gloo"``, ``"nccl"``) once one is up, else ``None``."""
        import torch.distributed as dist

        if self.distributed and dist.is_available() and dist.is_initialized():
            return str(dist.get_backend())
        return None

    def __str__(self) -> str:
        # Accelerate's description of the run, line for line, so logs read the same.
        from accelkw_core.runtime.kinds import distributed_type

        backend = self.backend
        # Accelerate's device of a multi-process CPU run is ``cpu:0`` (the index of the one CPU
        # device); accelkw's is ``cpu``, the same device. The description reads as Accelerate's.
        device = "cpu:0" if self.distributed and self.device_type == "cpu" else self.device
        return (
            f"Distributed environment: {distributed_type(self)}"
            f"{('  Backend: ' + backend) if backend else ''}\n"
            f"Num processes: {self.world_size}\n"
            f"Process index: {self.rank}\n"
            f"Local process index: {self.local_rank}\n"
            f"Device: {device}\n"
            f"\nMixed precision type: {self.mixed_precision}\n"
        )


# The state of the newest Accelerator of this process, and its gradient state: what
# Accelerate's shared-state singletons (``AcceleratorState()``, ``PartialState()``,
# ``GradientState()``) read once an Accelerator exists.
_current: list[RunState] = []
_gradients: list[Any] = []


def make_current(state: RunState, gradients: Any = None) -> None:
    """Make ``state`` the process's current run (the ``Accelerator`` does, when it is built),
    with ``gradients``, its :class:`~accelkw_core.runtime.accumulation.GradientState`."""
    _current[:] = [state]
    _gradients[:] = [] if gradients is None else [gradients]


def current_gradients() -> Any:
    """The gradient state of the newest ``Accelerator`` of this process, ``None`` before it."""
    return _gradients[0] if _gradients else None


def current_state() -> RunState | None:
    """The state of the newest ``Accelerator`` of this process, ``None`` before the first."""
    return _current[0] if _current else None


def _detect_device(cpu: bool) -> str:
    if cpu:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"

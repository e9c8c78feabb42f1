"""``AcceleratorState``: the facts of the run and the slots that handlers fill."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelkw_core.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from accelkw_core.handlers.base import KwargsHandler

__all__ = ["MIXED_PRECISION_MODES", "AcceleratorState", "LogEntry"]

MIXED_PRECISION_MODES = ("no", "fp16", "bf16")

ModelWrapper = Callable[[Any], Any]
Teardown = Callable[[], None]


@dataclass(frozen=True)
class LogEntry:
    """One line of the state's log: what a handler did, or why it did nothing."""

    handler: str
    message: str
    applied: bool

    def __str__(self) -> str:
        return f"{self.handler}: {self.message}"


def _env_int(env: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ConfigError("environment", key, raw, f"an integer >= {minimum}")
    return value


class AcceleratorState:
    """The facts of a run (rank, world size, device, mixed precision) and what handlers set up.

    Handlers fill the slots in ``apply(state)``:

    - ``autocast_factory``: builds the runtime's autocast context manager;
    - ``model_wrappers``: ``(handler name, callable)`` pairs applied to models in ``prepare``;
    - ``grad_scaler``: the gradient scaler ``backward`` and optimizer steps go through;
    - ``profiler_factory``: builds the context manager ``Accelerator.profile()`` enters;
    - ``extras``: anything else, keyed by handler name (for third-party handlers);

    and register undo actions with :meth:`add_teardown`. :meth:`record` keeps a log of what each
    handler did or why it did nothing.
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

        self.autocast_factory: Callable[[], AbstractContextManager[Any]] | None = None
        self.model_wrappers: list[tuple[str, ModelWrapper]] = []
        self.grad_scaler: Any = None
        self.profiler_factory: Callable[[], AbstractContextManager[Any]] | None = None
        self.extras: dict[str, Any] = {}
        self.handlers: dict[str, KwargsHandler] = {}
        self.log: list[LogEntry] = []
        self._teardowns: list[tuple[str, Teardown]] = []

    @classmethod
    def from_env(
        cls,
        *,
        mixed_precision: str = "no",
        cpu: bool = False,
        env: Mapping[str, str] | None = None,
        device_type: str | None = None,
    ) -> AcceleratorState:
        """Read the run's facts from the variables torchrun sets (``RANK``, ``WORLD_SIZE``, …)."""
        env = os.environ if env is None else env
        world_size = _env_int(env, "WORLD_SIZE", 1, 1)
        rank = _env_int(env, "RANK", 0, 0)
        local_rank = _env_int(env, "LOCAL_RANK", 0, 0)
        local_world_size = _env_int(env, "LOCAL_WORLD_SIZE", world_size, 1)
        port = env.get("MASTER_PORT")
        master_port = _env_int(env, "MASTER_PORT", 0, 0) if port else None
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

    def record(self, handler: str, message: str, *, applied: bool = True) -> None:
        """Log what ``handler`` did (``applied=True``) or why it did nothing."""
        self.log.append(LogEntry(handler, message, applied))

    def messages(self, handler: str) -> list[str]:
        """The log lines recorded by ``handler``."""
        return [e.message for e in self.log if e.handler == handler]

    def add_teardown(self, handler: str, fn: Teardown) -> None:
        """Register ``fn`` to undo what ``handler`` did; teardowns run in reverse order."""
        self._teardowns.append((handler, fn))

    @property
    def teardowns(self) -> list[tuple[str, Teardown]]:
        return list(self._teardowns)

    def run_teardowns(self) -> list[tuple[str, BaseException]]:
        """Run every teardown in reverse order, once; return the ones that raised.

        A failing teardown never stops the others: each is tried, and its error returned.
        """
        failures: list[tuple[str, BaseException]] = []
        while self._teardowns:
            name, fn = self._teardowns.pop()
            try:
                fn()
            except Exception as exc:
                failures.append((name, exc))
                self.record(name, f"teardown failed: {type(exc).__name__}: {exc}", applied=False)
        return failures

    def reset_slots(self) -> None:
        """Empty every slot handlers fill (used after a failed composition)."""
        self.autocast_factory = None
        self.model_wrappers = []
        self.grad_scaler = None
        self.profiler_factory = None
        self.extras = {}
        self.handlers = {}

    def summary(self) -> list[str]:
        """The log as printable lines."""
        return [str(e) for e in self.log]


def _detect_device(cpu: bool) -> str:
    if cpu:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"

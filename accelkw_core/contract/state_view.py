"""The state of a run as a handler sees it: its facts, its log and its extension points.

:class:`AcceleratorState` here is a ``Protocol``: what a handler's ``plan``, a plan's actions and a
step's contributions may read and call. The runtime's class
(:class:`accelkw_core.RunState`, built by the ``Accelerator``) implements it; a plugin
types against this one, so it depends on the contract alone and never on how the runtime keeps
the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, Protocol, TypeVar, overload

from accelkw_core.contract.extension_point import Contribution, ExtensionPoint

if TYPE_CHECKING:
    import torch

__all__ = ["AcceleratorState", "LogEntry", "StatePoint"]

T = TypeVar("T")
P = ParamSpec("P")


class StatePoint(Protocol[P]):
    """What ``state.contribute`` takes first: an extension point constant of
    :mod:`accelkw_core.plugin` (a name, the deprecated form, is reported as not one), whose :meth:`entry
    <accelkw_core.contract.extension_point.ExtensionPoint.entry>` makes the contribution from
    the arguments after it. Through ``P`` the point alone types them, so a wrong value is
    reported as "expected <the point's type>"."""

    def entry(self, *args: P.args, **kwargs: P.kwargs) -> Contribution: ...


@dataclass(frozen=True)
class LogEntry:
    """One line of the state's log: what a handler did, or why it did nothing."""

    handler: str
    message: str
    applied: bool

    def __str__(self) -> str:
        return f"{self.handler}: {self.message}"


class AcceleratorState(Protocol):
    """What a handler reads and calls on the state of the run it takes part in.

    The facts (read-only here): ``mixed_precision`` (``"no"``, ``"fp16"``, ``"bf16"``,
    ``"fp8"``), ``cpu`` (the run was asked to stay on the CPU), ``rank``/``local_rank``,
    ``world_size``/``local_world_size``, ``master_addr``/``master_port`` (``None`` outside a
    launch), ``device_type`` and ``device``, ``distributed`` (more than one process) and
    ``is_main_process`` (rank 0).

    The points: :meth:`contribute` adds to one (a :class:`~accelkw_core.contract.plan.Plan`
    does it for a handler), :meth:`values`, :meth:`keyed` and :meth:`contributions` read one.
    :meth:`record` keeps the log a user sees in ``accelkw plan``; :meth:`agree` makes every
    process take the same decision, :meth:`agree_value` agree on one number.
    """

    @property
    def mixed_precision(self) -> str: ...

    @property
    def cpu(self) -> bool: ...

    @property
    def rank(self) -> int: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def local_world_size(self) -> int: ...

    @property
    def master_addr(self) -> str | None: ...

    @property
    def master_port(self) -> int | None: ...

    @property
    def device_type(self) -> str: ...

    @property
    def distributed(self) -> bool:
        """Whether more than one process takes part in the run."""
        ...

    @property
    def is_main_process(self) -> bool: ...

    @property
    def device(self) -> torch.device:
        """The ``torch.device`` of this process."""
        ...

    @property
    def log(self) -> list[LogEntry]:
        """What every handler did, or why it did nothing, in order."""
        ...

    def record(self, handler: str, message: str, *, applied: bool = True) -> None:
        """Log what ``handler`` did (``applied=True``) or why it did nothing."""
        ...

    def messages(self, handler: str) -> list[str]:
        """The log lines recorded by ``handler``."""
        ...

    def contribute(self, point: StatePoint[P], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """``state.contribute(POINT, handler, value, key=None)``: add ``handler``'s ``value``
        to ``POINT`` (a constant of :mod:`accelkw_core.plugin`), checking its cardinality.

        ``mypy`` checks ``value`` against the point's type (:meth:`ExtensionPoint.entry
        <accelkw_core.contract.extension_point.ExtensionPoint.entry>`); ``key`` keys a keyed
        point's contribution (default: the handler's name).
        """
        ...

    def contributions(self, point: ExtensionPoint[Any] | str) -> list[Contribution]:
        """The contributions to ``point``, in the order they were made."""
        ...

    @overload
    def values(self, point: ExtensionPoint[T]) -> list[T]: ...

    @overload
    def values(self, point: str) -> list[Any]: ...

    def values(self, point: ExtensionPoint[Any] | str) -> list[Any]:
        """The contributed values of ``point``, in order (empty when nobody contributed)."""
        ...

    @overload
    def keyed(self, point: ExtensionPoint[T]) -> dict[str, T]: ...

    @overload
    def keyed(self, point: str) -> dict[str, Any]: ...

    def keyed(self, point: ExtensionPoint[Any] | str) -> dict[str, Any]:
        """The contributions of a keyed point (``CHECKPOINT``, ``ATTRIBUTE``) by key."""
        ...

    def provide(self, capability: str, handler: str) -> None:
        """Record that ``handler`` provides ``capability`` (``"gradient_sync"``, ...)."""
        ...

    def agree(self, flag: bool, *, how: Literal["any", "all"] = "any") -> bool:
        """``flag`` agreed by every process (``how="any"``: true on every rank when it is on
        any; ``"all"``: only when it is on all). Every process must call it, as often; with one
        process it is ``flag``."""
        ...

    def agree_value(
        self, value: float, *, op: Literal["sum", "mean", "max", "min"] = "mean"
    ) -> float:
        """``value`` combined over every process by ``op`` (``"mean"``, ``"sum"``, ``"max"``,
        ``"min"``): the same float on every rank. Every process must call it, as often; with one
        process it is ``float(value)``."""
        ...

"""``GeneralTracker``, the base of every tracker, and ``on_main_process``, Accelerate's decorator.

A tracker is what ``Accelerator(log_with=...)`` writes metrics to. Accelerate's contract, kept
here: a subclass sets ``name`` and ``requires_logging_directory`` and provides a ``tracker``
property (the underlying run or writer); ``start`` opens the run (called by
``init_trackers``), ``store_init_configuration`` records the hyperparameters, ``log`` writes
values at a step and ``finish`` closes the run (called by ``end_training``). With
``main_process_only = True`` (the default) the methods decorated with :func:`on_main_process`
run only on the main process, so one process writes, as in Accelerate.

Nothing here imports torch: a tracker plugin's module imports its backend inside ``start``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

__all__ = ["GeneralTracker", "is_main_process", "on_main_process"]

P = ParamSpec("P")
R = TypeVar("R")


def is_main_process() -> bool:
    """Whether this process is global rank 0.

    The rank of the initialised ``torch.distributed`` group when there is one (torch is not
    imported for the question), else the ``RANK`` variable torchrun and ``accelkw launch``
    set, else 0: the same answer Accelerate's ``PartialState`` gives.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()) == 0
    raw = os.environ.get("RANK", "")
    return not raw.strip().isdigit() or int(raw) == 0


def on_main_process(function: Callable[P, R]) -> Callable[P, R | None]:
    """Run the decorated method only on the main process when ``self.main_process_only``.

    Accelerate's decorator: the check happens at each call, so a tracker built before the
    process group exists still answers for the right process. On the other processes the
    call does nothing and returns ``None``. Decorate methods: the first argument is ``self``.
    """

    @functools.wraps(function)
    def execute_on_main_process(*args: P.args, **kwargs: P.kwargs) -> R | None:
        owner = args[0] if args else None
        if getattr(owner, "main_process_only", False) and not is_main_process():
            return None
        return function(*args, **kwargs)

    return execute_on_main_process


class GeneralTracker:
    """The base class of a tracker (Accelerate's ``GeneralTracker``, same methods and checks).

    A subclass sets ``name`` (what ``log_with`` and ``get_tracker`` call it),
    ``requires_logging_directory`` (whether ``init_trackers`` passes it the logging folder
    after the project name; ``accepts_logging_directory``: as ``logging_dir=`` when there is
    one) and a ``tracker`` property; constructing one that lacks any of
    them raises ``NotImplementedError`` naming what is missing. ``main_process_only``
    (default ``True``) makes the :func:`on_main_process` methods run on the main process only.

    Example::

        class PrintTracker(GeneralTracker):
            name = "print"
            requires_logging_directory = False

            @property
            def tracker(self):
                return None

            @on_main_process
            def log(self, values, step=None, **kwargs):
                print(step, values)
    """

    name: str
    requires_logging_directory: bool
    main_process_only: bool = True
    #: accelkw's one addition to the contract: a tracker that does not need a logging folder
    #: but can use one sets it, and ``init_trackers`` passes ``logging_dir=`` (the run's
    #: logging folder, when it has one and ``init_kwargs`` gives none).
    accepts_logging_directory: bool = False

    if TYPE_CHECKING:

        @property
        def tracker(self) -> Any:
            """The underlying run or writer (``get_tracker(name, unwrap=True)`` returns it)."""

    def __init__(self, _blank: bool = False) -> None:
        if _blank:
            return
        missing = [
            f"`{attribute}`"
            for attribute in ("name", "requires_logging_directory")
            if not hasattr(self, attribute)
        ]
        # ``tracker`` is usually a property that reads what ``start`` made: look it up by name.
        if "tracker" not in dir(self):
            missing.append("`tracker`")
        if missing:
            raise NotImplementedError(
                "The implementation for this tracker class is missing the following required "
                f"attributes. Please define them in the class definition: {', '.join(missing)}"
            )

    def start(self) -> None:
        """Open the run; ``init_trackers`` calls it once, before any other method."""

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record ``values`` (``bool``, ``str``, ``int``, ``float`` or ``None``) as hyperparameters."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Write ``values`` to the run, at ``step`` when given; ``kwargs`` are the backend's."""

    def finish(self) -> None:
        """Close the run; ``Accelerator.end_training`` calls it."""

"""The run's trackers: ``init_trackers``, ``log``, ``get_tracker`` and their end.

:class:`Trackers` is the ``Accelerator``'s collaborator for them. ``Accelerator(log_with=...)``
chooses the trackers (:func:`accelkw_core.tracking.filter_trackers`); ``init_trackers`` builds
the named ones from their installed classes, as Accelerate does from its table:
``cls(project_name, logging_dir, **init_kwargs[name])`` for a tracker that writes files,
``cls(project_name, **init_kwargs[name])`` otherwise (with ``logging_dir=`` for a tracker that
``accepts_logging_directory``, accelkw's one addition). As in Accelerate, ``init_trackers`` and
``log`` act on the main process only: the other processes start no tracker, and their
``get_tracker`` is a blank ``GeneralTracker`` whose methods do nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from accelkw_core.contract.tracker import GeneralTracker

if TYPE_CHECKING:
    from accelkw_core.discovery.registry import Registry
    from accelkw_core.runtime.run_state import RunState

__all__ = ["Trackers"]


class Trackers:
    """The trackers ``log_with`` chose (as :func:`~accelkw_core.tracking.filter_trackers`
    resolved it), built from ``registry``'s tracker classes on the main process."""

    def __init__(
        self, state: RunState, log_with: list[str | GeneralTracker], registry: Registry
    ) -> None:
        self.state = state
        #: What ``log_with`` resolved to: installed tracker names and tracker instances.
        self.log_with = log_with
        #: The trackers ``init_trackers`` started, in ``log_with``'s order.
        self.trackers: list[GeneralTracker] = []
        self._classes: dict[str, type[GeneralTracker]] = (
            {name: info.cls for name, info in registry.trackers().items()} if log_with else {}
        )

    def init_trackers(
        self,
        project_name: str,
        config: dict[str, Any] | None,
        init_kwargs: Mapping[str, Mapping[str, Any]] | None,
        *,
        logging_dir: str | None = None,
    ) -> None:
        """Start a run named ``project_name`` in every tracker of ``log_with``.

        ``config`` is stored as the run's hyperparameters; ``init_kwargs`` maps a tracker's
        name to the keyword arguments its constructor takes. A tracker that writes files gets
        ``logging_dir``. Only the main process starts trackers (Accelerate's semantics).
        """
        if self.state.rank != 0:
            return
        init_kwargs = {} if init_kwargs is None else init_kwargs
        for choice in self.log_with:
            if isinstance(choice, GeneralTracker):
                self.trackers.append(choice)  # built by the caller
                continue
            cls = self._classes[choice]
            # A tracker's constructor is its own (Accelerate's contract fixes only the leading
            # project name, and the logging folder after it for one that writes files).
            build: Callable[..., GeneralTracker] = cls
            kwargs = dict(init_kwargs.get(choice, {}))
            if cls.accepts_logging_directory and logging_dir is not None:
                kwargs.setdefault("logging_dir", logging_dir)
            if cls.requires_logging_directory:
                self.trackers.append(build(project_name, logging_dir, **kwargs))
            else:
                self.trackers.append(build(project_name, **kwargs))
        for tracker in self.trackers:
            tracker.start()
        if config is not None:
            for tracker in self.trackers:
                tracker.store_init_configuration(config)

    def get_tracker(self, name: str, unwrap: bool) -> Any:
        """The started tracker ``name`` (unwrapped: its run); a blank one when none started."""
        if not self.trackers:
            return GeneralTracker(_blank=True)
        for tracker in self.trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        names = ", ".join(t.name for t in self.trackers)
        raise ValueError(
            f"{name} is not an available tracker stored inside the `Accelerator` (started: {names})"
        )

    def log(
        self,
        values: dict[str, Any],
        step: int | None,
        log_kwargs: Mapping[str, Mapping[str, Any]] | None,
    ) -> None:
        """Write ``values`` at ``step`` to every started tracker (on the main process)."""
        if self.state.rank != 0:
            return
        log_kwargs = {} if log_kwargs is None else log_kwargs
        for tracker in self.trackers:
            tracker.log(values, step=step, **log_kwargs.get(tracker.name, {}))

    def finish(self) -> list[tuple[str, BaseException]]:
        """Finish every started tracker; the ones that raise, with their error (each one runs)."""
        failures: list[tuple[str, BaseException]] = []
        for tracker in self.trackers:
            try:
                tracker.finish()
            except Exception as exc:
                failures.append((tracker.name, exc))
        return failures

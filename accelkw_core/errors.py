"""The exceptions accelkw raises: one base, subclasses that carry their context as attributes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "AccelkwError",
    "BatchSizeError",
    "CheckpointError",
    "CheckpointLockedError",
    "CheckpointNotFoundError",
    "CheckpointWarning",
    "ComposeError",
    "ConfigError",
    "ConfigErrors",
    "ConfigFileError",
    "ConfigWarning",
    "Contributor",
    "HandlerApplyError",
    "IncompatiblePluginWarning",
    "InvalidTrackerError",
    "Mismatch",
    "MissingPluginWarning",
    "PluginError",
    "PluginLoadWarning",
    "PointConflictError",
    "PortError",
    "RequirementError",
    "ScaffoldError",
    "UnknownHandlerError",
    "UnsupportedAnnotationError",
    "WorkerFailed",
    "flatten",
    "quoted",
    "raise_all",
    "suggest",
]


class AccelkwError(Exception):
    """Base of every error accelkw raises on purpose; the CLI prints these without a traceback."""


def suggest(name: str, choices: Iterable[str]) -> str | None:
    """The closest of ``choices`` to ``name`` (a likely typo), or ``None``."""
    import difflib

    matches = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class ConfigError(AccelkwError, ValueError):
    """A handler setting is wrong.

    Carries ``handler`` (registry name or class name), ``field``, ``value`` and ``expected``,
    plus an optional ``suggestion`` (a close match for a misspelt name) and ``source`` (where the
    value came from: a file and table, an environment variable, the command line).
    """

    def __init__(
        self,
        handler: str,
        field: str,
        value: Any,
        expected: str,
        *,
        suggestion: str | None = None,
        source: str | None = None,
    ) -> None:
        self.handler = handler
        self.field = field
        self.value = value
        self.expected = expected
        self.suggestion = suggestion
        self.source = source
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"{self.source}: " if self.source else ""
        text = f"{where}{self.handler}.{self.field}: got {_short(self.value)}, expected {self.expected}"
        if self.suggestion is not None:
            text += f" (did you mean {self.suggestion!r}?)"
        return text

    def with_source(self, source: str) -> ConfigError:
        """A copy of this error that also says where the value came from."""
        return ConfigError(
            self.handler,
            self.field,
            self.value,
            self.expected,
            suggestion=self.suggestion,
            source=source,
        )


class ConfigErrors(ConfigError):
    """Every problem found in one configuration, one line each, in the order found.

    ``errors`` holds them (each an :class:`AccelkwError`, most a :class:`ConfigError` naming
    its table, field, value and expectation); the attributes of :class:`ConfigError` are the
    first's, so ``except ConfigError`` still catches the lot. The message is their messages,
    one per line: a user fixes every problem of a file in one pass.
    """

    def __init__(self, errors: Sequence[AccelkwError]) -> None:
        self.errors: list[AccelkwError] = list(errors)
        first = next((e for e in self.errors if isinstance(e, ConfigError)), None)
        if first is None:
            super().__init__("config", "<file>", None, "no errors")
        else:
            super().__init__(
                first.handler,
                first.field,
                first.value,
                first.expected,
                suggestion=first.suggestion,
                source=first.source,
            )

    def _message(self) -> str:
        return "\n".join(str(e) for e in self.errors)

    def with_source(self, source: str) -> ConfigErrors:
        return ConfigErrors(
            [e.with_source(source) if isinstance(e, ConfigError) else e for e in self.errors]
        )


def flatten(errors: Iterable[AccelkwError]) -> list[AccelkwError]:
    """``errors`` with each :class:`ConfigErrors` replaced by the errors it holds."""
    out: list[AccelkwError] = []
    for err in errors:
        out.extend(flatten(err.errors) if isinstance(err, ConfigErrors) else [err])
    return out


def raise_all(errors: Sequence[AccelkwError]) -> None:
    """Raise nothing for no error, the error itself for one, :class:`ConfigErrors` for more."""
    found = flatten(errors)
    if len(found) == 1:
        raise found[0]
    if found:
        raise ConfigErrors(found)


class UnsupportedAnnotationError(AccelkwError, TypeError):
    """A handler field's annotation is one validation cannot check values against.

    Carries ``handler``, ``field`` and ``annotation`` (how it reads). A mistake in the handler's
    code, not in a user's value: configuration for that field could not be checked, so the
    handler is refused rather than passing values through unchecked.
    """

    def __init__(self, handler: str, field: str, annotation: str, supported: str) -> None:
        self.handler = handler
        self.field = field
        self.annotation = annotation
        super().__init__(
            f"{handler}.{field}: annotation {annotation} cannot be checked; annotate it with "
            f"{supported}"
        )


class ConfigFileError(AccelkwError, ValueError):
    """A configuration file cannot be used: missing, unreadable, not TOML, or the wrong shape.

    Carries ``path``, ``reason`` and, for syntax errors, ``line`` and ``column``.
    """

    def __init__(
        self, path: str, reason: str, *, line: int | None = None, column: int | None = None
    ) -> None:
        self.path = path
        self.reason = reason
        self.line = line
        self.column = column
        where = path if line is None else f"{path}:{line}" + (f":{column}" if column else "")
        super().__init__(f"{where}: {reason}")


class PluginError(AccelkwError):
    """A plugin could not be used: it failed to load, conflicts, or is missing."""

    def __init__(self, plugin: str, distribution: str | None, reason: str) -> None:
        self.plugin = plugin
        self.distribution = distribution
        self.reason = reason
        dist = f" (distribution {distribution})" if distribution else ""
        super().__init__(f"plugin {plugin!r}{dist}: {reason}")


class InvalidTrackerError(PluginError):
    """``register`` of ``accelkw_register_trackers`` got something that is not a tracker class.

    The registry records the plugin ``failed`` with the type ``InvalidTracker``.
    """


class UnknownHandlerError(AccelkwError, LookupError):
    """No installed handler has the requested registry name."""

    def __init__(self, name: str, available: list[str], suggestion: str | None = None) -> None:
        self.name = name
        self.available = available
        self.suggestion = suggestion
        hint = f" Did you mean {suggestion!r}?" if suggestion else ""
        names = ", ".join(available) or "none installed"
        super().__init__(f"no handler named {name!r} is installed.{hint} Available: {names}")


class ComposeError(AccelkwError, ValueError):
    """The handlers cannot be composed: duplicates, an ordering cycle, a non-handler object."""


class PointConflictError(ComposeError):
    """Two or more handlers contributed to an extension point (or key) that takes one contribution.

    Carries ``point``, ``key`` (for a keyed point) and ``contributors``: every handler that
    contributes, as :class:`Contributor` ``(handler, distribution, origin)`` in apply order;
    ``first`` and ``second`` are the first two as ``(handler, distribution)`` pairs. ``origin``
    says where each came from (``"code"``: passed in code; ``"config"``: asked for by a config
    file or the environment; ``"default"``: installed and on by default; ``None``: not known), and
    the message gives the advice that fits it.
    """

    def __init__(
        self,
        point: str,
        first: tuple[str, str | None] | Contributor,
        second: tuple[str, str | None] | Contributor,
        key: str | None = None,
        *more: Contributor,
    ) -> None:
        self.point = point
        self.key = key
        self.contributors: tuple[Contributor, ...] = tuple(
            c if isinstance(c, Contributor) else Contributor(*c) for c in (first, second, *more)
        )
        self.first = self.contributors[0][:2]
        self.second = self.contributors[1][:2]
        what = f"extension point {point!r}" + (f" key {key!r}" if key is not None else "")
        names = [c.describe() for c in self.contributors]
        listed = ", ".join(names[:-1]) + f" and {names[-1]}"
        both = "both" if len(names) == 2 else "all"
        advice = "; ".join(dict.fromkeys(c.advice() for c in self.contributors))
        super().__init__(
            f"{what} takes one contribution, but handlers {listed} {both} contribute to it; "
            f"keep one of them: {advice}"
        )

    @classmethod
    def of(
        cls, point: str, contributors: Iterable[Contributor], key: str | None = None
    ) -> PointConflictError:
        """The error for ``contributors`` (two or more) of ``point``."""
        first, second, *more = contributors
        return cls(point, first, second, key, *more)


class Contributor(NamedTuple):
    """One handler of a :class:`PointConflictError`: its name, distribution and origin."""

    handler: str
    distribution: str | None
    origin: str | None = None

    def describe(self) -> str:
        """``'name' (distribution)``, or that it has none (a handler passed in code)."""
        dist = self.distribution or "code passed directly, no distribution"
        where = {
            "code": ", passed in code",
            "config": ", asked for by the config or environment",
            "default": ", installed and on by default",
        }.get(self.origin or "", "")
        return f"{self.handler!r} ({dist}{where})"

    def advice(self) -> str:
        """What takes this handler out of the run, for where it came from."""
        name, dist = self.handler, self.distribution
        if self.origin == "code":
            return f"drop {name!r} from kwargs_handlers (it was passed in code)"
        if self.origin == "config":
            return (
                f"remove what asks for {name!r} ([handlers.{name}] or [plugins] enable in the "
                f"config file, ACCELKW_{name.upper()}__<FIELD> in the environment)"
            )
        deny = dist or name
        fix = (
            f"disable {name!r} ([plugins] disable = [{name!r}], or ACCELKW_DISABLE_PLUGINS={deny})"
        )
        return fix + (f" or uninstall {dist}" if dist else "")


class HandlerApplyError(AccelkwError):
    """A handler's ``apply(state)`` failed; everything applied before it was undone."""

    def __init__(self, handler: str, distribution: str | None, cause: BaseException) -> None:
        self.handler = handler
        self.distribution = distribution
        self.cause = cause
        dist = distribution or "code passed directly, no distribution"
        super().__init__(
            f"handler {handler!r} (from {dist}) failed in apply(): "
            f"{type(cause).__name__}: {cause}; the handlers applied before it were undone"
        )


class RequirementError(AccelkwError):
    """One or more required plugins are missing, did not load, or have the wrong version.

    ``problems`` holds one line per unmet requirement; ``source`` says where they were required.
    """

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}required plugins not satisfied: " + "; ".join(problems))


class CheckpointError(AccelkwError, OSError):
    """A checkpoint cannot be saved or loaded; nothing was changed.

    Carries ``path`` (the file or folder at fault) and ``problem`` (what is wrong with it). An
    ``OSError`` too, as the ``FileNotFoundError`` Accelerate raises for a missing checkpoint.
    """

    def __init__(self, path: Any, problem: str) -> None:
        self.path = path
        self.problem = problem
        Exception.__init__(self, f"checkpoint: {path} {problem}")

    def __str__(self) -> str:
        return f"checkpoint: {self.path} {self.problem}"


def quoted(error: BaseException) -> str:
    """``error`` as another message quotes it: a :class:`CheckpointError` without its
    ``checkpoint:`` prefix (the message quoting it has its own), anything else as it reads."""
    if isinstance(error, CheckpointError):
        return f"{error.path} {error.problem}"
    return str(error)


class CheckpointLockedError(CheckpointError):
    """Another process is saving into the checkpoint folder: one writer per folder.

    ``holder`` says which (its host and process id), ``path`` the folder.
    """

    def __init__(self, path: Any, holder: str) -> None:
        self.holder = holder
        super().__init__(
            path,
            f"is being saved by another process ({holder}): one writer per checkpoint folder; "
            "wait for that save to finish, or save elsewhere",
        )


class CheckpointNotFoundError(CheckpointError, FileNotFoundError, ValueError):
    """There is no checkpoint to load: the folder does not exist, or no complete one is left.

    A ``FileNotFoundError``, and a ``ValueError`` as Accelerate raises for a missing folder.
    """


class CheckpointWarning(UserWarning):
    """A checkpoint loaded, but not all of this run's state came from it (a handler added since
    the save starts fresh), or it holds state this run does not use (left alone)."""


class PortError(AccelkwError):
    """A script imports an Accelerate name accelkw does not provide (or does not know)."""


class BatchSizeError(AccelkwError, RuntimeError):
    """``find_executable_batch_size`` ran out of batch sizes: every one it tried ran out of
    memory. Carries ``function`` (its name) and ``tried`` (the sizes, in order)."""

    def __init__(self, function: str, tried: list[int]) -> None:
        self.function = function
        self.tried = tried
        sizes = ", ".join(map(str, tried)) or "none"
        super().__init__(
            f"{function}: no batch size fits in memory (tried {sizes}; the next would be 0); "
            "free memory or make the model smaller"
        )


class ScaffoldError(AccelkwError, ValueError):
    """The plugin cannot be created: an invalid or taken name, or a target folder in use."""


class MissingPluginWarning(UserWarning):
    """A run lacks something a plugin would provide (gradient sync, a process group)."""


class ConfigWarning(UserWarning):
    """A setting that is probably a mistake but does not stop a run: an ``ACCELKW_*`` variable
    that nothing reads, or a name in a plugin allow/deny list that no installed plugin has.
    ``accelkw config check --strict`` and ``accelkw plugins list --strict`` make these errors."""


class PluginLoadWarning(UserWarning):
    """An installed plugin was left out of a run: it failed to load or conflicts with another.

    The message names the plugin, its distribution, why, and the fix (deny one of two
    conflicting distributions, fix or uninstall a broken one).
    """


class IncompatiblePluginWarning(PluginLoadWarning):
    """An installed plugin was left out of a run: its distribution excludes the installed core."""


class Mismatch(Exception):
    """Internal to validation: a value does not fit an annotation. ``expected`` says what would,
    ``path`` locates it inside a container. Validation turns it into a :class:`ConfigError`."""

    def __init__(self, expected: str, path: str = "", value: Any = None) -> None:
        super().__init__(expected)
        self.expected = expected
        self.path = path
        self.value = value


class WorkerFailed(AssertionError):
    """A worker of :func:`accelkw_core.testing.run_workers` raised, died or timed out; the
    message holds its traceback. An ``AssertionError``, so a test reports it as a failure."""

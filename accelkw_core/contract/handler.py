"""The ``KwargsHandler`` contract: a dataclass mixin that configures one part of a training run."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

from accelkw_core.contract.accelerate_env import AccelerateEnv, read_declared
from accelkw_core.errors import ConfigError, suggest

if TYPE_CHECKING:
    from accelkw_core.contract.plan import Plan
    from accelkw_core.contract.state_view import AcceleratorState

__all__ = ["KwargsHandler", "handler_field"]

_MISSING = dataclasses.MISSING


def handler_field(
    default: Any = _MISSING,
    *,
    default_factory: Any = _MISSING,
    doc: str = "",
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    finite: bool = False,
) -> Any:
    """A dataclass field with documentation and an optional numeric range.

    The range (``ge``/``gt``/``le``/``lt``) is enforced by :meth:`KwargsHandler.from_mapping`
    and by :meth:`KwargsHandler.validate`, and so is ``finite=True`` (no ``inf``/``nan``: a
    one-sided range such as ``gt=0`` lets ``inf`` through); ``doc`` feeds ``accelkw plugins
    show`` and the generated documentation.
    """
    metadata = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt, "finite": finite}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


class KwargsHandler:
    """Mixin for handler dataclasses.

    A handler is a ``@dataclass`` subclass with a default for every field, a registry ``name``
    (its config key), optional ``after`` (registry names it must be applied after) and
    ``apply(state)``, which configures an :class:`~accelkw_core.contract.state_view.AcceleratorState`.

    ``to_kwargs()`` keeps the reference semantics (the fields that differ from a default
    instance). ``explicit_kwargs()`` adds the fields passed to the constructor, so a value the
    user set that happens to equal the default is never lost.

    Derive a changed copy with :meth:`replace`, which keeps the explicit fields.
    ``dataclasses.replace`` and ``copy.replace`` (Python 3.13+) pass every field to the
    constructor, so in their copy every field is explicit, on every Python version.
    """

    name: ClassVar[str] = ""
    after: ClassVar[tuple[str, ...]] = ()
    before: ClassVar[tuple[str, ...]] = ()
    requires: ClassVar[tuple[str, ...]] = ()
    conflicts: ClassVar[tuple[str, ...]] = ()
    #: ``Accelerator`` keywords this handler takes (Accelerate's ``gradient_accumulation_steps``,
    #: ``fsdp_plugin``, ...): keyword -> the field it sets, or ``"*"`` for an instance.
    accelerator_keywords: ClassVar[Mapping[str, str]] = {}
    #: Composed only when requested (passed in code or through an ``Accelerator`` keyword, a
    #: ``[handlers.NAME]`` table, ``ACCELKW_NAME__FIELD`` variables, ``[plugins] enable``),
    #: never as a default instance of an installed handler: for handlers that change how a run
    #: trains (sharding, compilation), which Accelerate also applies only on request.
    opt_in: ClassVar[bool] = False
    #: Accelerate's environment variables this handler takes its defaults from, as Accelerate's
    #: own class does: variable -> the field it sets, or ``"*"`` for the switch whose true value
    #: asks for the handler (``ACCELERATE_USE_FSDP``). The core reads them, never the handler;
    #: override :meth:`from_accelerate_env` when Accelerate reads one only in some cases.
    accelerate_env: ClassVar[Mapping[str, str]] = {}
    _accelkw_explicit: frozenset[str]

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # Recorded here, not in __init__, because the dataclass decorator writes __init__.
        # Every field the constructor is given counts, whoever calls it: dataclasses.replace
        # and copy.replace pass them all, so their copies have every field explicit.
        self = super().__new__(cls)
        names = _init_field_names(cls)
        explicit = set(names[: len(args)])
        explicit.update(k for k in kwargs if k in names)
        object.__setattr__(self, "_accelkw_explicit", frozenset(explicit))
        return self

    @classmethod
    def from_accelerate_env(cls, env: Mapping[str, str]) -> AccelerateEnv:
        """What Accelerate's variables in ``env`` (a mapping the core passes) ask of this class.

        The default reads :attr:`accelerate_env` plainly: a true switch requests the handler,
        every other variable set gives its field's value as text. Values are checked later, when
        the core builds the handler through its validated path.
        """
        return read_declared(cls.accelerate_env, env)

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied that keeps this handler's explicit fields.

        The fields in ``changes`` become explicit too, even when a value equals the current
        one (or the default): passing it says you chose it. The copy is built and
        checked like any instance (a :class:`~accelkw_core.errors.ConfigError` for a bad
        value, or for a name that is not a field). Unlike ``dataclasses.replace``, which
        marks every field explicit, a field you never set stays open to configuration files
        and ``ACCELKW_*`` variables.
        """
        values = self.field_values()
        unknown = [name for name in changes if name not in values]
        if unknown:
            name = unknown[0]
            raise ConfigError(
                self.name or type(self).__name__,
                name,
                changes[name],
                "a field replace() can set: " + ", ".join(values),
                suggestion=suggest(name, values),
            )
        values.update(changes)
        new = type(self)(**values)
        object.__setattr__(new, "_accelkw_explicit", self._explicit_names() | frozenset(changes))
        return new

    def __post_init__(self) -> None:
        # Values set in code pass the same checks as config values; enum strings become members.
        from accelkw_core.contract.validation import check_instance

        check_instance(self)
        self.check_values()

    def check_values(self) -> None:
        """Cross-field checks a handler adds; raise ``ConfigError``. Called after construction."""

    def to_dict(self) -> dict[str, Any]:
        """Every field and its value, in declaration order, as a deep copy (Accelerate's).

        Changing the result never changes the handler.
        """
        return copy.deepcopy(self.field_values())

    def to_kwargs(self) -> dict[str, Any]:
        """The fields whose values differ from a default-constructed instance, deep-copied.

        Accelerate's semantics: containers are copies, so changing the result never changes the
        handler, and a tuple stays a tuple. Only the differing values are copied, which gives
        the same result as copying everything first.
        """
        return copy.deepcopy(_differing(self))

    def explicit_fields(self) -> frozenset[str]:
        """Names of the fields the caller set: passed to the constructor or changed since."""
        return self._explicit_names() | frozenset(_differing(self))

    def explicit_kwargs(self) -> dict[str, Any]:
        """``to_kwargs()`` plus the fields passed explicitly, even when equal to the default."""
        return {name: getattr(self, name) for name in self._ordered(self.explicit_fields())}

    def field_values(self) -> dict[str, Any]:
        """Every field and its current value, in declaration order."""
        return {name: getattr(self, name) for name in _init_field_names(type(self))}

    def plan(self, state: AcceleratorState) -> Plan:
        """What this handler would do on ``state``: its contributions, or why there are none.

        Planning has no side effects: ``accelkw plan`` prints the plan, and :meth:`apply`
        carries out the same plan. Override it; the default contributes nothing.
        """
        from accelkw_core.contract.plan import Plan

        return Plan(self.name or type(self).__name__).note("nothing to apply")

    def apply(self, state: AcceleratorState) -> None:
        """Carry out :meth:`plan` on ``state``: contribute to its points and log each step."""
        self.plan(state).carry_out(state)

    def describe(self, state: AcceleratorState) -> str:
        """What :meth:`apply` would do on ``state``, as one line (the plan's summary)."""
        return self.plan(state).summary()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, strings: bool = False) -> Self:
        """Build a handler from untrusted data, checking every name, type and range.

        ``strings=True`` also accepts text forms (``"true"``, ``"25"``, JSON lists and dicts),
        as read from environment variables. Raises :class:`~accelkw_core.errors.ConfigError`.
        """
        from accelkw_core.contract.validation import build_handler

        return build_handler(cls, data, strings=strings)

    def validate(self) -> None:
        """Check the current field values as :meth:`from_mapping` would; raise ``ConfigError``."""
        from accelkw_core.contract.validation import check_instance

        check_instance(self)
        self.check_values()

    def _explicit_names(self) -> frozenset[str]:
        return getattr(self, "_accelkw_explicit", frozenset())

    def _ordered(self, names: frozenset[str]) -> list[str]:
        return [n for n in _init_field_names(type(self)) if n in names]


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_DEFAULTS: dict[type, dict[str, Any]] = {}


def _init_field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        if not dataclasses.is_dataclass(cls):
            return ()
        names = tuple(f.name for f in dataclasses.fields(cls) if f.init)
        _FIELD_NAMES[cls] = names
    return names


def _differing(handler: KwargsHandler) -> dict[str, Any]:
    """The fields of ``handler`` whose values differ from the defaults, uncopied."""
    defaults = _defaults(type(handler))
    out: dict[str, Any] = {}
    for name, default in defaults.items():
        value = getattr(handler, name)
        if value != default:
            out[name] = value
    return out


def _defaults(cls: type) -> dict[str, Any]:
    # A default instance per class, built once: to_kwargs() is on the hot path of the runtime.
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        if cls in _BUILDING:
            # check_values() of the default instance itself asks which fields differ: answer
            # from the declared defaults instead of building that instance again, forever.
            return _declared_defaults(cls)
        _BUILDING.add(cls)
        try:
            instance = cls()
        finally:
            _BUILDING.discard(cls)
        defaults = {n: getattr(instance, n) for n in _init_field_names(cls)}
        _DEFAULTS[cls] = defaults
    return defaults


_BUILDING: set[type] = set()


def _declared_defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out

"""The one validated path from untrusted data (files, environment, CLI) to handler instances.

Every field is checked against its annotation: ``bool``/``int``/``float``/``str``, ``Optional``
and unions, ``Enum`` and ``Literal`` values (the member or its string value), ``timedelta``
(seconds, or ``"90s"``/``"10m"``/``"1h"``), lists and dicts, and the ranges a field declares
through :func:`~accelkw_core.contract.handler.handler_field`.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from accelkw_core.contract.coercion import (
    SUPPORTED,
    coerce,
    describe_type,
    parse_duration,
    unsupported_annotation,
)
from accelkw_core.errors import (
    AccelkwError,
    ConfigError,
    Mismatch,
    UnsupportedAnnotationError,
    raise_all,
    suggest,
)

__all__ = [
    "build_handler",
    "check_instance",
    "coerce_values",
    "describe_type",
    "field_specs",
    "parse_duration",
]

H = TypeVar("H")


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """A handler field as the validator and the docs see it."""

    name: str
    type: Any
    default: Any
    doc: str
    ranges: dict[str, float]
    finite: bool = False


_SPECS: dict[type, dict[str, FieldSpec]] = {}


def field_specs(cls: type) -> dict[str, FieldSpec]:
    """The init fields of a handler class with resolved types, defaults, docs and ranges."""
    specs = _SPECS.get(cls)
    if specs is not None:
        return specs
    hints = typing.get_type_hints(cls)
    specs = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        unknown = unsupported_annotation(hints.get(f.name, Any))
        if unknown is not None:
            raise UnsupportedAnnotationError(
                handler_label(cls), f.name, describe_type(unknown), SUPPORTED
            )
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        meta = f.metadata
        ranges = {k: meta[k] for k in ("ge", "gt", "le", "lt") if meta.get(k) is not None}
        specs[f.name] = FieldSpec(
            f.name,
            hints.get(f.name, Any),
            default,
            meta.get("doc", ""),
            ranges,
            bool(meta.get("finite", False)),
        )
    _SPECS[cls] = specs
    return specs


def handler_label(cls: type) -> str:
    return getattr(cls, "name", "") or cls.__name__


def build_handler(
    cls: type[H], data: Mapping[str, Any], *, strings: bool = False, import_callables: bool = False
) -> H:
    """Construct ``cls`` from ``data`` after checking every key and value.

    ``strings`` accepts text forms of every type (environment variables). ``import_callables``
    is the explicit opt-in that lets a ``"package.module:attribute"`` string name a callable;
    without it, configuration never imports or runs code.
    """
    label = handler_label(cls)
    values = coerce_values(cls, data, strings=strings, import_callables=import_callables)
    try:
        return cls(**values)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            label, "<construction>", dict(data), f"values {cls.__name__} accepts: {exc}"
        ) from exc


def coerce_values(
    cls: type, data: Mapping[str, Any], *, strings: bool = False, import_callables: bool = False
) -> dict[str, Any]:
    """Every key and value of ``data`` checked and converted for ``cls``, without building it.

    What :func:`build_handler` passes to the constructor; settings merged from several sources
    use it to build each handler once, from all of them together.
    """
    label = handler_label(cls)
    if not isinstance(data, Mapping):
        raise ConfigError(label, "<table>", data, "a table of field = value")
    specs = field_specs(cls)
    values: dict[str, Any] = {}
    # Every key is checked, so one table's three mistakes are three lines of one error.
    errors: list[AccelkwError] = []
    for key, raw in data.items():
        if not isinstance(key, str) or key not in specs:
            hint = suggest(str(key), specs) if isinstance(key, str) else None
            errors.append(
                ConfigError(
                    label,
                    str(key),
                    raw,
                    "a known field: " + ", ".join(specs),
                    suggestion=hint,
                )
            )
            continue
        try:
            values[key] = _coerce_field(label, specs[key], raw, strings, False, import_callables)
        except ConfigError as exc:
            errors.append(exc)
    raise_all(errors)
    return values


def check_instance(handler: Any, *, normalise: bool = True) -> None:
    """Check every field of a handler built in code; with ``normalise``, store coerced values.

    Normalising turns enum strings into members and ints into floats where a float is declared,
    so ``comm_hook="fp16"`` works and is never silently ignored.
    """
    cls = type(handler)
    label = handler_label(cls)
    for spec in field_specs(cls).values():
        value = getattr(handler, spec.name)
        coerced = _coerce_field(label, spec, value, False, True, False)
        if normalise and coerced is not value:
            object.__setattr__(handler, spec.name, coerced)


def _coerce_field(
    label: str, spec: FieldSpec, raw: Any, strings: bool, trusted: bool, import_callables: bool
) -> Any:
    try:
        value = coerce(raw, spec.type, strings, trusted, import_callables)
    except Mismatch as err:
        field = spec.name + err.path
        raise ConfigError(label, field, err.value if err.path else raw, err.expected) from None
    _check_range(label, spec, value)
    return value


def _check_range(label: str, spec: FieldSpec, value: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return
    if spec.finite and not math.isfinite(value):
        within = f" {_range_text(spec.ranges)}" if spec.ranges else ""
        raise ConfigError(label, spec.name, value, f"a finite number{within} (not inf or nan)")
    if not spec.ranges:
        return
    r = spec.ranges
    ok = True
    if "ge" in r:
        ok = ok and value >= r["ge"]
    if "gt" in r:
        ok = ok and value > r["gt"]
    if "le" in r:
        ok = ok and value <= r["le"]
    if "lt" in r:
        ok = ok and value < r["lt"]
    if not ok:
        raise ConfigError(label, spec.name, value, f"a number {_range_text(r)}")


def _range_text(r: Mapping[str, float]) -> str:
    words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    return " and ".join(f"{words[k]} {_number(v)}" for k, v in r.items())


def _number(v: float) -> str:
    # Whole bounds in full: 8796093022207 must not read as 8.79609e+12.
    return str(int(v)) if float(v).is_integer() else f"{v:g}"

"""Coercion of one value to one annotation, used by :mod:`accelkw_core.contract.validation`.

Supports ``bool``/``int``/``float``/``str``, ``Optional`` and unions, ``Enum`` and ``Literal``
values, ``timedelta``, lists, dicts and callables. A mismatch raises :class:`Mismatch` with a
reader's description of what was expected; the caller turns it into a ``ConfigError``.
"""

from __future__ import annotations

import enum
import json
import pkgutil
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from accelkw_core.errors import Mismatch

# The words a boolean may be written as, in config files, the environment and the CLI: the one
# table the core reads them with (facts.environment reads its flags with it too).
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})

__all__ = [
    "FALSE_WORDS",
    "SUPPORTED",
    "TRUE_WORDS",
    "Mismatch",
    "coerce",
    "describe_type",
    "parse_duration",
    "unsupported_annotation",
]

#: What :func:`coerce` checks values against (what :func:`unsupported_annotation` accepts).
SUPPORTED = (
    "bool, int, float, str, None, a union, Literal, an Enum, timedelta, list/tuple/set of a "
    "supported type, dict of supported types, Callable, Any or a class"
)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def describe_type(tp: Any) -> str:
    """A reader's name for an annotation: ``int``, ``'no' | 'fp16'``, ``list[str] | None``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is type(None):
        return "None"
    if tp is Any:
        return "any"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(describe_type(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(_plain(a)) for a in args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp.__name__
    if origin in (list, tuple, set, frozenset):
        return (
            f"{origin.__name__}[{', '.join(describe_type(a) for a in args)}]"
            if args
            else origin.__name__
        )
    if origin is dict:
        return f"dict[{describe_type(args[0])}, {describe_type(args[1])}]" if args else "dict"
    if origin is not None and getattr(origin, "__name__", "") == "Callable":
        return "Callable"
    if tp is Callable or origin is Callable:
        return "Callable"
    return getattr(tp, "__name__", str(tp))


def unsupported_annotation(tp: Any) -> Any | None:
    """The part of annotation ``tp`` that :func:`coerce` does not know, or ``None``.

    ``Sequence[int]`` or a ``TypeVar`` would otherwise let any value through unchecked.
    """
    if tp is Any or tp is object or tp is None or tp is type(None) or tp is Ellipsis:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal:
        return None
    if tp is Callable or origin is Callable or getattr(origin, "__name__", "") == "Callable":
        return None
    if origin in (typing.Union, types.UnionType, list, tuple, set, frozenset, dict):
        for arg in args:
            inner = unsupported_annotation(arg)
            if inner is not None:
                return inner
        return None
    if origin is None and isinstance(tp, type):
        return None  # a class: bool, int, enums, timedelta, or an isinstance check
    return tp


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def parse_duration(text: str) -> timedelta:
    """``"90"``, ``"90s"``, ``"10m"``, ``"1h30m"``, ``"1.5h"``, ``"250ms"``, ``"1d"`` → timedelta."""
    s = text.strip()
    try:
        return timedelta(seconds=float(s))
    except ValueError:
        pass
    pos = 0
    total = 0.0
    for m in _DURATION.finditer(s):
        if s[pos : m.start()].strip():
            raise ValueError(text)
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()]
        pos = m.end()
    if pos == 0 or s[pos:].strip():
        raise ValueError(text)
    return timedelta(seconds=total)


def _expected(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(_plain(a)) for a in typing.get_args(tp))
    if tp is timedelta:
        return "a duration: seconds as a number, or a string like '90s', '10m', '1h'"
    if tp is bool:
        return "a boolean (true or false)"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    return describe_type(tp)


def coerce(value: Any, tp: Any, strings: bool, trusted: bool, imp: bool) -> Any:
    """``value`` converted to annotation ``tp``, or :class:`Mismatch`.

    ``strings`` accepts text forms (environment variables); ``trusted`` accepts callables
    (values set in code); ``imp`` lets a ``"module:attribute"`` string import a callable.
    """
    if tp is Any or tp is object:
        return value
    value = _from_numpy(value)
    if tp is type(None) or tp is None:
        if value is None or (
            strings and isinstance(value, str) and value.lower() in ("none", "null")
        ):
            return None
        raise Mismatch("None")
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(value, args, strings, trusted, imp)
    if origin is typing.Literal:
        return _coerce_literal(value, tp, args, strings)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _coerce_enum(value, tp)
    if tp is bool:
        return _coerce_bool(value, strings)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return _int64(value)
        if strings and isinstance(value, str):
            try:
                return _int64(int(value.strip()))
            except ValueError:
                pass
        raise Mismatch(_expected(tp))
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return value if type(value) is float else float(value)
            except OverflowError:  # an int beyond 1.8e308
                raise Mismatch("a number within the range of a float") from None
        if strings and isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise Mismatch(_expected(tp))
    if tp is str:
        if isinstance(value, str):
            return value
        raise Mismatch("a string")
    if tp is timedelta:
        return _coerce_timedelta(value)
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        return _coerce_list(value, tp, origin or tp, args, strings, trusted, imp)
    if origin is dict or tp is dict:
        return _coerce_dict(value, args, strings, trusted, imp)
    if tp is Callable or origin is Callable or getattr(origin, "__name__", "") == "Callable":
        return _coerce_callable(value, trusted, imp)
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        raise Mismatch(f"an instance of {tp.__name__}")
    return value


def _from_numpy(value: Any) -> Any:
    """A NumPy scalar as the Python number torch would read from it; anything else unchanged.

    ``np.bool_`` becomes ``bool``, ``np.integer`` ``int`` and ``np.floating`` ``float``, so the
    usual rules then apply (an ``np.float32`` is refused where an ``int`` is declared, as a
    ``float`` is). NumPy is never imported here: a NumPy scalar means NumPy is loaded already.
    """
    np = sys.modules.get("numpy")
    if np is None or not isinstance(value, np.generic) or isinstance(value, float | int):
        return value  # np.float64 and np.int_-like subclasses: the float and int rules apply
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _int64(value: int) -> int:
    # Handler integers end up in torch's C++ code, where a larger one fails only at run time.
    if -(2**63) <= value < 2**63:
        return value
    raise Mismatch("an integer within the signed 64-bit range")


def _coerce_union(
    value: Any, args: tuple[Any, ...], strings: bool, trusted: bool, imp: bool
) -> Any:
    if type(None) in args and (
        value is None or (strings and isinstance(value, str) and value.lower() in ("none", "null"))
    ):
        return None
    expectations: list[str] = []
    deepest: Mismatch | None = None
    for arm in args:
        if arm is type(None) and not (strings and isinstance(value, str)):
            expectations.append("None")
            continue
        try:
            return coerce(value, arm, strings, trusted, imp)
        except Mismatch as err:
            if err.path:
                deepest = err
            expectations.append(err.expected)
    if deepest is not None:
        raise deepest
    raise Mismatch(" or ".join(dict.fromkeys(expectations)))


def _coerce_literal(value: Any, tp: Any, args: tuple[Any, ...], strings: bool) -> Any:
    for allowed in args:
        if value == allowed and type(value) is type(allowed):
            return allowed
        if isinstance(allowed, enum.Enum) and isinstance(value, str) and value == allowed.value:
            return allowed
    if strings and isinstance(value, str):
        for allowed in args:
            if isinstance(allowed, str) and allowed.lower() == value.lower():
                return allowed
    raise Mismatch(_expected(tp))


def _coerce_enum(value: Any, tp: type[enum.Enum]) -> Any:
    if isinstance(value, tp):
        return value
    if isinstance(value, str):
        for member in tp:
            if value == member.value or value.lower() == str(member.value).lower():
                return member
            if value.upper() == member.name:
                return member
    raise Mismatch(_expected(tp))


def _coerce_bool(value: Any, strings: bool) -> bool:
    if isinstance(value, bool):
        return value
    if strings and isinstance(value, str):
        low = value.strip().lower()
        if low in TRUE_WORDS:
            return True
        if low in FALSE_WORDS:
            return False
    raise Mismatch(_expected(bool))


def _coerce_timedelta(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond 1.8e308
            raise Mismatch("a positive duration of at most 10 years") from None
    elif isinstance(value, str):
        try:
            seconds = parse_duration(value).total_seconds()
        except (ValueError, OverflowError):
            raise Mismatch(_expected(timedelta)) from None
    else:
        raise Mismatch(_expected(timedelta))
    if not seconds > 0 or seconds > 10 * 365 * 86400:
        raise Mismatch("a positive duration of at most 10 years")
    return value if isinstance(value, timedelta) else timedelta(seconds=seconds)


def _coerce_list(
    value: Any, tp: Any, kind: Any, args: tuple[Any, ...], strings: bool, trusted: bool, imp: bool
) -> Any:
    if strings and isinstance(value, str):
        value = _parse_text_list(value)
    if not isinstance(value, list | tuple):
        raise Mismatch(f"a list ({describe_type(tp)})")
    item_tp = args[0] if args else Any
    out = []
    for i, item in enumerate(value):
        try:
            out.append(coerce(item, item_tp, strings, trusted, imp))
        except Mismatch as err:
            raise Mismatch(
                err.expected, f"[{i}]{err.path}", err.value if err.path else item
            ) from None
    if all(a is b for a, b in zip(out, value, strict=True)):
        return value  # nothing converted: the caller's own list or tuple, as Accelerate keeps it
    return tuple(out) if isinstance(value, tuple) else out


def _parse_text_list(text: str) -> Any:
    s = text.strip()
    if s.startswith("["):
        try:
            return json.loads(s)
        except json.JSONDecodeError:
            raise Mismatch("a JSON list or comma-separated values") from None
    return [part.strip() for part in s.split(",") if part.strip()]


def _coerce_dict(value: Any, args: tuple[Any, ...], strings: bool, trusted: bool, imp: bool) -> Any:
    if strings and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise Mismatch("a JSON object") from None
    if not isinstance(value, Mapping):
        raise Mismatch("a table (mapping)")
    key_tp, val_tp = args if args else (Any, Any)
    out = {}
    changed = not isinstance(value, dict)
    for k, v in value.items():
        try:
            ck = coerce(k, key_tp, strings, trusted, imp)
            cv = coerce(v, val_tp, strings, trusted, imp)
        except Mismatch as err:
            raise Mismatch(
                err.expected, f"[{k!r}]{err.path}", err.value if err.path else v
            ) from None
        changed = changed or ck is not k or cv is not v
        out[ck] = cv
    return out if changed else value


def _coerce_callable(value: Any, trusted: bool, imp: bool) -> Any:
    if trusted and callable(value):
        return value
    if imp and isinstance(value, str) and ":" in value:
        try:
            obj: Any = pkgutil.resolve_name(value)
        except Exception as exc:
            raise Mismatch(
                f"an importable 'module:attribute' ({type(exc).__name__}: {exc})"
            ) from None
        if callable(obj):
            return obj
        raise Mismatch("a 'module:attribute' that names a callable")
    raise Mismatch(
        "a callable set in code (configuration never imports code; opt in with "
        "ACCELKW_ALLOW_IMPORTS=1 to name one as 'package.module:function')"
    )

"""The five built-in handlers, paired with Accelerate's classes, and how to compare outcomes.

An *outcome* is what a small program produced: a value, or the exception class it raised.
:func:`same` compares two outcomes across the frameworks: enum members by class name and value
(each framework has its own enum class), containers item by item with their exact types.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from datetime import timedelta
from typing import Any

NAMES = ("autocast", "ddp", "profile", "grad_scaler", "process_group")
CLASS_NAMES = {
    "autocast": "AutocastKwargs",
    "ddp": "DistributedDataParallelKwargs",
    "profile": "ProfileKwargs",
    "grad_scaler": "GradScalerKwargs",
    "process_group": "InitProcessGroupKwargs",
}


def ours(name: str) -> type:
    """accelkw's class, imported from its plugin package (a broken install fails, never skips)."""
    from accelkw_autocast import AutocastKwargs
    from accelkw_ddp import DistributedDataParallelKwargs
    from accelkw_grad_scaler import GradScalerKwargs
    from accelkw_process_group import InitProcessGroupKwargs
    from accelkw_profile import ProfileKwargs

    classes: dict[str, type] = {
        "autocast": AutocastKwargs,
        "ddp": DistributedDataParallelKwargs,
        "profile": ProfileKwargs,
        "grad_scaler": GradScalerKwargs,
        "process_group": InitProcessGroupKwargs,
    }
    return classes[name]


def theirs(name: str) -> type:
    """Accelerate's class of the same name."""
    import accelerate.utils

    cls: type = getattr(accelerate.utils, CLASS_NAMES[name])
    return cls


@dataclasses.dataclass(frozen=True)
class Raised:
    """The outcome of a program that raised."""

    error: type[BaseException]
    message: str

    def __repr__(self) -> str:
        return f"Raised({self.error.__name__}: {self.message})"


def run(program: Callable[[], Any]) -> Any:
    """The program's result, or :class:`Raised`."""
    try:
        return program()
    except Exception as exc:
        return Raised(type(exc), str(exc))


def same(a: Any, b: Any) -> bool:
    """Whether two outcomes are the same across the frameworks (exact types, enums by value)."""
    if isinstance(a, enum.Enum) or isinstance(b, enum.Enum):
        return (
            isinstance(a, enum.Enum)
            and isinstance(b, enum.Enum)
            and type(a).__name__ == type(b).__name__
            and a.name == b.name
            and a.value == b.value
        )
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a != a:
        return b != b
    return bool(a == b)


def annotation(tp: Any) -> str:
    """A framework-neutral name for a resolved annotation.

    ``Optional[X]`` and ``X | None`` read the same, a bare ``Callable`` is ``Callable[..., Any]``,
    enum classes and members read by name (each framework has its own class).
    """
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is type(None):
        return "None"
    if tp is Any:
        return "Any"
    if tp is Ellipsis:
        return "..."
    if isinstance(tp, enum.Enum):
        return f"{type(tp).__name__}.{tp.name}"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(annotation(a) for a in args)
    if origin is typing.Literal:
        return "Literal[" + ", ".join(annotation(a) if isinstance(a, enum.Enum) else repr(a)
                                      for a in args) + "]"  # fmt: skip
    if tp is typing.Callable or tp is Callable:
        return "Callable[..., Any]"
    if origin is not None and getattr(origin, "__name__", "") == "Callable":
        params, result = args
        shown = "..." if params is Ellipsis else "[" + ", ".join(map(annotation, params)) + "]"
        return f"Callable[{shown}, {annotation(result)}]"
    if origin is not None:
        return f"{origin.__name__}[{', '.join(annotation(a) for a in args)}]"
    if tp is timedelta:
        return "timedelta"
    return str(getattr(tp, "__name__", tp))


def fields(cls: type) -> list[tuple[str, str, Any, bool]]:
    """``(name, annotation, default, has_factory)`` for each init field, in order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        factory = f.default_factory is not dataclasses.MISSING
        default = f.default_factory() if factory else f.default  # type: ignore[misc]
        out.append((f.name, annotation(hints[f.name]), default, factory))
    return out

"""How ``accelkw config check`` and ``accelkw plan`` show effective settings, as text and JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelkw_core.cli.render import jsonable

if TYPE_CHECKING:
    from accelkw_core.config.settings import HandlerSettings, Settings

__all__ = ["field_rows", "handler_lines", "settings_json"]


def field_rows(hs: HandlerSettings) -> list[dict[str, Any]]:
    """Each field of a handler: value, default, whether it differs, and where it came from."""
    from accelkw_core.contract.validation import field_specs

    rows = []
    specs = field_specs(type(hs.handler))
    for name, value in hs.handler.field_values().items():
        default = specs[name].default if name in specs else None
        rows.append(
            {
                "name": name,
                "value": jsonable(value),
                "default": jsonable(default),
                "changed": jsonable(value) != jsonable(default),
                "source": hs.source(name),
            }
        )
    return rows


def handler_json(hs: HandlerSettings, versions: dict[str, str | None]) -> dict[str, Any]:
    cls = type(hs.handler)
    return {
        "name": hs.name,
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "distribution": hs.distribution,
        "version": versions.get(hs.name),
        "after": list(cls.after),
        "before": list(cls.before),
        "requires": list(cls.requires),
        "conflicts": list(cls.conflicts),
        "fields": field_rows(hs),
    }


def settings_json(settings: Settings, versions: dict[str, str | None]) -> dict[str, Any]:
    """The settings as plain JSON data (handlers in apply order)."""
    return {
        "config": str(settings.config.path) if settings.config.path else None,
        "accelerator": {
            "mixed_precision": {
                "value": settings.mixed_precision,
                "source": settings.accelerator_sources.get("mixed_precision", "default"),
            },
            "cpu": {
                "value": settings.cpu,
                "source": settings.accelerator_sources.get("cpu", "default"),
            },
        },
        "handlers": [handler_json(h, versions) for h in settings.handlers],
        "disabled": dict(settings.disabled),
        "notes": list(settings.notes),
        "errors": [str(e) for e in settings.errors],
    }


def accelerator_lines(settings: Settings) -> list[str]:
    lines = []
    for key, value in (("mixed_precision", settings.mixed_precision), ("cpu", settings.cpu)):
        source = settings.accelerator_sources.get(key, "default")
        mark = " " if source == "default" else "*"
        lines.append(
            f"  {mark} {key} = {value!r}" + ("" if source == "default" else f"  ({source})")
        )
    return lines


def show(value: Any) -> str:
    """A value as the text views print it: enums by value, durations as ``90s``."""
    import enum
    from datetime import timedelta

    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    if isinstance(value, enum.Enum):
        return repr(value.value)
    return repr(jsonable(value))


def handler_lines(hs: HandlerSettings, index: int, version: str | None) -> list[str]:
    """A numbered block: the handler, where it comes from, then every field (``*`` = changed)."""
    origin = hs.distribution or "code"
    if version:
        origin += f" {version}"
    lines = [f"{index}. {hs.name}  ({type(hs.handler).__name__}, {origin})"]
    rows = field_rows(hs)
    width = max((len(r["name"]) for r in rows), default=0)
    values = hs.handler.field_values()
    for row in rows:
        mark = "*" if row["changed"] or row["source"] != "default" else " "
        text = f"   {mark} {row['name'].ljust(width)} = {show(values[row['name']])}"
        if row["source"] != "default":
            text += f"  ({row['source']})"
        lines.append(text)
    return lines

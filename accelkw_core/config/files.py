"""Configuration files: where they are found, how they are read, and the shape they must have.

A config is ``accelkw.toml``, or the ``[tool.accelkw]`` table of ``pyproject.toml``::

    [accelerator]
    mixed_precision = "bf16"      # "no" | "fp16" | "bf16" | "fp8"
    cpu = false

    [plugins]
    disable = ["profile"]         # handler names not to compose (or enable = [...] for an allow-list)
    required = ["ddp>=0.1"]       # plugins that must be installed and load, with version ranges

    [handlers.ddp]                # one table per handler, by registry name
    bucket_cap_mb = 50

Lookup: an explicit path (``Accelerator(config=...)``, ``--config``), else the ``ACCELKW_CONFIG``
environment variable, else ``./accelkw.toml``, else ``./pyproject.toml`` when it has
``[tool.accelkw]``. Reading a config never imports or runs code: TOML in, plain data out. The
values of handler tables are checked later, by the handler classes (see :mod:`.settings`).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelkw_core.errors import ConfigError, ConfigFileError, raise_all, suggest
from accelkw_core.facts.precision import MIXED_PRECISION_MODES

__all__ = [
    "CONFIG_ENV",
    "CONFIG_FILE",
    "ConfigFile",
    "find_config",
    "load_config",
    "parse_config",
    "read_toml",
]

CONFIG_ENV = "ACCELKW_CONFIG"
CONFIG_FILE = "accelkw.toml"
PYPROJECT = "pyproject.toml"
SECTIONS = ("accelerator", "plugins", "handlers")
ACCELERATOR_KEYS = ("mixed_precision", "cpu")
PLUGINS_KEYS = ("enable", "disable", "required")
_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)")


@dataclass
class ConfigFile:
    """A parsed config: the ``[accelerator]`` values, the ``[plugins]`` lists, the handler tables."""

    path: Path | None = None
    prefix: str = ""
    accelerator: dict[str, Any] = field(default_factory=dict)
    enable: list[str] | None = None
    disable: list[str] = field(default_factory=list)
    required: list[str] = field(default_factory=list)
    handlers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: What is wrong with the file's shape, every problem (a bad value is left out of the
    #: fields above); :func:`load_config` raises them unless asked to collect them.
    errors: list[ConfigError] = field(default_factory=list)

    def where(self, table: str) -> str:
        """``"accelkw.toml [handlers.ddp]"``: the file and table a value came from."""
        return f"{self.path} [{self.prefix}{table}]"

    @property
    def label(self) -> str:
        """The file, plus the table for ``pyproject.toml``; ``"(none)"`` without a file."""
        if self.path is None:
            return "(none)"
        return f"{self.path} [{self.prefix.rstrip('.')}]" if self.prefix else str(self.path)


def find_config(
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Path | None:
    """The config file to use, or ``None``; an explicit or ``ACCELKW_CONFIG`` path must exist."""
    env = os.environ if env is None else env
    chosen: str | os.PathLike[str] | None = explicit
    how = "the config path given"
    if chosen is None and env.get(CONFIG_ENV):
        chosen, how = env[CONFIG_ENV], f"{CONFIG_ENV}"
    base = Path(cwd) if cwd is not None else Path.cwd()
    if chosen is not None:
        path = base / Path(chosen)
        if path.is_dir():
            raise ConfigFileError(
                str(chosen),
                f"is a directory, not a config file ({how}); give the path of a TOML file, "
                f"such as {Path(chosen) / CONFIG_FILE}",
            )
        if not path.is_file():
            raise ConfigFileError(str(chosen), f"no such config file ({how})")
        return path
    for name in (CONFIG_FILE, PYPROJECT):
        candidate = base / name
        if candidate.is_file() and (name == CONFIG_FILE or _has_tool_table(candidate)):
            return candidate
    return None


def _has_tool_table(path: Path) -> bool:
    # Cheap pre-check so an unrelated, even malformed, pyproject.toml is not an error.
    try:
        data = path.read_bytes()  # bytes: a pyproject.toml that is not UTF-8 is not ours to judge
    except OSError:
        return False
    return b"tool.accelkw" in data


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a syntax error becomes a :class:`ConfigFileError` with its line."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigFileError(str(path), f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:  # tomllib decodes the whole file as UTF-8 first
        data = bytes(exc.object)
        start = data.rfind(b"\n", 0, exc.start) + 1
        raise ConfigFileError(
            str(path),
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} cannot be decoded); "
            "TOML files must be UTF-8: save it with that encoding",
            line=data[: exc.start].count(b"\n") + 1,
            column=exc.start - start + 1,
        ) from None
    except tomllib.TOMLDecodeError as exc:
        # Python 3.14 adds lineno/colno; before that the position is only in the message.
        reason = str(exc)
        line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
        found = _POSITION.search(reason)
        if found:
            reason = reason[: found.start()].rstrip()
            line, column = line or int(found.group(1)), column or int(found.group(2))
        raise ConfigFileError(
            str(path), f"invalid TOML: {reason}", line=line, column=column
        ) from None


def load_config(path: Path | None, *, collect: bool = False) -> ConfigFile:
    """Read and check the shape of the config at ``path`` (an empty config for ``None``).

    Every problem of its shape is raised at once (:class:`~accelkw_core.errors.ConfigErrors`
    for several); with ``collect``, they are left in ``ConfigFile.errors`` instead.
    """
    if path is None:
        return ConfigFile()
    data = read_toml(path)
    prefix = ""
    if path.name == PYPROJECT:
        tool = data.get("tool", {})
        data = tool.get("accelkw", {}) if isinstance(tool, dict) else {}
        prefix = "tool.accelkw."
    cfg = parse_config(data, path=path, prefix=prefix)
    if not collect:
        raise_all(cfg.errors)
    return cfg


def parse_config(
    data: Mapping[str, Any], *, path: Path | None = None, prefix: str = ""
) -> ConfigFile:
    """Check the sections of a config mapping and return them as a :class:`ConfigFile`.

    Each problem goes to ``errors`` and its value is left out, so every one is found.
    """
    cfg = ConfigFile(path=path, prefix=prefix)
    where_root = f"{path} [{prefix.rstrip('.')}]" if prefix else str(path)
    tables: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        if key not in SECTIONS:
            cfg.errors.append(
                ConfigError(
                    "config",
                    key,
                    value,
                    "one of the tables " + ", ".join(f"[{s}]" for s in SECTIONS),
                    suggestion=suggest(key, SECTIONS),
                    source=where_root,
                )
            )
        elif not isinstance(value, dict):
            cfg.errors.append(
                ConfigError("config", key, value, f"a table ([{prefix}{key}])", source=where_root)
            )
        else:
            tables[key] = value
    cfg.accelerator = _accelerator(cfg, tables.get("accelerator", {}))
    plugins = tables.get("plugins", {})
    _check_keys(cfg, "plugins", plugins, PLUGINS_KEYS)
    if "enable" in plugins:
        cfg.enable = _collect(cfg, _name_list, cfg, "enable", plugins["enable"])
    if "disable" in plugins:
        cfg.disable = _collect(cfg, _name_list, cfg, "disable", plugins["disable"]) or []
    if "required" in plugins:
        cfg.required = _collect(cfg, _requirement_list, cfg, plugins["required"]) or []
    for name, table in tables.get("handlers", {}).items():
        if not isinstance(table, dict):
            cfg.errors.append(
                ConfigError(
                    name,
                    "<table>",
                    table,
                    f"a table of field = value ([{prefix}handlers.{name}])",
                    source=cfg.where("handlers"),
                )
            )
            continue
        cfg.handlers[name] = dict(table)
    return cfg


def _collect(cfg: ConfigFile, read: Any, *args: Any) -> Any:
    """``read(*args)``, or ``None`` with its error added to ``cfg.errors``."""
    try:
        return read(*args)
    except ConfigError as exc:
        cfg.errors.append(exc)
        return None


def _check_keys(
    cfg: ConfigFile, table: str, values: dict[str, Any], allowed: tuple[str, ...]
) -> None:
    for key, value in values.items():
        if key not in allowed:
            cfg.errors.append(
                ConfigError(
                    table,
                    key,
                    value,
                    "one of the keys " + ", ".join(allowed),
                    suggestion=suggest(key, allowed),
                    source=cfg.where(table),
                )
            )


def _accelerator(cfg: ConfigFile, values: dict[str, Any]) -> dict[str, Any]:
    _check_keys(cfg, "accelerator", values, ACCELERATOR_KEYS)
    out: dict[str, Any] = {}
    if "mixed_precision" in values:
        mode = _collect(
            cfg, check_mixed_precision, values["mixed_precision"], cfg.where("accelerator")
        )
        if mode is not None:
            out["mixed_precision"] = mode
    if "cpu" in values:
        if not isinstance(values["cpu"], bool):
            cfg.errors.append(
                ConfigError(
                    "accelerator",
                    "cpu",
                    values["cpu"],
                    "a boolean (true or false)",
                    source=cfg.where("accelerator"),
                )
            )
        else:
            out["cpu"] = values["cpu"]
    return out


def check_mixed_precision(value: Any, source: str) -> str:
    """``value`` if it is a mixed-precision mode, else a :class:`ConfigError` naming ``source``."""
    if not isinstance(value, str) or value not in MIXED_PRECISION_MODES:
        raise ConfigError(
            "accelerator",
            "mixed_precision",
            value,
            "one of " + ", ".join(repr(m) for m in MIXED_PRECISION_MODES),
            suggestion=suggest(str(value).lower(), MIXED_PRECISION_MODES),
            source=source,
        )
    return value


def _name_list(cfg: ConfigFile, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            "plugins", key, value, "a list of handler names", source=cfg.where("plugins")
        )
    return list(value)


def _requirement_list(cfg: ConfigFile, value: Any) -> list[str]:
    # Checked here so that `accelkw config check` reports a malformed entry with its file.
    from accelkw_core.discovery.required_plugins import EXPECTED, parse_requirement

    where = cfg.where("plugins")
    if not isinstance(value, list):
        raise ConfigError("plugins", "required", value, f"a list, each {EXPECTED}", source=where)
    return [parse_requirement(item, source=where).text for item in value]

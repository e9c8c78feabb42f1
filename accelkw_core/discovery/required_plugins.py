"""Required plugins: ``[plugins] required = ["ddp>=0.1", "seed"]``, checked before anything runs.

Each entry is a plugin name with an optional PEP 440 version range, as in a pip requirement. The
name is matched (case-insensitively, ``-``/``_``/``.`` alike) against the installed handlers'
registry names (of loaded or conflicting plugins), then the plugins' entry-point names, then
their distribution names; the range
is checked against the version of the distribution that ships the plugin. A requirement that is
not met stops the run with a :class:`RequirementError` that lists every unmet one and why.

Version ranges are parsed by ``packaging``, imported only when a requirement has one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from accelkw_core.discovery.catalog import HANDLER_DISTRIBUTIONS, install_hint

# The allow- and deny-lists' name matching, so a name means the same thing in every list.
from accelkw_core.discovery.records import normalize_name
from accelkw_core.errors import ConfigError, RequirementError

if TYPE_CHECKING:
    from accelkw_core.discovery.registry import PluginRecord, Registry

__all__ = ["PluginRequirement", "check_requirements", "parse_requirement"]

_REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<spec>[<>=!~].*)?$")
_STATUS_TEXT = {
    "failed": "failed to load",
    "disabled": "is disabled",
    "conflict": "is in conflict",
    "incompatible": "is incompatible with the installed core",
}
EXPECTED = "a plugin name with an optional PEP 440 version range, such as 'ddp' or 'ddp>=0.1,<1'"


class PluginRequirement(NamedTuple):
    """A parsed entry of ``[plugins] required``: the name and the version range (may be empty)."""

    text: str
    name: str
    spec: str


def parse_requirement(text: Any, *, source: str | None = None) -> PluginRequirement:
    """Parse ``"ddp>=0.1"``; a malformed entry is a :class:`ConfigError` on ``plugins.required``."""
    match = _REQUIREMENT.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError("plugins", "required", text, EXPECTED, source=source)
    spec = (match["spec"] or "").strip()
    if spec:
        _specifier(text, spec, source)
    return PluginRequirement(text, match["name"], spec)


def _specifier(text: str, spec: str, source: str | None) -> Any:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(spec)
    except InvalidSpecifier as exc:
        raise ConfigError(
            "plugins", "required", text, f"{EXPECTED} ({exc})", source=source
        ) from None


def check_requirements(
    required: Iterable[str], registry: Registry, source: str | None = None
) -> None:
    """Raise :class:`RequirementError` unless every requirement is met by a loaded plugin."""
    problems = [
        problem
        for text in required
        if (problem := _unmet(parse_requirement(text, source=source), registry)) is not None
    ]
    if problems:
        raise RequirementError(problems, source)


def _unmet(req: PluginRequirement, registry: Registry) -> str | None:
    key = normalize_name(req.name)
    handlers = registry.handlers()
    record = _find(key, registry, handlers)
    if record is None:
        known = key in HANDLER_DISTRIBUTIONS.values()
        hint = f"pip install {key}" if known else install_hint(key.replace("-", "_"))
        return f"{req.text!r}: no installed plugin provides it ({hint})"
    owner = record.distribution or "code (no distribution)"
    if record.status != "loaded":
        state = _STATUS_TEXT.get(record.status, record.status)
        return f"{req.text!r}: plugin {record.name!r} from {owner} {state}: {record.reason}"
    if not req.spec:
        return None
    wanted = f"{record.distribution or req.name}{req.spec}"
    if record.version is None:
        return f"{req.text!r}: plugin {record.name!r} is registered in code, with no version"
    from packaging.version import InvalidVersion, Version

    try:
        version = Version(record.version)
    except InvalidVersion:
        return f"{req.text!r}: {owner} has version {record.version!r}, which is not PEP 440"
    if _specifier(req.text, req.spec, None).contains(version, prereleases=True):
        return None
    return f"{req.text!r}: {owner} {record.version} is installed (pip install '{wanted}')"


def _find(key: str, registry: Registry, handlers: dict[str, Any]) -> PluginRecord | None:
    records = registry.plugins()
    for name, info in handlers.items():
        if normalize_name(name) == key:
            return next(r for r in records if r.name == info.plugin and info.cls in r.handlers)
    for record in records:  # a handler name two plugins claim: their records say so
        if any(normalize_name(cls.name) == key for cls in record.handlers):
            return record
    for field in ("name", "distribution"):
        for record in records:
            value = getattr(record, field)
            if value and normalize_name(value) == key:
                return record
    return None

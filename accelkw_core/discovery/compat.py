"""Which core a plugin was built for, read from its distribution's metadata without importing it.

A plugin distribution states the cores it works with as a requirement on ``accelkw-core`` in its
``Requires-Dist`` metadata (``dependencies = ["accelkw-core>=0.2,<0.3"]`` in its pyproject). The
registry compares that range with the running core's version before it imports the plugin: a
range that excludes the core makes the plugin ``incompatible`` (never imported), with the pip line
that fixes it. pip does not prevent the mismatch: upgrading the core only warns, and ``--no-deps``
or editable installs skip the check.

Versions are compared by PEP 440 (``packaging``, imported only when a distribution declares a
range, and only on an entry-point cache miss: the verdict is cached with the entry points); a
plain requirement line is read with a regular expression, anything else by packaging. One
deliberate reading: a pre-release of the core (``0.3.0rc1``, ``0.3.0.dev2``) is judged as the
release it precedes, because it carries that release's API; so ``>=0.3,<0.4`` accepts
``0.3.0rc1`` and ``>=0.2,<0.3`` rejects ``0.3.0.dev2``. A range that itself names a pre-release
(``>=0.3.0rc2``) is applied strictly, as pip would.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "CORE_DISTRIBUTION",
    "INCOMPATIBLE_VERDICTS",
    "NO_RANGE",
    "OK",
    "core_range_for",
    "core_requirement",
    "describe",
    "fix_line",
    "no_range_note",
    "verdict",
]

CORE_DISTRIBUTION = "accelkw-core"
OK, NO_RANGE, CORE_TOO_NEW, CORE_TOO_OLD = "ok", "no-range", "core-too-new", "core-too-old"
INCOMPATIBLE_VERDICTS = (CORE_TOO_NEW, CORE_TOO_OLD)

# A requirement line on the core, before packaging parses it: cheap to test every line with.
_ON_CORE = re.compile(r"^\s*accelkw[-_.]core(?![A-Za-z0-9_.-]*[A-Za-z0-9])", re.IGNORECASE)
_HEADER = re.compile(r"^Requires-Dist:[ \t]*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)
# The plain form nearly every plugin writes, "accelkw-core>=0.2,<0.3" or "accelkw-core (>=0.2)":
# no extras, marker or URL. Read without packaging.requirements, whose import (markers, tags,
# subprocess, logging) costs a third of a listing on an entry-point cache miss.
_PLAIN = re.compile(
    r"^\s*accelkw[-_.]core\s*(?:\((?P<paren>[^()\[\];@]*)\)|(?P<bare>[^()\[\];@]*))\s*$",
    re.IGNORECASE,
)
_SPEC = re.compile(
    r"^\s*(~=|==|!=|<=|>=|<|>)\s*(\d+(?:\.\d+)*(?:\.\*)?(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?)\s*$"
)


def core_requirement(dist: Any) -> str | None:
    """The version range ``dist`` requires of ``accelkw-core``; ``None`` when it names no core.

    ``""`` means the core is required with no range. Requirements behind an extra, or whose
    environment marker is false here, do not count; several that apply are joined.
    """
    if dist is None:
        return None
    lines = [line for line in _requirement_lines(dist) if _ON_CORE.match(line)]
    if not lines:
        return None
    plain = [_plain_specs(line) for line in lines]
    if all(specs is not None for specs in plain):
        # Each line's specifiers in packaging's order (below), lines in their order.
        ordered = [sorted(specs or (), key=lambda s: (s[0] == "<", s)) for specs in plain]
        return ",".join(spec for specs in ordered for spec in specs)
    from packaging.requirements import InvalidRequirement, Requirement

    specs: list[str] = []
    found = False
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        found = True
        # Lower bounds first, as people write them (a SpecifierSet keeps no order).
        specs.extend(
            str(s) for s in sorted(req.specifier, key=lambda s: (s.operator[0] == "<", str(s)))
        )
    return ",".join(specs) if found else None


def _plain_specs(line: str) -> list[str] | None:
    """The specifiers of a plain requirement line, as packaging prints them; ``None``: not plain.

    Anything else (extras, a marker, a URL, an odd specifier) goes to packaging.
    """
    match = _PLAIN.match(line)
    if match is None:
        return None
    text = match["paren"] if match["paren"] is not None else match["bare"]
    if not text.strip():
        return []
    out = []
    for part in text.split(","):
        spec = _SPEC.match(part)
        if spec is None:
            return None
        out.append(spec[1] + spec[2])
    return out


def _requirement_lines(dist: Any) -> list[str]:
    # The header block of METADATA, read as text: the email parser that dist.requires uses costs
    # more than the whole entry-point scan on a cache miss.
    try:
        text = dist.read_text("METADATA")
    except Exception:
        text = None
    if text:
        head = text.split("\n\n", 1)[0]
        return _HEADER.findall(head)
    try:  # an *.egg-info folder keeps its requirements in requires.txt, by [extra:marker] section
        text = dist.read_text("requires.txt")
    except Exception:
        text = None
    out: list[str] = []
    section = ""
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line.strip("[]")
            continue
        if not line or line.startswith("#"):
            continue
        extra, _, marker = section.partition(":")
        if extra:  # only behind an extra: not required by a plain install
            continue
        out.append(f"{line}; {marker}" if marker else line)
    return out


def verdict(spec: str | None, core_version: str) -> str:
    """``ok``, ``no-range``, ``core-too-new`` or ``core-too-old`` for a range and the core."""
    if not spec:
        return NO_RANGE
    plain = _plain_verdict(spec, core_version)
    if plain is not None:
        return plain
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        specifier = SpecifierSet(spec)
        version = Version(core_version)
    except (InvalidSpecifier, InvalidVersion):
        return NO_RANGE  # a range that cannot be read says nothing either way
    judged = version
    if version.is_prerelease and not any(
        Version(_bare(s.version)).is_prerelease for s in specifier
    ):
        judged = Version(version.base_version)
    if specifier.contains(judged, prereleases=True):
        return OK
    for s in specifier:
        if s.contains(judged, prereleases=True):
            continue
        if s.operator in (">", ">="):
            return CORE_TOO_OLD
        if s.operator in ("~=", "==", "===") and judged < Version(_bare(s.version)):
            return CORE_TOO_OLD
    return CORE_TOO_NEW


_RELEASE = re.compile(r"^\d+(?:\.\d+)*$")
_PLAIN_SPEC = re.compile(r"^\s*(==|!=|<=|>=|<|>)\s*(\d+(?:\.\d+)*)\s*$")


def _plain_verdict(spec: str, core_version: str) -> str | None:
    """:func:`verdict` for final releases compared by ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``.

    Those compare as zero-padded tuples (PEP 440), so packaging (a few ms to import on the first
    listing after an install) is not needed; anything else (pre-releases, ``~=``, wildcards,
    local versions) returns ``None`` and goes to packaging.
    """
    if not _RELEASE.match(core_version):
        return None
    parts = []
    for text in spec.split(","):
        match = _PLAIN_SPEC.match(text)
        if match is None:
            return None
        parts.append((match[1], match[2]))
    core = tuple(int(p) for p in core_version.split("."))
    for operator, version in parts:
        other = tuple(int(p) for p in version.split("."))
        width = max(len(core), len(other))
        a, b = core + (0,) * (width - len(core)), other + (0,) * (width - len(other))
        holds = {
            "==": a == b,
            "!=": a != b,
            "<": a < b,
            "<=": a <= b,
            ">": a > b,
            ">=": a >= b,
        }[operator]
        if holds:
            continue
        if operator in (">", ">="):
            return CORE_TOO_OLD
        if operator == "==" and a < b:
            return CORE_TOO_OLD
        return CORE_TOO_NEW
    return OK


def _bare(version: str) -> str:
    return version[:-2] if version.endswith(".*") else version


def fix_line(distribution: str | None, spec: str, why: str) -> str:
    """The pip line that makes a plugin compatible again."""
    core = f'pip install "{CORE_DISTRIBUTION}{spec}"'
    if why == CORE_TOO_NEW and distribution:
        return f"pip install -U {distribution}"
    return core


def describe(distribution: str | None, spec: str, core_version: str, why: str) -> str:
    """One line: the range, the installed core, and what fixes it."""
    dist = distribution or "the plugin's distribution"
    text = (
        f"{dist} requires {CORE_DISTRIBUTION}{spec}, "
        f"but {CORE_DISTRIBUTION} {core_version} is installed; "
    )
    if why == CORE_TOO_NEW:
        return (
            text + f"upgrade the plugin to a release built for this core "
            f"({fix_line(distribution, spec, why)}) or downgrade the core "
            f'(pip install "{CORE_DISTRIBUTION}{spec}")'
        )
    return text + f"upgrade the core ({fix_line(distribution, spec, why)})"


def no_range_note(distribution: str | None, spec: str | None) -> str:
    """Why a plugin that declares no range is loaded, and how its author can say more."""
    dist = distribution or "the plugin's distribution"
    what = "names no version range of" if spec == "" else "does not require"
    return (
        f"{dist} {what} {CORE_DISTRIBUTION}, so nothing says which core it was built for; "
        "it is loaded unchecked (its author can declare the range, see docs/versioning.md)"
    )


def core_range_for(version: str) -> str:
    """The range a plugin built against core ``version`` should declare.

    Pre-1.0, a minor release may break the plugin API, so ``0.2.x`` gives ``>=0.2,<0.3``; from
    1.0, a major release does (``>=1.4,<2``). A pre-release core is named as the lower bound
    itself (``>=0.3.0rc1,<0.4``), so pip accepts it.
    """
    from packaging.version import Version

    parsed = Version(version)
    major, minor = (*parsed.release, 0)[:2]
    lower = str(parsed) if parsed.is_prerelease else f"{major}.{minor}"
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f">={lower},<{upper}"

"""Which core a plugin was built for, judged by ``packaging`` from its distribution's requirements.

A plugin distribution states the cores it works with as a requirement on ``accelkw-core``
(``dependencies = ["accelkw-core>=0.2,<0.3"]`` in its pyproject, ``Requires-Dist`` in its
metadata). The registry judges that range against the running core before it imports the
plugin: a range that excludes the core makes the plugin ``incompatible`` (never imported), with
the pip line that fixes it. pip does not prevent the mismatch: upgrading the core only warns, and
``--no-deps`` or editable installs skip the check.

The requirement strings come from ``importlib_metadata`` (``Distribution.requires``); each is
read by ``packaging.requirements.Requirement`` and the range judged by ``SpecifierSet`` and
``Version``. One deliberate reading: a pre-release of the core (``0.3.0rc1``, ``0.3.0.dev2``) is
judged as the release it precedes, because it carries that release's API; so ``>=0.3,<0.4``
accepts ``0.3.0rc1`` and ``>=0.2,<0.3`` rejects ``0.3.0.dev2``. A range that itself names a
pre-release (``>=0.3.0rc2``) is applied strictly, as pip would.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "CORE_DISTRIBUTION",
    "CORE_TOO_NEW",
    "CORE_TOO_OLD",
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


def core_requirement(requires: Iterable[str] | None) -> str | None:
    """The range that ``requires`` puts on ``accelkw-core``; ``None`` when none names the core.

    ``requires``: a distribution's requirement strings, as ``Distribution.requires`` gives them.
    ``""`` means the core is required with no range. A requirement behind an extra, or whose
    environment marker is false here, does not count; several that apply are joined. A string
    that is not a valid requirement is skipped (pip would have refused to install it).
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    specs: list[str] = []
    found = False
    for line in requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != CORE_DISTRIBUTION:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        found = True
        # Lower bounds first, as people write them (a SpecifierSet keeps no order).
        specs.extend(
            str(s) for s in sorted(req.specifier, key=lambda s: (s.operator[0] == "<", str(s)))
        )
    return ",".join(specs) if found else None


def verdict(spec: str | None, core_version: str) -> str:
    """``ok``, ``no-range``, ``core-too-new`` or ``core-too-old`` for a range and the core."""
    if not spec:
        return NO_RANGE
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        specifier = SpecifierSet(spec)
        version = Version(core_version)
    except (InvalidSpecifier, InvalidVersion):
        return NO_RANGE  # a range that cannot be read says nothing either way
    judged = version
    if version.is_prerelease and not any(
        Version(s.version.removesuffix(".*")).is_prerelease for s in specifier
    ):
        judged = Version(version.base_version)
    if specifier.contains(judged, prereleases=True):
        return OK
    # Which side of the range the core falls on decides the fix: upgrade the core or the plugin.
    for s in specifier:
        if s.contains(judged, prereleases=True):
            continue
        if s.operator in (">", ">="):
            return CORE_TOO_OLD
        if s.operator in ("~=", "==", "===") and judged < Version(s.version.removesuffix(".*")):
            return CORE_TOO_OLD
    return CORE_TOO_NEW


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

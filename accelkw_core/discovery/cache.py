"""The entry points of one group, read from a cache that any install or uninstall invalidates.

Scanning for entry points means importing ``importlib_metadata`` and reading the metadata of
every installed distribution: most of what ``accelkw plugins list`` costs before a plugin loads.
In the spirit of stevedore's cache, the result of a scan is kept in a file together with a
*stamp* of everything the scan reads: the interpreter, and for each ``sys.path`` entry that holds
distributions, in order, every ``*.dist-info``/``*.egg-info`` in it with the modification time
and size of its ``entry_points.txt`` and of its metadata file, and the core's version. Each
entry point is stored with its distribution's range on ``accelkw-core`` and the compatibility
verdict (:mod:`accelkw_core.discovery.compat`), so a warm start parses no metadata. The next start
rebuilds the stamp (directory listings and a few ``stat`` calls) and, when it is identical, uses
the stored entry points; installing, upgrading or removing a distribution changes the stamp, so
the scan runs again. The stamp is taken before the scan, so a change made during a scan is caught
at the next start.

The file is ``$XDG_CACHE_HOME/accelkw/entry-points-<key>.json`` (``~/.cache/accelkw`` when
``XDG_CACHE_HOME`` is unset), one per interpreter and group; ``ACCELKW_NO_CACHE=1`` turns the
cache off. A cache that cannot be read or written is ignored: the scan is always the fallback.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import re
import sys
import zlib
from collections.abc import Mapping
from typing import Any

__all__ = ["ENV_NO_CACHE", "EntryPointInfo", "cache_dir", "entry_points", "scan", "stamp_of"]

ENV_NO_CACHE = "ACCELKW_NO_CACHE"
FORMAT = 2  # 2: rows carry the core range and the compatibility verdict

# The syntax importlib_metadata accepts: "module", "package.module:object.attribute [extras]".
_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")
_DIST_INFO = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)\.dist-info$")


class EntryPointInfo:
    """One entry point: its name, its ``module:attribute`` value, and the distribution behind it.

    ``core_range`` is the distribution's requirement on ``accelkw-core`` (``None``: it names no
    core; ``""``: no range) and ``verdict`` what :func:`accelkw_core.discovery.compat.verdict`
    made of it for the running core (``None``: not checked, no distribution).
    """

    __slots__ = ("core_range", "distribution", "name", "value", "verdict", "version")

    def __init__(
        self,
        name: str,
        value: str,
        distribution: str | None,
        version: str | None,
        core_range: str | None = None,
        verdict: str | None = None,
    ) -> None:
        self.name = name
        self.value = value
        self.distribution = distribution
        self.version = version
        self.core_range = core_range
        self.verdict = verdict

    def __repr__(self) -> str:
        return (
            f"EntryPointInfo(name={self.name!r}, value={self.value!r}, "
            f"distribution={self.distribution!r}, version={self.version!r}, "
            f"core_range={self.core_range!r}, verdict={self.verdict!r})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EntryPointInfo) and self._row() == other._row()

    def __hash__(self) -> int:
        return hash(self._row())

    def load(self) -> Any:
        """Import the module and return the object the value names, as importlib_metadata does."""
        match = _VALUE.match(self.value)
        if match is None:
            raise ValueError(
                f"invalid entry point value {self.value!r}; expected 'module' or "
                "'package.module:attribute'"
            )
        module = importlib.import_module(match["module"])
        attrs = filter(None, (match["attr"] or "").split("."))
        return functools.reduce(getattr, attrs, module)

    def _row(self) -> list[str | None]:
        return [
            self.name,
            self.value,
            self.distribution,
            self.version,
            self.core_range,
            self.verdict,
        ]


def cache_dir(env: Mapping[str, str] | None = None) -> str | None:
    """The folder of the cache files, or ``None`` when ``ACCELKW_NO_CACHE`` turns caching off."""
    env = os.environ if env is None else env
    from accelkw_core.config.environment import env_flag

    if env_flag(env, ENV_NO_CACHE, handler="plugins", field="no_cache"):
        return None
    base = env.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is to be ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "accelkw")


def entry_points(
    group: str, cache_folder: str | None, stamp: list[Any] | None = None
) -> list[EntryPointInfo]:
    """The entry points of ``group`` on ``sys.path``, from the cache in ``cache_folder`` if valid.

    ``cache_folder=None`` always scans. The result is what ``importlib_metadata.entry_points``
    returns, in its order, with each distribution's name and version. ``stamp``: one the caller
    took with :func:`stamp_of` just before (so it is not taken twice).
    """
    if stamp is None and cache_folder is not None:
        stamp = stamp_of(group)
    if stamp is None or cache_folder is None:
        return scan(group)
    path = os.path.join(cache_folder, f"entry-points-{_key(group)}.json")
    cached = _read(path, stamp)
    if cached is not None:
        return cached
    found = scan(group)
    _write(path, {"format": FORMAT, "stamp": stamp, "entry_points": [e._row() for e in found]})
    return found


def scan(group: str) -> list[EntryPointInfo]:
    """Read the entry points of ``group`` from the installed distributions' metadata.

    Each comes with its distribution's range on ``accelkw-core`` and the verdict for the running
    core (see :mod:`accelkw_core.discovery.compat`); the metadata of each distribution is read
    once, however many entry points it has. Where every distribution is a ``*.dist-info``
    folder, the folders are read directly (:func:`_scan_dist_infos`); anything else goes through
    ``importlib_metadata``, whose result the direct reading reproduces.
    """
    direct = _scan_dist_infos(group)
    if direct is not None:
        return direct
    import importlib_metadata

    from accelkw_core._version import __version__
    from accelkw_core.discovery import compat

    found: list[EntryPointInfo] = []
    ranges: dict[int, tuple[str | None, str | None]] = {}
    seen: list[Any] = []  # keeps each distribution alive, so its id() stays its own
    for ep in importlib_metadata.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        if id(dist) not in ranges:
            seen.append(dist)
            spec = compat.core_requirement(dist)
            ranges[id(dist)] = (spec, compat.verdict(spec, __version__) if dist else None)
        found.append(EntryPointInfo(ep.name, ep.value, *_dist_identity(dist), *ranges[id(dist)]))
    return found


class _DistInfo:
    """A ``*.dist-info`` folder, with the one method :mod:`.compat` asks of a distribution."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def read_text(self, filename: str) -> str | None:
        try:
            with open(os.path.join(self.path, filename), encoding="utf-8") as f:
                return f.read()
        except OSError:
            return None


def _scan_dist_infos(group: str) -> list[EntryPointInfo] | None:
    """``importlib_metadata.entry_points(group=group)`` read straight from ``*.dist-info`` folders.

    Importing ``importlib_metadata`` costs more than the scan itself: on the first listing after
    an install, a third of the entry-point floor. This reading covers the common layout only and
    answers ``None`` for anything else, which then goes through ``importlib_metadata``: a custom
    distribution finder, a zip file or ``*.egg`` on the path, an ``*.egg-info`` or a folder not
    named ``name-version.dist-info`` with entry points in ``group``, an unreadable or malformed
    ``entry_points.txt``.
    The order and the shadowing are importlib_metadata's: ``sys.path`` in order, each folder in
    listing order, the first distribution of a (normalised) name hiding any later one.
    """
    for finder in sys.meta_path:
        if getattr(finder, "find_distributions", None) is not None and not _standard(finder):
            return None
    from accelkw_core._version import __version__
    from accelkw_core.discovery import compat

    seen: set[str] = set()
    found: list[EntryPointInfo] = []
    for entry in sys.path:
        if not isinstance(entry, str):
            return None
        root = entry or "."
        try:
            names = os.listdir(root)
        except OSError:
            if os.path.exists(root):
                return None  # a zip file: importlib_metadata reads inside it
            continue
        if os.path.basename(root).lower().endswith(".egg"):
            return None
        for name in names:
            low = name.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            key = re.sub(r"[-_.]+", "_", low.rpartition(".")[0].partition("-")[0])
            if key in seen:
                continue  # shadowed by the same distribution earlier on the path
            seen.add(key)
            path = os.path.join(root, name)
            try:
                with open(os.path.join(path, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except (FileNotFoundError, NotADirectoryError):
                continue  # no entry points (an old-style egg-info is a file)
            except OSError:
                return None
            pairs = _section_pairs(text, group)
            if pairs is None:
                return None
            if not pairs:
                continue
            match = _DIST_INFO.match(name)
            if match is None:  # an egg-info, or an odd name: its metadata says who it is
                return None
            dist = _DistInfo(path)
            spec = compat.core_requirement(dist)
            ranged = (spec, compat.verdict(spec, __version__))
            ident = (_canonical(match["name"]), match["version"])
            found.extend(EntryPointInfo(n, v, *ident, *ranged) for n, v in pairs)
    return found


def _section_pairs(text: str, group: str) -> list[tuple[str, str]] | None:
    """The ``name = value`` lines of section ``[group]``, as importlib_metadata reads them."""
    pairs: list[tuple[str, str]] = []
    section: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is None:
            continue
        name, eq, value = line.partition("=")
        if not eq:
            return None  # importlib_metadata raises here: let it
        if section == group:
            pairs.append((name.strip(), value.strip()))
    return pairs


def stamp_of(group: str) -> list[Any] | None:
    """What the scan would read, as JSON-ready data; ``None`` when it cannot be known.

    A distribution finder other than the standard path finder (a custom ``sys.meta_path``
    entry with ``find_distributions``) may read anything, so its presence disables the cache.
    """
    for finder in sys.meta_path:
        if getattr(finder, "find_distributions", None) is not None and not _standard(finder):
            return None
    from accelkw_core._version import __version__

    # The core's version: the cached verdicts were made for it (a checkout on PYTHONPATH can
    # change it with no distribution changing).
    stamp: list[Any] = [FORMAT, sys.executable, sys.version, group, __version__]
    for entry in sys.path:
        if not isinstance(entry, str):
            return None
        found = _entry_stamp(entry)
        # A folder without distributions adds nothing to the scan: leaving it out lets scripts
        # in different folders (sys.path[0]) share one cache.
        if found:
            stamp.append([entry, *found])
    return stamp


def _standard(finder: object) -> bool:
    cls = finder if isinstance(finder, type) else type(finder)
    return f"{cls.__module__}.{cls.__qualname__}" in (
        "_frozen_importlib_external.PathFinder",  # importlib.machinery.PathFinder
        "importlib_metadata.MetadataPathFinder",
    )


def _entry_stamp(entry: str) -> list[Any]:
    root = entry or "."
    try:
        names = os.listdir(root)
    except OSError:
        # A zip file (or nothing): its own time and size stand for what is inside.
        return [_stat(root)]
    is_egg = os.path.basename(root).lower().endswith(".egg")
    out: list[Any] = []
    for name in names:  # listing order kept: the scan's order (and its duplicates) follow it
        low = name.lower()
        if low.endswith(".dist-info"):
            meta = "METADATA"
        elif low.endswith(".egg-info") or (is_egg and low == "egg-info"):
            meta = "PKG-INFO"
        else:
            continue
        # The scan reads these two files and nothing else of a distribution.
        path = os.path.join(root, name)
        files = [_stat(os.path.join(path, "entry_points.txt")), _stat(os.path.join(path, meta))]
        if files == [None, None]:
            files.append(_stat(path))  # an old-style egg-info *file* holds the metadata itself
        out.append([name, *files])
    return out


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def _key(group: str) -> str:
    # One file per interpreter and group; the stamp inside decides whether it is valid, so a
    # collision of this short key only costs a rescan.
    return f"{zlib.crc32(f'{sys.executable}|{group}'.encode()):08x}"


def _read(path: str, stamp: list[Any]) -> list[EntryPointInfo] | None:
    import json

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("format") != FORMAT or data.get("stamp") != stamp:
            return None
        return [EntryPointInfo(*row) for row in data["entry_points"]]
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return None


def _write(path: str, data: Mapping[str, Any]) -> None:
    import json

    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def _canonical(name: str) -> str:
    # PEP 503 normalisation, as pip prints distribution names.
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_identity(dist: Any) -> tuple[str | None, str | None]:
    """A distribution's name and version, read from its ``*.dist-info`` folder name if possible.

    Reading ``dist.name`` parses the METADATA file with the ``email`` package, which costs more
    than the whole entry-point scan; the folder name is standardised (PEP 427/503) and free.
    """
    if dist is None:
        return None, None
    path = getattr(dist, "_path", None)
    match = _DIST_INFO.match(getattr(path, "name", "") or "")
    if match:
        return _canonical(match["name"]), match["version"]
    return getattr(dist, "name", None), getattr(dist, "version", None)

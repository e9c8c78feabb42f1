"""What ``accelkw plugins list`` showed last time, kept so that an unchanged install imports nothing.

A real listing finds the entry points (``importlib_metadata``), reads each distribution's
metadata, judges its core range (``packaging``) and imports every plugin to learn its handlers.
When nothing was installed, removed or edited since the last real listing, the answer cannot have
changed, so the listing keeps what it printed (each plugin's name, distribution, version, status,
reason, entry point, compatibility, each handler's name, class and fields, and each tracker's
name and class) in one file, under one *stamp* of everything that could change it:

- the interpreter and the core's version (a checkout on ``PYTHONPATH`` changes no distribution);
- for each ``sys.path`` entry that holds distributions, in order, every ``*.dist-info`` and
  ``*.egg-info`` in it, with the modification time and size of its ``entry_points.txt`` and
  its metadata file: installing, upgrading or removing *any* distribution (a plugin's
  dependency included) changes it, so the next listing loads for real and reports, say, the
  import that now fails;
- every ``ACCELKW_*`` environment variable (the allow- and deny-lists change statuses).

Beside the listing it keeps the modification time and size of every source file the real load
imported or tried to import (the plugin modules and what they pulled in), so editing an editable
install's source is seen too. The next listing takes the stamp again (directory listings and
``stat`` calls, no metadata parsed) and, when it and the files are unchanged, prints the kept
records without importing ``importlib_metadata``, ``packaging``, pluggy or any plugin.

The file is ``listing-<key>.json`` in the user's cache folder for ``accelkw`` as ``platformdirs``
names it (``$XDG_CACHE_HOME/accelkw``, else ``~/.cache/accelkw`` on Linux), one per interpreter
and group. ``accelkw plugins list --refresh``
always loads for real; ``ACCELKW_NO_CACHE=1`` turns the cache off. A file that cannot be read
or written is ignored: the real listing is always the fallback. A folder on ``sys.path`` that
holds no distribution is not in the stamp (so scripts in different folders share one file), and
a module dropped there that shadows a plugin is only seen after ``--refresh`` or any install.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ENV_NO_CACHE",
    "GROUP",
    "Snapshot",
    "cache_dir",
    "module_files",
    "read",
    "snapshot",
    "stamp_of",
    "write",
]

ENV_NO_CACHE = "ACCELKW_NO_CACHE"
GROUP = "accelkw"  # registry.ENTRY_POINT_GROUP, named here so that a listing imports no pluggy
# 3: one cache (the kept listing); the entry-point cache of format 2 is gone. 4: trackers too.
FORMAT = 4


class Snapshot:
    """The stamp of a listing, taken before a load, and the file its records are kept in."""

    __slots__ = ("path", "stamp")

    def __init__(self, stamp: list[Any], path: str) -> None:
        self.stamp = stamp
        self.path = path


def cache_dir(env: Mapping[str, str] | None = None) -> str | None:
    """The folder of the cache file, or ``None`` when ``ACCELKW_NO_CACHE`` in ``env`` turns
    caching off; the folder is the platform's user cache folder (``platformdirs``), which
    reads the process's environment (``XDG_CACHE_HOME``)."""
    env = os.environ if env is None else env
    from accelkw_core.facts.environment import env_flag

    if env_flag(env, ENV_NO_CACHE, handler="plugins", field="no_cache"):
        return None
    import platformdirs

    return platformdirs.user_cache_dir("accelkw", appauthor=False)


def snapshot(
    group: str = GROUP, env: Mapping[str, str] | None = None, folder: str | None = None
) -> Snapshot | None:
    """The stamp of a listing now, or ``None`` when nothing may be kept (cache off, custom finder).

    ``folder``: the cache folder (default: :func:`cache_dir`).
    """
    env = os.environ if env is None else env
    folder = cache_dir(env) if folder is None else folder
    if folder is None:
        return None
    stamp = stamp_of(group, env)
    if stamp is None:
        return None
    import zlib

    # One file per interpreter and group; the stamp inside decides whether it is valid, so a
    # collision of this short name only costs a real listing.
    key = f"{zlib.crc32(f'{sys.executable}|{group}'.encode()):08x}"
    return Snapshot(stamp, os.path.join(folder, f"listing-{key}.json"))


def stamp_of(group: str = GROUP, env: Mapping[str, str] | None = None) -> list[Any] | None:
    """Everything a listing depends on, as JSON-ready data; ``None`` when it cannot be known.

    A distribution finder other than the standard path finder (a custom ``sys.meta_path`` entry
    with ``find_distributions``) may read anything, so its presence turns the cache off.
    """
    for finder in sys.meta_path:
        if getattr(finder, "find_distributions", None) is not None and not _standard(finder):
            return None
    from accelkw_core._version import __version__

    env = os.environ if env is None else env
    variables = sorted([k, v] for k, v in env.items() if k.startswith("ACCELKW_"))
    stamp: list[Any] = [FORMAT, sys.executable, sys.version, group, __version__, variables]
    for entry in sys.path:
        if not isinstance(entry, str):
            return None
        found = _entry_stamp(entry)
        # A folder without distributions adds nothing to what importlib_metadata reads: leaving
        # it out lets scripts in different folders (sys.path[0]) share one cache.
        if found:
            stamp.append([entry, *found])
    return stamp


def read(snap: Snapshot) -> dict[str, Any] | None:
    """The kept listing when it was kept under ``snap``'s stamp and no source file changed."""
    import json

    try:
        with open(snap.path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("stamp") != snap.stamp:
            return None
        for path, size_time in data["files"]:
            if _stat(path) != size_time:
                return None
        listing = data["listing"]
        return listing if isinstance(listing, dict) else None
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return None


def write(snap: Snapshot, listing: Mapping[str, Any], files: Iterable[str]) -> None:
    """Keep ``listing`` (JSON-ready) under ``snap``'s stamp with the stamps of ``files``.

    A file that cannot be written is ignored: the next listing loads for real.
    """
    import contextlib
    import json

    stamped = [[path, _stat(path)] for path in sorted(set(files))]
    data = {"stamp": snap.stamp, "files": stamped, "listing": listing}
    tmp = f"{snap.path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(snap.path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"))
        os.replace(tmp, snap.path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def module_files(names: Iterable[str], entry_points: Iterable[str]) -> list[str] | None:
    """The source files of the modules ``names`` and of each entry point's module.

    The entry points' own modules are looked up even when their import failed (a failed import
    leaves nothing in ``sys.modules``), so fixing a broken plugin's source is seen; a dependency
    it lacked coming back is an install, seen in the stamp. ``None`` when an entry point's
    module (or its package) cannot be found at all: where it would appear is unknown, so such a
    listing is not kept.
    """
    import importlib.util

    files: list[str] = []
    for name in names:
        path = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(path, str):
            files.append(path)
    for value in entry_points:
        module = value.split(":")[0].strip()
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None  # its package failed to import
        if spec is None or not spec.origin or not os.path.exists(spec.origin):
            return None
        files.append(spec.origin)
    return files


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
    for name in sorted(names):
        low = name.lower()
        if low.endswith(".dist-info"):
            meta = "METADATA"
        elif low.endswith(".egg-info") or (is_egg and low == "egg-info"):
            meta = "PKG-INFO"
        else:
            continue
        # What a listing reads of a distribution: its entry points and its metadata.
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

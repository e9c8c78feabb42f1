"""What ``accelkw plugins list`` showed last time, kept so that an unchanged install imports nothing.

A listing imports every plugin module to learn its handlers; when nothing was installed, removed
or edited since the last real listing, the answer cannot have changed. After a real load the
listing stores each plugin's record (name, distribution, version, status, reason, entry point,
compatibility, and each handler's name, class and fields) beside the entry-point cache, under a
key made of:

- the entry-point cache's stamp (:func:`accelkw_core.discovery.cache.stamp_of`): the interpreter,
  the core's version and *every* distribution on ``sys.path`` (not only the plugins'), so
  installing, upgrading or removing any distribution, a plugin's dependency included, makes the
  next listing load for real and report, say, the import that now fails;
- every ``ACCELKW_*`` environment variable (the allow- and deny-lists change statuses);
- the modification time and size of every source file the load imported or tried to import
  (the plugin modules and what they pulled in), so editing an editable install's source is seen.

The next listing rebuilds the key (directory listings and ``stat`` calls) and, when it is
identical, prints the stored records without importing ``pluggy``, the registry or any plugin.
``accelkw plugins list --refresh`` always loads for real; ``ACCELKW_NO_CACHE=1`` turns this cache
off with the entry-point cache. A folder on ``sys.path`` that holds no distribution is not in the
stamp (see :mod:`.cache`), so a module dropped there that shadows a plugin is only seen after
``--refresh`` or any install.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from accelkw_core.discovery import cache

__all__ = ["Snapshot", "key_of", "module_files", "read", "write"]

FORMAT = 1
GROUP = "accelkw"  # registry.ENTRY_POINT_GROUP, named here so that a listing imports no pluggy


class Snapshot:
    """The key of a listing taken before a load, and where its records are kept."""

    __slots__ = ("key", "path", "stamp")

    def __init__(self, key: list[Any], path: str, stamp: list[Any]) -> None:
        self.key = key
        self.path = path
        self.stamp = stamp  # the entry-point cache's, in the key: a load may reuse it


def key_of(
    group: str = GROUP, env: Mapping[str, str] | None = None, folder: str | None = None
) -> Snapshot | None:
    """The key of a listing now, or ``None`` when nothing may be cached (cache off, custom finder).

    ``folder``: the cache folder (default: :func:`accelkw_core.discovery.cache.cache_dir`).
    """
    env = os.environ if env is None else env
    folder = cache.cache_dir(env) if folder is None else folder
    if folder is None:
        return None
    stamp = cache.stamp_of(group)
    if stamp is None:
        return None
    variables = sorted([k, v] for k, v in env.items() if k.startswith("ACCELKW_"))
    key = [FORMAT, stamp, variables]
    return Snapshot(key, os.path.join(folder, f"listing-{cache._key(group)}.json"), stamp)


def read(snapshot: Snapshot) -> dict[str, Any] | None:
    """The stored listing when it was stored under ``snapshot``'s key and no source changed."""
    import json

    try:
        with open(snapshot.path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("key") != snapshot.key:
            return None
        for path, size_time in data["files"]:
            if cache._stat(path) != size_time:
                return None
        listing = data["listing"]
        return listing if isinstance(listing, dict) else None
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return None


def write(snapshot: Snapshot, listing: Mapping[str, Any], files: Iterable[str]) -> None:
    """Store ``listing`` (JSON-ready) under ``snapshot``'s key with the stamps of ``files``.

    A file that cannot be written is ignored: the next listing loads for real.
    """
    stamped = [[path, cache._stat(path)] for path in sorted(set(files))]
    cache._write(snapshot.path, {"key": snapshot.key, "files": stamped, "listing": listing})


def module_files(names: Iterable[str], entry_points: Iterable[str]) -> list[str] | None:
    """The source files of the modules ``names`` and of each entry point's module.

    The entry points' own modules are looked up even when their import failed (a failed import
    leaves nothing in ``sys.modules``), so fixing a broken plugin's source is seen; a dependency
    it lacked coming back is an install, seen in the stamp. ``None`` when an entry point's
    module (or its package) cannot be found at all: where it would appear is unknown, so such a
    listing is not stored.
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

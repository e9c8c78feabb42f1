"""The installed plugins' entry points, with what their distributions say, from importlib_metadata.

``importlib_metadata.entry_points(group="accelkw")`` finds them, in its order and with its
shadowing (the first distribution of a name on ``sys.path`` hides later ones). Each
distribution's metadata is read once, however many entry points it has: its name, its version
and its requirement on ``accelkw-core``, judged for the running core by
:mod:`accelkw_core.discovery.compat`. Nothing here imports a plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from accelkw_core.discovery import compat

if TYPE_CHECKING:
    import importlib_metadata

__all__ = ["PluginEntryPoint", "find_entry_points"]


class PluginEntryPoint(NamedTuple):
    """One entry point of the group and the distribution that ships it.

    ``core_range`` is the distribution's range on ``accelkw-core`` (``None``: it names no core;
    ``""``: no range) and ``verdict`` what :func:`accelkw_core.discovery.compat.verdict` made of
    it for the running core (``None``: no distribution to judge).
    """

    name: str
    value: str
    distribution: str | None
    version: str | None
    core_range: str | None = None
    verdict: str | None = None
    group: str = "accelkw"

    def load(self) -> object:
        """Import the module and return the object the value names, as importlib_metadata does."""
        import importlib_metadata

        return importlib_metadata.EntryPoint(self.name, self.value, self.group).load()


def find_entry_points(group: str) -> list[PluginEntryPoint]:
    """The entry points of ``group`` on ``sys.path``, as ``importlib_metadata`` finds them."""
    import importlib_metadata

    from accelkw_core._version import __version__

    found: list[PluginEntryPoint] = []
    # Keyed by id(): the distribution is kept in the value, so its id stays its own.
    facts: dict[int, tuple[object, tuple[str | None, str | None, str | None, str | None]]] = {}
    for ep in importlib_metadata.entry_points(group=group):
        dist = ep.dist
        if id(dist) not in facts:
            facts[id(dist)] = (dist, _distribution_facts(dist, __version__))
        found.append(PluginEntryPoint(ep.name, ep.value, *facts[id(dist)][1], group=group))
    return found


def _distribution_facts(
    dist: importlib_metadata.Distribution | None, core_version: str
) -> tuple[str | None, str | None, str | None, str | None]:
    """(name, version, range on the core, verdict) of ``dist``, its metadata parsed once."""
    if dist is None:
        return None, None, None, None
    from packaging.utils import canonicalize_name

    metadata = dist.metadata  # parsed at each access: once here
    name = metadata.get("Name")
    requires = metadata.get_all("Requires-Dist")
    if requires is None and dist.read_text("requires.txt") is not None:
        # An *.egg-info keeps its requirements in requires.txt, which Distribution.requires
        # reads (it would parse the metadata again first, so it is not asked otherwise).
        requires = dist.requires
    core_range = compat.core_requirement(requires)
    return (
        canonicalize_name(name) if name else None,
        metadata.get("Version"),
        core_range,
        compat.verdict(core_range, core_version),
    )

"""``accelkw plugins new``: write a working plugin distribution to start from.

The folder holds a ``pyproject.toml`` with the ``accelkw`` entry point, a package with a handler
dataclass (or, with ``kind="tracker"``, a ``GeneralTracker``) and its registration hook, a README
and tests that pass once the folder is installed (``pip install -e``). Names are checked first: a
lowercase identifier that no installed plugin, handler, distribution or module already uses, and a
class name the template can define.

The author of a handler chooses whether it is opt-in (``opt_in=True``: composed only when a run
asks for it). The rule the template states: a handler that changes numbers or random state on its
own (seeding, clipping, skipping steps, averaging weights) must be opt-in; one that acts only when
the run asks for what it does (mixed precision, several processes, a profiler block) may be on by
default. A tracker writes only what a run logs to it, so it has no such choice.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

from accelkw_core._version import __version__
from accelkw_core.errors import ScaffoldError

if TYPE_CHECKING:
    from accelkw_core.discovery.registry import Registry

__all__ = [
    "KINDS",
    "PluginNames",
    "check_available",
    "check_class_name",
    "check_name",
    "scaffold_plugin",
]

#: What ``plugins new --kind`` can write: a handler plugin or a tracker plugin.
KINDS = ("handler", "tracker")

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_CLASS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names the template's handler module (and its tests) already bind: a handler class of the same
# name would shadow them, and the generated code would not run.
_TEMPLATE_NAMES = frozenset(
    {
        "AFTER_STEP",
        "CHECKPOINT",
        "TYPE_CHECKING",
        "AcceleratorState",
        "Any",
        "ClassVar",
        "ConfigError",
        "HandlerContract",
        "KwargsHandler",
        "Plan",
        "Registry",
        "StepContext",
        "StepCounter",
        "annotations",
        "apply_handler",
        "dataclass",
        "handler_field",
        "isolated_registry",
        "make_state",
        "plugin",
        "pytest",
    }
)
# Names whose package would be the core's own (``accelkw_core``) or read as a prefix twice.
_RESERVED = {"core"}


@dataclass(frozen=True)
class PluginNames:
    """The names derived from a plugin's registry name, e.g. ``my_seed``."""

    name: str  # registry name and entry-point name: my_seed
    distribution: str  # accelkw-my-seed
    package: str  # accelkw_my_seed
    class_name: str  # MySeedKwargs (MySeedTracker for a tracker)

    @classmethod
    def from_name(
        cls, name: str, class_name: str | None = None, kind: str = "handler"
    ) -> PluginNames:
        """The names for registry name ``name``; the class is ``class_name`` when given
        (checked by :func:`check_class_name`), else derived: ``my_seed`` -> ``MySeedKwargs``
        (``MySeedTracker`` for a tracker)."""
        check_name(name)
        if class_name is not None:
            check_class_name(class_name)
        suffix = "Tracker" if kind == "tracker" else "Kwargs"
        return cls(
            name=name,
            distribution="accelkw-" + name.replace("_", "-"),
            package="accelkw_" + name,
            class_name=class_name
            if class_name is not None
            else "".join(part.capitalize() for part in name.split("_") if part) + suffix,
        )


def _suggest_name(value: str) -> str | None:
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", value)  # CamelCase -> camel_case
    text = re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").lower()
    text = re.sub(r"_+", "_", text)
    text = re.sub(r"^accelkw_", "", text)
    if text and text[0].isdigit():
        text = "plugin_" + text
    if keyword.iskeyword(text) or text in _RESERVED:
        text += "_plugin"
    return text if text and text != value and _NAME.match(text) else None


def check_name(name: str) -> None:
    """Raise :class:`ScaffoldError` unless ``name`` can be a plugin's registry name."""
    expected = (
        "expected a lowercase Python identifier: a letter, then letters, digits or "
        "underscores (the handler's registry name, e.g. 'seed')"
    )
    problem = None
    if not _NAME.match(name):
        problem = expected
    elif keyword.iskeyword(name):
        problem = f"{name!r} is a Python keyword; expected a name that can be an identifier"
    elif name in _RESERVED:
        problem = f"its package accelkw_{name} would be the core's own; expected another name"
    elif name.startswith("accelkw_"):
        problem = (
            "expected the handler's registry name without the accelkw_ prefix "
            "(the distribution and package names add it)"
        )
    if problem is None:
        return
    hint = _suggest_name(name)
    suffix = f"; did you mean {hint!r}?" if hint else ""
    raise ScaffoldError(f"invalid plugin name {name!r}: {problem}{suffix}")


def check_class_name(class_name: str) -> None:
    """Raise :class:`ScaffoldError` unless ``class_name`` can name the generated handler class:
    an ASCII Python identifier, not a keyword, not a name the template already uses."""
    problem = None
    if not _CLASS_NAME.match(class_name):
        problem = (
            "expected a Python class name: an ASCII letter or underscore, then letters, "
            "digits or underscores (e.g. 'SeedKwargs')"
        )
    elif keyword.iskeyword(class_name) or class_name in {"None", "True", "False"}:
        problem = f"{class_name!r} is a Python keyword; expected a name a class can have"
    elif class_name in _TEMPLATE_NAMES:
        problem = (
            f"the generated handler module already uses the name {class_name!r}; "
            "expected another name"
        )
    if problem is not None:
        raise ScaffoldError(f"invalid --class-name {class_name!r}: {problem}")


def check_available(names: PluginNames, registry: Registry | None = None) -> None:
    """Raise :class:`ScaffoldError` if an installed plugin, handler, distribution or module
    already uses one of ``names``.

    ``registry`` defaults to one that loads every installed plugin, ignoring allow- and
    deny-lists, so a disabled plugin still counts as installed.
    """
    from accelkw_core.discovery.registry import Registry

    registry = registry if registry is not None else Registry(autoload=True, env={})
    for record in registry.plugins():
        source = record.distribution or "code"
        if record.version:
            source += f" {record.version}"
        if record.name == names.name:
            raise ScaffoldError(
                f"the name {names.name!r} is taken: the installed plugin {record.name!r} comes "
                f"from {source}; choose another name"
            )
        contributed: list[tuple[str, str, type]] = [
            *(("handler", h.name, h) for h in record.handlers),
            *(("tracker", t.name, t) for t in record.trackers),
        ]
        for kind, taken, cls in contributed:
            if taken == names.name:
                raise ScaffoldError(
                    f"the name {names.name!r} is taken: {kind} {taken!r} "
                    f"({cls.__module__}.{cls.__qualname__}) comes from {source} "
                    f"(plugin {record.name!r}); choose another name"
                )
    import importlib_metadata

    try:
        dist = importlib_metadata.distribution(names.distribution)
    except importlib_metadata.PackageNotFoundError:
        pass
    else:
        raise ScaffoldError(
            f"the name {names.name!r} is taken: the distribution {names.distribution} "
            f"{dist.version} is already installed; choose another name"
        )
    spec = importlib.util.find_spec(names.package)
    if spec is not None:
        raise ScaffoldError(
            f"the name {names.name!r} is taken: a module {names.package} is already importable "
            f"from {spec.origin or spec.submodule_search_locations}; choose another name"
        )


def _templates(kind: str) -> dict[str, str]:
    if kind == "tracker":
        from accelkw_core.tools.scaffold_tracker_templates import TRACKER_FILES

        return TRACKER_FILES
    if kind != "handler":
        raise ScaffoldError(f"invalid plugin kind {kind!r}: expected one of {', '.join(KINDS)}")
    from accelkw_core.tools.scaffold_templates import FILES

    return FILES


def render(names: PluginNames, kind: str = "handler", *, opt_in: bool = False) -> dict[str, str]:
    """The files of the new plugin (a ``kind`` of :data:`KINDS`): relative path -> text.
    ``opt_in``: a handler's ``opt_in`` class variable (see the module docstring for the rule)."""
    from accelkw_core.discovery.compat import CORE_DISTRIBUTION, core_range_for
    from accelkw_core.tools.scaffold_templates import (
        ON_BY_DEFAULT_COMMENT,
        OPT_IN_COMMENT,
        README_ON_BY_DEFAULT,
        README_OPT_IN,
    )

    files = _templates(kind)

    # The cores this one's plugin API holds for (docs/versioning.md): a core outside it lists
    # the plugin as incompatible instead of importing it.
    values = {
        "name": names.name,
        "dist": names.distribution,
        "package": names.package,
        "cls": names.class_name,
        "kind": kind,
        "core_req": f"{CORE_DISTRIBUTION}{core_range_for(__version__)}",
        "opt_in": str(opt_in),
        "opt_in_comment": OPT_IN_COMMENT if opt_in else ON_BY_DEFAULT_COMMENT,
        "when_applied": README_OPT_IN if opt_in else README_ON_BY_DEFAULT,
    }
    values = {key: Template(value).substitute(values) for key, value in values.items()}
    return {
        Template(path).substitute(values): Template(text).substitute(values)
        for path, text in files.items()
    }


def scaffold_plugin(
    name: str,
    directory: str | Path | None = None,
    *,
    opt_in: bool | None = None,
    class_name: str | None = None,
    kind: str = "handler",
    registry: Registry | None = None,
    check_installed: bool = True,
) -> list[Path]:
    """Create plugin ``name`` in ``directory`` (default ``./accelkw-<name>``); return its files.

    ``kind``: ``"handler"`` or ``"tracker"``. For a handler, ``opt_in`` is the author's
    choice, required: ``True`` for a handler composed only when a run asks for it, as every
    handler that changes numbers or random state on its own must be. ``class_name`` names the
    class (default: derived from ``name``, ``MySeedKwargs``). The folder must not exist or be
    empty. With ``check_installed`` (the default), a name an installed plugin already uses is
    refused (see :func:`check_available`).
    """
    _templates(kind)  # an unknown kind fails before anything is checked or written
    if kind == "handler" and opt_in is None:
        raise ScaffoldError(
            "choose whether the handler is opt-in: opt_in=True (--opt-in) when it changes "
            "numbers or random state on its own, False (--on-by-default) otherwise"
        )
    names = PluginNames.from_name(name, class_name, kind)
    target = Path(directory) if directory is not None else Path.cwd() / names.distribution
    if target.exists():
        if not target.is_dir():
            raise ScaffoldError(f"cannot create the plugin in {target}: it is a file, not a folder")
        if any(target.iterdir()):
            raise ScaffoldError(
                f"cannot create the plugin in {target}: the folder exists and is not empty; "
                "choose another --dir or empty it"
            )
    if check_installed:
        check_available(names, registry)
    written = []
    for rel, text in render(names, kind, opt_in=bool(opt_in)).items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written

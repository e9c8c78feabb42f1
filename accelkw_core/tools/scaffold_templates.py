"""The files ``accelkw plugins new`` writes, as ``string.Template`` text.

Kept as strings in a module (not package data) so an installed core always has them. Fields:
``$name`` (registry name), ``$dist`` (distribution), ``$package``, ``$cls`` (handler class),
``$core_req`` (the accelkw-core requirement). ``$$`` is a literal dollar sign.
"""

from __future__ import annotations

__all__ = ["FILES"]

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "accelkw handler plugin: $name ($cls)."
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["$core_req"]

# How accelkw finds the plugin: the entry point names the module with the hook implementation.
[project.entry-points.accelkw]
$name = "$package.plugin"

[tool.setuptools.packages.find]
include = ["$package*"]

[tool.setuptools.package-data]
$package = ["py.typed"]
"""

INIT = '''\
"""$dist: the ``$name`` handler for accelkw."""

from $package.handler import $cls

__all__ = ["$cls"]
'''

HANDLER = '''\
"""``$cls``: the ``$name`` handler.

Replace the example fields, ``apply`` and ``describe`` with your own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from accelkw_core import KwargsHandler, handler_field

if TYPE_CHECKING:
    # Type-only imports. At run time, import torch inside the methods that use
    # it, never at module level, so ``accelkw plugins list`` stays fast.
    from accelkw_core import AcceleratorState

__all__ = ["$cls"]


@dataclass
class $cls(KwargsHandler):
    """What the ``$name`` handler customises.

    This text is shown by ``accelkw plugins show $name``.

    Example::

        from accelkw_core import Accelerator
        from $package import $cls

        accelerator = Accelerator(kwargs_handlers=[$cls(level=3)])
    """

    # The registry name: the key users write in configuration. To be applied
    # after other handlers, add ``after: ClassVar[tuple[str, ...]] = ("autocast",)``.
    name: ClassVar[str] = "$name"

    # Every field has a default: an installed handler is applied with its defaults
    # when the user does not pass it. ``handler_field`` adds documentation and a
    # range that is checked on construction.
    enabled: bool = handler_field(True, doc="Whether the handler changes anything.")
    level: int = handler_field(1, ge=0, le=10, doc="An example setting, 0 to 10.")

    def apply(self, state: AcceleratorState) -> None:
        """Configure ``state`` and record what was done, or why nothing was."""
        if not self.enabled:
            state.record(self.name, "enabled=False, nothing applied", applied=False)
            return
        # Keep what you build in ``state.extras`` under your name; the built-in
        # slots (autocast_factory, model_wrappers, grad_scaler, ...) are there too.
        settings: dict[str, Any] = {"level": self.level, "rank": state.rank}
        state.extras[self.name] = settings
        # Undo what you changed: teardowns run on shutdown, and when a handler
        # applied after this one fails.
        state.add_teardown(self.name, lambda: state.extras.pop(self.name, None))
        state.record(self.name, f"level {self.level} on rank {state.rank}")

    def describe(self, state: AcceleratorState) -> str:
        """What ``apply`` would do on ``state``, without doing it (``accelkw plan``)."""
        if not self.enabled:
            return "enabled=False, nothing would be applied"
        return f"would set level {self.level} on rank {state.rank}"
'''

PLUGIN = '''\
"""The ``accelkw`` entry point of $dist.

It registers :class:`$cls`.
"""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core import KwargsHandler, hookimpl

from $package.handler import $cls

__all__ = ["accelkw_register_handlers"]


@hookimpl
def accelkw_register_handlers(register: Callable[[type[KwargsHandler]], None]) -> None:
    """Contribute ``$cls`` under the registry name ``$name``."""
    register($cls)
'''

TEST = '''\
"""Tests for the ``$name`` handler.

Run them after installing the folder: ``pip install -e .`` then ``pytest tests``.
"""

from __future__ import annotations

import pytest
from accelkw_core import ConfigError, Registry
from accelkw_core.testing import applied, apply_handler, isolated_registry, make_state

from $package import $cls, plugin


def test_apply_records_what_it_did() -> None:
    state = apply_handler($cls(level=3), make_state(world_size=2, rank=1))
    assert state.extras["$name"] == {"level": 3, "rank": 1}
    assert state.messages("$name") == ["level 3 on rank 1"]


def test_disabled_handler_says_why_it_did_nothing() -> None:
    state = apply_handler($cls(enabled=False))
    assert "$name" not in state.extras
    assert [(e.message, e.applied) for e in state.log] == [
        ("enabled=False, nothing applied", False)
    ]


def test_teardown_undoes_apply() -> None:
    with applied($cls()) as state:
        assert "$name" in state.extras
    assert "$name" not in state.extras


def test_describe_changes_nothing() -> None:
    state = make_state()
    assert "level 1" in $cls().describe(state)
    assert state.extras == {} and state.log == []


def test_invalid_value_names_the_field() -> None:
    with pytest.raises(ConfigError, match="level"):
        $cls.from_mapping({"level": 11})
    with pytest.raises(ConfigError, match="levle"):
        $cls.from_mapping({"levle": 1})


def test_plugin_registers_the_handler() -> None:
    assert isolated_registry([plugin]).get("$name").cls is $cls


def test_installed_entry_point_is_discovered() -> None:
    """Fails until the distribution is installed (``pip install -e .``)."""
    info = Registry(env={}).get("$name")
    assert info.cls is $cls
    assert info.distribution == "$dist"
'''

README = """\
# $dist

An [accelkw](https://pypi.org/project/accelkw-core/) handler plugin. It adds the handler
`$cls`, registered under the name `$name`.

## Install

```bash
pip install -e .          # from this folder, while developing
accelkw plugins list      # shows $name, from $dist, status "loaded"
accelkw plugins show $name
```

## Use

```python
from accelkw_core import Accelerator
from $package import $cls

accelerator = Accelerator(kwargs_handlers=[$cls(level=3)])
```

Once installed, the handler is applied to every run with its default values unless the user
passes their own instance; turn it off with `ACCELKW_DISABLE_PLUGINS=$name`.

## Fields

| field | type | default | |
|---|---|---|---|
| `enabled` | `bool` | `True` | Whether the handler changes anything. |
| `level` | `int` | `1` | An example setting, 0 to 10. |

## Layout

- `pyproject.toml`: the distribution; `[project.entry-points.accelkw]` names `$package.plugin`.
- `$package/handler.py`: `$cls`, a dataclass with `apply(state)` and `describe(state)`.
- `$package/plugin.py`: the `accelkw_register_handlers` hook that registers it.
- `tests/test_$name.py`: tests built on `accelkw_core.testing`.

## Test

```bash
pip install -e . pytest
pytest tests
```
"""

# Relative path (with ``$package`` and ``$name`` substituted) -> template.
FILES: dict[str, str] = {
    "pyproject.toml": PYPROJECT,
    "README.md": README,
    "$package/__init__.py": INIT,
    "$package/handler.py": HANDLER,
    "$package/plugin.py": PLUGIN,
    "$package/py.typed": "",
    "tests/test_$name.py": TEST,
}

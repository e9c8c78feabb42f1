"""The files ``accelkw plugins new`` writes, as ``string.Template`` text.

Kept as strings in a module (not package data) so an installed core always has them. Fields:
``$name`` (registry name), ``$dist`` (distribution), ``$package``, ``$cls`` (handler class),
``$core_req`` (the accelkw-core requirement), ``$opt_in`` (``True`` or ``False``, the author's
choice) with ``$opt_in_comment`` and ``$when_applied`` (the text that goes with it). ``$$`` is a
literal dollar sign.
"""

from __future__ import annotations

__all__ = [
    "FILES",
    "ON_BY_DEFAULT_COMMENT",
    "OPT_IN_COMMENT",
    "README_ON_BY_DEFAULT",
    "README_OPT_IN",
]

# The rule, stated where the author sees it (issue: installing a plugin must not change a run
# that did not ask for it). Each is indented for the class body.
_RULE = """\
    # The rule: a handler that changes numbers or random state on its own (seeding,
    # clipping, skipping or averaging, ...) must be opt-in; one that acts only when the run
    # asks for what it does (mixed precision, several processes, a profiler block) may be
    # on by default."""

OPT_IN_COMMENT = (
    _RULE
    + """
    # Opt-in (plugins new --opt-in): installed, it changes no run until the run asks for it,
    # in code (kwargs_handlers=[...]), with a [handlers.$name] table, ACCELKW_<NAME>__<FIELD>
    # variables or [plugins] enable = ["$name"]."""
)

ON_BY_DEFAULT_COMMENT = (
    _RULE
    + """
    # On by default (plugins new --on-by-default): once installed, every run composes it with
    # its defaults unless the run passes its own instance or disables it."""
)

README_OPT_IN = """\
The handler is opt-in (`opt_in = True`): installed, it changes no run until the run asks for
it, by passing an instance, a `[handlers.$name]` table in the configuration, an
`ACCELKW_<NAME>__<FIELD>` variable or `[plugins] enable = ["$name"]`."""

README_ON_BY_DEFAULT = """\
Once installed, the handler is applied to every run with its default values unless the user
passes their own instance; turn it off with `ACCELKW_DISABLE_PLUGINS=$name`. A handler that
changes numbers or random state on its own must be opt-in instead (`opt_in = True`)."""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "accelkw $kind plugin: $name ($cls)."
readme = "README.md"
requires-python = ">=3.11"
license = { text = "Apache-2.0" }
# torch: the handler imports it inside its methods, and a type checker reads its types.
dependencies = ["$core_req", "torch>=2.1"]

# How accelkw finds the plugin: the entry point names the module with the hook implementation.
[project.entry-points.accelkw]
$name = "$package.plugin"

[tool.setuptools]
# The root as the package folder, as the built-in plugins have it: `pip install -e` is then a
# plain path entry (a .pth line), which mypy and other type checkers follow from any folder,
# instead of an import hook they cannot see through (error: import-not-found).
package-dir = { "" = "." }

[tool.setuptools.packages.find]
include = ["$package*"]

[tool.setuptools.package-data]
$package = ["py.typed"]

# `mypy` checks the plugin as its users' type checkers will: strict, following accelkw-core and
# torch. The first run reads torch's types (tens of seconds); .mypy_cache makes the next ones quick.
[tool.mypy]
strict = true
files = ["$package", "tests"]
warn_unused_configs = true
"""

INIT = '''\
"""$dist: the ``$name`` $kind for accelkw."""

from $package.$kind import $cls

__all__ = ["$cls"]
'''

HANDLER = '''\
"""``$cls``: the ``$name`` handler.

Replace the example fields, ``plan`` and ``StepCounter`` with your own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

# Everything a plugin needs from the core comes from this module, and only from it.
from accelkw_core.plugin import AFTER_STEP, CHECKPOINT, KwargsHandler, Plan, handler_field

if TYPE_CHECKING:
    # Type-only imports. At run time, import torch inside the methods that use
    # it, never at module level, so ``accelkw plugins list`` stays fast.
    from accelkw_core.plugin import AcceleratorState, StepContext

__all__ = ["$cls", "StepCounter"]


class StepCounter:
    """An example contribution: counts the optimizer steps that ran, saved with the run."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.steps = 0

    def __call__(self, step: StepContext) -> None:
        # The after_step point: called after every optimizer step, in composition order.
        if not step.skipped:
            self.steps += 1

    def state_dict(self) -> dict[str, Any]:
        # The checkpoint point: saved and loaded with the run by save_state/load_state.
        return {"steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])


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

$opt_in_comment
    opt_in: ClassVar[bool] = $opt_in

    # Every field has a default: an installed handler is applied with its defaults
    # when the user does not pass it. ``handler_field`` adds documentation and a
    # range that is checked on construction.
    enabled: bool = handler_field(True, doc="Whether the handler changes anything.")
    level: int = handler_field(1, ge=0, le=10, doc="An example setting, 0 to 10.")

    def plan(self, state: AcceleratorState) -> Plan:
        """What this handler does on ``state``: its contributions, or why there are none.

        ``accelkw plan`` prints the plan and ``apply`` carries it out, so planning has no
        side effects: build what you contribute here, change nothing.
        """
        plan = Plan(self.name)
        if not self.enabled:
            return plan.note("enabled=False, nothing applied")
        # Take part in the run through the extension points, typed constants of
        # accelkw_core.plugin (mypy checks each contribution): FORWARD_CONTEXT, MODEL_WRAPPER,
        # LOSS, AROUND_STEP, AFTER_STEP, CHECKPOINT, TEARDOWN, ... To change something outside
        # the run (a global setting), use plan.run(action, message) and undo it from a
        # teardown the action registers.
        counter = StepCounter(self.level)
        plan.contribute(
            AFTER_STEP, counter, f"level {self.level}: count optimizer steps on rank {state.rank}"
        )
        plan.contribute(CHECKPOINT, counter, "the step count is saved with the run")
        return plan
'''

PLUGIN = '''\
"""The ``accelkw`` entry point of $dist.

It registers :class:`$cls`.
"""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import KwargsHandler, hookimpl

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
from accelkw_core import Registry
from accelkw_core.plugin import AFTER_STEP, CHECKPOINT, ConfigError, StepContext
from accelkw_core.testing import HandlerContract, apply_handler, isolated_registry, make_state

from $package import $cls, plugin
from $package.handler import StepCounter


def test_apply_contributes_what_the_plan_says() -> None:
    handler = $cls(level=3)
    plan = handler.plan(make_state(world_size=2, rank=1))
    state = apply_handler(handler, make_state(world_size=2, rank=1))
    (counter,) = state.values(AFTER_STEP)
    assert isinstance(counter, StepCounter) and counter.level == 3
    assert state.keyed(CHECKPOINT) == {"$name": counter}
    assert state.messages("$name") == [s.message for s in plan.steps]
    assert state.messages("$name")[0] == "level 3: count optimizer steps on rank 1"


def test_the_counter_counts_the_steps_that_ran_and_is_saved() -> None:
    counter = StepCounter(level=1)
    ran, skipped = StepContext(None, None, 0), StepContext(None, None, 1)
    ran.skipped = False
    counter(ran)
    counter(skipped)
    assert counter.steps == 1
    restored = StepCounter(level=1)
    restored.load_state_dict(counter.state_dict())
    assert restored.steps == 1


def test_disabled_handler_says_why_it_did_nothing() -> None:
    state = apply_handler($cls(enabled=False))
    assert state.values(AFTER_STEP) == [] and state.keyed(CHECKPOINT) == {}
    assert [(e.message, e.applied) for e in state.log] == [
        ("enabled=False, nothing applied", False)
    ]


def test_planning_changes_nothing() -> None:
    state = make_state()
    assert "level 1" in $cls().plan(state).summary()
    assert state.values(AFTER_STEP) == [] and state.log == []


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


class Test${cls}Contract(HandlerContract):
    """The checks every handler plugin passes (accelkw_core.testing.HandlerContract).

    The entry-point check fails until the distribution is installed (``pip install -e .``).
    """

    handler_class = $cls
    plugin_module = "$package.plugin"
    examples = ({"level": 3}, {"enabled": False}, {"level": 0, "enabled": True})
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

$when_applied

## Fields

| field | type | default | |
|---|---|---|---|
| `enabled` | `bool` | `True` | Whether the handler changes anything. |
| `level` | `int` | `1` | An example setting, 0 to 10. |

## Layout

- `pyproject.toml`: the distribution; `[project.entry-points.accelkw]` names `$package.plugin`.
- `$package/handler.py`: `$cls`, a dataclass whose `plan(state)` says what it contributes
  to the run's extension points (here `after_step` and `checkpoint`); `accelkw plan` prints
  that plan and `apply(state)` carries it out. It imports only from `accelkw_core.plugin`.
- `$package/plugin.py`: the `accelkw_register_handlers` hook that registers it.
- `tests/test_$name.py`: tests built on `accelkw_core.testing`, including
  `Test${cls}Contract`, the contract every handler plugin passes (`HandlerContract`).

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

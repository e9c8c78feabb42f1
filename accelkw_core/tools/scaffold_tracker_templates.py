"""The files ``accelkw plugins new NAME --kind tracker`` writes, as ``string.Template`` text.

Apart from the handler templates (:mod:`accelkw_core.tools.scaffold_templates`), with the same
fields: ``$name`` (tracker name and entry-point name), ``$dist``, ``$package``, ``$cls`` (the
tracker class), ``$core_req``. ``$$`` is a literal dollar sign.
"""

from __future__ import annotations

from accelkw_core.tools.scaffold_templates import INIT, PYPROJECT

__all__ = ["TRACKER_FILES"]

# The distribution's files every kind shares (``$kind`` and the module name differ).
TRACKER_PYPROJECT = PYPROJECT
TRACKER_INIT = INIT

TRACKER = '''\
"""``$cls``: the ``$name`` tracker, what ``Accelerator(log_with="$name")`` writes to.

An example that appends one JSON line per ``log`` call to ``<logging_dir>/<project>/$name.jsonl``;
replace the file with your service's client. Import heavy libraries (and torch) inside the
methods, never at module level, so ``accelkw plugins list`` stays fast.
"""

from __future__ import annotations

import json
import os
from typing import IO, Any

from accelkw_core.tracking import GeneralTracker, on_main_process


class $cls(GeneralTracker):
    """Append each logged step to ``<logging_dir>/<run_name>/$name.jsonl``.

    ``run_name`` is the project name ``init_trackers`` got; ``logging_dir`` the run's logging
    folder; ``indent`` an example option (``init_kwargs={"$name": {"indent": 2}}``), the
    indentation of each JSON line (``None``: one line each).
    """

    name = "$name"
    requires_logging_directory = True

    def __init__(
        self, run_name: str, logging_dir: str | os.PathLike[str], indent: int | None = None
    ) -> None:
        super().__init__()
        self.folder = os.path.join(logging_dir, run_name)
        self.indent = indent
        self.file: IO[str] | None = None

    @property
    def tracker(self) -> IO[str] | None:
        """The open file (``None`` before :meth:`start` and on the other processes)."""
        return self.file

    @on_main_process
    def start(self) -> None:
        """Open the run's file."""
        os.makedirs(self.folder, exist_ok=True)
        # Open across calls, closed in finish(): no `with` block can span them.
        path = os.path.join(self.folder, "$name.jsonl")
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Write the hyperparameters as the first line."""
        self._write({"config": values})

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Write ``values`` at ``step``."""
        self._write({"step": step, "values": values})

    @on_main_process
    def finish(self) -> None:
        """Close the file."""
        if self.file is not None:
            self.file.close()
            self.file = None

    def _write(self, record: dict[str, Any]) -> None:
        if self.file is None:
            raise RuntimeError("$cls: call accelerator.init_trackers() first")
        self.file.write(json.dumps(record, indent=self.indent, default=str) + "\\n")
        self.file.flush()
'''

TRACKER_PLUGIN = '''\
"""The ``accelkw`` entry point of $dist.

It registers :class:`$cls`.
"""

from __future__ import annotations

from collections.abc import Callable

from accelkw_core.plugin import hookimpl
from accelkw_core.tracking import GeneralTracker

from $package.tracker import $cls

__all__ = ["accelkw_register_trackers"]


@hookimpl
def accelkw_register_trackers(register: Callable[[type[GeneralTracker]], None]) -> None:
    """Contribute ``$cls`` under the tracker name ``$name``."""
    register($cls)
'''

TRACKER_TEST = '''\
"""Tests for the ``$name`` tracker.

Run them after installing the folder: ``pip install -e .`` then ``pytest tests``.
"""

from __future__ import annotations

import json
from pathlib import Path

from accelkw_core import Accelerator
from accelkw_core.testing import TrackerContract, isolated_registry

import $package.plugin
from $package import $cls


class Test${cls}Contract(TrackerContract):
    """The checks every tracker plugin passes."""

    tracker_class = $cls
    plugin_module = "$package.plugin"


def test_a_run_writes_one_line_per_log(tmp_path: Path) -> None:
    registry = isolated_registry([$package.plugin])
    accelerator = Accelerator(log_with="$name", project_dir=tmp_path, registry=registry)
    accelerator.init_trackers("demo", config={"lr": 0.1})
    accelerator.log({"loss": 0.5}, step=1)
    accelerator.end_training()
    lines = (tmp_path / "demo" / "$name.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"config": {"lr": 0.1}},
        {"step": 1, "values": {"loss": 0.5}},
    ]
'''

TRACKER_README = """\
# $dist

An [accelkw](https://pypi.org/project/accelkw-core/) tracker plugin: `$cls`, registered under
the tracker name `$name`.

## Install

```bash
pip install -e .
accelkw plugins list      # shows "tracker  $name  $cls ... loaded"
```

## Use

```python
from accelkw_core import Accelerator

accelerator = Accelerator(log_with="$name", project_dir="runs")  # or log_with="all"
accelerator.init_trackers("my_project", config={"lr": 0.1}, init_kwargs={"$name": {"indent": 2}})
accelerator.log({"loss": 0.5}, step=1)
accelerator.end_training()
```

Only the main process writes (`main_process_only`, the `on_main_process` methods).

## Layout

- `pyproject.toml`: the distribution; `[project.entry-points.accelkw]` names `$package.plugin`.
- `$package/tracker.py`: `$cls`, a `GeneralTracker` (`start`, `store_init_configuration`,
  `log`, `finish`, the `tracker` property).
- `$package/plugin.py`: the `accelkw_register_trackers` hook that registers it.
- `tests/test_$name.py`: `Test${cls}Contract` (`TrackerContract`, the contract every tracker
  plugin passes) and a run read back.

## Test

```bash
pip install -e . pytest
pytest tests
```
"""

# Relative path (with ``$package`` and ``$name`` substituted) -> template.
TRACKER_FILES: dict[str, str] = {
    "pyproject.toml": TRACKER_PYPROJECT,
    "README.md": TRACKER_README,
    "$package/__init__.py": TRACKER_INIT,
    "$package/tracker.py": TRACKER,
    "$package/plugin.py": TRACKER_PLUGIN,
    "$package/py.typed": "",
    "tests/test_$name.py": TRACKER_TEST,
}

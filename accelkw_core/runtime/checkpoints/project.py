"""``ProjectConfiguration``: where a run keeps its checkpoints and logs, and how they are named.

Accelerate's dataclass, field for field. With ``automatic_checkpoint_naming``, ``save_state()``
writes ``<project_dir>/checkpoints/checkpoint_<iteration>`` and ``load_state()`` reads the newest.
Unlike Accelerate: the iteration continues after a restart from the folders present (a restarted
run never tries to reuse ``checkpoint_0``), the oldest checkpoints beyond ``total_limit`` are
removed only after the new one is complete, and ``load_state()`` loads the newest *complete*
checkpoint (an interrupted save never left one under a final name, and a folder that lost files
is skipped).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelkw_core.errors import ConfigError
from accelkw_core.runtime.checkpoints.manifest import read_manifest

__all__ = ["CHECKPOINTS", "ProjectConfiguration", "is_complete", "numbered_checkpoints"]

CHECKPOINTS = "checkpoints"
_NAME = re.compile(r"checkpoint_(\d+)")


def _path_or_none(field: str, value: Any) -> str | None:
    if value is None:
        return None
    try:
        text = os.fspath(value)
    except TypeError:
        raise ConfigError(
            "project_config", field, value, "a directory path (str or os.PathLike) or None"
        ) from None
    if not isinstance(text, str) or not text:
        raise ConfigError(
            "project_config", field, value, "a non-empty directory path (str or os.PathLike)"
        )
    return text


@dataclass
class ProjectConfiguration:
    """Where the run's checkpoints and logs live (Accelerate's ``ProjectConfiguration``).

    ``project_dir``: the folder of the project (checkpoints go under ``checkpoints/``);
    ``logging_dir``: where trackers write, ``project_dir`` when ``None``;
    ``automatic_checkpoint_naming``: ``save_state()`` names folders ``checkpoint_<iteration>``;
    ``total_limit``: how many automatically named checkpoints to keep (``None``: all);
    ``iteration``: the number of the next automatically named checkpoint (at least one past
    the newest folder present); ``save_on_each_node``: every machine's local main process
    writes the shared files (for machines that share no file system).
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        self.logging_dir = _path_or_none("logging_dir", self.logging_dir)
        self.set_directories(self.project_dir)
        for name in ("automatic_checkpoint_naming", "save_on_each_node"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError("project_config", name, getattr(self, name), "True or False")
        if self.total_limit is not None and (
            isinstance(self.total_limit, bool)
            or not isinstance(self.total_limit, int)
            or self.total_limit < 1
        ):
            raise ConfigError(
                "project_config", "total_limit", self.total_limit, "an integer >= 1, or None"
            )
        if (
            isinstance(self.iteration, bool)
            or not isinstance(self.iteration, int)
            or self.iteration < 0
        ):
            raise ConfigError("project_config", "iteration", self.iteration, "an integer >= 0")

    def set_directories(self, project_dir: str | os.PathLike[str] | None = None) -> None:
        """Set ``project_dir``, and ``logging_dir`` to it when no logging folder is set."""
        self.project_dir = _path_or_none("project_dir", project_dir)
        if self.logging_dir is None:
            self.logging_dir = self.project_dir

    def checkpoints_dir(self) -> Path:
        """``<project_dir>/checkpoints``; a :class:`ConfigError` without a ``project_dir``."""
        if self.project_dir is None:
            raise ConfigError(
                "project_config",
                "project_dir",
                None,
                "a directory path: automatic_checkpoint_naming saves under "
                "<project_dir>/checkpoints",
            )
        return Path(self.project_dir) / CHECKPOINTS


def numbered_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """The ``checkpoint_<i>`` folders in ``folder``, by number (temporaries excluded)."""
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        match = _NAME.fullmatch(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def is_complete(folder: Path, *, manifest_required: bool = False) -> bool:
    """Whether ``folder`` holds a whole checkpoint: its manifest's files all there, at their size.

    A folder without a manifest (written by Accelerate) counts, unless ``manifest_required``
    (a temporary folder of accelkw's own), when process 0's random states, the file Accelerate
    writes last, are present.
    """
    try:
        manifest = read_manifest(folder)
    except Exception:
        return False
    if manifest is None:
        return not manifest_required and (folder / "random_states_0.pkl").is_file()
    for name, entry in manifest.files.items():
        try:
            if (folder / name).stat().st_size != entry.size:
                return False
        except OSError:
            return False
    return True

"""examples/resume/train.py with workers killed (SIGKILL) at chosen moments, each once.

For tests/test_restarts.py, run by ``accelkw launch --max-restarts N``::

    RESTART_FAULTS=MOMENT:STEP:RANK[,...] RESTART_MARKER=PATH accelkw launch ... restart_worker.py ARGS

ARGS are the example's. For each fault, process ``RANK`` kills itself at ``MOMENT`` of step
``STEP``, on the first attempt that gets there only: it writes ``PATH.<i>`` (``i``, the fault's
place in the list) first, and a fault whose file exists does not fire again. A fault fires only
once every fault before it in the list has: with ``--async-saves`` a ``write`` fault fires on a
background thread while training goes on, and another rank may reach the next fault's step
before it. With steps in increasing order, attempt ``i`` is killed by fault ``i`` and attempt
``len(faults)`` completes.

- ``save``: inside the save of step ``STEP``, after the model, optimizer and scheduler files are
  in the temporary folder (from the ``state_dict()`` of an object registered for checkpointing,
  which only the writing process, rank 0, calls); ``PATH.<i>`` lists the temporary folder's files;
- ``write``: inside the save of step ``STEP``, once every file of it is written, at the first
  file synced for the manifest: with ``--async-saves``, on the thread that writes the save in
  the background while training goes on (armed from the same ``state_dict()``, which the
  staging calls, so rank 0 only); ``PATH.<i>`` lists the temporary folder's files;
- ``between``: after step ``STEP``, which is not a step that saves;
- ``after``: just after the save of step ``STEP`` returned.

Without ``RESTART_FAULTS`` it is the example, unchanged (the uninterrupted reference run).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "resume" / "train.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("resume_train", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Faults:
    """Kills this process at the chosen moments, each unless its marker says it already did."""

    def __init__(self, text: str, marker: str) -> None:
        rank = int(os.environ.get("RANK", "0"))
        # Each of this rank's faults, with the markers of the faults listed before it.
        self.faults: list[tuple[str, int, Path, list[Path]]] = []
        markers = [Path(f"{marker}.{i}") for i in range(len(text.split(",")))]
        for i, fault in enumerate(text.split(",")):
            moment, step, victim = fault.split(":")
            if int(victim) == rank:
                self.faults.append((moment, int(step), markers[i], markers[:i]))
        self.last_step = 0

    def _fire(self, moments: tuple[str, ...], step: int) -> Path | None:
        for moment, at, marker, earlier in self.faults:
            if (
                moment in moments
                and at == step
                and not marker.exists()
                and all(m.exists() for m in earlier)
            ):
                return marker
        return None

    @staticmethod
    def _kill(marker: Path, note: str) -> None:
        marker.write_text(note)
        os.kill(os.getpid(), signal.SIGKILL)

    @classmethod
    def _kill_listing(cls, marker: Path) -> None:
        """Kill, the marker listing the files in the temporary folder of the save."""
        project = Path(sys.argv[sys.argv.index("--project-dir") + 1])
        temporaries = list(project.glob("checkpoints/.*tmp"))
        cls._kill(marker, "\n".join(sorted(p.name for t in temporaries for p in t.iterdir())))

    # Registered for checkpointing: state_dict() runs on rank 0 while the save writes (or,
    # with --async-saves, stages: an earlier save in flight has been waited for by then).
    def state_dict(self) -> dict[str, Any]:
        marker = self._fire(("save",), self.last_step + 1)
        if marker is not None:
            self._kill_listing(marker)
        marker = self._fire(("write",), self.last_step + 1)
        if marker is not None:
            self._arm_write(marker)
        return {}

    def _arm_write(self, marker: Path) -> None:
        from accelkw_core.runtime.checkpoints import folder_io

        # CheckpointWriter.finish syncs the files (folder_io._sync_all) once every file of the
        # save is written and hashed, so this kills with the files all there, before the
        # manifest.
        def sync_all(*args: Any) -> Any:
            self._kill_listing(marker)

        folder_io._sync_all = sync_all  # type: ignore[attr-defined]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def after_step(self, step: int, saved: bool) -> None:
        self.last_step = step
        marker = self._fire(("after",) if saved else ("between",), step)
        if marker is not None:
            self._kill(marker, f"step {step}")


def main() -> None:
    train = _example()
    text = os.environ.get("RESTART_FAULTS")
    if not text:
        train.main()
        return
    faults = Faults(text, os.environ["RESTART_MARKER"])
    train.main(checkpointed=[faults], after_step=faults.after_step)


if __name__ == "__main__":
    main()

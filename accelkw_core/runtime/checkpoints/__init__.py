"""Checkpoints: ``save_state``/``load_state``'s files, their protocol and their guarantees.

One job per module: :mod:`.layout` (the files and their names), :mod:`.atomic_folders` (files and
folders fsynced and committed by rename), :mod:`.lock` (one writer per folder), :mod:`.manifest`
(what a folder holds), :mod:`.folder_io` (the writer and reader contributions use),
:mod:`.agreement` (the processes agreeing on each stage), :mod:`.random_states` (each process's
generators and loaders' positions), :mod:`.save` and :mod:`.load` (the two protocols),
:mod:`.project` (``ProjectConfiguration`` and automatic naming), :mod:`.pretrained`
(``save_model``'s files), :mod:`.aliases` (tied weights in a safetensors file),
:mod:`.parts` (each process's own part, written without waiting for another), :mod:`.staging` (a
save's state copied for a background write) and :mod:`.background_save` (the ``SaveJob`` a
checkpoint executor runs).

The ``Accelerator``'s collaborator over them is :mod:`.manager` (``Checkpoints``: where a save
goes, automatic naming, pruning after a commit, the hand-off to a checkpoint executor).
"""

from accelkw_core.errors import CheckpointLockedError
from accelkw_core.runtime.checkpoints.folder_io import FolderReader, FolderWriter
from accelkw_core.runtime.checkpoints.layout import Checkpointed
from accelkw_core.runtime.checkpoints.load import load_checkpoint
from accelkw_core.runtime.checkpoints.lock import WriterLock
from accelkw_core.runtime.checkpoints.manifest import MANIFEST, Manifest, read_manifest
from accelkw_core.runtime.checkpoints.project import ProjectConfiguration
from accelkw_core.runtime.checkpoints.save import PendingSave, begin_save

__all__ = [
    "MANIFEST",
    "CheckpointLockedError",
    "Checkpointed",
    "FolderReader",
    "FolderWriter",
    "Manifest",
    "PendingSave",
    "ProjectConfiguration",
    "WriterLock",
    "begin_save",
    "load_checkpoint",
    "read_manifest",
]

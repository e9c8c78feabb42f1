"""Checkpoints against what real runs do to them: two writers, links, permissions, a full disk, a
load that fails half-way, a missing or damaged manifest, folders the save creates.

Real files, real processes (a second writer is another process holding the folder's lock). A full
disk is an ``ENOSPC`` raised where every file of a save is opened (``durable.open_new``): an OS
error injected at the write layer, nothing of torch replaced.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import pytest
import torch

from accelkw_core import CheckpointError
from accelkw_core.errors import CheckpointLockedError, CheckpointWarning
from accelkw_core.plugin import CHECKPOINT, ApplyLoaded, KwargsHandler, Plan
from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.runtime.checkpoints.folder_io import FolderReader, FolderWriter
from accelkw_core.runtime.checkpoints.lock import lock_of
from accelkw_core.runtime.checkpoints.manifest import MANIFEST, read_manifest
from tests.checkpoint_workers import Steps
from tests.test_checkpoints import make, same, snapshot, step, trained

ROOT = Path(__file__).resolve().parent.parent

HOLD = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from accelkw_core.runtime.checkpoints.lock import WriterLock
lock = WriterLock(Path(sys.argv[1]))
lock.acquire()
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the writer lock of ``tmp_path / "ckpt"`` (a second run's save)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "ckpt"), str(ROOT)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait(timeout=30)


def _listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


# -- 1. one writer per folder ------------------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_holder_and_nothing_is_touched(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    acc = make()
    trained(acc)
    # The holder's save is under way: its temporary folder (a unique name) and a previous
    # checkpoint are there.
    live = atomic_folders.temporary_of(tmp_path / "ckpt", f"{holder.pid}-0badc0de")
    live.mkdir()
    (live / "optimizer.bin").write_bytes(b"being written")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"the holder's previous checkpoint")
    before = _listing(tmp_path)
    with pytest.raises(CheckpointLockedError) as caught:
        acc.save_state(tmp_path / "ckpt")
    message = str(caught.value)
    assert "\n" not in message and str(tmp_path / "ckpt") in message
    assert f"host {socket.gethostname()}, pid {holder.pid}" in message
    assert _listing(tmp_path) == before
    # Another folder's save sweeps only temporaries whose save is gone: the live one stays.
    dead = atomic_folders.temporary_of(tmp_path / "gone", "1-feedf00d")
    dead.mkdir()
    with pytest.warns(CheckpointWarning, match=r"removed \.gone\.1-feedf00d\.accelkw-tmp"):
        acc.save_state(tmp_path / "other")
    assert live.is_dir() and not dead.exists()
    assert not lock_of(tmp_path / "other").exists()  # released and removed after the save
    holder.kill()
    holder.wait(timeout=30)
    # Its process gone, its lock is free: the next save of that folder takes over.
    with pytest.warns(CheckpointWarning, match="left by a save that was interrupted"):
        acc.save_state(tmp_path / "ckpt")
    assert not live.exists() and read_manifest(tmp_path / "ckpt") is not None


# -- 3. all or nothing, to the end -------------------------------------------------------------


def test_an_object_refusing_its_state_restores_every_object_already_loaded(
    tmp_path: Path,
) -> None:
    acc = make()
    trained(acc)  # a StepLR
    acc.save_state(tmp_path / "ckpt")
    later = make()
    torch.manual_seed(1)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.5**epoch)
    counter = Steps()
    later.register_for_checkpointing(counter)
    model, optimizer, scheduler = later.prepare(model, optimizer, scheduler)
    step(later, model, optimizer, scheduler)
    counter.n = 3
    before = snapshot(model, optimizer, scheduler, counter)
    with pytest.raises(CheckpointError) as caught:
        later.load_state(tmp_path / "ckpt")  # a StepLR's state into a LambdaLR
    message = str(caught.value)
    assert "\n" not in message and "scheduler 0 (LambdaLR)" in message
    assert "KeyError" in message and "restored" in message
    # The weights and optimizer, loaded before the scheduler refused, are back as they were.
    assert same(before, snapshot(model, optimizer, scheduler, counter))


# -- 6. links, permissions, space --------------------------------------------------------------


def test_a_destination_that_is_a_link_is_saved_into_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "scratch" / "ckpt"
    real.parent.mkdir()
    (tmp_path / "ckpt").symlink_to(real, target_is_directory=True)
    acc = make()
    objects = trained(acc)
    acc.save_state(tmp_path / "ckpt")
    step(acc, *objects[:3])
    objects[3].n = 8
    acc.save_state(tmp_path / "ckpt")  # over the first: through the link again
    saved = snapshot(*objects)
    assert (tmp_path / "ckpt").is_symlink() and os.readlink(tmp_path / "ckpt") == str(real)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "scratch"]
    assert sorted(p.name for p in real.parent.iterdir()) == ["ckpt"]
    step(acc, *objects[:3])
    acc.load_state(tmp_path / "ckpt")
    assert same(saved, snapshot(*objects))


@pytest.fixture
def as_another_user(tmp_path: Path) -> Iterator[Path]:
    """A folder this test may write in, with permissions that bind (root's do not: run as nobody)."""
    place = tmp_path / "shared"
    place.mkdir()
    if os.geteuid() != 0:
        yield place
        return
    for folder in (tmp_path, *tmp_path.parents):
        if folder == Path("/"):
            break
        os.chmod(folder, os.stat(folder).st_mode | 0o011)  # others may pass through
    os.chown(place, 65534, 65534)
    os.seteuid(65534)
    try:
        yield place
    finally:
        os.seteuid(0)


def test_a_folder_that_cannot_be_replaced_is_refused_before_anything_is_written(
    as_another_user: Path,
) -> None:
    place = as_another_user
    acc = make()
    trained(acc)
    acc.save_state(place / "ckpt")
    os.chmod(place / "ckpt", 0o555)  # its files cannot be removed: the folder cannot be replaced
    try:
        before = _listing(place)
        with pytest.raises(CheckpointError, match=r"ckpt cannot be replaced.*nothing was written"):
            acc.save_state(place / "ckpt")
        assert _listing(place) == before
        assert sorted(p.name for p in place.iterdir()) == ["ckpt"]
    finally:
        os.chmod(place / "ckpt", 0o755)
    os.chmod(place, 0o555)  # nowhere to write a lock or a temporary folder
    try:
        with pytest.raises(CheckpointError, match=r"shared is not writable.*nothing was written"):
            acc.save_state(place / "ckpt")
        assert _listing(place) == before
    finally:
        os.chmod(place, 0o777)


class _Full:
    """A file on a disk that fills up after ``room`` bytes."""

    def __init__(self, fh: BinaryIO, room: int) -> None:
        self._fh = fh
        self._room = room

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        if size > self._room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= size
        return self._fh.write(data)

    def flush(self) -> None:
        self._fh.flush()

    def fileno(self) -> int:
        return self._fh.fileno()

    def __enter__(self) -> _Full:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


@pytest.mark.parametrize(
    "name",
    [
        "optimizer.bin",  # the first file written, synced on a thread
        "model.safetensors",
        "custom_checkpoint_0.pkl",
        "random_states_0.pkl",
        MANIFEST,  # the last file, after every other is synced
    ],
)
def test_a_full_disk_at_any_file_fails_naming_it_and_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    acc = make()
    objects = trained(acc)
    acc.save_state(tmp_path / "ckpt")
    saved = read_manifest(tmp_path / "ckpt")
    real_open = atomic_folders.open_new

    def open_new(path: Path) -> Any:
        fh = real_open(path)
        return _Full(fh, 16) if path.name == name else fh

    monkeypatch.setattr(atomic_folders, "open_new", open_new)
    if name == "model.safetensors":
        # safetensors writes this file itself (save_file), so the disk fills up in the
        # library, which words it so (its message for a real EFBIG is checked in
        # test_checkpoint_commit.py).
        import safetensors.torch
        from safetensors import SafetensorError

        def serialize_file(*args: Any, **kwargs: Any) -> None:
            raise SafetensorError(
                "Error while serializing: I/O error: No space left on device (os error 28)"
            )

        monkeypatch.setattr(safetensors.torch, "serialize_file", serialize_file)
    step(acc, *objects[:3])
    with pytest.raises(CheckpointError) as caught:
        acc.save_state(tmp_path / "ckpt")
    message = str(caught.value)
    assert "\n" not in message and name in message and "no space left" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary left
    assert read_manifest(tmp_path / "ckpt") == saved
    monkeypatch.undo()
    acc.load_state(tmp_path / "ckpt")


def test_a_file_of_a_checkpoint_that_links_out_of_its_folder_is_refused(tmp_path: Path) -> None:
    acc = make()
    objects = trained(acc)
    acc.save_state(tmp_path / "ckpt")
    # The same bytes, elsewhere: sizes and hashes still match, the link itself is the fault.
    outside = tmp_path / "elsewhere.pkl"
    shutil.move(tmp_path / "ckpt" / "custom_checkpoint_0.pkl", outside)
    (tmp_path / "ckpt" / "custom_checkpoint_0.pkl").symlink_to(outside)
    step(acc, *objects[:3])
    before = snapshot(*objects)
    with pytest.raises(CheckpointError, match=r"custom_checkpoint_0\.pkl is a link to .*outside"):
        acc.load_state(tmp_path / "ckpt")
    assert same(before, snapshot(*objects))


# -- 7. verification is never silently off -----------------------------------------------------


def test_a_folder_without_a_manifest_warns_once_that_it_cannot_be_verified(
    tmp_path: Path,
) -> None:
    acc = make()
    trained(acc)
    acc.save_state(tmp_path / "ckpt")
    (tmp_path / "ckpt" / MANIFEST).unlink()
    with pytest.warns(CheckpointWarning) as caught:
        acc.load_state(tmp_path / "ckpt")
    unverified = [w for w in caught if "cannot be verified" in str(w.message)]
    assert len(unverified) == 1 and "has no manifest" in str(unverified[0].message)


@pytest.mark.parametrize(
    "damage",
    [b"\xff\xfe\x00garbage", b'{"format": 1, "files": {"model.safetensors": 3}}', b"[1, 2]"],
    ids=["bytes", "entry", "shape"],
)
def test_a_damaged_manifest_is_one_line_naming_it(tmp_path: Path, damage: bytes) -> None:
    acc = make()
    objects = trained(acc)
    acc.save_state(tmp_path / "ckpt")
    (tmp_path / "ckpt" / MANIFEST).write_bytes(damage)
    before = snapshot(*objects)
    with pytest.raises(CheckpointError) as caught:
        acc.load_state(tmp_path / "ckpt")
    message = str(caught.value)
    assert "\n" not in message and f"{MANIFEST} is damaged: not a valid manifest" in message
    assert same(before, snapshot(*objects))


def test_a_corrupted_file_reads_as_corrupted_not_as_unreadable(tmp_path: Path) -> None:
    acc = make()
    trained(acc)
    acc.save_state(tmp_path / "ckpt")
    path = tmp_path / "ckpt" / "optimizer.bin"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as caught:
        acc.load_state(tmp_path / "ckpt")
    assert str(caught.value) == (
        f"checkpoint: {path} is corrupted: its hash differs from the manifest's"
    )


# -- 8. durable the whole way down --------------------------------------------------------------


@dataclass
class NestedKwargs(KwargsHandler):
    """Owns its checkpoint files, in sub-folders of their own (as DCP writes its shards)."""

    name: ClassVar[str] = "nested"

    def plan(self, state: Any) -> Plan:
        return Plan(self.name).contribute(CHECKPOINT, self, "files in sub-folders")

    def save_checkpoint(self, writer: FolderWriter) -> None:
        writer.write_bytes("nested/a/b/part.bin", b"deep")
        # A library writing its own files, recorded afterwards.
        (writer.folder / "nested" / "c").mkdir()
        (writer.folder / "nested" / "c" / "lib.bin").write_bytes(b"library")
        writer.record_tree("nested/c")

    def read_checkpoint(self, reader: FolderReader) -> ApplyLoaded:
        reader.verify("nested/a/b/part.bin")
        reader.verify_tree("nested/c")
        return lambda: None


def test_every_folder_the_save_creates_is_fsynced_before_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acc = make(kwargs_handlers=[NestedKwargs()])
    trained(acc)
    synced: list[str] = []
    real_sync, real_commit = atomic_folders.fsync_dir, atomic_folders.commit_folder
    committed: list[Path] = []

    def fsync_dir(path: Path) -> None:
        if not committed:
            synced.append(str(path))
        real_sync(path)

    def commit_folder(temporary: Path, final: Path, *rest: Any) -> None:
        real_commit(temporary, final, *rest)
        committed.append(temporary)

    monkeypatch.setattr(atomic_folders, "fsync_dir", fsync_dir)
    monkeypatch.setattr(atomic_folders, "commit_folder", commit_folder)
    acc.save_state(tmp_path / "ckpt")
    temporary = committed[0]
    created = {"", "nested", "nested/a", "nested/a/b", "nested/c"}
    assert {str(temporary / sub).rstrip("/") for sub in created} <= set(synced)
    manifest = read_manifest(tmp_path / "ckpt")
    assert manifest is not None
    assert {"nested/a/b/part.bin", "nested/c/lib.bin"} <= set(manifest.files)
    acc.load_state(tmp_path / "ckpt")

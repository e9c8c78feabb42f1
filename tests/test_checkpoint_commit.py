"""The commit's rename exchange, looked up once per process; a write failing inside a library."""

from __future__ import annotations

import ctypes.util
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from accelkw_core import Accelerator
from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.testing import isolated_registry, run_workers


def test_the_rename_exchange_is_looked_up_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def find_library(name: str) -> Any:
        raise AssertionError(f"find_library({name!r}) runs ldconfig in a subprocess")

    monkeypatch.setattr(ctypes.util, "find_library", find_library)
    atomic_folders._renameat2.cache_clear()
    acc = Accelerator(cpu=True, registry=isolated_registry([]))
    layer = acc.prepare(torch.nn.Linear(2, 2))
    acc.register_for_checkpointing(layer)
    for _ in range(3):  # the second and third commit over an existing folder
        acc.save_state(tmp_path / "ckpt")
    info = atomic_folders._renameat2.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    if sys.platform.startswith("linux"):
        assert atomic_folders._renameat2() is not None
    assert not atomic_folders.aside_of(tmp_path / "ckpt").exists()
    acc.end_training()


def _save_over_the_size_limit(rank: int, folder: str) -> str:
    """Save a model whose weights' file is over this process's file-size limit (a real
    ``EFBIG`` from the kernel, raised in safetensors' own writing); the error's text."""
    import resource
    import signal

    from accelkw_core import CheckpointError

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing
    acc = Accelerator(cpu=True, registry=isolated_registry([]))
    model = acc.prepare(torch.nn.Linear(256, 256))  # 257 KiB of weights
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (128 * 1024, hard))
    try:
        acc.save_state(Path(folder) / "ckpt")
    except CheckpointError as exc:
        return str(exc)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        acc.end_training()
    return f"saved {model}"


def test_a_failed_write_inside_safetensors_is_one_line_naming_the_file(tmp_path: Path) -> None:
    (message,) = run_workers(_save_over_the_size_limit, 1, args=(str(tmp_path),), timeout=60)
    assert "\n" not in message and "model.safetensors cannot be saved" in message, message
    assert "File too large" in message, message
    assert not list(tmp_path.iterdir())  # no temporary, no checkpoint

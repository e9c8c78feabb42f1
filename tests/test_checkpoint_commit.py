"""The commit's rename exchange: looked up once per process, never by a library search."""

from __future__ import annotations

import ctypes.util
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from accelkw_core import Accelerator
from accelkw_core.runtime.checkpoints import durable
from accelkw_core.testing import isolated_registry


def test_the_rename_exchange_is_looked_up_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def find_library(name: str) -> Any:
        raise AssertionError(f"find_library({name!r}) runs ldconfig in a subprocess")

    monkeypatch.setattr(ctypes.util, "find_library", find_library)
    durable._renameat2.cache_clear()
    acc = Accelerator(cpu=True, registry=isolated_registry([]))
    layer = acc.prepare(torch.nn.Linear(2, 2))
    acc.register_for_checkpointing(layer)
    inodes = []
    for _ in range(3):  # the second and third commit over an existing folder
        acc.save_state(tmp_path / "ckpt")
        inodes.append((tmp_path / "ckpt").stat().st_ino)
    assert len(set(inodes)) == 3  # each a new folder, swapped into place
    info = durable._renameat2.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    if sys.platform.startswith("linux"):
        assert durable._renameat2() is not None
    assert not durable.aside_of(tmp_path / "ckpt").exists()
    acc.end_training()

"""Shared fixtures of the differential suite: Accelerate itself, and a one-process gloo group.

Every test here runs one small program under Accelerate 1.15.0 and under accelkw and compares
the outcomes; a difference must be a row of the table in docs/migrating.md (see
``differences.py``). Accelerate is a dev-only dependency (requirements-dev.txt): a missing or
different version fails the suite, never skips it.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ACCELERATE_VERSION = "1.15.0"


@pytest.fixture(autouse=True)
def _accelerates_state_reset() -> Iterator[None]:
    """Accelerate keeps its state in class-level singletons: a test that gave it a setting (a
    dynamo backend, a mixed precision) would hand that setting to every later test of the
    same worker process. Each test starts from none, whatever ran before it."""
    yield
    import sys

    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(reset_partial_state=True)
        state.GradientState._reset_state()


@pytest.fixture(scope="session")
def accelerate() -> ModuleType:
    """The ``accelerate`` package, checked to be the version this suite compares against."""
    try:
        version = importlib.metadata.version("accelerate")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(
            f"the conformance suite needs accelerate=={ACCELERATE_VERSION} (a dev-only "
            "dependency): pip install -r requirements-dev.txt",
            pytrace=False,
        )
    if version != ACCELERATE_VERSION:
        pytest.fail(
            f"the conformance suite compares against accelerate=={ACCELERATE_VERSION}, "
            f"found {version}: pip install -r requirements-dev.txt",
            pytrace=False,
        )
    import accelerate as module

    return module


@pytest.fixture
def gloo_group(tmp_path: Path) -> Iterator[None]:
    """A one-process gloo process group for the test (destroyed after it), so a model can be
    wrapped in ``DistributedDataParallel`` in the test's own process."""
    import torch.distributed as dist

    assert not dist.is_initialized(), "a process group leaked from an earlier test"
    store = dist.FileStore(os.fspath(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()

"""Checks every suite of the repository shares: the core's tests, the plugins' and the examples'."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_autocast_left_on() -> Iterator[None]:
    """Fail the test that leaves CPU autocast switched on, instead of the tests after it."""
    # Only once torch is imported: the torch-free tests (tests/torch_free.txt) also run where
    # torch is not installed, and a test that never imports torch cannot switch autocast on.
    torch = sys.modules.get("torch")
    before = torch is not None and torch.is_autocast_enabled("cpu")
    yield
    torch = sys.modules.get("torch")
    if torch is None:
        return
    leaked = torch.is_autocast_enabled("cpu") != before
    torch.set_autocast_enabled("cpu", before)
    assert not leaked, "the test left CPU autocast switched on"

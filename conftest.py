"""Checks every suite of the repository shares: the core's tests, the plugins' and the examples'."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_autocast_left_on() -> Iterator[None]:
    """Fail the test that leaves CPU autocast switched on, instead of the tests after it."""
    import torch

    before = torch.is_autocast_enabled("cpu")
    yield
    leaked = torch.is_autocast_enabled("cpu") != before
    torch.set_autocast_enabled("cpu", before)
    assert not leaked, "the test left CPU autocast switched on"

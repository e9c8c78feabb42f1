"""Lets the example's tests run from a checkout where accelkw-loss-guard is not installed.

Once it is installed (``pip install -e examples/nan-guard``) its package is imported from the
installation and this does nothing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("accelkw_loss_guard") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

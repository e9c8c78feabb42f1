"""Lets the example's tests run from a repository checkout where accelkw-seed is not installed.

The example is an independent distribution; once it is installed (``pip install -e
examples/seed``), its package is imported from the installation and this does nothing. It is not
installed in the development environment by default because an installed handler is applied
to every run with its defaults, and seeding every run is not something to impose silently.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("accelkw_seed") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

"""Make the worker module importable by the processes ``run_workers`` spawns.

Tests are imported with ``--import-mode=importlib``, under names a fresh process cannot import;
the spawned workers unpickle their target by module name, so it lives in a plain module here.
"""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

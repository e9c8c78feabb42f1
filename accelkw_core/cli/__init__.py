"""The ``accelkw`` command line."""

from accelkw_core.cli.main import main

__all__ = ["main"]

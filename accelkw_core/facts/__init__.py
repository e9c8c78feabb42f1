"""The bottom layer: facts of a run and the environment variables that set them.

Imports nothing of accelkw but :mod:`accelkw_core.errors`; every other layer may import it.
"""

__all__: list[str] = []

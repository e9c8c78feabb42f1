"""Facts of a run and the environment variables that set them: the layer above the contract.

Imports nothing of accelkw but :mod:`accelkw_core.errors`; every layer above it may import it.
"""

__all__: list[str] = []

"""accelkw-compile: ``TorchDynamoPlugin``, prepared models compiled with ``torch.compile``."""

from accelkw_compile.handler import DynamoBackend, TorchDynamoPlugin

__all__ = ["DynamoBackend", "TorchDynamoPlugin"]

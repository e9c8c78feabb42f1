"""Which fp8 libraries are importable, and the one-line refusal when one a recipe needs is not."""

from __future__ import annotations

import importlib.util

from accelkw_core.plugin import ConfigError

__all__ = ["INSTALL", "LIBRARIES", "is_available", "require"]

#: Backend (Accelerate's ``FP8BackendType`` value) -> the module it imports.
LIBRARIES = {"AO": "torchao", "TE": "transformer_engine", "MSAMP": "msamp"}
#: Backend -> what to install for it.
INSTALL = {
    "AO": "pip install torchao",
    "TE": "pip install transformer-engine[pytorch] (NVIDIA Transformer Engine, CUDA only)",
    "MSAMP": "install MS-AMP from https://github.com/Azure/MS-AMP (CUDA only)",
}


def is_available(backend: str) -> bool:
    """Whether the library of ``backend`` can be imported (found, not imported)."""
    return importlib.util.find_spec(LIBRARIES[backend]) is not None


def require(handler: str, cls: str, backend: str) -> None:
    """Raise a one-line :class:`ConfigError` when ``backend``'s library is missing."""
    if not is_available(backend):
        raise ConfigError(
            handler,
            "mixed_precision",
            "fp8",
            f"the {LIBRARIES[backend]!r} library, which {cls} trains with: {INSTALL[backend]}",
        )

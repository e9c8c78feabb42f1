"""Backend names: parsing, validation and what this torch build and machine can run.

Checking a name needs no torch for the built-in backends, so constructing a handler (for
``accelkw plan`` or a config file) stays cheap; only an unknown name consults
``torch.distributed.Backend``, where third-party backends are registered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkw_core.plugin import ConfigError, suggest

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = [
    "BUILTIN_BACKENDS",
    "available_backends",
    "backend_names",
    "check_backend",
    "cuda_usable",
    "fallback_backend",
    "is_available",
]

BUILTIN_BACKENDS = ("gloo", "nccl", "mpi", "ucc", "xccl")

EXPECTED = (
    "one of 'gloo', 'nccl', 'mpi', 'ucc', 'xccl' (or a backend registered with "
    "torch.distributed.Backend), a per-device string such as 'cpu:gloo,cuda:nccl', "
    "or None for torch's default"
)


def backend_names(value: str) -> list[str] | None:
    """The lowercase backend names in ``'gloo'`` or ``'cpu:gloo,cuda:nccl'``; ``None`` if malformed."""
    text = value.strip()
    if not text:
        return None
    if ":" not in text:
        return None if "," in text else [text.lower()]
    names: list[str] = []
    for part in text.split(","):
        device, _, backend = part.strip().partition(":")
        if not device.strip() or not backend.strip() or ":" in backend:
            return None
        names.append(backend.strip().lower())
    return names


def registered_backends() -> tuple[str, ...]:
    """Every backend name torch knows, built-in or registered by a third party."""
    try:
        import torch.distributed as dist

        listed = tuple(b for b in dist.Backend.backend_list if b != "undefined")
    except (ImportError, AttributeError):
        return BUILTIN_BACKENDS
    return tuple(dict.fromkeys(BUILTIN_BACKENDS + listed))


def check_backend(handler: str, value: str) -> None:
    """Raise ``ConfigError`` unless ``value`` names known backends in a form torch accepts."""
    names = backend_names(value)
    if names is None:
        raise ConfigError(handler, "backend", value, EXPECTED)
    unknown = [n for n in names if n not in BUILTIN_BACKENDS]
    if not unknown:
        return
    known = registered_backends()
    for name in unknown:
        if name not in known:
            raise ConfigError(handler, "backend", value, EXPECTED, suggestion=suggest(name, known))


def is_available(name: str) -> bool:
    """Whether this torch build can create backend ``name``."""
    import torch.distributed as dist

    if hasattr(dist, "is_backend_available"):
        return bool(dist.is_backend_available(name))
    probe = getattr(dist, f"is_{name}_available", None)
    return True if probe is None else bool(probe())


def available_backends() -> list[str]:
    """The backends this torch build can create."""
    return [b for b in registered_backends() if b != "fake" and is_available(b)]


def cuda_usable(state: AcceleratorState) -> bool:
    """Whether this run puts its tensors on CUDA devices (so NCCL can carry them)."""
    if state.device_type != "cuda":
        return False
    import torch

    return bool(torch.cuda.is_available())


def fallback_backend(device_type: str) -> str:
    """The backend to use instead of the default ``'nccl'`` on a run without CUDA."""
    if device_type in ("cpu", "cuda"):
        return "gloo"
    import torch.distributed as dist

    mapping = getattr(dist.Backend, "default_device_backend_map", {})
    return str(mapping.get(device_type, "gloo"))

"""What handlers contribute to the ``attribute`` point, read by name and checked by type.

:class:`Extras` is the ``Accelerator``'s collaborator for ``accelerator.extras``,
``accelerator.extra(name, kind)`` and Accelerate's ``accelerator.scaler`` (a contribution keyed
``"scaler"``). Contributions live in their own namespace: none becomes an attribute of the
``Accelerator``, so a key may be any name, that of an ``Accelerator`` attribute included.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar

from accelkw_core.contract.points import ATTRIBUTE
from accelkw_core.errors import AccelkwError

if TYPE_CHECKING:
    import torch

    from accelkw_core.runtime.run_state import RunState

__all__ = ["Extras"]

T = TypeVar("T")


class Extras:
    """The ``attribute`` contributions of one run (``state``'s)."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The contribution keyed ``"scaler"``, checked to be a ``torch.amp.GradScaler``."""
        found = self.state.keyed(ATTRIBUTE).get("scaler")
        if found is None:
            return None
        import torch

        if isinstance(found, torch.amp.GradScaler):
            return found
        raise TypeError(
            f"accelerator.scaler: the 'scaler' attribute contribution is a "
            f"{type(found).__name__}, not a torch.amp.GradScaler"
        )

    @property
    def extras(self) -> Mapping[str, object]:
        """Every contribution by name (read-only)."""
        return MappingProxyType(self.state.keyed(ATTRIBUTE))

    def extra(self, name: str, kind: type[T]) -> T:
        """The contribution ``name``, checked to be a ``kind``."""
        found = self.state.keyed(ATTRIBUTE).get(name)
        if found is None:
            have = ", ".join(sorted(self.state.keyed(ATTRIBUTE))) or "none"
            raise AccelkwError(
                f"no handler of this run contributes {name!r} (contributed: {have}); "
                "install and enable the plugin that provides it"
            )
        if not isinstance(found, kind):
            raise TypeError(
                f"accelerator.extra({name!r}) is a {type(found).__name__}, not a {kind.__name__}"
            )
        return found

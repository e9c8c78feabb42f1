"""``ReferenceEnum``: a string enum that behaves as Accelerate's ``BaseEnum`` does.

A member equals its value (``DDPCommunicationHookType.FP16 == "fp16"``), ``list()`` gives every
value in order, and ``"fp16" in DDPCommunicationHookType`` tests a value (Python 3.11's ``in``
raises ``TypeError`` for anything but a member; Accelerate's metaclass accepts values).
"""

from __future__ import annotations

import builtins
import enum
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["ReferenceEnum"]


class _ContainsByValue(enum.EnumMeta):
    def __contains__(cls, item: object) -> bool:
        # `"value" in SomeEnum` answers by value as well as by member (Accelerate's enums do).
        values = [member.value for member in cast("Iterable[enum.Enum]", cls)]
        return isinstance(item, cls) or item in values


class ReferenceEnum(enum.StrEnum, metaclass=_ContainsByValue):
    """Base of the enums a plugin serves under an Accelerate name."""

    @classmethod
    def list(cls) -> builtins.list[str]:
        """Every value, in declaration order (Accelerate's ``BaseEnum.list``)."""
        return [str(member) for member in cls]

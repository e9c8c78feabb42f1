"""FullyShardedDataParallelPlugin and TorchDynamoPlugin next to Accelerate 1.15.0's classes.

Field names, order and declared defaults agree; what each ``__post_init__`` fills in differs,
as the table of deliberate differences says.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

import pytest

from tests.conformance.differences import listed


def _declared(cls: type) -> list[tuple[str, object]]:
    return [(f.name, f.default) for f in dataclasses.fields(cls)]


def test_the_dynamo_plugin_reads_no_environment(
    accelerate: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelerate.utils import TorchDynamoPlugin as Theirs
    from accelkw_compile import TorchDynamoPlugin as Ours

    assert _declared(Ours) == _declared(Theirs)
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "eager")
    assert Theirs().backend.value == "EAGER"  # read from the environment
    assert Ours().backend is None and Ours().backend_name == "no"
    assert (
        Theirs(backend="eager").to_dict()["backend"] == Ours(backend="eager").to_dict()["backend"]
    )
    listed("dynamo-no-environment")


def test_the_fsdp_plugin_is_fsdp2_only(accelerate: ModuleType) -> None:
    from accelerate.utils import FullyShardedDataParallelPlugin as Theirs
    from accelkw_fsdp import FullyShardedDataParallelPlugin as Ours

    from accelkw_core import ConfigError

    assert _declared(Ours) == _declared(Theirs)
    assert Theirs().fsdp_version == 1 and Ours().fsdp_version is None
    assert Theirs(fsdp_version=2).reshard_after_forward is True
    assert Ours(fsdp_version=2).resolved().reshard_after_forward is True
    with pytest.raises(ConfigError, match="runs FSDP2"):
        Ours(fsdp_version=1)
    listed("fsdp2-only")

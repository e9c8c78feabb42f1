"""FullyShardedDataParallelPlugin in real two-process gloo groups (spawned by ``run_workers``)."""

from __future__ import annotations

import functools
from typing import Any

import fsdp_workers as workers
import pytest
import torch

from accelkw_core.testing import run_workers

pytestmark = pytest.mark.multiprocess

WRAPS: dict[str, dict[str, Any]] = {
    "transformer": {
        "auto_wrap_policy": "transformer_based_wrap",
        "transformer_cls_names_to_wrap": ["Block"],
    },
    "size_checkpointed_sync": {
        "auto_wrap_policy": "size_based_wrap",
        "min_num_params": 30,
        "activation_checkpointing": True,
        "sync_module_states": True,
        "reshard_after_forward": False,
    },
}


@functools.cache
def _run(name: str) -> list[dict[str, Any]]:
    kwargs = WRAPS[name]
    # With sync_module_states, rank 1 starts from other weights and gets rank 0's.
    differ = bool(kwargs.get("sync_module_states"))
    results = run_workers(workers.train, 2, args=(kwargs, differ), timeout=120)
    for result in results:
        result.update(workers.from_bytes(result.pop("tensors")))
    return results


@pytest.mark.parametrize("name", sorted(WRAPS))
def test_two_processes_train_like_one_full_batch_process(name: str) -> None:
    results = _run(name)
    expected = workers.reference()
    for rank, result in enumerate(results):
        assert result["handlers"] == ["process_group", "fsdp"], "the default ddp gives way"
        assert result["dtensors"] and result["optimizer_dtensors"]
        assert result["norms"] == pytest.approx(expected["norms"], rel=1e-5)
        torch.testing.assert_close(result["out"], expected["out"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(result["reloaded"], expected["out"], rtol=1e-5, atol=1e-6)
        if rank == 0:
            torch.testing.assert_close(result["state"], expected["state"], rtol=1e-5, atol=1e-6)
        else:
            assert result["state"] == {}, "a full state dict is gathered on rank 0 only"
    assert any("sharded Net with fully_shard" in m for m in results[0]["messages"])


def test_a_saved_full_state_dict_loads_into_a_plain_model() -> None:
    saved = _run("transformer")[0]
    plain = workers.Net()
    plain.load_state_dict(saved["state"])
    x, _ = workers.make_batch(99)
    with torch.no_grad():
        torch.testing.assert_close(plain(x), saved["out"])

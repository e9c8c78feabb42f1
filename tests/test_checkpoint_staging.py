"""An asynchronous save's staging copy is the state's own bytes, even when the state is made of
temporaries; and the asynchronous saves' process group ends with its run.

The staging copy is keyed by a storage's address (so views of one storage share one copy): a
temporary freed during the staging must not hand its address, and so its "copy", to the next.
Through the public API: a third party's checkpoint contribution that computes what it writes
per write, and (two processes) FSDP2's full state dict and the random states, each saved in the
background, loaded back and compared bit for bit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from accelkw_async_checkpoint import AsyncCheckpointKwargs

from accelkw_core import Accelerator
from accelkw_core.plugin import (
    CHECKPOINT,
    ApplyLoaded,
    CheckpointReader,
    CheckpointWriter,
    KwargsHandler,
    Plan,
)
from accelkw_core.runtime.checkpoints.staging import staged
from accelkw_core.testing import isolated_registry, plugin_of, run_workers
from tests.checkpoint_workers import fsdp_async_run, fsdp_model

SIZES = (1, 7, 256, 4096, 65536)


def _computed(i: int, numel: int) -> torch.Tensor:
    """The ``i``-th state of ``numel`` elements, computed fresh (a new storage each call)."""
    return torch.arange(numel, dtype=torch.float32) * 0.5 + float(i)


def test_staged_temporaries_each_keep_their_own_bytes() -> None:
    # A probe: many temporaries of a few sizes staged with one memo, each freed at once, as a
    # state computed per write is. The allocator hands a freed block to the next tensor of its
    # size; a copy keyed by that address alone would be the earlier tensor's.
    memo: dict[Any, Any] = {}
    copies = [(i, n, staged(_computed(i, n), memo)) for i in range(20) for n in SIZES]
    wrong = [(i, n) for i, n, copy in copies if not torch.equal(copy, _computed(i, n))]
    assert wrong == []
    pointers = [copy.untyped_storage().data_ptr() for _, _, copy in copies]
    assert len(set(pointers)) == len(pointers)  # every copy is its own storage
    # Views of one storage still share one copy (tied weights stay tied).
    base = _computed(3, 64)
    tied = staged({"a": base, "b": base[16:], "c": base.view(8, 8)}, {})
    storages = {t.untyped_storage().data_ptr() for t in tied.values()}
    assert len(storages) == 1
    assert torch.equal(tied["b"], base[16:]) and torch.equal(tied["c"], base.view(8, 8))


class Computed:
    """A third party's checkpoint contribution whose state is computed per write: each file is
    written from temporaries made for it and freed once the write returns."""

    FILES = 12

    def __init__(self) -> None:
        self.generation = 0
        self.loaded: dict[str, dict[str, torch.Tensor]] = {}

    def state_of(self, i: int, generation: int) -> dict[str, torch.Tensor]:
        return {f"t{n}": _computed(1000 * generation + i, n) for n in SIZES} | {
            "step": torch.tensor([generation, i])
        }

    def save_checkpoint(self, writer: CheckpointWriter) -> None:
        for i in range(self.FILES):
            writer.save(f"computed/{i}.pt", self.state_of(i, self.generation))

    def read_checkpoint(self, reader: CheckpointReader) -> ApplyLoaded:
        read = {str(i): reader.load(f"computed/{i}.pt") for i in range(self.FILES)}

        def apply() -> None:
            self.loaded = read

        return apply


@dataclass
class ComputedKwargs(KwargsHandler):
    """Contributes one :class:`Computed` to the ``checkpoint`` point."""

    name: ClassVar[str] = "computed"

    def plan(self, state: Any) -> Plan:
        self.contribution = Computed()
        return Plan(self.name).contribute(CHECKPOINT, self.contribution, "computed per write")


def test_a_contribution_computing_its_state_per_write_loads_back_bit_for_bit(
    tmp_path: Path,
) -> None:
    handler = ComputedKwargs()
    registry = isolated_registry([plugin_of(ComputedKwargs, AsyncCheckpointKwargs)])
    acc = Accelerator(
        cpu=True, registry=registry, kwargs_handlers=[handler, AsyncCheckpointKwargs()]
    )
    contribution = handler.contribution
    for generation in range(2):  # the second save replaces the first
        contribution.generation = generation
        acc.save_state(tmp_path / "ckpt")
        garbage = [torch.randn(n) for n in SIZES for _ in range(4)]  # reuse the freed blocks
        del garbage
    acc.wait_for_checkpoints()
    acc.load_state(tmp_path / "ckpt")
    assert sorted(contribution.loaded, key=int) == [str(i) for i in range(Computed.FILES)]
    for i in range(Computed.FILES):
        expected = contribution.state_of(i, 1)
        got = contribution.loaded[str(i)]
        assert got.keys() == expected.keys()
        assert all(torch.equal(got[k], expected[k]) for k in expected), i
    acc.end_training()


# -- two processes: FSDP2's full state dict and the random states; the group's lifetime -------


def _full_state(model: Any, optimizer: Any) -> dict[str, Any]:
    """The model's and optimizer's whole state, on every rank (collectives)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
    weights = get_model_state_dict(model, options=options)
    optim = get_optimizer_state_dict(model, optimizer, options=options)
    flat: dict[str, Any] = {f"model.{k}": v.clone() for k, v in weights.items()}
    for key, slots in optim["state"].items():
        for slot, value in slots.items():
            flat[f"optim.{key}.{slot}"] = (
                value.clone() if isinstance(value, torch.Tensor) else torch.tensor(value)
            )
    return flat


def _train(acc: Any, model: Any, optimizer: Any, rank: int, steps: int) -> None:
    for _ in range(steps):
        acc.backward(model(torch.randn(4, 16) + rank).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()


def fsdp_full_and_groups(rank: int, run_dir: str) -> dict[str, Any]:
    """FSDP2 (FULL_STATE_DICT) saved in the background, trained on, and loaded back by a fresh
    model; then three runs with asynchronous saves on one default group, each ended."""
    import torch.distributed as dist

    out = Path(run_dir)
    acc, model, optimizer = fsdp_async_run(0, "FULL_STATE_DICT")
    _train(acc, model, optimizer, rank, 3)
    torch.manual_seed(50 + rank)
    saved = _full_state(model, optimizer)
    rng = torch.get_rng_state()
    acc.save_state(out / "full")  # returns once staged
    _train(acc, model, optimizer, rank, 3)  # changes every weight and moment in place
    acc.wait_for_checkpoints()
    acc.free_memory()
    model, optimizer = acc.prepare(*fsdp_model(9))
    torch.manual_seed(12345)
    acc.load_state(out / "full")
    loaded = _full_state(model, optimizer)
    result: dict[str, Any] = {
        "keys": sorted(saved) == sorted(loaded),
        "bit_for_bit": all(torch.equal(saved[k], loaded[k]) for k in saved),
        "rng": torch.equal(torch.get_rng_state(), rng),
    }
    # The process group stays (the process-group plugin made it); the runs below join it.
    groups = [len(dist.distributed_c10d._world.pg_map)]
    for run in range(3):
        registry = isolated_registry([plugin_of(AsyncCheckpointKwargs)])
        run_acc = Accelerator(
            cpu=True, registry=registry, kwargs_handlers=[AsyncCheckpointKwargs()]
        )
        layer = run_acc.prepare(torch.nn.Linear(4, 4))
        run_acc.register_for_checkpointing(layer)
        run_acc.save_state(out / f"run{run}")
        run_acc.end_training()
        groups.append(len(dist.distributed_c10d._world.pg_map))
    result["groups"] = groups
    acc.end_training()
    return result


@pytest.mark.multiprocess
def test_fsdp2_full_state_and_random_states_load_back_and_ended_runs_leave_no_groups(
    tmp_path: Path,
) -> None:
    results = run_workers(
        fsdp_full_and_groups,
        2,
        args=(str(tmp_path),),
        timeout=180,
        env={"OMP_NUM_THREADS": "1"},
    )
    for result in results:
        assert result["keys"] and result["bit_for_bit"] and result["rng"], result
        # Each ended run destroyed its saves' group: the count is the one before the runs.
        first = result["groups"][0]
        assert result["groups"] == [first] * 4, result["groups"]
    assert os.path.isfile(tmp_path / "run2" / "accelkw_checkpoint.json")

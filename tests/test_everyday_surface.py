"""The everyday surface a training script uses besides the handlers, on its own (no Accelerate).

The differential suite (tests/conformance/test_surface_utils.py and
test_feature_scripts.py) compares these with Accelerate; here are their edges: lengths of
the sharded samplers, refusals, the decorator's errors, a cheap ``accelkw_core.utils``.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch

from accelkw_core import Accelerator, DataLoaderConfiguration
from accelkw_core.discovery.registry import Registry
from accelkw_core.errors import BatchSizeError, ConfigError
from accelkw_core.local_sgd import LocalSGD
from accelkw_core.runtime.data.data_loader import BatchShard, skip_first_batches
from accelkw_core.runtime.memory import find_executable_batch_size
from accelkw_core.runtime.preparing.optimizer import AcceleratedOptimizer
from accelkw_core.runtime.processes.coordination import DistributedType


def _sampler(n: int, size: int, drop_last: bool = False) -> Any:
    return torch.utils.data.BatchSampler(range(n), size, drop_last)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("even", [False, True])
@pytest.mark.parametrize(("n", "size", "drop_last"), [(10, 2, False), (9, 4, False), (9, 4, True)])
def test_each_shard_yields_as_many_batches_as_its_length(
    split: bool, even: bool, n: int, size: int, drop_last: bool
) -> None:
    for rank in (0, 1):
        shard = BatchShard(
            _sampler(n, size, drop_last), 2, rank, split_batches=split, even_batches=even
        )
        assert len(list(shard)) == len(shard) or (split and not even), (rank, list(shard))


def test_split_batches_needs_a_batch_size_the_processes_divide() -> None:
    from accelkw_core.runtime.data.data_loader import prepare_data_loader
    from accelkw_core.runtime.run_state import RunState

    state = RunState.from_env(env={"RANK": "0", "WORLD_SIZE": "2"}, cpu=True)
    loader = torch.utils.data.DataLoader(torch.arange(9), batch_size=3)
    with pytest.raises(ConfigError, match="multiple of the 2 processes"):
        prepare_data_loader(loader, state, config=DataLoaderConfiguration(split_batches=True))


def test_the_accelerator_takes_only_a_dataloader_configuration() -> None:
    registry = Registry(allow=[])
    with pytest.raises(ConfigError, match="dataloader_config: got"):
        Accelerator(cpu=True, registry=registry, dataloader_config={"split_batches": True})
    acc = Accelerator(cpu=True, registry=registry)
    assert acc.dataloader_config == DataLoaderConfiguration() and acc.even_batches is True
    with pytest.raises(ConfigError, match="even_batches: got 1"):
        acc.even_batches = 1  # type: ignore[assignment]
    acc.end_training()


def test_a_plain_data_loader_skips_into_a_plain_data_loader() -> None:
    loader = torch.utils.data.DataLoader(torch.arange(5), batch_size=2)
    skipped = skip_first_batches(loader, num_batches=2)
    assert type(skipped) is torch.utils.data.DataLoader
    assert [b.tolist() for b in skipped] == [[4]] and len(skipped) == 1


def test_find_executable_batch_size_refuses_a_batch_size_and_stops_at_zero() -> None:
    @find_executable_batch_size(starting_batch_size=2, reduce_batch_size_fn=lambda: 0)
    def never(batch_size: int) -> None:
        raise RuntimeError("CUDA out of memory.")

    with pytest.raises(
        BatchSizeError, match=r"never: no batch size fits in memory \(tried 2;"
    ) as e:
        never()
    assert isinstance(e.value, RuntimeError) and e.value.tried == [2]
    assert e.value.function == "never"

    @find_executable_batch_size(starting_batch_size=8)
    def train(batch_size: int, lr: float) -> float:
        return batch_size * lr

    with pytest.raises(TypeError, match=r"train\(\) gets its batch size from .*train\(lr=0.1\)"):
        train(8, 0.1)
    with pytest.raises(ValueError, match="other"):

        @find_executable_batch_size
        def other(batch_size: int) -> None:
            raise ValueError("other")

        other()


def test_find_executable_batch_size_shrinks_by_a_tenth_and_keeps_the_size_found() -> None:
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=10)
    def fits_seven(batch_size: int, scale: int) -> int:
        tried.append(batch_size)
        if batch_size > 7:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried")
        return batch_size * scale

    assert fits_seven(2) == 14 and tried == [10, 9, 8, 7]
    assert fits_seven(scale=3) == 21 and tried[4:] == [7]  # the next call starts where it ended
    assert fits_seven.__name__ == "fits_seven"

    @find_executable_batch_size(starting_batch_size=3)
    def two_args_error(batch_size: int) -> None:
        raise RuntimeError("CUDA out of memory.", "a second argument")

    with pytest.raises(RuntimeError, match="a second argument"):
        two_args_error()  # not torch's one-argument error: not retried


class _Run:
    """What LocalSGD reads of an Accelerator before it touches the model: the kind of run."""

    def __init__(self, kind: DistributedType) -> None:
        self.distributed_type = kind


@pytest.mark.parametrize("kind", [DistributedType.FSDP, DistributedType.DEEPSPEED])
def test_local_sgd_refuses_a_run_without_whole_replicas(kind: DistributedType) -> None:
    with pytest.raises(NotImplementedError, match=f"a {kind.value} run holds none"):
        LocalSGD(_Run(kind), torch.nn.Linear(1, 1), local_sgd_steps=2)  # type: ignore[arg-type]


@pytest.mark.parametrize("steps", [0, -1, 2.0, True, None])
def test_local_sgd_refuses_a_step_count_that_is_not_a_positive_int(steps: Any) -> None:
    run = _Run(DistributedType.MULTI_CPU)
    with pytest.raises(ConfigError, match=r"LocalSGD.local_sgd_steps: got .*an int >= 1"):
        LocalSGD(run, torch.nn.Linear(1, 1), local_sgd_steps=steps)  # type: ignore[arg-type]
    disabled = LocalSGD(run, torch.nn.Linear(1, 1), steps, enabled=False)  # type: ignore[arg-type]
    with disabled as local_sgd:  # a disabled block never averages: it needs no valid count
        local_sgd.step()
    assert local_sgd.num_steps == 1


def test_train_and_eval_reach_the_optimizer_a_wrapper_holds() -> None:
    calls: list[str] = []

    class ScheduleFree(torch.optim.SGD):  # type: ignore[misc]
        def train(self) -> None:
            calls.append("train")

        def eval(self) -> None:
            calls.append("eval")

    class Wrapper:
        def __init__(self, optimizer: Any) -> None:
            self.optimizer = optimizer

    inner = ScheduleFree(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    prepared = AcceleratedOptimizer(Wrapper(inner))
    prepared.train()
    prepared.eval()
    AcceleratedOptimizer(torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)).train()
    assert calls == ["train", "eval"]


def test_importing_the_utilities_imports_no_torch() -> None:
    code = (
        "import sys, accelkw_core.utils as u, accelkw_core.local_sgd; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "u.is_schedulefree_available(); u.DataLoaderConfiguration(); "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

"""The Accelerate surface of the core's Accelerator, with no plugin installed: inline handlers only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from safetensors.torch import load_file

from accelkw_core import Accelerator, ConfigError
from accelkw_core.plugin import (
    AROUND_BACKWARD,
    AROUND_STEP,
    ATTRIBUTE,
    UNSCALE_GRADIENTS,
    KwargsHandler,
    Plan,
    StepContext,
)
from accelkw_core.testing import isolated_registry, make_state, plugin_of
from accelkw_core.utils import DistributedType


@dataclass
class Halving(KwargsHandler):
    """A third-party loss scaler: doubles losses, halves gradients before clipping, skips odd steps."""

    name: ClassVar[str] = "halving"

    def plan(self, state: Any) -> Plan:
        def backward(loss: Any, proceed: Callable[[Any], None]) -> None:
            proceed(loss * 2)

        unscaled: list[Any] = []

        def unscale(optimizer: Any) -> None:
            unscaled.append(optimizer)
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad /= 2

        def around(step: StepContext, proceed: Callable[[], Any]) -> Any:
            return proceed() if step.index % 2 == 0 else None

        plan = Plan(self.name)
        plan.contribute(AROUND_BACKWARD, backward, "losses doubled")
        plan.contribute(UNSCALE_GRADIENTS, unscale, "gradients halved before clipping")
        plan.contribute(ATTRIBUTE, unscaled, "the optimizers unscaled", key="unscaled")
        return plan.contribute(AROUND_STEP, around, "odd steps skipped")


def make(*classes: type[KwargsHandler]) -> Accelerator:
    return Accelerator(cpu=True, registry=isolated_registry([plugin_of(*classes)]))


def test_the_unscale_gradients_point_is_called_for_every_prepared_optimizer() -> None:
    acc = make(Halving)
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model, opt = acc.prepare(model, opt)
    acc.backward(model(torch.tensor([[3.0, 4.0]])).sum())
    assert model.weight.grad.tolist() == [[6.0, 8.0]]  # scaled by 2
    norm = acc.clip_grad_norm_(model.parameters(), 1.0)
    assert float(norm) == pytest.approx(5.0)  # the true norm, after unscaling
    assert acc.extra("unscaled", list) == [opt.optimizer]
    acc.unscale_gradients(opt)
    acc.clip_grad_value_(model.parameters(), 0.1)
    assert model.weight.grad.tolist() == [[pytest.approx(0.1)] * 2]


def test_without_a_scaler_clipping_is_torchs() -> None:
    acc = make()
    model = torch.nn.Linear(2, 1, bias=False)
    model.weight.grad = torch.tensor([[3.0, 4.0]])
    assert float(acc.clip_grad_norm_(model.parameters(), 1.0)) == pytest.approx(5.0)
    assert model.weight.grad.norm().item() == pytest.approx(1.0, rel=1e-5)


def test_a_prepared_scheduler_steps_only_on_real_steps() -> None:
    acc = make(Halving)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    sched, model, opt = acc.prepare(sched, model, opt)  # any order: schedulers last
    assert type(sched).__name__ == "AcceleratedScheduler" and sched.optimizers == [opt]
    lrs = []
    for _ in range(4):
        acc.backward(model(torch.ones(1, 2)).sum())
        opt.step()
        sched.step()
        opt.zero_grad()
        lrs.append(sched.get_last_lr()[0])
    assert lrs == [0.5, 0.5, 0.25, 0.25]  # steps 1 and 3 were skipped


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # stepped with no optimizer step
def test_the_scheduler_steps_num_processes_times_and_honours_sync_and_total_steps() -> None:
    from accelkw_core.runtime.preparing.scheduler import AcceleratedScheduler

    opt = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=1.0)
    synced = [True]
    adjusted: list[Any] = []
    inner = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3)
    sched = AcceleratedScheduler(
        inner, [], num_processes=2, synced=lambda: synced[0], on_unsynced=adjusted.append
    )
    sched.step()
    assert inner._step_count == 3
    sched.step()  # OneCycleLR is never stepped past total_steps
    assert inner._step_count == 4
    synced[0] = False
    sched.step()
    assert inner._step_count == 4 and adjusted == [inner]


def test_facts_and_process_helpers_on_one_process(capsys: pytest.CaptureFixture[str]) -> None:
    acc = make()
    assert acc.distributed_type is DistributedType.NO and acc.distributed_type == "NO"
    with acc.main_process_first(), acc.local_main_process_first():
        pass
    assert acc.on_main_process(lambda: 7)() == 7
    assert acc.on_local_main_process(lambda: 8)() == 8
    with acc.split_between_processes([1, 2, 3]) as share:
        assert share == [1, 2, 3]
    with pytest.raises(ConfigError, match="on_main_process: got None, expected a function"):
        acc.on_main_process(None)


def test_split_between_processes_shares_and_pads_like_accelerate() -> None:
    from accelkw_core.runtime.processes.coordination import split_inputs

    data = torch.arange(5).reshape(5, 1)
    shares = [split_inputs(data, make_state(world_size=3, rank=r), True) for r in range(3)]
    assert [s.flatten().tolist() for s in shares] == [[0, 1], [2, 3], [4, 4]]
    state = make_state(world_size=2, rank=1)
    # As in Accelerate, values other than lists, tuples and tensors are not split.
    assert split_inputs({"a": [1, 2, 3], "b": "xyz"}, state) == {"a": [3], "b": "xyz"}
    with pytest.raises(ValueError, match="same length"):
        split_inputs({"a": [1], "b": [1, 2]}, state)


def test_distributed_type_follows_the_run_and_a_contribution() -> None:
    from accelkw_core.runtime.processes.coordination import distributed_type

    assert distributed_type(make_state(world_size=2)) is DistributedType.MULTI_CPU
    assert (
        distributed_type(make_state(world_size=2, device_type="cuda")) is DistributedType.MULTI_GPU
    )
    state = make_state(world_size=2)
    state.contribute(ATTRIBUTE, "sharding", "FSDP", key="distributed_type")
    assert distributed_type(state) is DistributedType.FSDP


def run_loop(acc: Accelerator, model: Any, opt: Any, sched: Any, loader: Any) -> list[float]:
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y) + 0.01 * torch.randn(()).abs()
        acc.backward(loss)
        acc.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def build(seed: int = 0) -> tuple[Accelerator, Any, Any, Any, Any]:
    fixed = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(10, 3, generator=fixed), torch.randn(10, 1, generator=fixed)
    )
    torch.manual_seed(seed)
    acc = make()
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.3), torch.nn.Linear(4, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    loader = torch.utils.data.DataLoader(data, batch_size=3, shuffle=True)
    return acc, *acc.prepare(model, opt, sched, loader)


def test_a_run_resumed_from_a_checkpoint_continues_bit_for_bit(tmp_path: Path) -> None:
    acc, model, opt, sched, loader = build()
    run_loop(acc, model, opt, sched, loader)
    acc.save_state(tmp_path / "ckpt")
    expected = [run_loop(acc, model, opt, sched, loader) for _ in range(2)]
    weights = {k: v.clone() for k, v in acc.get_state_dict(model).items()}

    # A fresh process's objects, started from other weights and another seed.
    acc2, model2, opt2, sched2, loader2 = build(seed=123)
    acc2.load_state(tmp_path / "ckpt")
    assert [run_loop(acc2, model2, opt2, sched2, loader2) for _ in range(2)] == expected
    assert all(torch.equal(v, acc2.get_state_dict(model2)[k]) for k, v in weights.items())


def test_registered_objects_are_checkpointed_and_bad_input_is_refused(tmp_path: Path) -> None:
    acc = make()

    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def state_dict(self) -> dict[str, int]:
            return {"n": self.n}

        def load_state_dict(self, state: dict[str, int]) -> None:
            self.n = state["n"]

    counter = Counter()
    acc.register_for_checkpointing(counter)
    counter.n = 5
    acc.save_state(tmp_path)
    counter.n = 9
    acc.load_state(tmp_path)
    assert counter.n == 5 and (tmp_path / "custom_checkpoint_0.pkl").is_file()
    with pytest.raises(ValueError, match="Item at index 0, `object`"):
        acc.register_for_checkpointing(object())
    with pytest.raises(ConfigError, match="output_dir: got None, expected a directory path"):
        acc.save_state()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        acc.load_state(tmp_path / "missing")


def test_save_model_get_state_dict_and_free_memory(tmp_path: Path) -> None:
    acc = make()
    model = acc.prepare(torch.nn.Linear(2, 2))
    acc.save_model(model, tmp_path / "out")
    saved = load_file(tmp_path / "out" / "model.safetensors")
    assert saved.keys() == acc.get_state_dict(model).keys() == {"weight", "bias"}
    acc.save_model(model, tmp_path / "bin", safe_serialization=False)
    saved = torch.load(tmp_path / "bin" / "pytorch_model.bin", weights_only=True)
    assert all(torch.equal(v, acc.get_state_dict(model)[k]) for k, v in saved.items())
    assert acc.free_memory(model) == [None] and acc._prepared.models == []
    assert acc.clear() == []


def test_gather_for_metrics_on_one_process_keeps_everything() -> None:
    acc = make()
    loader = acc.prepare(torch.utils.data.DataLoader(torch.arange(5), batch_size=2))
    seen = [acc.gather_for_metrics(b).tolist() for b in loader]
    assert seen == [[0, 1], [2, 3], [4]]
    assert acc.gather_for_metrics(["a", "b"]) == ["a", "b"]  # objects
    assert loader.end_of_dataloader and loader.remainder == 1

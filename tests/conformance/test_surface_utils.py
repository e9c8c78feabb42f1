"""Accelerate's everyday surface beyond the handlers, under Accelerate 1.15.0 and accelkw.

``DataLoaderConfiguration`` (split, uneven and seedable), ``skip_first_batches``, triggers,
``LocalSGD``, the free collectives of ``accelerate.utils``, ``set_seed``,
``find_executable_batch_size``, a schedule-free optimizer's ``train()``/``eval()`` and the
``is_*_available`` checks: the same programs give the same values; where accelkw refuses what
Accelerate accepts, the row of docs/migrating.md is named with ``listed``.
"""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from accelkw_core.errors import ConfigError
from accelkw_core.testing import run_workers
from tests.conformance import surface_programs as programs
from tests.conformance.differences import listed
from tests.conformance.runtime_programs import BUILTINS

ENV = {"ACCELKW_PLUGINS": BUILTINS, "OMP_NUM_THREADS": "1"}


def test_two_processes_shard_skip_trigger_average_and_collect_alike(
    accelerate: ModuleType,
) -> None:
    ref = run_workers(programs.data_worker, 2, args=("accelerate",), env=ENV, timeout=240)
    ours = run_workers(programs.data_worker, 2, args=("accelkw",), env=ENV, timeout=240)
    assert ours == ref
    r0, r1 = ours
    assert r0["use_distributed"] is True
    assert (r0["split"], r1["split"]) == ([[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]])
    assert (r0["split_uneven"], r1["split_uneven"]) == ([[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7]])
    assert (r0["uneven"], r1["uneven"]) == ([[0, 1, 2, 3], [8, 9]], [[4, 5, 6, 7]])
    assert r0["skipped"] == r0["skipped_free"] == r0["default"][1:]
    assert r0["seedable"][0] != r0["seedable"][1]  # a new order each epoch, equal on both sides
    assert r0["triggers"] == r1["triggers"] == [True, False]
    assert r0["padded"] == [0, -1] and r1["padded"] == [0, 1]
    assert r0["objects"] == ["r0", "r1"] and r0["object_list"] == ["r1", 1]
    assert r0["seeded"] != r1["seeded"]  # device_specific seeds each rank differently
    assert r0["local_sgd"][-1] == r1["local_sgd"][-1]  # averaged at the end of the block
    assert r0["local_sgd"][0] != r1["local_sgd"][0]  # trained apart in between


def test_one_process_finds_a_batch_size_seeds_and_steps_schedule_free_alike(
    accelerate: ModuleType,
) -> None:
    ref, ours = programs.single_process("accelerate"), programs.single_process("accelkw")
    assert ours == ref
    assert ours["tried"] == [64, 57, 51, 45, 40] and ours["found"] == 80
    assert ours["use_distributed"] is False and ours["skipped"] == [[4, 5], [6]]
    assert ours["available"]["is_schedulefree_available"] is True


def test_a_compiled_model_around_ddp_unwraps_uncompiled_with_a_warning() -> None:
    from accelkw_core.runtime.preparing.prepared import _compiled_around

    model = torch.nn.Linear(2, 1)
    wrapped = torch.nn.Sequential(model)  # stands for the DDP wrapper inside torch.compile
    compiled = torch.compile(wrapped, backend="eager")
    with pytest.warns(UserWarning, match="wraps a Sequential, not the model"):
        assert _compiled_around(compiled, model) is model
    assert isinstance(compiled._orig_mod, torch.nn.Sequential)  # the prepared model is intact
    assert _compiled_around(torch.compile(model, backend="eager"), model) is not model
    listed("unwrap-compiled-around-wrapper")


def test_settings_that_cannot_take_effect_are_refused(accelerate: ModuleType) -> None:
    from accelkw_core import DataLoaderConfiguration

    # Accelerate takes it and needs torchdata; dispatch_batches=True is carried out by both.
    accelerate.DataLoaderConfiguration(use_stateful_dataloader=True)
    assert DataLoaderConfiguration(dispatch_batches=True).dispatch_batches is True
    with pytest.raises(ConfigError, match=r"dispatch_batches: got 'yes', expected True or False"):
        DataLoaderConfiguration(dispatch_batches="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="use_stateful_dataloader: got True"):
        DataLoaderConfiguration(use_stateful_dataloader=True)
    with pytest.raises(ConfigError, match="split_batches: got 'yes', expected True or False"):
        DataLoaderConfiguration(split_batches="yes")  # type: ignore[arg-type]
    listed("dataloader-config-refused")


def test_values_accelerate_accepts_and_fails_on_later_are_refused(accelerate: ModuleType) -> None:
    import accelkw_core.utils as utils
    from accelkw_core import Accelerator
    from accelkw_core.discovery.registry import Registry
    from accelkw_core.local_sgd import LocalSGD

    # Accelerate sums for an unknown reduction and skips nothing (or everything) silently.
    assert accelerate.utils.reduce(torch.ones(1), reduction="avg").tolist() == [1.0]
    with pytest.raises(ConfigError, match=r"reduce.reduction: got 'avg', expected one of"):
        utils.reduce(torch.ones(1), reduction="avg")
    loader = torch.utils.data.DataLoader(torch.arange(4), batch_size=2)
    with pytest.raises(ConfigError, match=r"num_batches: got -1, expected an int >= 0"):
        utils.skip_first_batches(loader, num_batches=-1)
    acc = Accelerator(cpu=True, registry=Registry(allow=BUILTINS.split(",")))
    assert LocalSGD(acc, torch.nn.Linear(1, 1), local_sgd_steps=0).enabled is False  # 1 process
    acc.end_training()
    listed("surface-values-checked")


def test_no_xla_here() -> None:
    import accelkw_core.utils as utils

    assert utils.is_torch_xla_available() is False
    listed("no-xla")

"""RunState: the run's facts from torchrun's environment, and its validation."""

from __future__ import annotations

import pytest

from accelkw_core import ConfigError, RunState


@pytest.mark.needs_torch
def test_facts_come_from_torchrun_variables() -> None:
    env = {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.1.2.3",
        "MASTER_PORT": "29500",
    }
    s = RunState.from_env(env=env, cpu=True, mixed_precision="bf16")
    assert (s.rank, s.local_rank, s.world_size, s.local_world_size) == (3, 1, 4, 2)
    assert (s.master_addr, s.master_port) == ("10.1.2.3", 29500)
    assert s.distributed and not s.is_main_process
    assert s.device_type == "cpu" and str(s.device) == "cpu"
    assert s.mixed_precision == "bf16"


def test_single_process_defaults() -> None:
    s = RunState.from_env(env={}, cpu=True)
    assert (s.rank, s.world_size, s.local_world_size, s.master_port) == (0, 1, 1, None)
    assert not s.distributed and s.is_main_process


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE"),
        ({"RANK": "-1"}, "RANK"),
    ],
)
def test_bad_environment_names_the_variable(env: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        RunState.from_env(env=env, cpu=True)
    assert info.value.field == field and info.value.handler == "environment"


def test_rank_outside_world_and_bad_precision_are_errors() -> None:
    with pytest.raises(
        ConfigError, match=r"accelerator\.rank: got 2, expected an integer in \[0, 2\)"
    ):
        RunState.from_env(env={"RANK": "2", "WORLD_SIZE": "2"}, cpu=True)
    with pytest.raises(
        ConfigError,
        match=r"mixed_precision: got 'fp4', expected one of 'no', 'fp16', 'bf16', 'fp8'",
    ):
        RunState(mixed_precision="fp4", cpu=True)


def test_log_records_what_was_done_and_why_not() -> None:
    s = RunState(cpu=True)
    s.record("ddp", "world size 1, model not wrapped", applied=False)
    s.record("autocast", "bf16 autocast on cpu")
    assert s.messages("ddp") == ["world size 1, model not wrapped"]
    assert s.summary() == ["ddp: world size 1, model not wrapped", "autocast: bf16 autocast on cpu"]
    assert [e.applied for e in s.log] == [False, True]

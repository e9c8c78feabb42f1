"""Accelerate's environment variables, read as Accelerate 1.15 reads them (issue 28).

Core tests use handler classes written here; the built-ins' variables (``ACCELERATE_USE_FSDP``
with ``FSDP_*``, ``ACCELERATE_DYNAMO_*``, ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS``) are tested
with the built-in classes themselves.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime_helpers as rh

from accelkw_core.config.accelerate_env import (
    CORE_VARIABLES,
    HONOURED,
    REFUSED,
    UNUSED,
    describe_accelerate_env,
)
from accelkw_core.config.settings import resolve_settings
from accelkw_core.errors import ConfigError
from accelkw_core.plugin import KwargsHandler, handler_field


@pytest.fixture(autouse=True)
def _no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rh.clean_env(monkeypatch, tmp_path)


@dataclass
class ShardKwargs(KwargsHandler):
    """An opt-in handler that takes Accelerate-style variables, as accelkw-fsdp does."""

    name: ClassVar[str] = "shard"
    opt_in: ClassVar[bool] = True
    accelerate_env: ClassVar[dict[str, str]] = {
        "ACCELERATE_USE_SHARD": "*",
        "SHARD_SIZE": "size",
        "SHARD_OFFLOAD": "offload",
    }
    size: int = handler_field(1, doc="size", ge=1)
    offload: bool = handler_field(False, doc="offload")

    def plan(self, state: Any) -> Any:
        from accelkw_core.plugin import Plan

        return Plan(self.name).note(f"size {self.size}")


def settings(env: Mapping[str, str], *handlers: Any, **kw: Any) -> Any:
    return resolve_settings(handlers, env=env, registry=rh.registry_of(ShardKwargs), **kw)


# -- the core's variables ---------------------------------------------------------------------


def test_mixed_precision_is_the_default_that_code_and_accelkw_variables_override(
    tmp_path: Path,
) -> None:
    got = settings({"ACCELERATE_MIXED_PRECISION": "BF16"})
    assert got.mixed_precision == "bf16"
    assert got.accelerator_sources["mixed_precision"] == "env ACCELERATE_MIXED_PRECISION"
    assert (
        settings({"ACCELERATE_MIXED_PRECISION": "bf16"}, mixed_precision="fp16").mixed_precision
        == "fp16"
    )
    both = {"ACCELERATE_MIXED_PRECISION": "bf16", "ACCELKW_MIXED_PRECISION": "fp16"}
    assert settings(both).mixed_precision == "fp16"
    # Above the config file, as every environment variable is.
    (tmp_path / "accelkw.toml").write_text('[accelerator]\nmixed_precision = "fp16"\n')
    assert settings({"ACCELERATE_MIXED_PRECISION": "bf16"}).mixed_precision == "bf16"
    with pytest.raises(ConfigError, match=r"ACCELERATE_MIXED_PRECISION.*'fp4'"):
        settings({"ACCELERATE_MIXED_PRECISION": "fp4"})
    # fp8 is a mode like the others: whether a handler trains in it is the composition's concern.
    assert settings({"ACCELERATE_MIXED_PRECISION": "fp8"}).mixed_precision == "fp8"


def test_use_cpu_true_runs_on_the_cpu_even_when_code_says_cpu_false() -> None:
    # Accelerate's meaning: `accelerate launch --cpu` reaches scripts that pass cpu=args.cpu.
    assert settings({"ACCELERATE_USE_CPU": "True"}, cpu=False).cpu is True
    assert settings({"ACCELERATE_USE_CPU": "False"}).cpu is False
    assert settings({"ACCELERATE_USE_CPU": "false"}, cpu=True).cpu is True
    assert settings({"ACCELERATE_TORCH_DEVICE": "cpu"}).cpu is True  # Ray Train sets it
    with pytest.raises(ConfigError, match=r"environment variable ACCELERATE_USE_CPU"):
        settings({"ACCELERATE_USE_CPU": "maybe"})


def test_a_torch_device_other_than_where_accelkw_places_the_process_is_refused() -> None:
    assert settings({"ACCELERATE_TORCH_DEVICE": "cuda:1", "LOCAL_RANK": "1"}).cpu is False
    with pytest.raises(ConfigError) as err:
        settings({"ACCELERATE_TORCH_DEVICE": "cuda:3", "LOCAL_RANK": "0"})
    assert "ACCELERATE_TORCH_DEVICE" in str(err.value) and "CUDA_VISIBLE_DEVICES" in str(err.value)


REFUSED_VARIABLES = [v for v, spec in CORE_VARIABLES.items() if spec.action == REFUSED]


@pytest.mark.parametrize("variable", REFUSED_VARIABLES)
def test_each_refused_variable_stops_the_run_in_one_line_naming_it(variable: str) -> None:
    with pytest.raises(ConfigError) as err:
        settings({variable: "true"})
    message = str(err.value)
    assert "\n" not in message and variable in message
    assert CORE_VARIABLES[variable].accelkw in message
    if CORE_VARIABLES[variable].off == "flag":
        settings({variable: "false"})  # asks for nothing: no error


def test_the_accelerator_refuses_deepspeed_before_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelkw_core import Accelerator

    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ConfigError, match=r"ACCELERATE_USE_DEEPSPEED.*DeepSpeed is out of scope"):
        Accelerator(registry=rh.registry_of())


# -- a handler's own variables ---------------------------------------------------------------


def test_a_switch_requests_an_opt_in_handler_and_its_variables_fill_the_fields() -> None:
    off = settings({"SHARD_SIZE": "4"})
    assert off.handler("shard") is None  # without its switch, as in Accelerate: nothing
    on = settings({"ACCELERATE_USE_SHARD": "true", "SHARD_SIZE": "4", "SHARD_OFFLOAD": "yes"})
    shard = on.handler("shard")
    assert shard is not None and shard.handler.size == 4 and shard.handler.offload is True
    assert shard.source("size") == "env SHARD_SIZE"


def test_code_then_accelkw_variables_win_over_accelerate_variables() -> None:
    env = {"ACCELERATE_USE_SHARD": "1", "SHARD_SIZE": "4", "SHARD_OFFLOAD": "1"}
    coded = settings(env, ShardKwargs(size=2)).handler("shard")
    assert coded is not None and coded.handler.size == 2 and coded.handler.offload is True
    mine = settings({**env, "ACCELKW_SHARD__SIZE": "3"}).handler("shard")
    assert mine is not None and mine.handler.size == 3
    assert mine.source("size") == "env ACCELKW_SHARD__SIZE"


def test_a_bad_value_names_the_variable_that_gave_it() -> None:
    with pytest.raises(ConfigError) as err:
        settings({"ACCELERATE_USE_SHARD": "true", "SHARD_SIZE": "0"})
    assert "environment variable SHARD_SIZE" in str(err.value) and "shard.size" in str(err.value)


def test_describe_says_what_became_of_every_accelerate_variable() -> None:
    env = {
        "ACCELERATE_MIXED_PRECISION": "bf16",
        "ACCELERATE_USE_DEEPSPEED": "true",
        "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
        "ACCELERATE_LOG_LEVEL": "info",
        "ACCELERATE_USE_SHARD": "true",
        "SHARD_SIZE": "4",
        "ACCELERATE_NOT_A_THING": "1",
        "PATH": "/bin",
    }
    found = {f.variable: f for f in describe_accelerate_env(env, {"shard": ShardKwargs})}
    assert "PATH" not in found
    assert found["ACCELERATE_MIXED_PRECISION"].action == HONOURED
    assert found["ACCELERATE_USE_DEEPSPEED"].action == REFUSED
    assert found["ACCELERATE_DEEPSPEED_ZERO_STAGE"].action == UNUSED
    assert found["ACCELERATE_LOG_LEVEL"].action == UNUSED
    assert found["ACCELERATE_USE_SHARD"].what == "asks for the 'shard' handler"
    assert found["SHARD_SIZE"].action == HONOURED and "shard.size" in found["SHARD_SIZE"].what
    assert "not a variable Accelerate 1.15 reads" in found["ACCELERATE_NOT_A_THING"].what


# -- the built-ins' variables -----------------------------------------------------------------


def builtins_settings(env: Mapping[str, str], *classes: type, **kw: Any) -> Any:
    return resolve_settings((), env=env, registry=rh.registry_of(*classes), **kw)


def test_fsdp_variables_as_accelerate_launch_sets_them() -> None:
    from accelkw_ddp import DistributedDataParallelKwargs
    from accelkw_fsdp import FullyShardedDataParallelPlugin

    classes = (FullyShardedDataParallelPlugin, DistributedDataParallelKwargs)
    env = {
        "ACCELERATE_USE_FSDP": "true",
        "FSDP_VERSION": "2",
        "FSDP_OFFLOAD_PARAMS": "false",
        "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT",
        "FSDP_ACTIVATION_CHECKPOINTING": "true",
        # Read by Accelerate for FSDP1 or another wrap policy only: unused here too.
        "FSDP_SYNC_MODULE_STATES": "true",
        "FSDP_MIN_NUM_PARAMS": "100000000",
    }
    got = builtins_settings(env, *classes)
    fsdp = got.handler("fsdp")
    assert fsdp is not None and got.handler("ddp") is None  # FSDP leaves the default DDP out
    plugin = fsdp.handler
    assert plugin.fsdp_version == 2 and plugin.cpu_offload is False
    assert plugin.activation_checkpointing is True
    assert plugin.sync_module_states is None and plugin.min_num_params is None
    assert fsdp.source("fsdp_version") == "env FSDP_VERSION"
    # FSDP_* without the switch: Accelerate builds no plugin, and neither does accelkw.
    assert builtins_settings({"FSDP_VERSION": "2"}, *classes).handler("fsdp") is None
    # Accelerate's FSDP1 default is refused by the FSDP2-only plugin, naming the variable.
    with pytest.raises(ConfigError, match=r"FSDP_VERSION"):
        builtins_settings({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "1"}, *classes)


def test_dynamo_variables_compile_only_when_the_backend_is_not_no() -> None:
    from accelkw_compile import TorchDynamoPlugin

    launched = {
        "ACCELERATE_DYNAMO_BACKEND": "NO",
        "ACCELERATE_DYNAMO_MODE": "default",
        "ACCELERATE_DYNAMO_USE_FULLGRAPH": "False",
    }
    assert builtins_settings(launched, TorchDynamoPlugin).handler("compile") is None
    got = builtins_settings({**launched, "ACCELERATE_DYNAMO_BACKEND": "EAGER"}, TorchDynamoPlugin)
    compiled = got.handler("compile")
    assert compiled is not None and compiled.handler.backend_name == "eager"
    assert compiled.handler.fullgraph is False and compiled.handler.mode == "default"


def test_gradient_accumulation_steps_and_a_missing_plugin_named() -> None:
    from accelkw_grad_accum import GradientAccumulationPlugin

    env = {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}
    accum = builtins_settings(env, GradientAccumulationPlugin).handler("grad_accum")
    assert accum is not None and accum.handler.num_steps == 4
    # No installed handler reads the variable: the run stops, naming what to install.
    with pytest.raises(ConfigError, match=r"pip install accelkw-grad-accum"):
        builtins_settings(env)
    with pytest.raises(ConfigError, match=r"ACCELERATE_USE_FSDP.*pip install accelkw-fsdp"):
        builtins_settings({"ACCELERATE_USE_FSDP": "true"})
    builtins_settings({"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "1"})  # asks for nothing


def test_accelkw_env_lists_the_accelerate_variables_and_what_became_of_each(
    tmp_path: Path,
) -> None:
    from tests.test_accelerate_launch import accelkw_cli

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "ACCELERATE_"))}
    env.update(
        ACCELERATE_MIXED_PRECISION="bf16",
        ACCELERATE_USE_FSDP="true",
        FSDP_VERSION="2",
        ACCELERATE_DEEPSPEED_ZERO_STAGE="2",
    )
    out = accelkw_cli("env", "--json", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)["accelerate variables"]
    assert listed["ACCELERATE_MIXED_PRECISION"].startswith("'bf16': honoured")
    assert listed["ACCELERATE_USE_FSDP"] == "'true': honoured: asks for the 'fsdp' handler"
    assert "fsdp.fsdp_version" in listed["FSDP_VERSION"]
    assert listed["ACCELERATE_DEEPSPEED_ZERO_STAGE"].startswith("'2': unused")

"""``accelerate launch``'s flags and ``accelerate config``'s YAML on ``accelkw launch`` (issue 28).

The same two-process script, with only its imports changed from Accelerate's, runs in bf16 on
both ranks when launched by the real ``accelerate launch --multi_gpu --num_processes 2
--mixed_precision bf16`` (on a CPU machine too: Accelerate's multi-GPU launcher is torchrun,
and each worker falls back to the CPU), by ``accelkw launch --num_processes 2
--mixed_precision bf16``, and by ``accelkw launch --config_file`` with the YAML ``accelerate
config`` writes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from accelkw_core.cli.launch_cmd import PASSTHROUGH, apply_accelerate_options, build_command
from accelkw_core.cli.main import build_parser
from accelkw_core.config.accelerate_launch import FLAGS, REFUSED, SWITCH, translate
from accelkw_core.config.accelerate_yaml import read_accelerate_config
from accelkw_core.errors import ConfigError

TIMEOUT = 240

SCRIPT = """
    import json, sys
    import torch
    from accelkw_core import Accelerator  # was: from accelerate import Accelerator

    accelerator = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    seen = []
    model[0].register_forward_hook(lambda m, i, o: seen.append(str(o.dtype)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    loss = model(torch.ones(2, 4, device=accelerator.device)).sum()
    accelerator.backward(loss)
    optimizer.step()
    with open(f"{sys.argv[1]}/rank{accelerator.process_index}.json", "w") as fh:
        json.dump({"world": accelerator.num_processes, "mixed_precision":
                   accelerator.mixed_precision, "inner_dtype": seen[0],
                   "device": str(accelerator.device)}, fh)
    accelerator.end_training()
"""


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "ACCELERATE_"))}
    env.update(extra)
    return env


def accelkw_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    """``python -m accelkw_core ARGS`` in ``cwd``, with no ACCELKW_*/ACCELERATE_* variables."""
    return subprocess.run(
        [sys.executable, "-m", "accelkw_core", *args],
        cwd=cwd,
        env=env if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def run_and_read(cmd: list[str], tmp_path: Path) -> list[dict[str, Any]]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = subprocess.run(
        [*cmd, str(script), str(out_dir)],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in (0, 1)]


def assert_bf16_on_both_ranks(ranks: list[dict[str, Any]]) -> None:
    for seen in ranks:
        assert seen["world"] == 2 and seen["mixed_precision"] == "bf16", seen
        assert seen["inner_dtype"] == "torch.bfloat16", seen  # the forward ran under autocast


def write_accelerate_yaml(path: Path, **fields: Any) -> None:
    """The YAML `accelerate config` writes: its own ClusterConfig, saved as it saves it."""
    from accelerate.commands.config.config_args import ClusterConfig

    base: dict[str, Any] = dict(
        compute_environment="LOCAL_MACHINE",
        distributed_type="MULTI_GPU",
        mixed_precision="bf16",
        use_cpu=False,
        debug=False,
        num_processes=2,
        machine_rank=0,
        num_machines=1,
        gpu_ids="all",
        rdzv_backend="static",
        same_network=True,
        main_training_function="main",
        enable_cpu_affinity=False,
        downcast_bf16="no",
        tpu_use_cluster=False,
        tpu_use_sudo=False,
        tpu_env=[],
    )
    base.update(fields)
    ClusterConfig(**base).to_yaml_file(str(path))


# -- the must-show runs -----------------------------------------------------------------------


def test_the_real_accelerate_launch_multi_gpu_bf16_runs_bf16_under_accelkw(
    tmp_path: Path,
) -> None:
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    cmd = [accelerate, "launch", "--multi_gpu", "--num_processes", "2"]
    ranks = run_and_read([*cmd, "--mixed_precision", "bf16"], tmp_path)
    assert_bf16_on_both_ranks(ranks)


def test_accelkw_launch_with_accelerate_flags_runs_bf16_on_both_ranks(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "accelkw_core", "launch", "--num_processes", "2"]
    assert_bf16_on_both_ranks(run_and_read([*cmd, "--mixed_precision", "bf16"], tmp_path))


def test_accelkw_launch_with_the_yaml_accelerate_config_writes(tmp_path: Path) -> None:
    write_accelerate_yaml(tmp_path / "default_config.yaml")
    cmd = [sys.executable, "-m", "accelkw_core", "launch", "--config_file", "default_config.yaml"]
    assert_bf16_on_both_ranks(run_and_read(cmd, tmp_path))


# -- the flags ------------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(["launch", *argv, "train.py"])
    for key in PASSTHROUGH:
        if not hasattr(args, key):
            setattr(args, key, None)
    return args


# A value Accelerate's launcher takes for each --fp8_* flag that has choices.
FP8_VALUES = {
    "fp8_backend": "ao",
    "fp8_format": "E4M3",
    "fp8_amax_compute_algo": "max",
    "fp8_opt_level": "O1",
    "fp8_override_linear_precision": "true,false,true",
    "fp8_enable_fsdp_float8_all_gather": "false",
    "fp8_pad_inner_dim": "false",
}


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_every_accelerate_launch_flag_is_taken_and_honoured_or_refused_by_name(
    name: str, tmp_path: Path
) -> None:
    flag = FLAGS[name]
    if name == "config_file":
        return  # tested with a real file below
    value = {"tee": "3", "env": "A=1", "vm": "x", "num_machines": "1", **FP8_VALUES}.get(name, "2")
    argv = [f"--{name}"] if flag.takes == SWITCH else [f"--{name}", value]
    if name.startswith("fsdp_"):
        argv = ["--use_fsdp", *argv]
    if name.startswith("fp8_"):
        argv = ["--mixed_precision", "fp8", *argv]
    args = parse(*argv)
    assert args.script == "train.py"  # the flag took exactly its own arguments
    if flag.action == REFUSED:
        with pytest.raises(ConfigError) as err:
            apply_accelerate_options(args)
        assert f"launch.{name}" in str(err.value) and "\n" not in str(err.value)
    elif name != "mixed_precision":
        apply_accelerate_options(args)


def test_flags_become_torchrun_options_and_the_variables_accelerate_sets() -> None:
    got = translate(
        {
            "num_processes": 4,
            "num_machines": 2,
            "machine_rank": 1,
            "main_process_ip": "10.0.0.1",
            "main_process_port": 29500,
            "mixed_precision": "bf16",
            "cpu": True,
            "gradient_accumulation_steps": 2,
            "num_cpu_threads_per_process": 3,
            "dynamo_backend": "inductor",
            "dynamo_use_fullgraph": True,
            "use_fsdp": True,
            "fsdp_version": "2",
            "fsdp_transformer_layer_cls_to_wrap": "Block",
            "monitor_interval": "0.5",
        }
    )
    assert got.torchrun == {
        "nproc_per_node": "2",
        "nnodes": "2",
        "node_rank": "1",
        "rdzv_endpoint": "10.0.0.1:29500",
        "monitor_interval": "0.5",
    }
    assert got.env == {
        "ACCELERATE_MIXED_PRECISION": "bf16",
        "ACCELERATE_USE_CPU": "true",
        "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2",
        "OMP_NUM_THREADS": "3",
        "ACCELERATE_DYNAMO_BACKEND": "inductor",
        "ACCELERATE_DYNAMO_USE_FULLGRAPH": "True",
        "ACCELERATE_USE_FSDP": "true",
        "FSDP_VERSION": "2",
        "FSDP_TRANSFORMER_CLS_TO_WRAP": "Block",
    }
    same = translate(
        {"num_machines": 2, "main_process_ip": "h", "main_process_port": 1, "same_network": True}
    )
    assert same.torchrun["master_addr"] == "h" and same.torchrun["master_port"] == "1"
    with pytest.raises(ConfigError, match=r"launch.fsdp_version.*--use_fsdp"):
        translate({"fsdp_version": "2"})
    with pytest.raises(ConfigError, match=r"launch.num_processes.*multiple of num_machines"):
        translate(
            {"num_processes": 3, "num_machines": 2, "main_process_ip": "h", "main_process_port": 1}
        )
    with pytest.raises(ConfigError, match=r"launch.mixed_precision.*'fp4'"):
        translate({"mixed_precision": "fp4"})
    with pytest.raises(
        ConfigError, match=r"launch.fp8_backend.*together with --mixed_precision fp8"
    ):
        translate({"mixed_precision": "bf16", "fp8_backend": "ao"})
    with pytest.raises(ConfigError, match=r"launch.fp8_backend: got 'tf', expected one of ao, te"):
        translate({"mixed_precision": "fp8", "fp8_backend": "tf"})


def test_fp8_flags_become_accelerates_fp8_variables() -> None:
    got = translate(
        {
            "mixed_precision": "fp8",
            "fp8_backend": "ao",
            "fp8_pad_inner_dim": "false",
            "fp8_margin": "1",
            "fp8_override_linear_precision": "true,false,true",
            "fp8_use_autocast_during_eval": True,
        }
    )
    assert got.env == {
        "ACCELERATE_MIXED_PRECISION": "fp8",
        "ACCELERATE_FP8_BACKEND": "ao",
        "ACCELERATE_FP8_PAD_INNER_DIM": "false",
        "ACCELERATE_FP8_MARGIN": "1",
        "ACCELERATE_FP8_OVERRIDE_FPROP": "True",
        "ACCELERATE_FP8_OVERRIDE_DGRAD": "False",
        "ACCELERATE_FP8_OVERRIDE_WGRAD": "True",
        "ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL": "True",
    }


def test_one_machine_lets_torchrun_pick_the_port_and_flags_must_agree_with_accelkw_options() -> (
    None
):
    cmd, env = build_command(
        parse("--num_processes", "2", "--mixed_precision", "bf16"), "t.py", [], env={}
    )
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2"
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "127.0.0.1:0"
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    cmd, _ = build_command(
        parse("--num_processes", "2", "--main_process_port", "1234"), "t.py", [], env={}
    )
    assert cmd[cmd.index("--master-port") + 1] == "1234"
    with pytest.raises(ConfigError, match=r"nproc_per_node"):
        build_command(parse("--num_processes", "4", "--nproc-per-node", "2"), "t.py", [], env={})


# -- accelerate config's YAML ---------------------------------------------------------------


def test_the_yaml_is_read_key_by_key_and_the_command_line_wins(tmp_path: Path) -> None:
    path = tmp_path / "fsdp.yaml"
    write_accelerate_yaml(
        path,
        distributed_type="FSDP",
        fsdp_config={
            "fsdp_version": 2,
            "fsdp_offload_params": False,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        },
        dynamo_config={"dynamo_backend": "EAGER"},
    )
    read = read_accelerate_config(path)
    assert read.flags["use_fsdp"] is True and read.flags["fsdp_version"] == 2
    assert read.flags["dynamo_backend"] == "EAGER" and read.flags["mixed_precision"] == "bf16"
    assert "main_training_function" in read.unused and "rdzv_backend" not in read.shared
    args = parse("--config_file", str(path), "--mixed_precision", "fp16")
    env = apply_accelerate_options(args)
    assert env["ACCELERATE_MIXED_PRECISION"] == "fp16" and env["FSDP_VERSION"] == "2"
    assert args.nproc_per_node == "2"


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"distributed_type": "DEEPSPEED"}, "distributed_type"),
        ({"deepspeed_config": {"zero_stage": 2}}, "deepspeed_config"),
        ({}, "compute_environment"),
        ({"downcast_bf16": "yes"}, "downcast_bf16"),
        ({"fsdp_config": {"fsdp_not_a_key": 1}}, "fsdp_config.fsdp_not_a_key"),
    ],
)
def test_a_refused_key_is_named_with_why(tmp_path: Path, fields: dict[str, Any], key: str) -> None:
    path = tmp_path / "c.yaml"
    write_accelerate_yaml(path, **fields)
    if key == "compute_environment":  # SageMaker's own config class writes other keys too
        path.write_text(path.read_text().replace("LOCAL_MACHINE", "AMAZON_SAGEMAKER"))
    with pytest.raises(ConfigError) as err:
        read_accelerate_config(path)
    assert f"accelerate_config.{key}" in str(err.value)


def test_config_import_writes_toml_and_says_what_it_mapped_and_refused(tmp_path: Path) -> None:
    import tomllib

    path = tmp_path / "c.yaml"
    write_accelerate_yaml(
        path,
        distributed_type="FSDP",
        fsdp_config={
            "fsdp_version": 2,
            "fsdp_offload_params": True,
            "fsdp_sync_module_states": True,
        },
        deepspeed_config={"zero_stage": 2},
    )
    out = accelkw_cli("config", "import", str(path), "-o", "accelkw.toml", cwd=tmp_path)
    assert out.returncode == 1  # a key was refused; the rest is still converted
    assert "refused: " in out.stdout and "deepspeed_config" in out.stdout
    assert "mapped: mixed_precision -> [accelerator] mixed_precision = 'bf16'" in out.stdout
    assert "[handlers.fsdp] fsdp_version = 2" in out.stdout
    assert "unused: fsdp_config.fsdp_sync_module_states: read for FSDP1 only" in out.stdout
    assert "launch with: accelkw launch --nproc-per-node 2 SCRIPT" in out.stdout
    toml = tomllib.loads((tmp_path / "accelkw.toml").read_text())
    assert toml == {
        "accelerator": {"mixed_precision": "bf16"},
        "handlers": {"fsdp": {"fsdp_version": 2, "cpu_offload": True}},
    }
    # The TOML is an accelkw config that checks clean.
    check = accelkw_cli("config", "check", "accelkw.toml", cwd=tmp_path)
    assert check.returncode == 0, check.stderr


def test_nothing_is_read_from_accelerates_default_config_location(tmp_path: Path) -> None:
    home = tmp_path / "home"
    default = home / ".cache" / "huggingface" / "accelerate" / "default_config.yaml"
    default.parent.mkdir(parents=True)
    write_accelerate_yaml(default, mixed_precision="fp16")
    env = clean_env(HOME=str(home), HF_HOME=str(home / ".cache" / "huggingface"))
    out = accelkw_cli("plan", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert "mixed_precision = 'no'" in out.stdout


def test_the_yaml_fp8_config_becomes_the_fp8_flags(tmp_path: Path) -> None:
    path = tmp_path / "default_config.yaml"
    path.write_text(
        "mixed_precision: fp8\n"
        "fp8_config:\n  backend: AO\n  pad_inner_dim: false\n  fp8_enable_fsdp_float8_all_gather: true\n"
    )
    read = read_accelerate_config(path)
    assert read.flags == {
        "mixed_precision": "fp8",
        "fp8_backend": "AO",
        "fp8_pad_inner_dim": False,
        "fp8_enable_fsdp_float8_all_gather": True,
    }
    env = translate(read.flags).env
    assert env["ACCELERATE_FP8_BACKEND"] == "AO"
    assert env["ACCELERATE_FP8_PAD_INNER_DIM"] == "false"  # a false value is still a value
    assert env["ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"] == "true"
    with pytest.raises(ConfigError, match=r"fp8_config.margn.*did you mean 'fp8_margin'"):
        path.write_text("fp8_config:\n  margn: 1\n")
        read_accelerate_config(path)

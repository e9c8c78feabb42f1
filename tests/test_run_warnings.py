"""What a run goes without is said out loud: a conflicting or broken plugin, mixed precision with
nothing to apply it, and the rendezvous and profiling a plan reports (issue 14 items 1, 2, 7).

These run the installed built-ins beside synthetic distributions in a fresh interpreter, as a
user's environment would be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_accelkw, run_python, write_dist

RIVAL_DDP = """
    from dataclasses import dataclass
    from accelkw_core.plugin import KwargsHandler, hookimpl

    @dataclass
    class RivalDDP(KwargsHandler):
        name = "ddp"

    @hookimpl
    def accelkw_register_handlers(register):
        register(RivalDDP)
"""

TWO_RANK_ACCELERATOR = """
    import json, warnings
    from accelkw_core import Accelerator
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc = Accelerator(cpu=True, mixed_precision={mp!r})
    print(json.dumps({{
        "warnings": [f"{{w.category.__name__}}: {{w.message}}" for w in caught],
        "handlers": list(acc.state.handlers),
    }}))
"""


def _rival(site: Path) -> None:
    write_dist(site, "acme-ddp", {"acme_ddp": "acme_ddp"}, {"acme_ddp.py": RIVAL_DDP})


def test_a_conflicting_ddp_is_a_loud_warning_with_the_fix_not_an_install_hint(
    site: Path,
) -> None:
    _rival(site)
    # World size 2 with no process group needed: the gap check runs on the composed state.
    env = {"WORLD_SIZE": "2", "RANK": "1", "ACCELKW_DISABLE_PLUGINS": "process_group"}
    out = run_python(TWO_RANK_ACCELERATOR.format(mp="no"), site=site, env=env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.splitlines()[-1])
    assert "ddp" not in data["handlers"]
    load = [w for w in data["warnings"] if w.startswith("PluginLoadWarning")]
    assert any("acme-ddp" in w and "accelkw-ddp" in w for w in load), data["warnings"]
    assert any("ACCELKW_DISABLE_PLUGINS=" in w for w in load)
    sync = next(w for w in data["warnings"] if "synchronises gradients" in w)
    assert "claimed by" in sync and "acme-ddp" in sync and "accelkw-ddp" in sync
    assert "pip install accelkw-ddp" not in sync
    group = next(w for w in data["warnings"] if "no torch.distributed process group" in w)
    assert "the 'process_group' handler is disabled (in the deny-list" in group


def test_plan_and_config_check_warn_about_the_conflict_too(site: Path) -> None:
    _rival(site)
    plan = run_accelkw(["plan", "--nproc-per-node", "2"], site=site)
    assert plan.returncode == 0, plan.stderr
    assert "acme-ddp" in plan.stderr and "in conflict" in plan.stderr
    assert "claimed by" in plan.stdout  # the gap line names the conflict, not an install
    check = run_accelkw(["config", "check"], site=site)
    assert "acme-ddp" in check.stderr and "in conflict" in check.stderr


def test_denying_one_of_the_two_ends_the_warning(site: Path) -> None:
    _rival(site)
    env = {"ACCELKW_DISABLE_PLUGINS": "acme-ddp"}
    out = run_python(TWO_RANK_ACCELERATOR.format(mp="no"), site=site, env=env)
    data = json.loads(out.stdout.splitlines()[-1])
    assert "ddp" in data["handlers"]
    assert not any("PluginLoadWarning" in w for w in data["warnings"]), data["warnings"]


def test_mixed_precision_without_autocast_or_scaler_plugins_warns_with_the_pip_lines() -> None:
    env = {"ACCELKW_PLUGINS": "ddp,process_group"}
    out = run_python(TWO_RANK_ACCELERATOR.format(mp="fp16"), env=env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.splitlines()[-1])
    missing = [w for w in data["warnings"] if w.startswith("MissingPluginWarning")]
    allow = "is disabled (not in the allow-list ACCELKW_PLUGINS=ddp,process_group)"
    assert any(
        "mixed_precision='fp16' has no effect" in w and f"'autocast' handler {allow}" in w
        for w in missing
    ), data["warnings"]
    assert any(
        "without loss scaling" in w and f"'grad_scaler' handler {allow}" in w for w in missing
    )


def test_with_the_plugins_not_installed_the_warnings_give_the_pip_lines() -> None:
    from accelkw_core.runtime.composing.missing_capabilities import find_gaps

    gaps = find_gaps(1, set(), installed={}, disabled={}, mixed_precision="fp16")
    assert gaps == [
        "mixed_precision='fp16' has no effect: no handler autocasts the forward passes, so the "
        "run trains in float32; no installed handler provides it (pip install accelkw-autocast)",
        "mixed_precision='fp16' without loss scaling: small gradients may underflow to zero in "
        "float16; no installed handler provides it (pip install accelkw-grad-scaler)",
    ]
    assert (
        find_gaps(1, {"mixed_precision"}, installed={}, disabled={}, mixed_precision="bf16") == []
    )


def test_plan_shows_the_rendezvous_a_launch_will_use() -> None:
    out = run_accelkw(["plan", "--nproc-per-node", "2"], env={"MASTER_PORT": ""})
    assert out.returncode == 0, out.stderr
    assert "init_method env:// (MASTER_ADDR=127.0.0.1, MASTER_PORT=<a free port" in out.stdout
    assert "tcp://127.0.0.1:29500" not in out.stdout


def test_plan_says_every_rank_profiles(tmp_path: Path) -> None:
    (tmp_path / "accelkw.toml").write_text(
        f'[handlers.profile]\noutput_trace_dir = "{tmp_path / "traces"}"\n'
    )
    out = run_accelkw(["plan", "--nproc-per-node", "2", "--config", str(tmp_path / "accelkw.toml")])
    assert out.returncode == 0, out.stderr
    assert "every rank (0-1) profiles in profile()" in out.stdout
    assert "(profile_0.json, profile_1.json)" in out.stdout


def test_a_bad_world_size_is_one_line() -> None:
    out = run_accelkw(["plan"], env={"WORLD_SIZE": "abc"})
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "accelkw: error: environment variable WORLD_SIZE: environment.WORLD_SIZE: got 'abc', "
        "expected an integer >= 1"
    ]


def test_fp8_without_a_handler_that_trains_in_it_stops_in_one_line() -> None:
    from accelkw_core import Accelerator, ConfigError
    from accelkw_core.runtime.composing.missing_capabilities import precision_refusal
    from accelkw_core.testing import isolated_registry

    assert precision_refusal("fp8", set(), installed={}, disabled={}) == (
        "an installed handler that trains in fp8: pip install accelkw-fp8"
    )
    assert precision_refusal("fp8", {"fp8"}, installed={}, disabled={}) is None
    assert precision_refusal("bf16", set(), installed={}, disabled={}) is None
    with pytest.raises(ConfigError) as err:
        Accelerator(cpu=True, mixed_precision="fp8", registry=isolated_registry([]))
    text = str(err.value)
    assert "\n" not in text and text == (
        "accelerator.mixed_precision: got 'fp8', expected an installed handler that trains in "
        "fp8: pip install accelkw-fp8"
    )


def test_plan_and_the_disabled_fp8_plugin_say_why_fp8_would_stop() -> None:
    out = run_accelkw(["plan", "--mixed_precision", "fp8"], env={"ACCELKW_DISABLE_PLUGINS": "fp8"})
    assert out.returncode == 0, out.stderr
    assert "the run would stop: accelerator.mixed_precision: got 'fp8'" in out.stdout
    assert "the 'ao_recipe' handler is disabled" in out.stdout

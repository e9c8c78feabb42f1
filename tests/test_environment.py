"""The ``ACCELKW_*`` environment: one parser for every switch, typos warned about with a close
match (errors under ``--strict``), and a listing that says when autoloading is off."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from accelkw_core.config.settings import resolve_settings
from accelkw_core.contract.handler import KwargsHandler, handler_field
from accelkw_core.discovery.entry_points import PluginEntryPoint
from accelkw_core.discovery.hookspecs import hookimpl
from accelkw_core.discovery.listing_cache import cache_dir
from accelkw_core.discovery.registry import Registry
from accelkw_core.errors import ConfigError, ConfigWarning
from accelkw_core.facts.environment import env_flag, unknown_variables
from tests.conftest import good_plugin, run_accelkw, write_dist

SWITCHES = [
    "ACCELKW_CPU",
    "ACCELKW_ALLOW_IMPORTS",
    "ACCELKW_DISABLE_PLUGIN_AUTOLOAD",
    "ACCELKW_NO_CACHE",
]


@pytest.mark.parametrize("word", ["1", "true", "YES", " on ", "0", "False", "no", "OFF"])
def test_every_switch_accepts_the_same_words(word: str) -> None:
    expected = word.strip().lower() in ("1", "true", "yes", "on")
    for var in SWITCHES:
        assert env_flag({var: word}, var) is expected
    assert (
        env_flag({}, "ACCELKW_CPU") is None
        and env_flag({"ACCELKW_CPU": " "}, "ACCELKW_CPU") is None
    )


def test_a_bad_switch_value_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    for var in SWITCHES:
        with pytest.raises(ConfigError, match=rf"environment variable {var}: .*got 'maybe'"):
            env_flag({var: "maybe"}, var)
    # Each place that reads a switch goes through the one parser.
    with pytest.raises(ConfigError, match="ACCELKW_DISABLE_PLUGIN_AUTOLOAD"):
        Registry(env={"ACCELKW_DISABLE_PLUGIN_AUTOLOAD": "maybe"})
    with pytest.raises(ConfigError, match="ACCELKW_NO_CACHE"):
        cache_dir({"ACCELKW_NO_CACHE": "maybe"})
    assert cache_dir({"ACCELKW_NO_CACHE": "on"}) is None
    assert Registry(env={"ACCELKW_DISABLE_PLUGIN_AUTOLOAD": "on"}).autoload is False
    for var in ("ACCELKW_CPU", "ACCELKW_ALLOW_IMPORTS"):
        with pytest.raises(ConfigError, match=var):
            resolve_settings(env={var: "maybe"}, registry=Registry(autoload=False), cwd=tmp_path)


@dataclass
class TinyKwargs(KwargsHandler):
    name = "tiny"
    bucket_cap_mb: int = handler_field(25)


class TinyPlugin:
    @hookimpl
    def accelkw_register_handlers(self, register: object) -> None:
        register(TinyKwargs)  # type: ignore[operator]


def test_unknown_variables_are_warned_about_with_the_closest_name(tmp_path: Path) -> None:
    found = unknown_variables(
        {"ACCELKW_MIXED_PRECISON": "fp16", "ACCELKW_TINY_BUCKET_CAP_MB": "1", "ACCELKW_CPU": "1"},
        {"tiny": ["bucket_cap_mb"]},
    )
    assert found == [
        ("ACCELKW_MIXED_PRECISON", "ACCELKW_MIXED_PRECISION"),
        ("ACCELKW_TINY_BUCKET_CAP_MB", "ACCELKW_TINY__BUCKET_CAP_MB"),
    ]
    registry = Registry(autoload=False)
    registry.register_plugin(TinyPlugin())
    env = {"ACCELKW_TINY_BUCKET_CAP_MB": "1", "ACCELKW_ZZZ": "1", "PATH": "/bin"}
    with pytest.warns(ConfigWarning) as caught:
        settings = resolve_settings(env=env, registry=registry, cwd=tmp_path)
    messages = sorted(str(w.message) for w in caught)
    assert messages[0] == (
        "environment variable ACCELKW_TINY_BUCKET_CAP_MB is not an accelkw setting and is "
        "ignored (did you mean ACCELKW_TINY__BUCKET_CAP_MB?)"
    )
    assert messages[1].startswith("environment variable ACCELKW_ZZZ is not an accelkw setting")
    assert "ACCELKW_<HANDLER>__<FIELD>" in messages[1]
    tiny = settings.handler("tiny")
    assert tiny is not None and tiny.handler.bucket_cap_mb == 25  # ignored, as the warning says
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the right spelling is no warning
        resolve_settings(
            env={"ACCELKW_TINY__BUCKET_CAP_MB": "1", "ACCELKW_MIXED_PRECISION": "no"},
            registry=registry,
            cwd=tmp_path,
        )


def entry(name: str, dist: str) -> PluginEntryPoint:
    return PluginEntryPoint(name, f"{name}_mod", dist, "1.0")


def test_unknown_names_in_the_allow_and_deny_lists_get_a_close_match() -> None:
    found = [entry("ddp", "accelkw-ddp"), entry("process_group", "accelkw-process-group")]
    reg = Registry(
        env={"ACCELKW_PLUGINS": "ddp,proces_group", "ACCELKW_DISABLE_PLUGINS": "nope"},
        autoload=False,
    )
    assert reg.unknown_names(found) == [
        ("ACCELKW_PLUGINS", "proces_group", "process_group"),
        ("ACCELKW_DISABLE_PLUGINS", "nope", None),
    ]
    # A distribution name, with either separator, is a known name too.
    reg = Registry(env={"ACCELKW_PLUGINS": "accelkw_ddp,Accelkw-Process-Group"}, autoload=False)
    assert reg.unknown_names(found) == []


def test_plugins_list_warns_about_a_misspelt_plugin_and_fails_under_strict(site: Path) -> None:
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": good_plugin("gizmo")})
    env = {"ACCELKW_PLUGINS": "gizmo,gizmmo", "ACCELKW_DISABLE_PLUGINS": "nope"}
    plain = run_accelkw(["plugins", "list"], site=site, env=env)
    assert plain.returncode == 0, plain.stderr
    assert (
        "accelkw: warning: ACCELKW_PLUGINS names 'gizmmo', which no installed plugin or "
        "distribution has (did you mean 'gizmo'?)" in plain.stderr
    )
    assert "accelkw: warning: ACCELKW_DISABLE_PLUGINS names 'nope'" in plain.stderr
    assert "Traceback" not in plain.stderr
    strict = run_accelkw(["plugins", "list", "--strict"], site=site, env=env)
    assert strict.returncode == 1
    ok = run_accelkw(["plugins", "list", "--strict"], site=site, env={"ACCELKW_PLUGINS": "gizmo"})
    assert ok.returncode == 0, ok.stderr


def test_config_check_warns_about_unknown_variables_and_fails_under_strict(tmp_path: Path) -> None:
    env = {"ACCELKW_MIXED_PRECISON": "fp16", "ACCELKW_DISABLE_PLUGIN_AUTOLOAD": "1"}
    plain = run_accelkw(["config", "check"], env=env)
    assert plain.returncode == 0, plain.stderr
    assert (
        "accelkw: warning: environment variable ACCELKW_MIXED_PRECISON is not an accelkw "
        "setting and is ignored (did you mean ACCELKW_MIXED_PRECISION?)" in plain.stderr
    )
    assert plain.stdout.splitlines()[-1] == "ok: 0 error(s), 1 warning(s)"
    strict = run_accelkw(["config", "check", "--strict"], env=env)
    assert strict.returncode == 1
    assert strict.stdout.splitlines()[-1].startswith("invalid: 0 error(s), 1 warning(s)")
    data = run_accelkw(["config", "check", "--strict", "--json"], env=env).json()
    assert data["ok"] is False and "ACCELKW_MIXED_PRECISON" in data["warnings"][0]
    bad = run_accelkw(["config", "check"], env={"ACCELKW_DISABLE_PLUGIN_AUTOLOAD": "maybe"})
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        "accelkw: error: environment variable ACCELKW_DISABLE_PLUGIN_AUTOLOAD: "
        "plugins.disable_autoload: got 'maybe', expected a boolean (true/false, 1/0, yes/no, on/off)"
    ]


def test_plugins_list_with_autoload_off_says_so(site: Path) -> None:
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": good_plugin("gizmo")})
    out = run_accelkw(["plugins", "list"], site=site, env={"ACCELKW_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert out.returncode == 0, out.stderr
    assert "no accelkw plugins installed" not in out.stdout
    assert "entry-point autoloading is off (ACCELKW_DISABLE_PLUGIN_AUTOLOAD)" in out.stdout

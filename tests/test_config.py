"""Config files and environment overrides: lookup, precedence per field, and every bad value."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime_helpers as rh

from accelkw_core import Accelerator, ComposeError, ConfigError, ConfigFileError
from accelkw_core.config.settings import Settings, resolve_settings


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rh.clean_env(monkeypatch, tmp_path)


def resolve(
    tmp_path: Path, toml: str | None = None, env: dict[str, str] | None = None, **kw: Any
) -> Settings:
    if toml is not None:
        (tmp_path / "accelkw.toml").write_text(toml)
    return resolve_settings(env=env or {}, registry=rh.registry(), cwd=tmp_path, **kw)


def knobs(settings: Settings) -> Any:
    hs = settings.handler("knobs")
    assert hs is not None
    return hs


# -- lookup ----------------------------------------------------------------------------------


def test_no_config_gives_defaults_for_every_installed_handler(tmp_path: Path) -> None:
    s = resolve(tmp_path)
    assert (s.mixed_precision, s.cpu) == ("no", False)
    assert [h.name for h in s.handlers] == ["cast", "knobs", "process_group", "ddp", "scale"]
    assert all(h.sources == {} for h in s.handlers)
    assert s.config.path is None


def test_lookup_order_explicit_then_env_then_accelkw_toml_then_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.accelkw.handlers.knobs]\nlevel = 1\n")
    assert knobs(resolve(tmp_path)).handler.level == 1
    assert "tool.accelkw.handlers.knobs" in knobs(resolve(tmp_path)).source("level")
    (tmp_path / "accelkw.toml").write_text("[handlers.knobs]\nlevel = 2\n")
    assert knobs(resolve(tmp_path)).handler.level == 2
    (tmp_path / "env.toml").write_text("[handlers.knobs]\nlevel = 3\n")
    assert knobs(resolve(tmp_path, env={"ACCELKW_CONFIG": "env.toml"})).handler.level == 3
    (tmp_path / "given.toml").write_text("[handlers.knobs]\nlevel = 4\n")
    s = resolve(tmp_path, env={"ACCELKW_CONFIG": "env.toml"}, config="given.toml")
    assert knobs(s).handler.level == 4


def test_a_pyproject_without_tool_accelkw_is_not_a_config(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n[tool.other]\na = 1\n")
    assert resolve(tmp_path).config.path is None


def test_a_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match=r"nope.toml: no such config file \(the config"):
        resolve(tmp_path, config="nope.toml")
    with pytest.raises(ConfigFileError, match=r"gone.toml: no such config file \(ACCELKW_CONFIG"):
        resolve(tmp_path, env={"ACCELKW_CONFIG": "gone.toml"})


# -- precedence ------------------------------------------------------------------------------


TOML = """
[accelerator]
mixed_precision = "fp16"
cpu = true

[handlers.knobs]
level = 2
ratio = 0.25
mode = "safe"
tags = ["a", "b"]
"""


def test_precedence_is_code_then_env_then_file_then_default_per_field(tmp_path: Path) -> None:
    env = {"ACCELKW_KNOBS__RATIO": "0.75", "ACCELKW_KNOBS__MODE": "fast"}
    code = rh.KnobsKwargs(mode="safe", verbose=False)  # verbose equals its default
    s = resolve(tmp_path, TOML, env, handlers=[code])
    hs = knobs(s)
    h = hs.handler
    assert (h.level, h.ratio, h.mode, h.tags, h.verbose, h.window) == (
        2,
        0.75,
        "safe",
        ["a", "b"],
        False,
        None,
    )
    assert hs.source("level").startswith("file ") and "[handlers.knobs]" in hs.source("level")
    assert hs.source("ratio") == "env ACCELKW_KNOBS__RATIO"
    assert hs.source("mode") == "code"
    assert hs.source("verbose") == "code"  # explicit in code, though equal to the default
    assert hs.source("window") == "default"
    # Every value the user set anywhere stays explicit, so handlers apply it.
    assert h.explicit_fields() == {"level", "ratio", "mode", "tags", "verbose"}


def test_a_code_handler_without_config_is_used_as_is(tmp_path: Path) -> None:
    code = rh.KnobsKwargs(level=3)
    assert knobs(resolve(tmp_path, handlers=[code])).handler is code


def test_code_values_that_only_code_can_give_survive_the_merge(tmp_path: Path) -> None:
    def hook() -> None:
        pass

    s = resolve(tmp_path, "[handlers.knobs]\nlevel = 4\n", handlers=[rh.KnobsKwargs(hook=hook)])
    assert knobs(s).handler.hook is hook and knobs(s).handler.level == 4


def test_mixed_precision_and_cpu_precedence(tmp_path: Path) -> None:
    s = resolve(tmp_path, TOML)
    assert (s.mixed_precision, s.cpu) == ("fp16", True)
    assert s.accelerator_sources["mixed_precision"].startswith("file ")
    s = resolve(tmp_path, TOML, {"ACCELKW_MIXED_PRECISION": "BF16", "ACCELKW_CPU": "0"})
    assert (s.mixed_precision, s.cpu) == ("bf16", False)
    assert s.accelerator_sources["cpu"] == "env ACCELKW_CPU"
    s = resolve(tmp_path, TOML, {"ACCELKW_MIXED_PRECISION": "bf16"}, mixed_precision="no", cpu=True)
    assert (s.mixed_precision, s.cpu) == ("no", True)
    assert s.accelerator_sources == {"mixed_precision": "code", "cpu": "code"}


def test_env_values_use_text_forms(tmp_path: Path) -> None:
    env = {
        "ACCELKW_KNOBS__WINDOW": "30s",
        "ACCELKW_KNOBS__TAGS": "x, y",
        "ACCELKW_KNOBS__VERBOSE": "yes",
        "ACCELKW_KNOBS__LEVEL": "7",
    }
    h = knobs(resolve(tmp_path, env=env)).handler
    assert (h.window, h.tags, h.verbose, h.level) == (timedelta(seconds=30), ["x", "y"], True, 7)


@pytest.mark.needs_torch
def test_the_accelerator_applies_the_merged_settings(tmp_path: Path) -> None:
    (tmp_path / "accelkw.toml").write_text(TOML)
    with Accelerator(kwargs_handlers=[rh.KnobsKwargs(level=1)], registry=rh.registry()) as acc:
        assert acc.state.mixed_precision == "fp16" and acc.state.device_type == "cpu"
        assert "knobs: level 1" in acc.state.summary()
        assert acc.state.handlers["knobs"].ratio == 0.25
        assert any(line.startswith("config: settings read from") for line in acc.state.summary())


# -- enable / disable ------------------------------------------------------------------------


def test_disabled_handlers_are_not_composed(tmp_path: Path) -> None:
    s = resolve(tmp_path, '[plugins]\ndisable = ["scale", "cast"]\n')
    assert [h.name for h in s.handlers] == ["knobs", "process_group", "ddp"]
    assert s.disabled["scale"].startswith("listed in [plugins] disable of")


def test_enable_is_an_allow_list(tmp_path: Path) -> None:
    s = resolve(tmp_path, '[plugins]\nenable = ["knobs"]\n')
    assert [h.name for h in s.handlers] == ["knobs"]
    assert s.disabled["cast"].startswith("not listed in [plugins] enable of")


def test_a_handler_passed_in_code_is_applied_even_when_disabled(tmp_path: Path) -> None:
    passed = rh.KnobsKwargs()
    s = resolve(tmp_path, '[plugins]\ndisable = ["knobs"]\n', handlers=[passed])
    knobs = s.handler("knobs")
    assert knobs is not None and knobs.handler is passed and knobs.origin == "code"
    assert "knobs" not in s.disabled
    assert s.notes == [
        "knobs: passed in code, so applied although listed in [plugins] disable of "
        f"{tmp_path / 'accelkw.toml'}"
    ]


def test_two_handlers_of_one_class_in_code_is_the_reference_value_error(tmp_path: Path) -> None:
    with pytest.raises(ComposeError, match="You can only pass one `KnobsKwargs`"):
        resolve(tmp_path, handlers=[rh.KnobsKwargs(), rh.KnobsKwargs()])


# -- every kind of bad value, each with its message -----------------------------------------

BAD_FILES = [
    (
        "[handlers.knobs]\nlevel = 'high'\n",
        r"accelkw.toml \[handlers.knobs\]: knobs.level: got 'high', expected an integer",
    ),
    (
        "[handlers.knobs]\nlevel = 11\n",
        r"\[handlers.knobs\]: knobs.level: got 11, expected a number >= 0 and <= 10",
    ),
    (
        "[handlers.knobs]\nmode = 'fastest'\n",
        r"knobs.mode: got 'fastest', expected one of 'fast', 'safe'",
    ),
    (
        "[handlers.knobs]\nlvel = 1\n",
        r"knobs.lvel: got 1, expected a known field: level, .* \(did you mean 'level'\?\)",
    ),
    (
        "[handlers.knobs]\nwindow = 'soon'\n",
        r"knobs.window: got 'soon', expected a duration: seconds as a number, or a string",
    ),
    (
        "[handlers.knobs]\ntags = ['a', 2]\n",
        r"knobs.tags\[1\]: got 2, expected a string",
    ),
    (
        "[handlers.knobs]\nverbose = 'yes'\n",
        r"knobs.verbose: got 'yes', expected a boolean \(true or false\)",
    ),
    (
        "[handlers.knobs]\nmode = 'safe'\nlevel = 9\n",
        r"knobs.level: got 9, expected at most 5 when mode is 'safe'",
    ),
    (
        "[handlers.knobs]\nhook = 'os:system'\n",
        r"knobs.hook: got 'os:system', expected a callable set in code \(configuration never",
    ),
    (
        "[handlers.nobs]\nlevel = 1\n",
        r"accelkw.toml \[handlers\]: handlers.nobs: got '\[handlers.nobs\]', expected an "
        r"installed handler: cast, ddp, knobs, process_group, scale \(did you mean 'knobs'\?\)",
    ),
    (
        "[handlers]\nknobs = 3\n",
        r"\[handlers\]: knobs.<table>: got 3, expected a table of field = value",
    ),
    (
        "[handler.knobs]\nlevel = 1\n",
        r"config.handler: got .*, expected one of the tables \[accelerator\], \[plugins\], "
        r"\[handlers\] \(did you mean 'handlers'\?\)",
    ),
    ("accelerator = 1\n", r"config.accelerator: got 1, expected a table \(\[accelerator\]\)"),
    (
        "[accelerator]\nmixed_precision = 'fp4'\n",
        r"accelkw.toml \[accelerator\]: accelerator.mixed_precision: got 'fp4', expected one of "
        r"'no', 'fp16', 'bf16', 'fp8'",
    ),
    ("[accelerator]\ncpu = 'yes'\n", r"accelerator.cpu: got 'yes', expected a boolean"),
    (
        "[accelerator]\nmixed_precison = 'no'\n",
        r"accelerator.mixed_precison: got 'no', expected one of the keys mixed_precision, cpu "
        r"\(did you mean 'mixed_precision'\?\)",
    ),
    (
        "[plugins]\ndisable = 'knobs'\n",
        r"\[plugins\]: plugins.disable: got 'knobs', expected a list of handler names",
    ),
    (
        "[plugins]\nenable = ['knob']\n",
        r"plugins.enable: got 'knob', expected names of installed handlers: .* \(did you mean",
    ),
    (
        "[plugins]\ndisable = ['profile']\n",
        r"plugins.disable: got 'profile', expected names of installed handlers: cast, ddp, knobs, "
        r"process_group, scale; no handler 'profile' is installed, so there is nothing to "
        r"disable: remove it from the list",
    ),
    ("[plugins]\nonly = []\n", r"plugins.only: got \[\], expected one of the keys enable, disable"),
]


@pytest.mark.parametrize(("toml", "message"), BAD_FILES)
def test_bad_file_values_name_the_file_table_key_value_and_expectation(
    tmp_path: Path, toml: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        resolve(tmp_path, toml)
    assert str(tmp_path / "accelkw.toml") in str(info.value)


BAD_ENV = [
    (
        {"ACCELKW_KNOBS__LEVEL": "lots"},
        r"environment variable ACCELKW_KNOBS__LEVEL: knobs.level: got 'lots', expected an integer",
    ),
    (
        {"ACCELKW_KNOBS__LEVL": "1"},
        r"environment variable ACCELKW_KNOBS__LEVL: knobs.levl: .* \(did you mean 'level'\?\)",
    ),
    (
        {"ACCELKW_KNOB__LEVEL": "1"},
        r"environment variable ACCELKW_KNOB__LEVEL: handlers.knob: .*expected an installed "
        r"handler: .* \(did you mean 'knobs'\?\)",
    ),
    (
        {"ACCELKW_KNOBS__TAGS": "[1"},
        r"ACCELKW_KNOBS__TAGS: knobs.tags: got '\[1', expected a JSON list or comma-separated",
    ),
    (
        {"ACCELKW_MIXED_PRECISION": "half"},
        r"environment variable ACCELKW_MIXED_PRECISION: accelerator.mixed_precision: got 'half'",
    ),
    (
        {"ACCELKW_CPU": "maybe"},
        r"environment variable ACCELKW_CPU: accelerator.cpu: got 'maybe', expected a boolean",
    ),
]


@pytest.mark.parametrize(("env", "message"), BAD_ENV)
def test_bad_environment_values_name_the_variable(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve(tmp_path, env=env)


def test_a_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match=r"accelkw.toml:3:\d+: invalid TOML: ") as info:
        resolve(tmp_path, "[handlers.knobs]\nlevel = 1\nratio = = 2\n")
    assert info.value.line == 3


def test_collect_errors_keeps_every_error_and_falls_back_to_defaults(tmp_path: Path) -> None:
    s = resolve(
        tmp_path,
        "[handlers.knobs]\nlevel = -1\n[handlers.cast]\nenabled = 2\n[handlers.zzz]\n",
        collect_errors=True,
    )
    messages = "\n".join(str(e) for e in s.errors)
    assert len(s.errors) == 3
    for part in ("cast.enabled: got 2", "handlers.zzz", "knobs.level: got -1"):
        assert part in messages
    assert knobs(s).handler.level == 1


def test_a_handler_set_by_file_and_env_is_constructed_once(tmp_path: Path) -> None:
    from dataclasses import dataclass

    from accelkw_core.runtime.composing.composition import compose
    from accelkw_core.runtime.run_state import RunState
    from accelkw_core.testing import isolated_registry, plugin_of

    built: list[int] = []

    @dataclass
    class Counted(rh.KnobsKwargs):
        def check_values(self) -> None:  # runs once per construction
            built.append(self.level)
            super().check_values()

    registry = isolated_registry([plugin_of(Counted)])
    (tmp_path / "accelkw.toml").write_text("[handlers.knobs]\nlevel = 2\nratio = 0.25\n")
    Counted()  # the default instance, built once per class for to_kwargs(), is not counted
    built.clear()
    settings = resolve_settings(
        config=tmp_path / "accelkw.toml", env={"ACCELKW_KNOBS__VERBOSE": "true"}, registry=registry
    )
    assert built == [2]  # one construction from the file and the environment together
    (hs,) = settings.handlers
    assert (hs.handler.level, hs.handler.ratio, hs.handler.verbose) == (2, 0.25, True)
    built.clear()
    compose(RunState(cpu=True), registry=registry, settings=settings)
    assert built == []  # compose applies what was resolved: no second resolve or build

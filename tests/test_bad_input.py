"""Bad input that used to end in a traceback or pass silently: a config that is not UTF-8 or is
a directory, a float that must be finite, an integer beyond what torch accepts, an integer
environment variable that is not one. Each is one ``ConfigError``-style line naming the input."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from accelkw_core.config.files import find_config, load_config
from accelkw_core.contract.handler import KwargsHandler, handler_field
from accelkw_core.contract.validation import build_handler
from accelkw_core.discovery.hookspecs import hookimpl
from accelkw_core.errors import ConfigError, ConfigFileError, UnsupportedAnnotationError
from accelkw_core.facts.environment import env_int
from tests.conftest import run_accelkw


def test_a_config_that_is_not_utf8_names_the_file_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "accelkw.toml"
    path.write_bytes(b"[accelerator]\ncpu = true # caf\xe9\n")
    with pytest.raises(ConfigFileError) as caught:
        load_config(path)
    assert (caught.value.line, caught.value.column) == (2, 17)
    assert str(caught.value) == (
        f"{path}:2:17: not UTF-8 text (byte 0xe9 cannot be decoded); TOML files must be UTF-8: "
        "save it with that encoding"
    )
    out = run_accelkw(["config", "check", str(path)])
    assert out.returncode == 1
    assert out.stderr.splitlines() == [f"accelkw: error: {caught.value}"]


def test_an_unrelated_pyproject_that_is_not_utf8_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_bytes(b"[project]\nname = 'caf\xe9'\n")
    assert find_config(cwd=tmp_path, env={}) is None


def test_config_check_of_a_directory_says_it_is_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match="is a directory, not a config file"):
        find_config(tmp_path, env={})
    out = run_accelkw(["config", "check", str(tmp_path)])
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        f"accelkw: error: {tmp_path}: is a directory, not a config file (the config path "
        f"given); give the path of a TOML file, such as {tmp_path / 'accelkw.toml'}"
    ]


@dataclass
class ClipKwargs(KwargsHandler):
    name = "clip"
    max_norm: float = handler_field(1.0, gt=0, finite=True, doc="must be finite")
    scale: float = handler_field(1.0, gt=0, doc="inf allowed: no finite=True")
    ratio: float = handler_field(0.5, finite=True)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, "inf", "nan"])
def test_finite_true_rejects_inf_and_nan_from_every_channel(bad: object) -> None:
    strings = isinstance(bad, str)
    with pytest.raises(ConfigError) as caught:
        build_handler(ClipKwargs, {"max_norm": bad}, strings=strings)
    err = caught.value
    assert (err.handler, err.field) == ("clip", "max_norm")
    assert err.expected == "a finite number > 0 (not inf or nan)"
    with pytest.raises(ConfigError, match=r"clip\.ratio: got .*expected a finite number \(not"):
        build_handler(ClipKwargs, {"ratio": bad}, strings=strings)
    if not strings:
        with pytest.raises(ConfigError, match="max_norm"):
            ClipKwargs(max_norm=bad)  # type: ignore[arg-type]


def test_without_finite_a_one_sided_range_lets_inf_through() -> None:
    assert build_handler(ClipKwargs, {"scale": math.inf}).scale == math.inf
    assert ClipKwargs(max_norm=3.0, ratio=-2.0).max_norm == 3.0


def test_env_int_names_the_variable() -> None:
    assert env_int({}, "WORLD_SIZE", 1, 1) == 1
    assert env_int({"WORLD_SIZE": " 4 "}, "WORLD_SIZE", 1, 1) == 4
    for raw in ("abc", "0", "1.5"):
        with pytest.raises(ConfigError) as caught:
            env_int({"WORLD_SIZE": raw}, "WORLD_SIZE", 1, 1)
        assert str(caught.value) == (
            f"environment variable WORLD_SIZE: environment.WORLD_SIZE: got {raw!r}, "
            "expected an integer >= 1"
        )


def _resolve(tmp_path: Path, toml: str) -> None:
    from accelkw_core.config.settings import resolve_settings
    from accelkw_core.discovery.registry import Registry

    (tmp_path / "accelkw.toml").write_text(toml)
    registry = Registry(autoload=False)
    registry.register_plugin(ClipPlugin())
    resolve_settings(registry=registry, cwd=tmp_path, env={})


class ClipPlugin:
    @hookimpl
    def accelkw_register_handlers(self, register: object) -> None:
        register(ClipKwargs)  # type: ignore[operator]


def test_disabling_an_unknown_name_says_so_instead_of_advising_an_install(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        _resolve(tmp_path, "[plugins]\ndisable = ['nope']\n")
    assert caught.value.expected == (
        "names of installed handlers: clip; no handler 'nope' is installed, so there is "
        "nothing to disable: remove it from the list"
    )
    assert "install" not in caught.value.expected.replace("installed", "")
    with pytest.raises(ConfigError) as caught:
        _resolve(tmp_path, "[plugins]\ndisable = ['clp']\n")
    assert caught.value.suggestion == "clip"


def test_a_table_left_by_an_uninstalled_plugin_names_the_table_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        _resolve(tmp_path, "[handlers.profile]\nwith_stack = true\n")
    message = str(caught.value)
    assert message == (
        f"{tmp_path / 'accelkw.toml'} [handlers]: handlers.profile: got '[handlers.profile]', "
        "expected an installed handler: clip; no installed plugin provides 'profile' (was it "
        "uninstalled?): pip install accelkw-profile, or remove the [handlers.profile] table"
    )


@pytest.mark.parametrize(
    ("annotation", "named"),
    [
        (Sequence[int], "Sequence"),
        (list[Iterable[str]], "Iterable"),
        (int | Mapping[str, int], "Mapping"),
    ],
)
def test_an_annotation_validation_cannot_check_is_refused_naming_it(
    annotation: object, named: str
) -> None:
    # A field validation cannot check would let any value through; the class is refused instead.
    cls = type(
        "OddKwargs", (KwargsHandler,), {"name": "odd", "__annotations__": {"items": annotation}}
    )
    cls.items = None  # type: ignore[attr-defined]
    handler_cls = dataclass(cls)
    with pytest.raises(UnsupportedAnnotationError) as info:
        build_handler(handler_cls, {"items": [1, 2]})
    err = info.value
    assert (err.handler, err.field) == ("odd", "items") and named in err.annotation
    assert str(err).startswith(f"odd.items: annotation {err.annotation} cannot be checked; ")
    assert "Callable, Any or a class" in str(err)

"""Fuzzed configuration: every input builds a handler or raises ``ConfigError`` naming the field.

Three ways untrusted data reaches a built-in handler, each fuzzed for every installed one:

- ``Handler.from_mapping(data)``: Python data (what a caller or a JSON/YAML reader passes);
- ``ACCELKW_<HANDLER>__<FIELD>`` environment overrides: text only;
- ``[handlers.<name>]`` tables of a config file: real TOML text, read by the real settings path.

Inputs mix valid values, near-valid ones (case variants, numbers as text, boundaries, inf/NaN,
integers too large for a float), wrong types, nested junk and unknown keys. The property: the
call returns a handler (which passes its own validation again) or raises ``ConfigError`` whose
``field`` names the offending key, never any other exception.

500 examples per handler and channel by default, derandomised so CI is reproducible; set
``HYPOTHESIS_PROFILE=slow`` for 5,000 random ones per case::

    HYPOTHESIS_PROFILE=slow python -m pytest tests/test_reliability_fuzz.py
"""

from __future__ import annotations

import enum
import importlib
import math
import os
import tempfile
import types
import typing
from datetime import date, datetime, time, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelkw_core.config.settings import resolve_settings
from accelkw_core.contract.validation import field_specs
from accelkw_core.discovery.catalog import BUILTINS as CATALOG
from accelkw_core.plugin import ConfigError, KwargsHandler, hookimpl
from accelkw_core.testing import isolated_registry

# Profiles are registered here, not in conftest.py, and applied per test (not loaded), so the
# other test modules keep Hypothesis's defaults.
settings.register_profile(
    "accelkw-fuzz",
    max_examples=500,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "accelkw-fuzz-slow",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
SLOW = os.environ.get("HYPOTHESIS_PROFILE") == "slow"
FUZZ = settings.get_profile("accelkw-fuzz-slow" if SLOW else "accelkw-fuzz")

# The built-in handlers by registry name, with the package that provides each (the catalog).
BUILTINS = {b.name: (b.module, b.cls) for b in CATALOG}

# Values that are valid, or nearly so, for fields of the built-ins, beyond what the annotation
# says: a fuzzer that only draws random text never finds 'cpu:gloo,cuda:nccl'.
KNOWN_VALUES: dict[str, list[Any]] = {
    "backend": ["gloo", "GLOO", "nccl", "mpi", "ucc", "cpu:gloo,cuda:nccl", "cpu:gloo,", ":gloo"],
    "init_method": ["env://", "tcp://127.0.0.1:29500", "file:///tmp/rdzv", "tcp:/x", "env"],
    "timeout": [1, 0, -1, 1.5, "90s", "10m", "1h30m", "250ms", "1d", "1y", "0s", "inf", 10**400],
    "schedule_option": [
        {"wait": 1, "warmup": 1, "active": 2, "repeat": 1},
        {"active": 1},
        {"active": 0},
        {"wait": 1},
        {"skip_first": 3, "active": 2},
        {"actve": 2},
        {"active": True},
        {"active": "2"},
    ],
    "activities": [["cpu"], ["cuda", "cpu"], ["cpu", "cpu"], ["CPU"], [], "cpu", ["gpu"]],
    "profile_ranks": [[0], [0, 1], [-1], [True], ["0"], []],
    "output_trace_dir": ["traces", "", "   ", "a/b/c"],
    "on_trace_ready": ["os:system", "builtins:print", print],
    "comm_hook": ["no", "fp16", "bf16", "power_sgd", "batched_power_sgd", "FP16", "POWER_SGD", "x"],
    "comm_wrapper": ["no", "fp16", "bf16", "power_sgd", "FP16"],
    "comm_state_option": [{"matrix_approximation_rank": 2}, {"x": [1]}, []],
    "bucket_cap_mb": [0, 1, 25, -1, 10**6],
    "init_scale": [65536.0, 0.0, -1.0, math.inf, math.nan, 10**400, "65536"],
    "growth_factor": [2.0, 1.0, 1.0000001, math.inf],
    "backoff_factor": [0.5, 0.0, 1.0, 0.999],
    "growth_interval": [1, 0, 2000, -5, 10**20],
}

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | _TEXT
)
JUNK = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)


def load_builtin(name: str) -> type[KwargsHandler]:
    module, cls_name = BUILTINS[name]
    # The built-ins are what is fuzzed: a broken install fails, never skips.
    cls: type[KwargsHandler] = getattr(importlib.import_module(module), cls_name)
    return cls


def valid_for(tp: Any) -> st.SearchStrategy[Any]:
    """Values of annotation ``tp`` (and their usual text or member forms)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return st.none()
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(valid_for(a) for a in args))
    if origin is typing.Literal:
        return st.sampled_from(args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        members = list(tp)
        return st.sampled_from(members) | st.sampled_from([m.value for m in members])
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(min_value=-3, max_value=5000)
    if tp is float:
        return st.floats(min_value=-2, max_value=70000, allow_nan=False) | st.integers(0, 9)
    if tp is str:
        return _TEXT
    if tp is timedelta:
        return st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=30)) | st.integers(
            -5, 10**6
        )
    if origin in (list, tuple):
        return st.lists(valid_for(args[0]) if args else JUNK, max_size=4)
    if origin is dict:
        keys = valid_for(args[0]) if args else _TEXT
        return st.dictionaries(keys, valid_for(args[1]) if args else JUNK, max_size=4)
    return JUNK


def field_value(name: str, tp: Any) -> st.SearchStrategy[Any]:
    """A value for field ``name``: valid, near-valid, of another type, or nested junk."""
    choices = [valid_for(tp), JUNK]
    if name in KNOWN_VALUES:
        choices.insert(0, st.sampled_from(KNOWN_VALUES[name]))
    return st.one_of(*choices)


def typo(name: str) -> st.SearchStrategy[str]:
    """``name`` with one character dropped, doubled or swapped, or in upper case."""
    edits = [name.upper(), name + "s", name.replace("_", "-")]
    edits += [name[:i] + name[i + 1 :] for i in range(len(name))]
    edits += [name[:i] + name[i] + name[i:] for i in range(len(name))]
    return st.sampled_from(edits)


def mappings(cls: type[KwargsHandler], *, junk_keys: bool) -> st.SearchStrategy[dict[Any, Any]]:
    """Tables for ``cls``: some of its fields with fuzzed values, sometimes an unknown key."""
    specs = field_specs(cls)
    valid = st.fixed_dictionaries({}, optional={n: valid_for(s.type) for n, s in specs.items()})
    fuzzed = st.fixed_dictionaries(
        {}, optional={n: field_value(n, s.type) for n, s in specs.items()}
    )
    known = valid | fuzzed
    unknown_key: st.SearchStrategy[Any] = st.sampled_from(list(specs)).flatmap(typo) | _TEXT
    if junk_keys:
        unknown_key = unknown_key | st.integers() | st.none()
    extra = st.dictionaries(unknown_key, JUNK, max_size=1)
    return st.tuples(known, extra, st.integers(0, 9)).map(
        lambda t: {**t[0], **t[1]} if t[2] == 0 else t[0]
    )


def check_error(exc: ConfigError, cls: type[KwargsHandler], keys: list[str]) -> str:
    """The error names this handler and the key it is about (or the table); returns the key.

    ``field`` is a key as given, or a known field followed by the path to the bad item inside
    it (``schedule_option['active']``, ``activities[0]``).
    """
    assert exc.handler == cls.name, exc
    assert exc.field in str(exc)
    if exc.field == "<table>":
        return exc.field
    if exc.field in keys:
        return exc.field
    specs = field_specs(cls)
    key = next((k for k in keys if k in specs and exc.field.startswith(k + "[")), None)
    assert key is not None, (exc.field, keys, str(exc))
    return key


def check_built(handler: KwargsHandler, cls: type[KwargsHandler], data: dict[str, Any]) -> None:
    """A built handler is of the class, passes validation again and rebuilds from its values."""
    assert type(handler) is cls
    handler.validate()
    again = cls.from_mapping({k: getattr(handler, k) for k in data})
    assert again.field_values() == handler.field_values() or _has_nan(handler)


def _has_nan(handler: KwargsHandler) -> bool:
    return any(isinstance(v, float) and math.isnan(v) for v in handler.field_values().values())


class _OnePlugin:
    """A plugin object that contributes one handler class (what an installed plugin does)."""

    def __init__(self, cls: type[KwargsHandler]) -> None:
        self.cls = cls

    @hookimpl
    def accelkw_register_handlers(self, register: Any) -> None:
        register(self.cls)


@cache
def registry_for(cls: type[KwargsHandler]) -> Any:
    return isolated_registry([_OnePlugin(cls)])


@cache
def empty_dir() -> Path:
    # Shared by every example (a tmp_path fixture does not reset between Hypothesis examples):
    # settings are resolved here so that no ./accelkw.toml of the test run is picked up.
    return Path(tempfile.mkdtemp(prefix="accelkw-fuzz-"))


# -- from_mapping ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_from_mapping_builds_or_names_the_field(name: str) -> None:
    cls = load_builtin(name)

    @FUZZ
    @given(
        data=st.integers(0, 9).flatmap(lambda i: JUNK if i == 0 else mappings(cls, junk_keys=True))
    )
    def run(data: Any) -> None:
        try:
            handler = cls.from_mapping(data)
        except ConfigError as exc:
            keys = [str(k) for k in data] if isinstance(data, dict) else []
            check_error(exc, cls, keys)
            return
        check_built(handler, cls, data)

    run()


# -- environment overrides ---------------------------------------------------------------------


def as_text(value: Any) -> str:
    """The text a person would put in an environment variable for ``value``."""
    import json

    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, timedelta):
        return f"{value.total_seconds()}s"
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, list | dict):
        try:
            return json.dumps(value, default=str)
        except ValueError:
            return str(value)
    return str(value)


def env_tables(cls: type[KwargsHandler]) -> st.SearchStrategy[dict[str, str]]:
    specs = field_specs(cls)
    value = st.one_of(
        *(field_value(n, s.type).map(as_text) for n, s in specs.items()),
        _TEXT,
        st.sampled_from(["", " ", "none", "null", "[", "{}", "[1,", "1,2,,3", "TRUE", "0x10"]),
    )
    keys = st.sampled_from(list(specs)) | st.sampled_from(list(specs)).flatmap(typo)
    env_text = st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
    )
    return st.dictionaries(keys, value | env_text, min_size=1, max_size=3)


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_environment_overrides_build_or_name_the_variable(name: str) -> None:
    cls = load_builtin(name)
    registry = registry_for(cls)
    prefix = f"ACCELKW_{cls.name.upper()}__"

    @FUZZ
    @given(fields=env_tables(cls))
    def run(fields: dict[str, str]) -> None:
        env = {prefix + k.upper(): v for k, v in fields.items()}
        keys = [k.lower() for k in fields]
        try:
            out = resolve_settings(env=env, registry=registry, cwd=empty_dir())
        except ConfigError as exc:
            key = check_error(exc, cls, keys)
            assert exc.source is not None and prefix + key.upper() in exc.source, exc
            return
        built = out.handler(cls.name)
        assert built is not None
        assert set(built.sources) == set(keys)
        check_built(built.handler, cls, {k: None for k in keys})

    run()


# -- config files ------------------------------------------------------------------------------


def toml_value(value: Any) -> str | None:
    """``value`` as TOML text, or ``None`` when TOML cannot hold it (TOML has no null)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return toml_value(value.value)
    if isinstance(value, timedelta):
        return repr(value.total_seconds())
    if isinstance(value, list | tuple):
        items = [toml_value(v) for v in value]
        return None if None in items else "[" + ", ".join(i for i in items if i) + "]"
    if isinstance(value, dict):
        pairs = [(toml_string(str(k)), toml_value(v)) for k, v in value.items()]
        if any(v is None for _, v in pairs):
            return None
        return "{" + ", ".join(f"{k} = {v}" for k, v in pairs) + "}"
    return None


def toml_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


TOML_EXTRA = st.datetimes() | st.dates() | st.times()


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_config_file_tables_build_or_name_the_key(name: str) -> None:
    cls = load_builtin(name)
    registry = registry_for(cls)
    path = empty_dir() / f"{name}.toml"

    @FUZZ
    @given(table=mappings(cls, junk_keys=False), extra=st.none() | TOML_EXTRA)
    def run(table: dict[str, Any], extra: Any) -> None:
        if extra is not None and table:
            table = {**table, next(iter(table)): extra}
        lines = [f"[handlers.{cls.name}]"]
        for key, value in table.items():
            text = toml_value(value)
            if text is not None:
                lines.append(f"{toml_string(key)} = {text}")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        import tomllib

        written = tomllib.loads(path.read_text(encoding="utf-8"))["handlers"][cls.name]
        try:
            out = resolve_settings(config=path, env={}, registry=registry, cwd=empty_dir())
        except ConfigError as exc:
            check_error(exc, cls, list(written))
            assert exc.source is not None and f"[handlers.{cls.name}]" in exc.source, exc
            assert str(path) in exc.source
            return
        built = out.handler(cls.name)
        assert built is not None
        assert set(built.sources) == set(written)
        check_built(built.handler, cls, written)

    run()


def test_the_slow_profile_is_selected_by_the_environment() -> None:
    assert FUZZ.max_examples == (5000 if SLOW else 500)


# Inputs that once escaped validation, kept as exact regressions: the first three raised
# OverflowError; the last built a handler whose first optimizer step failed inside torch.
FOUND = [
    ("grad_scaler", {"init_scale": 10**400}, "init_scale", "a number within the range of a float"),
    ("grad_scaler", {"backoff_factor": -(10**400)}, "backoff_factor", "a number within the range"),
    ("process_group", {"timeout": 10**400}, "timeout", "a positive duration of at most 10 years"),
    ("grad_scaler", {"growth_interval": 2**63}, "growth_interval", "the signed 64-bit range"),
]


@pytest.mark.parametrize(
    ("name", "data", "field", "expected"), FOUND, ids=[f"{c[0]}-{c[2]}" for c in FOUND]
)
def test_inputs_the_fuzzer_found(
    name: str, data: dict[str, Any], field: str, expected: str
) -> None:
    cls = load_builtin(name)
    with pytest.raises(ConfigError) as info:
        cls.from_mapping(data)
    assert info.value.field == field
    assert expected in info.value.expected

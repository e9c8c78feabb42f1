"""AutocastKwargs with real torch.autocast on CPU: dtypes, nesting, defaults, validation, plugin."""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from typing import ClassVar, NamedTuple

import accelkw_autocast
import accelkw_autocast.plugin
import pytest
import torch
from accelkw_autocast import AutocastKwargs
from accelkw_autocast.handler import outputs_to_fp32

from accelkw_core import ConfigError
from accelkw_core.plugin import FORWARD_CONTEXT, FORWARD_OUTPUT
from accelkw_core.runtime.composing.composition import compose
from accelkw_core.testing import (
    HandlerContract,
    apply_handler,
    isolated_registry,
    make_state,
    modules_loaded_by,
)

# Accelerate's AutocastKwargs: field names, defaults and order are a public contract.
REFERENCE_FIELDS = [("enabled", True), ("cache_enabled", None)]


def matmul_dtype() -> torch.dtype:
    a = torch.randn(4, 4)
    return (a @ a).dtype


@pytest.mark.parametrize(("mode", "dtype"), [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_matmul_inside_context_runs_in_the_mixed_precision_dtype(
    mode: str, dtype: torch.dtype
) -> None:
    state = apply_handler(AutocastKwargs(), make_state(mixed_precision=mode))
    (factory,) = state.values(FORWARD_CONTEXT)
    with factory():
        assert matmul_dtype() == dtype
    assert matmul_dtype() == torch.float32


def test_disabled_handler_keeps_float32() -> None:
    state = make_state(mixed_precision="bf16")
    with AutocastKwargs(enabled=False).context(state):
        assert matmul_dtype() == torch.float32


def test_nested_handler_overrides_then_restores_the_outer_setting() -> None:
    bf16 = make_state(mixed_precision="bf16")
    fp16 = make_state(mixed_precision="fp16")
    with AutocastKwargs().context(bf16):
        assert matmul_dtype() == torch.bfloat16
        with AutocastKwargs(enabled=False).context(bf16):
            assert matmul_dtype() == torch.float32
        assert matmul_dtype() == torch.bfloat16
        with AutocastKwargs(cache_enabled=False).context(fp16):
            assert matmul_dtype() == torch.float16
        assert matmul_dtype() == torch.bfloat16
    assert matmul_dtype() == torch.float32


def test_cache_enabled_is_passed_only_when_set() -> None:
    state = make_state(mixed_precision="bf16")
    assert "cache_enabled" not in (AutocastKwargs().autocast_kwargs(state) or {})
    kwargs = AutocastKwargs(cache_enabled=False).autocast_kwargs(state)
    assert kwargs == {
        "device_type": "cpu",
        "dtype": torch.bfloat16,
        "enabled": True,
        "cache_enabled": False,
    }


def test_mixed_precision_no_is_a_recorded_no_op() -> None:
    state = apply_handler(AutocastKwargs(), make_state(mixed_precision="no"))
    assert state.values(FORWARD_CONTEXT) == []
    assert state.values(FORWARD_OUTPUT) == []
    assert matmul_dtype() == torch.float32
    (entry,) = state.log
    assert entry.message == "mixed precision 'no': autocast not used"
    assert entry.applied is False


def test_mixed_precision_no_says_which_explicit_settings_have_no_effect() -> None:
    state = apply_handler(AutocastKwargs(cache_enabled=True), make_state())
    (message,) = state.messages("autocast")
    assert message.startswith("mixed precision 'no': autocast not used")
    assert "cache_enabled=True" in message


def test_apply_records_what_it_does_and_the_plan_matches() -> None:
    handler = AutocastKwargs(cache_enabled=True)
    state = make_state(mixed_precision="fp16")
    plan = handler.plan(state)
    # Planning changes nothing.
    assert state.log == [] and state.values(FORWARD_CONTEXT) == []
    assert state.values(FORWARD_OUTPUT) == []
    apply_handler(handler, state)
    assert [e.message for e in state.log] == [s.message for s in plan.steps]
    assert all(e.applied for e in state.log)
    assert handler.describe(make_state(mixed_precision="fp16")) == plan.summary()
    assert [s.point for s in plan.steps] == ["forward_context", "forward_output"]
    assert plan.steps[0].message == (
        "torch.autocast(device_type='cpu', dtype=torch.float16, enabled=True, "
        "cache_enabled=True) around every forward of prepared models and in "
        "accelerator.autocast()"
    )
    (convert,) = state.values(FORWARD_OUTPUT)
    half = torch.ones(2, dtype=torch.float16)
    assert convert(half).dtype == torch.float32 and convert([half])[0].dtype == torch.float32


def test_disabled_autocast_says_it_is_turned_off_inside_the_context() -> None:
    (message, _) = (
        AutocastKwargs(enabled=False)
        .describe(make_state(mixed_precision="bf16"))
        .split("; prepared models")
    )
    assert message.endswith(
        "enabled=False) around every forward of prepared models and in "
        "accelerator.autocast(); autocasting explicitly turned off inside it"
    )


class _Pair(NamedTuple):
    logits: torch.Tensor
    step: int


def test_outputs_are_converted_to_float32_through_nested_containers() -> None:
    half = torch.ones(2, dtype=torch.float16)
    bf = torch.ones(2, dtype=torch.bfloat16)
    ints = torch.ones(2, dtype=torch.int64)
    out = outputs_to_fp32(
        {"a": half, "b": [bf, (ints, "x")], "c": _Pair(half, 3), "d": OrderedDict(e=bf)}
    )
    assert out["a"].dtype == torch.float32
    assert out["b"][0].dtype == torch.float32
    assert out["b"][1][0].dtype == torch.int64 and out["b"][1][1] == "x"
    assert isinstance(out["b"][1], tuple)
    assert isinstance(out["c"], _Pair) and out["c"].logits.dtype == torch.float32
    assert out["c"].step == 3
    assert isinstance(out["d"], OrderedDict) and out["d"]["e"].dtype == torch.float32
    full = torch.ones(2)
    assert outputs_to_fp32(full) is full  # float32 tensors pass through uncopied


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_autocast_torch_would_disable_is_an_error_not_a_silent_drop() -> None:
    state = make_state(mixed_precision="bf16", device_type="cuda")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        AutocastKwargs().apply(state)


def test_the_factory_does_no_per_call_work_beyond_torch_autocast() -> None:
    # Speed is measured by bench/bench_step.py, never timed here: this checks the structure
    # that makes it fast (everything bound once at apply time).
    state = apply_handler(AutocastKwargs(cache_enabled=False), make_state(mixed_precision="bf16"))
    (factory,) = state.values(FORWARD_CONTEXT)
    assert isinstance(factory, functools.partial)
    assert factory.func is torch.autocast
    # Bound once; arguments torch defaults to (enabled=True) are left out, each costs per call.
    assert factory.args == ("cpu",)
    assert factory.keywords == {"dtype": torch.bfloat16, "cache_enabled": False}
    off = apply_handler(AutocastKwargs(enabled=False), make_state(mixed_precision="bf16"))
    assert off.values(FORWARD_CONTEXT)[0].keywords == {"dtype": torch.bfloat16, "enabled": False}


def test_fields_defaults_and_order_match_the_reference() -> None:
    fields = [(f.name, f.default) for f in dataclasses.fields(AutocastKwargs)]
    assert fields == REFERENCE_FIELDS
    assert AutocastKwargs.name == "autocast"


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (AutocastKwargs(), {}),
        (AutocastKwargs(cache_enabled=True), {"cache_enabled": True}),
        (AutocastKwargs(enabled=False), {"enabled": False}),
        (AutocastKwargs(enabled=True), {}),
    ],
)
def test_to_kwargs_keeps_the_reference_semantics(
    handler: AutocastKwargs, expected: dict[str, object]
) -> None:
    assert handler.to_kwargs() == expected


def test_explicit_kwargs_keeps_a_value_equal_to_the_default() -> None:
    assert AutocastKwargs(enabled=True).explicit_kwargs() == {"enabled": True}


def test_from_mapping_accepts_text_forms() -> None:
    handler = AutocastKwargs.from_mapping(
        {"enabled": "false", "cache_enabled": "none"}, strings=True
    )
    assert handler == AutocastKwargs(enabled=False, cache_enabled=None)


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [
        ({"enabeld": False}, "enabeld", "did you mean 'enabled'"),
        ({"enabled": "yes"}, "enabled", "a boolean"),
        ({"cache_enabled": 1}, "cache_enabled", "a boolean"),
    ],
)
def test_from_mapping_errors_name_the_field(
    data: dict[str, object], field: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as err:
        AutocastKwargs.from_mapping(data)
    assert err.value.handler == "autocast"
    assert err.value.field == field
    assert fragment in str(err.value)


def test_a_wrong_type_in_code_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"autocast\.enabled"):
        AutocastKwargs(enabled="no")  # type: ignore[arg-type]


def test_importing_the_plugin_does_not_import_torch() -> None:
    assert modules_loaded_by("import accelkw_autocast, accelkw_autocast.plugin") == []


def test_plugin_registers_through_an_isolated_registry() -> None:
    registry = isolated_registry([accelkw_autocast.plugin])
    (record,) = registry.plugins()
    assert record.status == "loaded", record.error
    assert record.handlers == [AutocastKwargs]
    assert registry.get("autocast").cls is AutocastKwargs
    assert accelkw_autocast.AutocastKwargs is AutocastKwargs


def test_compose_contributes_the_forward_context() -> None:
    registry = isolated_registry([accelkw_autocast.plugin])
    state = make_state(mixed_precision="bf16")
    (applied,) = compose(state, [], registry=registry)
    assert isinstance(applied, AutocastKwargs)
    (contribution,) = state.contributions(FORWARD_CONTEXT)
    assert contribution.handler == "autocast"
    with contribution.value():
        assert matmul_dtype() == torch.bfloat16


class TestAutocastContract(HandlerContract):
    handler_class = AutocastKwargs
    plugin_module = "accelkw_autocast.plugin"
    examples: ClassVar = (
        {"enabled": False},
        {"cache_enabled": True},
        {"enabled": True, "cache_enabled": False},
    )

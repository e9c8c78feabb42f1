"""TorchDynamoPlugin: fields, backend checks, the compiled model, ordering after DDP and FSDP."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import accelkw_compile.plugin
import accelkw_ddp.plugin
import pytest
import torch
from accelkw_compile import DynamoBackend, TorchDynamoPlugin
from accelkw_ddp import DistributedDataParallelKwargs

from accelkw_core import Accelerator, ComposeError, ConfigError
from accelkw_core.plugin import MODEL_WRAPPER
from accelkw_core.testing import HandlerContract, compose_handlers, isolated_registry, make_state

T = TorchDynamoPlugin


class Blocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def _accelerator(**keywords: object) -> Accelerator:
    return Accelerator(cpu=True, registry=isolated_registry([accelkw_compile.plugin]), **keywords)


def _train_step(model: torch.nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    out = model(x)
    out.pow(2).mean().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_fields_order_and_defaults_match_accelerate() -> None:
    assert [(f.name, f.default) for f in dataclasses.fields(T)] == [
        ("backend", None),
        ("mode", None),
        ("fullgraph", None),
        ("dynamic", None),
        ("options", None),
        ("disable", False),
        ("use_regional_compilation", None),
    ]
    assert DynamoBackend.INDUCTOR == "INDUCTOR" and "AOT_EAGER" in DynamoBackend.list()


def test_the_reference_names_are_served_lazily() -> None:
    from accelkw_core.utils import DynamoBackend as ServedEnum
    from accelkw_core.utils import TorchDynamoPlugin as Served

    assert Served is T and ServedEnum is DynamoBackend


def test_an_unknown_backend_is_refused_listing_torchs_backends() -> None:
    with pytest.raises(ConfigError, match=r"torch._dynamo.list_backends\(\)\): .*aot_eager"):
        T(backend="aot_eagr")


def test_mode_and_options_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="either mode or options"):
        T(backend="eager", mode="max-autotune", options={"trace.enabled": True})


@pytest.mark.parametrize("backend", ["eager", "aot_eager", DynamoBackend.AOT_EAGER])
def test_a_compiled_model_computes_what_the_original_does(backend: str) -> None:
    expected = _train_step(Blocks())
    with _accelerator(dynamo_backend=backend) as accelerator:
        original = Blocks()
        model = accelerator.prepare(original)
        assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
        # Accelerate's default keeps the compiled wrapper; keep_torch_compile=False peels it.
        assert accelerator.unwrap_model(model) is model
        assert accelerator.unwrap_model(model, keep_torch_compile=False) is original
        out, grads = _train_step(model)
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(grads, expected[1])


def test_regional_compilation_compiles_the_blocks_in_place() -> None:
    plugin = T(backend="eager", use_regional_compilation=True)
    with _accelerator(dynamo_plugin=plugin) as accelerator:
        original = Blocks()
        model = accelerator.prepare(original)
        assert model is original, "names and parameters stay as they were"
        assert all(layer._compiled_call_impl is not None for layer in model.layers)
        torch.testing.assert_close(_train_step(model)[0], _train_step(Blocks())[0])


def test_backend_no_and_disable_compile_nothing() -> None:
    for plugin in (T(), T(backend="no"), T(backend="eager", disable=True)):
        with _accelerator(dynamo_plugin=plugin) as accelerator:
            model = Blocks()
            assert accelerator.prepare(model) is model


def test_dynamo_backend_and_dynamo_plugin_together_are_refused() -> None:
    with pytest.raises(ComposeError, match="dynamo_plugin= and dynamo_backend="):
        _accelerator(dynamo_backend="eager", dynamo_plugin=T(backend="eager"))


def test_the_compile_wrapper_comes_after_ddp_so_it_is_outermost() -> None:
    state = compose_handlers(
        [T(backend="eager"), DistributedDataParallelKwargs()],
        plugins=[accelkw_compile.plugin, accelkw_ddp.plugin],
        state=make_state(world_size=2),
    )
    assert [c.handler for c in state.contributions(MODEL_WRAPPER)] == ["ddp", "compile"]


@pytest.mark.slow
def test_inductor_compiles_on_cpu() -> None:
    # slow: inductor's first compile takes ~20 s.
    expected = _train_step(Blocks())
    with _accelerator(dynamo_backend="inductor") as accelerator:
        out, grads = _train_step(accelerator.prepare(Blocks()))
    torch.testing.assert_close(out, expected[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads, expected[1], rtol=1e-4, atol=1e-5)


class TestCompileContract(HandlerContract):
    handler_class = T
    plugin_module = "accelkw_compile.plugin"
    examples: ClassVar = (
        {"backend": "eager", "fullgraph": True},
        {"backend": "aot_eager", "mode": "default", "dynamic": False},
        {"backend": "INDUCTOR", "options": {"trace.enabled": False}},
        {"backend": "eager", "disable": True, "use_regional_compilation": True},
    )

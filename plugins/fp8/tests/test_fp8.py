"""accelkw-fp8: the recipes' fields and checks, torchao's conversion on the CPU, the refusals,
and fp8 composed with accumulation, clipping, torch.compile and the launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import accelkw_compile.plugin
import accelkw_fp8.plugin
import accelkw_grad_accum.plugin
import pytest
import torch
from accelkw_fp8 import AORecipeKwargs, FP8RecipeKwargs, MSAMPRecipeKwargs, TERecipeKwargs

from accelkw_core import Accelerator, ConfigError
from accelkw_core.errors import AccelkwError
from accelkw_core.plugin import FORWARD_CONTEXT, MODEL_WRAPPER, OPTIMIZER_WRAPPER
from accelkw_core.testing import HandlerContract, isolated_registry, make_state

PLUGINS = [accelkw_fp8.plugin]


class Net(torch.nn.Module):
    """first/last kept by the default filter, ``small`` (8 features) by the 16-rule."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(32, 64)
        self.mid = torch.nn.Linear(64, 64)
        self.small = torch.nn.Linear(64, 8)
        self.last = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.mid(torch.relu(self.first(x))))
        return self.last(torch.relu(self.small(x)))


def _accelerator(*handlers: Any, plugins: list[Any] | None = None, **kw: Any) -> Accelerator:
    registry = isolated_registry(PLUGINS + (plugins or []))
    return Accelerator(
        cpu=True, mixed_precision="fp8", kwargs_handlers=list(handlers), registry=registry, **kw
    )


def _float8(model: torch.nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if type(m).__name__ == "Float8Linear"]


def _steps(accelerator: Accelerator, steps: int = 3, clip: float | None = None) -> list[float]:
    model = accelerator.prepare(Net())
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 32, generator=g), torch.randn(8, 4, generator=g)
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            if clip is not None and accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.item())
    return losses


class TestAORecipeContract(HandlerContract):
    handler_class = AORecipeKwargs
    plugin_module = "accelkw_fp8.plugin"
    examples: ClassVar = ({"pad_inner_dim": False}, {"enable_fsdp_float8_all_gather": False})


class TestTERecipeContract(HandlerContract):
    handler_class = TERecipeKwargs
    plugin_module = "accelkw_fp8.plugin"
    examples: ClassVar = ({"fp8_format": "E4M3", "amax_compute_algo": "max", "margin": 1},)


class TestMSAMPRecipeContract(HandlerContract):
    handler_class = MSAMPRecipeKwargs
    plugin_module = "accelkw_fp8.plugin"
    examples: ClassVar = ({"opt_level": "O1"},)


class TestFP8RecipeContract(HandlerContract):
    handler_class = FP8RecipeKwargs
    plugin_module = "accelkw_fp8.plugin"
    examples: ClassVar = ({"backend": "te", "opt_level": "O2"},)


def test_values_are_checked_and_case_folded_as_accelerate_does() -> None:
    assert TERecipeKwargs(fp8_format="hybrid", amax_compute_algo="MAX").fp8_format == "HYBRID"
    assert TERecipeKwargs(amax_compute_algo="MAX").amax_compute_algo == "max"
    assert FP8RecipeKwargs(backend="msamp").backend == "MSAMP"
    with pytest.raises(ConfigError, match=r"te_recipe.fp8_format: got 'E3M4', expected one of"):
        TERecipeKwargs(fp8_format="E3M4")
    with pytest.raises(ConfigError, match=r"msamp_recipe.opt_level: got 'O3'"):
        MSAMPRecipeKwargs(opt_level="O3")
    with pytest.raises(ConfigError, match=r"fp8_recipe.backend: got 'AO', expected one of 'MSAMP'"):
        FP8RecipeKwargs(backend="ao")


def test_the_default_filter_keeps_the_first_last_and_unaligned_linears() -> None:
    accelerator = _accelerator()
    model = accelerator.prepare(Net())
    assert _float8(model) == ["mid"]
    assert "converted to Float8Linear: mid" in accelerator.state.messages("ao_recipe")
    accelerator.end_training()


def test_a_module_filter_func_replaces_the_default_filter() -> None:
    chosen = AORecipeKwargs(module_filter_func=lambda module, fqn: fqn in ("first", "mid"))
    accelerator = _accelerator(chosen)
    assert _float8(accelerator.prepare(Net())) == ["first", "mid"]
    accelerator.end_training()


def test_the_forward_runs_in_bfloat16_and_returns_float32() -> None:
    seen: list[torch.dtype] = []
    accelerator = _accelerator()
    model = accelerator.prepare(Net())
    model.first.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    assert model(torch.randn(2, 32)).dtype == torch.float32
    assert seen == [torch.bfloat16]
    accelerator.end_training()


def test_other_precisions_convert_nothing() -> None:
    state = make_state(mixed_precision="bf16")
    plan = AORecipeKwargs().plan(state)
    assert not plan.effective and "no fp8 conversion" in plan.summary()


def test_the_plan_shows_the_conversion_the_optimizers_and_the_precision() -> None:
    plan = AORecipeKwargs(pad_inner_dim=False).plan(make_state(mixed_precision="fp8"))
    points = [step.point for step in plan.steps]
    assert points == [
        MODEL_WRAPPER.name,
        OPTIMIZER_WRAPPER.name,
        FORWARD_CONTEXT.name,
        "forward_output",
    ]
    assert "Float8Linear" in plan.summary() and "pad_inner_dim=False" in plan.summary()
    assert plan.provides == {"fp8", "mixed_precision"}


def test_an_optimizer_built_before_prepare_trains_the_converted_layers() -> None:
    accelerator = _accelerator()
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer, model = accelerator.prepare(optimizer, model)  # the optimizer first, even
    before = model.mid.weight._tensor.detach().clone()
    accelerator.backward(model(torch.randn(4, 32)).pow(2).mean())
    optimizer.step()
    assert not torch.equal(model.mid.weight._tensor, before)
    accelerator.end_training()


def test_accumulation_and_clipping_run_under_fp8() -> None:
    plugins = [accelkw_grad_accum.plugin]
    clipped = _steps(_accelerator(plugins=plugins, gradient_accumulation_steps=2), 4, clip=0.01)
    free = _steps(_accelerator(plugins=plugins, gradient_accumulation_steps=2), 4)
    assert clipped[:2] == free[:2] and clipped[2:] != free[2:]  # clipping changed step 1


def test_torch_compile_wraps_the_converted_model() -> None:
    accelerator = _accelerator(plugins=[accelkw_compile.plugin], dynamo_backend="aot_eager")
    losses = _steps(accelerator, 2)
    eager = _steps(_accelerator(), 2)
    assert losses == pytest.approx(eager, rel=1e-2, abs=1e-3)
    names = [e.handler for e in accelerator.state.log if e.applied]
    assert names.index("ao_recipe") < names.index("compile")


@pytest.mark.parametrize(
    ("handler", "library"),
    [
        (TERecipeKwargs(), "transformer_engine"),
        (MSAMPRecipeKwargs(), "msamp"),
        (FP8RecipeKwargs(backend="TE"), "transformer_engine"),
        (FP8RecipeKwargs(backend="MSAMP"), "msamp"),
    ],
)
def test_recipes_without_their_library_are_refused_in_one_line(handler: Any, library: str) -> None:
    import importlib.util

    if importlib.util.find_spec(library) is not None:
        pytest.skip(f"{library} is installed here")
    warns = pytest.warns(FutureWarning) if isinstance(handler, FP8RecipeKwargs) else _nothing()
    with warns, pytest.raises(AccelkwError) as err:
        _accelerator(handler)
    text = str(err.value)
    assert "\n" not in text and f"the {library!r} library" in text


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_requested_recipe_leaves_the_default_ao_recipe_out() -> None:
    with pytest.raises(AccelkwError, match="transformer_engine"):
        _accelerator(TERecipeKwargs())
    accelerator = Accelerator(
        cpu=True, registry=isolated_registry(PLUGINS), kwargs_handlers=[TERecipeKwargs()]
    )
    assert "ao_recipe" not in [type(h).name for h in accelerator.handlers]
    accelerator.end_training()


@pytest.mark.cuda
def test_transformer_engine_recipe_on_cuda() -> None:
    pytest.importorskip("transformer_engine")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    with pytest.raises(AccelkwError, match="does not train with the Transformer Engine backend"):
        Accelerator(
            mixed_precision="fp8",
            kwargs_handlers=[TERecipeKwargs()],
            registry=isolated_registry(PLUGINS),
        )


def test_the_environment_selects_fp8_and_fills_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp8")
    monkeypatch.setenv("ACCELERATE_FP8_BACKEND", "AO")
    monkeypatch.setenv("ACCELERATE_FP8_PAD_INNER_DIM", "false")
    accelerator = Accelerator(cpu=True, registry=isolated_registry(PLUGINS))
    (recipe,) = [h for h in accelerator.handlers if isinstance(h, AORecipeKwargs)]
    assert accelerator.mixed_precision == "fp8" and recipe.pad_inner_dim is False
    assert recipe.float8_config().pad_inner_dim is False
    accelerator.end_training()


def test_the_launcher_flag_selects_fp8(tmp_path: Path) -> None:
    train = tmp_path / "train.py"
    train.write_text(
        "import torch\n"
        "from accelkw_core import Accelerator\n"
        "acc = Accelerator(cpu=True)\n"
        "m = acc.prepare(torch.nn.Sequential(*(torch.nn.Linear(32, 32) for _ in range(3))))\n"
        "print('MP', acc.mixed_precision, [type(x).__name__ for x in m])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "ACCELERATE_"))}
    env["ACCELKW_PLUGINS"] = "fp8"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelkw_core",
            "launch",
            "--mixed_precision",
            "fp8",
            "--fp8_backend",
            "ao",
            str(train),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    assert "MP fp8 ['Linear', 'Float8Linear', 'Linear']" in out.stdout


@pytest.mark.multiprocess
def test_fp8_over_fsdp2_trains_as_over_ddp_on_two_processes(tmp_path: Path) -> None:
    import fp8_workers as workers

    from accelkw_core.testing import run_workers

    env = {"OMP_NUM_THREADS": "1"}
    ddp = run_workers(workers.train, 2, args=(False,), env=env, timeout=240)
    fsdp = run_workers(workers.train, 2, args=(True, str(tmp_path / "ckpt")), env=env, timeout=240)
    for rank in (0, 1):
        assert fsdp[rank]["losses"] == ddp[rank]["losses"]
        assert fsdp[rank]["converted"] == ddp[rank]["converted"] == ["2", "4"]
    # The converted layers' weights trained too, and a sharded save loads back as it was.
    assert {"2.weight", "4.weight"} <= set(fsdp[0]["changed"])
    assert fsdp[0]["reloaded_equal"] is True


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKW_", "ACCELERATE_"))}
    return subprocess.run(
        [sys.executable, "-m", "accelkw_core", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_accelkw_plan_shows_the_conversion_and_env_names_torchao() -> None:
    import importlib.metadata

    plan = _cli("plan", "--mixed_precision", "fp8")
    assert plan.returncode == 0, plan.stderr
    assert (
        "[model_wrapper] nn.Linear layers of prepared models converted to torchao Float8Linear"
        in (plan.stdout)
    )
    assert (
        "[forward_context] torch.autocast(device_type='cpu', dtype=torch.bfloat16)" in plan.stdout
    )
    env = _cli("env")
    assert env.returncode == 0, env.stderr
    assert f"torchao: {importlib.metadata.version('torchao')}" in env.stdout


def test_settings_without_fp8_are_noted_as_having_no_effect() -> None:
    plan = AORecipeKwargs(pad_inner_dim=False).plan(make_state(mixed_precision="bf16"))
    assert plan.summary() == (
        "mixed precision 'bf16': no fp8 conversion (pad_inner_dim=False has no effect without "
        "mixed_precision='fp8')"
    )

"""The Accelerator in one process, with handlers written against the core (no plugin needed)."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime_helpers as rh

from accelkw_core import Accelerator, AccelkwError, HandlerApplyError, KwargsHandler
from accelkw_core.accelerator import NoProfiler
from accelkw_core.errors import MissingPluginWarning
from accelkw_core.plugin import MODEL_WRAPPER, PROFILER, TEARDOWN, Plan
from accelkw_core.testing import modules_loaded_by

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rh.clean_env(monkeypatch, tmp_path)


def make(**kwargs: object) -> Accelerator:
    kwargs.setdefault("cpu", True)
    kwargs.setdefault("registry", rh.registry())
    return Accelerator(**kwargs)  # type: ignore[arg-type]


def test_composes_every_installed_handler_in_order_and_reports_facts() -> None:
    acc = make(mixed_precision="bf16")
    assert [type(h).name for h in acc.handlers] == [
        "cast",
        "knobs",
        "process_group",
        "ddp",
        "scale",
    ]
    assert acc.device == torch.device("cpu")
    assert (acc.process_index, acc.local_process_index, acc.num_processes) == (0, 0, 1)
    assert acc.is_main_process and acc.is_local_main_process
    assert acc.mixed_precision == "bf16"
    assert "cast: autocast enabled=True" in acc.state.summary()
    acc.end_training()


def test_prepare_returns_models_optimizers_and_loaders_in_order() -> None:
    acc = make()
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.arange(10.0).reshape(5, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=2)
    other = object()
    p_model, p_opt, p_loader, p_other = acc.prepare(model, opt, loader, other)
    assert p_model is model and acc.unwrap_model(p_model) is model
    assert type(p_opt).__name__ == "AcceleratedOptimizer" and p_opt.optimizer is opt
    assert isinstance(p_opt, torch.optim.Optimizer)  # LR schedulers accept it
    assert p_opt.param_groups is opt.param_groups
    assert [b[0].tolist() for b in p_loader] == [b[0].tolist() for b in loader]
    assert p_other is other
    assert acc.prepare(p_opt) is p_opt and acc.prepare(p_loader) is p_loader
    p_loader.set_epoch(3)
    assert p_loader.epoch == 3
    torch.optim.lr_scheduler.StepLR(p_opt, step_size=1)


def test_model_wrappers_apply_in_order_and_unwrap_returns_the_original() -> None:
    acc = make()
    calls: list[str] = []

    def wrapper(tag: str):  # type: ignore[no-untyped-def]
        def wrap(model):  # type: ignore[no-untyped-def]
            calls.append(tag)
            outer = torch.nn.Sequential(model)
            outer.module = model  # the attribute DDP uses
            return outer

        return wrap

    acc.state.contribute(MODEL_WRAPPER, "first", wrapper("first"))
    acc.state.contribute(MODEL_WRAPPER, "second", wrapper("second"))
    model = torch.nn.Linear(2, 2)
    wrapped = acc.prepare(model)
    assert calls == ["first", "second"]
    assert acc.unwrap_model(wrapped) is model
    # A model prepared elsewhere is unwrapped through .module
    assert acc.unwrap_model(wrapper("x")(model)) is model


def test_a_failing_model_wrapper_names_its_handler() -> None:
    acc = make()

    def broken(model):  # type: ignore[no-untyped-def]
        raise RuntimeError("no group")

    acc.state.contribute(MODEL_WRAPPER, "ddp", broken)
    with pytest.raises(AccelkwError, match=r"model_wrapper of handler 'ddp' failed: RuntimeError"):
        acc.prepare(torch.nn.Linear(1, 1))


def test_autocast_uses_the_configured_factory_and_a_handler_replaces_it_per_block() -> None:
    acc = make(mixed_precision="bf16")
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with acc.autocast():
        assert (a @ b).dtype == torch.bfloat16
    with acc.autocast(autocast_handler=rh.CastKwargs(enabled=False)):
        assert (a @ b).dtype == torch.float32
    assert (a @ b).dtype == torch.float32
    with pytest.raises(TypeError, match="expected a handler instance that contributes"):
        acc.autocast(autocast_handler=object())


def test_autocast_without_a_handler_is_a_no_op() -> None:
    acc = make(mixed_precision="bf16", registry=rh.only("knobs"))
    with acc.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_backward_and_step_go_through_the_grad_scaler_under_fp16() -> None:
    acc = make(mixed_precision="fp16", kwargs_handlers=[rh.ScaleKwargs(init_scale=1024.0)])
    scaler = acc.scaler
    assert scaler is not None and scaler.get_scale() == 1024.0
    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.ones_(model.weight)
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.5))
    loss = model(torch.ones(1, 2)).sum()
    acc.backward(loss)
    assert model.weight.grad.tolist() == [[1024.0, 1024.0]]  # scaled by backward
    opt.step()
    assert not opt.step_was_skipped
    assert model.weight.tolist() == [[0.5, 0.5]]  # unscaled before the step
    opt.zero_grad()
    acc.backward(model(torch.tensor([[float("inf"), 1.0]])).sum())
    opt.step()
    assert opt.step_was_skipped and scaler.get_scale() == 512.0
    assert model.weight.tolist() == [[0.5, 0.5]]


def test_backward_without_a_scaler_is_plain_backward() -> None:
    acc = make()
    x = torch.ones(2, requires_grad=True)
    acc.backward((x * 3).sum())
    assert x.grad.tolist() == [3.0, 3.0]


def test_profile_without_a_profiler_warns_once_and_yields_a_no_op() -> None:
    acc = make()
    warning = r"no profiler is configured.*pip install accelkw-profile"
    with pytest.warns(UserWarning, match=warning), acc.profile() as prof:
        prof.step()
    assert isinstance(prof, NoProfiler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with acc.profile():
            pass
    assert any("no profiler is configured" in line for line in acc.state.summary())


def test_profile_uses_the_factory_or_the_handler_given() -> None:
    acc = make()
    entered: list[str] = []

    class Recorder:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def __enter__(self) -> Recorder:
            entered.append(self.tag)
            return self

        def __exit__(self, *exc: object) -> None:
            entered.append(f"/{self.tag}")

        def step(self) -> None:
            entered.append("step")

    @dataclass
    class Handler(KwargsHandler):
        name: ClassVar[str] = "recorder"

        def plan(self, state: object) -> Plan:
            return Plan(self.name).contribute(PROFILER, lambda: Recorder("handler"), "records")

    acc.state.contribute(PROFILER, "configured", lambda: Recorder("factory"))
    with acc.profile() as prof:
        prof.step()
    with acc.profile(profile_handler=Handler()):
        pass
    assert entered == ["factory", "step", "/factory", "handler", "/handler"]
    with pytest.raises(TypeError, match="expected a handler instance"), acc.profile(object()):
        pass


def test_gather_and_reduce_in_one_process() -> None:
    acc = make()
    assert acc.gather(torch.tensor([[1, 2]])).tolist() == [[1, 2]]
    assert acc.gather(torch.tensor(5)).tolist() == [5]
    assert acc.gather({"a": (torch.tensor([1]),)})["a"][0].tolist() == [1]
    t = torch.tensor([1.0, 2.0])
    out = acc.reduce(t, "mean")
    assert out.tolist() == [1.0, 2.0] and out is not t
    assert acc.reduce({"t": t}, "max")["t"].tolist() == [1.0, 2.0]  # Accelerate's reductions
    with pytest.raises(ValueError, match=r"reduce.reduction: got 'avg', expected one of 'mean'"):
        acc.reduce(t, "avg")
    with pytest.raises(TypeError, match="expected a tensor"):
        acc.gather("text")
    acc.wait_for_everyone()


def test_end_training_runs_every_teardown_once_and_works_as_a_context_manager() -> None:
    rh.TEARDOWNS_RUN.clear()
    with make() as acc:
        pass
    assert rh.TEARDOWNS_RUN == ["knobs"]
    acc.end_training()
    assert rh.TEARDOWNS_RUN == ["knobs"]


def test_a_failing_teardown_is_reported_not_raised() -> None:
    acc = make()

    def boom() -> None:
        raise RuntimeError("gone")

    acc.state.contribute(TEARDOWN, "knobs", boom)
    with pytest.warns(UserWarning, match="teardown of handler 'knobs' failed: RuntimeError: gone"):
        acc.end_training()


def test_a_handler_failing_in_apply_undoes_the_others() -> None:
    undone: list[str] = []

    @dataclass
    class First(KwargsHandler):
        name: ClassVar[str] = "first"

        def apply(self, state):  # type: ignore[no-untyped-def]
            state.contribute(TEARDOWN, self.name, lambda: undone.append(self.name))

    @dataclass
    class Boom(KwargsHandler):
        name: ClassVar[str] = "boom"
        after: ClassVar[tuple[str, ...]] = ("first",)

        def apply(self, state):  # type: ignore[no-untyped-def]
            raise RuntimeError("cannot")

    with pytest.raises(HandlerApplyError, match=r"handler 'boom'.*RuntimeError: cannot"):
        Accelerator(cpu=True, kwargs_handlers=[Boom(), First()], registry=rh.only())
    assert undone == ["first"]


def test_print_only_on_the_main_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make().print("hello", 1)
    assert capsys.readouterr().out == "hello 1\n"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.warns(MissingPluginWarning):
        acc = make(registry=rh.only("knobs"))
    acc.print("hidden")
    assert capsys.readouterr().out == ""
    assert not acc.is_main_process and acc.process_index == 1


def test_world_size_two_without_sync_or_group_handlers_warns_and_names_the_plugins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc = make(registry=rh.only("knobs"))
    messages = [str(w.message) for w in caught if issubclass(w.category, MissingPluginWarning)]
    assert len(messages) == 2
    assert "gradients will not be synchronised" in messages[0]
    assert "pip install accelkw-ddp" in messages[0]
    assert "no torch.distributed process group" in messages[1]
    assert "pip install accelkw-process-group" in messages[1]
    assert any("gradients will not be synchronised" in line for line in acc.state.summary())
    with pytest.raises(AccelkwError, match=r"gather needs a torch\.distributed process group"):
        acc.gather(torch.tensor([1]))
    with pytest.raises(AccelkwError, match="pip install accelkw-process-group"):
        acc.wait_for_everyone()


def test_a_disabled_sync_handler_is_named_in_the_warning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    @dataclass
    class Ddp(KwargsHandler):
        name: ClassVar[str] = "ddp"

    (tmp_path / "accelkw.toml").write_text('[plugins]\ndisable = ["ddp"]\n')
    monkeypatch.setenv("WORLD_SIZE", "2")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc = make(registry=rh.registry_of(Ddp))
    assert "the 'ddp' handler is disabled (listed in [plugins] disable" in str(caught[0].message)
    assert "ddp" not in acc.state.handlers


def test_importing_the_runtime_does_not_import_torch() -> None:
    code = (
        "from accelkw_core import Accelerator; import accelkw_core.utils;"
        "from accelkw_core.cli.main import build_parser; build_parser()"
    )
    assert modules_loaded_by(code) == []

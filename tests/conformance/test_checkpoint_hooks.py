"""Save and load state hooks get the models as they were given to ``prepare``, as in Accelerate.

diffusers' scripts call ``model.save_pretrained``, ``register_to_config`` and
``isinstance(model, type(unwrap_model(unet)))`` on the models their hooks receive: under DDP they
failed at the first checkpoint when given the wrapper. Here a script in diffusers' style
(``tests/checkpoint_hook_workers.py``: two models with their own pretrained folders, an EMA copy,
hooks popping what they save and load) runs on two real gloo processes with each framework:
each saves from the main process only, and each loads both frameworks' checkpoints.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from accelkw_core.testing import run_workers
from tests import checkpoint_hook_workers as hooks

ENV = {"OMP_NUM_THREADS": "1", "ACCELKW_SAVE_JOIN_TIMEOUT": "1"}
GIVEN = {"UNet", "TextEncoder"}


@pytest.mark.multiprocess
def test_diffusers_style_hooks_save_and_load_both_frameworks_checkpoints_on_two_processes(
    accelerate: ModuleType, tmp_path: Path
) -> None:
    saved = {}
    for seed, name in enumerate(("accelkw", "accelerate"), start=1):
        r0, r1 = run_workers(hooks.saves, 2, args=(str(tmp_path), name, seed), timeout=240, env=ENV)
        # Both prepared a DistributedDataParallel; the hooks were given the models inside.
        assert r0["wrapped"] == r1["wrapped"] == "DistributedDataParallel"
        assert r0["seen"] == [["UNet", "TextEncoder"]] and r1["seen"] == []
        saved[name] = r0["state"]
        assert (tmp_path / name / "unet" / hooks.WEIGHTS).is_file()
        assert (tmp_path / name / "unet_ema" / "config.json").is_file()
        # The hook popped every weight: neither framework wrote a model file of its own.
        assert not (tmp_path / name / "model.safetensors").exists()
    assert saved["accelkw"]["unet-config"]["trained_steps"] == 3
    assert saved["accelkw"] != saved["accelerate"]  # two runs: a load shows which it read

    sources = ["accelkw", "accelerate"]
    for name in sources:
        r0, r1 = run_workers(
            hooks.loads, 2, args=(str(tmp_path), name, sources), timeout=240, env=ENV
        )
        for found in (r0, r1):
            assert found["wrapped"] == "DistributedDataParallel"
            # One load per checkpoint; every call given the models themselves, in order.
            assert found["seen"] == [["UNet", "TextEncoder"]] * 2
            for source in sources:
                # Weights, configs (register_to_config) and the EMA, as the save left them.
                assert found[source] == saved[source], (name, source)


def test_hooks_get_the_model_without_its_torch_compile_wrapper(tmp_path: Path) -> None:
    found = hooks.compiled(str(tmp_path))
    assert found["wrapped"] == "OptimizedModule"
    assert found["seen"] == [["UNet", "TextEncoder"]] * 2
    assert set(found["seen"][0]) == GIVEN
    assert found["loaded"] == found["saved"]


def test_a_compiled_models_weights_keep_accelerates_names_both_ways(
    accelerate: ModuleType, tmp_path: Path
) -> None:
    import torch
    from accelkw_compile import TorchDynamoPlugin
    from safetensors import safe_open

    import accelkw_core

    def run(framework: ModuleType, seed: int) -> tuple[Any, Any]:
        kwargs: dict[str, Any] = (
            {"dynamo_plugin": TorchDynamoPlugin(backend="eager")}
            if framework is accelkw_core
            else {"dynamo_backend": "eager"}
        )
        acc = framework.Accelerator(cpu=True, **kwargs)
        torch.manual_seed(seed)
        return acc, acc.prepare(torch.nn.Linear(3, 2))

    def weights(acc: Any, model: Any) -> dict[str, list[float]]:
        inner = acc.unwrap_model(model, keep_torch_compile=False)
        return {k: v.flatten().tolist() for k, v in inner.state_dict().items()}

    saved = {}
    for seed, framework in enumerate((accelkw_core, accelerate)):
        acc, model = run(framework, seed)
        assert type(model).__name__ == "OptimizedModule"
        acc.save_state(tmp_path / framework.__name__)
        saved[framework.__name__] = weights(acc, model)
        # The names of the model as given to prepare, not torch.compile's `_orig_mod.` ones.
        with safe_open(str(tmp_path / framework.__name__ / "model.safetensors"), "pt") as fh:
            assert sorted(fh.keys()) == ["bias", "weight"]
    for framework in (accelkw_core, accelerate):
        acc, model = run(framework, 7)
        for source, expected in saved.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # accelkw: Accelerate's folder has no manifest
                acc.load_state(tmp_path / source)
            assert weights(acc, model) == expected, (framework.__name__, source)

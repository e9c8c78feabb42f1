"""Programs of tests/conformance/test_checkpoint_ports.py, written as the ecosystem's scripts are.

One script for both frameworks (``framework`` is ``accelkw_core`` or ``accelerate``): a tiny
causal LM whose ``lm_head.weight`` is its embedding's weight (as GPT-2's), and a small
"unet" with its own ``save_pretrained``/``from_pretrained``, saved by save-state hooks into
``<checkpoint>/unet`` as diffusers' ``train_*.py`` scripts save theirs.

Run as a script, it is the program the kill test runs::

    python -m tests.checkpoint_port_workers RUN_DIR

It saves ``RUN_DIR/ckpt``, takes a step, and saves over it, killed by SIGKILL inside the save
hook once the unet's weights are written.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

UNET_WEIGHTS = "diffusion_pytorch_model.safetensors"


def _modules() -> tuple[type, type]:
    import torch
    from safetensors.torch import load_file, save_file

    class TiedLM(torch.nn.Module):
        """Embedding, one block, and a head sharing the embedding's weight."""

        def __init__(self) -> None:
            super().__init__()
            self.wte = torch.nn.Embedding(13, 8)
            self.block = torch.nn.Linear(8, 8)
            self.lm_head = torch.nn.Linear(8, 13, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, ids: Any) -> Any:
            return self.lm_head(torch.tanh(self.block(self.wte(ids))))

    class Unet(torch.nn.Module):
        """A model saved its own way (a config file and a safetensors file, as diffusers')."""

        def __init__(self, width: int = 6) -> None:
            super().__init__()
            self.width = width
            self.proj = torch.nn.Linear(width, width)

        def forward(self, x: Any) -> Any:
            return self.proj(x)

        def save_pretrained(self, folder: str) -> None:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "config.json"), "w") as fh:
                json.dump({"width": self.width}, fh)
            save_file(self.state_dict(), os.path.join(folder, UNET_WEIGHTS))

        @classmethod
        def from_pretrained(cls, folder: str) -> Any:
            with open(os.path.join(folder, "config.json")) as fh:
                model = cls(**json.load(fh))
            model.load_state_dict(load_file(os.path.join(folder, UNET_WEIGHTS)))
            return model

    return TiedLM, Unet


def script(framework: Any, accelerator: Any, seed: int = 0) -> tuple[Any, Any, Any]:
    """The models, their optimizer and the save/load hooks, as a diffusers script sets them."""
    import torch

    tied_lm, unet_class = _modules()
    torch.manual_seed(seed)
    lm, unet = tied_lm(), unet_class()
    optimizer = torch.optim.Adam(list(lm.parameters()) + list(unet.parameters()), lr=0.05)
    lm, unet, optimizer = accelerator.prepare(lm, unet, optimizer)

    def save_model_hook(models: list[Any], weights: list[Any], output_dir: str) -> None:
        if accelerator.is_main_process:
            for i in reversed(range(len(models))):
                model = accelerator.unwrap_model(models[i])
                if isinstance(model, unet_class):
                    model.save_pretrained(os.path.join(output_dir, "unet"))
                    weights.pop(i)  # saved here: not by save_state's own files

    def load_model_hook(models: list[Any], input_dir: str) -> None:
        for i in reversed(range(len(models))):
            model = accelerator.unwrap_model(models[i])
            if isinstance(model, unet_class):
                models.pop(i)
                loaded = unet_class.from_pretrained(os.path.join(input_dir, "unet"))
                model.load_state_dict(loaded.state_dict())

    accelerator.register_save_state_pre_hook(save_model_hook)
    accelerator.register_load_state_pre_hook(load_model_hook)
    return lm, unet, optimizer


def train_step(accelerator: Any, lm: Any, unet: Any, optimizer: Any, seed: int) -> None:
    import torch

    generator = torch.Generator().manual_seed(seed + accelerator.process_index)
    ids = torch.randint(0, 13, (2, 5), generator=generator)
    x = torch.randn(3, 6, generator=generator)
    loss = lm(ids).float().pow(2).mean() + unet(x).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()


def weights(accelerator: Any, *models: Any) -> dict[str, list[float]]:
    """Every weight of ``models`` as plain numbers (they pickle across processes)."""
    out = {}
    for i, model in enumerate(models):
        for key, value in accelerator.unwrap_model(model).state_dict().items():
            out[f"{i}.{key}"] = value.flatten().tolist()
    return out


def tied(accelerator: Any, lm: Any) -> bool:
    inner = accelerator.unwrap_model(lm)
    return bool(inner.lm_head.weight is inner.wte.weight)


def two_processes(rank: int, run_dir: str) -> dict[str, Any]:
    """Two accelkw processes (DDP over gloo, saves in the background) through the patterns.

    Loads Accelerate's checkpoint ``accel``; saves ``solo`` from the main process only and
    everyone resumes from it; saves ``ours`` from every process; saves ``solo2`` from the main
    process again and everyone resumes from it. Returns weights and what each step found.
    """
    import warnings

    import torch
    from accelkw_async_checkpoint import AsyncCheckpointKwargs

    import accelkw_core
    from accelkw_core.runtime.checkpoints.manifest import read_manifest
    from accelkw_core.runtime.checkpoints.parts import read_part
    from accelkw_core.testing import isolated_registry, plugin_of
    from tests.runtime_helpers import GroupKwargs, SyncKwargs

    out = Path(run_dir)
    acc = accelkw_core.Accelerator(
        cpu=True,
        registry=isolated_registry([plugin_of(GroupKwargs, SyncKwargs, AsyncCheckpointKwargs)]),
        kwargs_handlers=[AsyncCheckpointKwargs()],
    )
    lm, unet, optimizer = script(accelkw_core, acc, seed=rank + 3)
    found: dict[str, Any] = {"wrapped": type(lm).__name__}
    acc.load_state(out / "accel")
    found["accel"] = weights(acc, lm, unet)
    found["accel-tied"] = tied(acc, lm)

    train_step(acc, lm, unet, optimizer, seed=1)
    acc.step = 3  # as three micro-steps of accumulate() count it, on every process
    if acc.is_main_process:
        acc.save_state(out / "solo")
    acc.wait_for_everyone()
    found["solo"] = weights(acc, lm, unet)
    train_step(acc, lm, unet, optimizer, seed=2)
    acc.step = 0  # as a restarted run begins
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc.load_state(out / "solo")
    found["solo-loaded"] = weights(acc, lm, unet)
    found["solo-tied"] = tied(acc, lm)
    found["solo-warnings"] = [str(w.message) for w in caught]
    found["solo-random"] = torch.rand(3).tolist()
    found["solo-step"] = acc.step

    train_step(acc, lm, unet, optimizer, seed=3)
    acc.save_state(out / "ours")
    acc.wait_for_checkpoints()
    found["ours"] = weights(acc, lm, unet)
    manifest = read_manifest(out / "ours")
    found["ours-files"] = sorted(manifest.files) if manifest is not None else None
    found["ours-part-1"] = manifest is not None and read_part(out / "ours", manifest, 1) is not None

    train_step(acc, lm, unet, optimizer, seed=4)
    if acc.is_main_process:
        acc.save_state(out / "solo2")
    acc.wait_for_everyone()
    found["solo2"] = weights(acc, lm, unet)
    train_step(acc, lm, unet, optimizer, seed=5)
    acc.load_state(out / "solo2")
    found["solo2-loaded"] = weights(acc, lm, unet)
    acc.end_training()
    return found


def _killed_in_hook(run_dir: str) -> None:
    import accelkw_core

    out = Path(run_dir)
    acc = accelkw_core.Accelerator(cpu=True)
    lm, unet, optimizer = script(accelkw_core, acc)
    train_step(acc, lm, unet, optimizer, seed=1)
    acc.save_state(out / "ckpt")
    train_step(acc, lm, unet, optimizer, seed=2)

    def kill(models: list[Any], weights: list[Any], output_dir: str) -> None:
        if (Path(output_dir) / "unet" / UNET_WEIGHTS).is_file():
            os.kill(os.getpid(), signal.SIGKILL)

    acc.register_save_state_pre_hook(kill)  # after the script's, which writes the unet
    acc.save_state(out / "ckpt")


if __name__ == "__main__":
    _killed_in_hook(sys.argv[1])

"""A training script in diffusers' style, for tests/conformance/test_checkpoint_hooks.py.

One script for both frameworks (``name`` is ``"accelkw"`` or ``"accelerate"``), written here
after the shape of diffusers' ``train_unconditional.py`` and ``train_text_to_image_lora.py``:
models with a config, ``save_pretrained``/``from_pretrained`` and ``register_to_config``, an EMA
copy of the unet, and save/load state pre-hooks that use the models they are given directly
(``model.save_pretrained``, ``isinstance(model, type(unwrap_model(unet)))``, popping the
weights and models they handle): they work only when the hooks receive the models as they were
given to ``prepare``, not the ``DistributedDataParallel`` or ``torch.compile`` wrapper.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

WEIGHTS = "diffusion_pytorch_model.safetensors"


def _classes() -> tuple[type, type, type]:
    import torch
    from safetensors.torch import load_file, save_file

    class Pretrained(torch.nn.Module):
        """What the two models share: a config dict and the pretrained folder's two files."""

        def __init__(self, **config: Any) -> None:
            super().__init__()
            self.config: dict[str, Any] = dict(config)

        def register_to_config(self, **changes: Any) -> None:
            self.config.update(changes)

        def save_pretrained(self, folder: str) -> None:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "config.json"), "w") as fh:
                json.dump(self.config, fh, sort_keys=True)
            tensors = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
            save_file(tensors, os.path.join(folder, WEIGHTS))

        @classmethod
        def from_pretrained(cls, folder: str, subfolder: str | None = None) -> Any:
            where = os.path.join(folder, subfolder) if subfolder else folder
            with open(os.path.join(where, "config.json")) as fh:
                config = json.load(fh)
            model = cls(**config)
            model.load_state_dict(load_file(os.path.join(where, WEIGHTS)))
            return model

    class UNet(Pretrained):
        def __init__(self, width: int = 6, **config: Any) -> None:
            super().__init__(width=width, **config)
            self.down = torch.nn.Linear(width, width)
            self.up = torch.nn.Linear(width, width)

        def forward(self, x: Any) -> Any:
            return self.up(torch.tanh(self.down(x)))

    class TextEncoder(Pretrained):
        def __init__(self, vocab: int = 11, width: int = 6, **config: Any) -> None:
            super().__init__(vocab=vocab, width=width, **config)
            self.embed = torch.nn.Embedding(vocab, width)

        def forward(self, ids: Any) -> Any:
            return self.embed(ids)

    class EMAModel:
        """An exponential moving average of the unet's parameters, saved as a unet."""

        def __init__(self, parameters: Any, decay: float, model_config: dict[str, Any]) -> None:
            self.shadow = [p.detach().clone() for p in parameters]
            self.decay = decay
            self.optimization_step = 0
            self.model_config = dict(model_config)

        @torch.no_grad()
        def step(self, parameters: Any) -> None:
            self.optimization_step += 1
            for shadow, param in zip(self.shadow, parameters, strict=True):
                shadow.mul_(self.decay).add_(param.detach(), alpha=1 - self.decay)

        def state_dict(self) -> dict[str, Any]:
            return {
                "decay": self.decay,
                "optimization_step": self.optimization_step,
                "shadow": [s.clone() for s in self.shadow],
            }

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.decay = state["decay"]
            self.optimization_step = state["optimization_step"]
            self.shadow = [s.clone() for s in state["shadow"]]

        def save_pretrained(self, folder: str) -> None:
            model = UNet(**self.model_config)
            for param, shadow in zip(model.parameters(), self.shadow, strict=True):
                param.data.copy_(shadow)
            model.register_to_config(decay=self.decay, optimization_step=self.optimization_step)
            model.save_pretrained(folder)

        @classmethod
        def from_pretrained(cls, folder: str) -> Any:
            model = UNet.from_pretrained(folder)
            config = dict(model.config)
            decay, step = config.pop("decay"), config.pop("optimization_step")
            ema = cls(model.parameters(), decay, config)
            ema.optimization_step = step
            return ema

    return UNet, TextEncoder, EMAModel


def _framework(name: str) -> Any:
    if name == "accelkw":
        import accelkw_core

        return accelkw_core
    import accelerate

    return accelerate


def script(name: str, seed: int, **accelerator_kwargs: Any) -> dict[str, Any]:
    """The script's objects: an Accelerator, the prepared models and optimizer, the EMA, and
    what the hooks were given (``seen``: the class of each model, at each call)."""
    import torch

    unet_class, encoder_class, ema_class = _classes()
    accelerator = _framework(name).Accelerator(cpu=True, **accelerator_kwargs)
    torch.manual_seed(seed)
    unet, text_encoder = unet_class(), encoder_class()
    ema_unet = ema_class(unet.parameters(), decay=0.9, model_config=unet.config)
    optimizer = torch.optim.AdamW(
        list(unet.parameters()) + list(text_encoder.parameters()), lr=0.05
    )
    unet, text_encoder, optimizer = accelerator.prepare(unet, text_encoder, optimizer)
    seen: list[list[str]] = []

    def unwrap_model(model: Any) -> Any:
        model = accelerator.unwrap_model(model)
        return getattr(model, "_orig_mod", model)  # diffusers' is_compiled_module check

    def save_model_hook(models: list[Any], weights: list[Any], output_dir: str) -> None:
        seen.append([type(m).__name__ for m in models])
        if accelerator.is_main_process:
            ema_unet.save_pretrained(os.path.join(output_dir, "unet_ema"))
            for model in models:
                if isinstance(model, type(unwrap_model(unet))):
                    model.save_pretrained(os.path.join(output_dir, "unet"))
                elif isinstance(model, type(unwrap_model(text_encoder))):
                    model.save_pretrained(os.path.join(output_dir, "text_encoder"))
                else:
                    raise ValueError(f"Unexpected save model: {model.__class__}")
                # saved in its own folder: not again by save_state
                weights.pop()

    def load_model_hook(models: list[Any], input_dir: str) -> None:
        seen.append([type(m).__name__ for m in models])
        loaded_ema = ema_class.from_pretrained(os.path.join(input_dir, "unet_ema"))
        ema_unet.load_state_dict(loaded_ema.state_dict())
        del loaded_ema
        while len(models) > 0:
            model = models.pop()  # loaded here: not again by load_state
            if isinstance(model, type(unwrap_model(unet))):
                loaded = unet_class.from_pretrained(input_dir, subfolder="unet")
            elif isinstance(model, type(unwrap_model(text_encoder))):
                loaded = encoder_class.from_pretrained(input_dir, subfolder="text_encoder")
            else:
                raise ValueError(f"Unexpected load model: {model.__class__}")
            model.register_to_config(**loaded.config)
            model.load_state_dict(loaded.state_dict())
            del loaded

    accelerator.register_save_state_pre_hook(save_model_hook)
    accelerator.register_load_state_pre_hook(load_model_hook)
    return {
        "accelerator": accelerator,
        "unet": unet,
        "text_encoder": text_encoder,
        "optimizer": optimizer,
        "ema": ema_unet,
        "seen": seen,
        "unwrap": unwrap_model,
    }


def train(run: dict[str, Any], steps: int, seed: int) -> None:
    import torch

    accelerator, unet, text_encoder = run["accelerator"], run["unet"], run["text_encoder"]
    generator = torch.Generator().manual_seed(seed + accelerator.process_index)
    for _ in range(steps):
        ids = torch.randint(0, 11, (4,), generator=generator)
        x = torch.randn(4, 6, generator=generator)
        loss = (unet(x + text_encoder(ids)) ** 2).mean()
        accelerator.backward(loss)
        run["optimizer"].step()
        run["optimizer"].zero_grad()
        run["ema"].step(run["unwrap"](unet).parameters())
    inner = run["unwrap"](unet)
    inner.register_to_config(trained_steps=inner.config.get("trained_steps", 0) + steps)


def observed(run: dict[str, Any]) -> dict[str, Any]:
    """What a resume must restore, as plain values (they pickle across processes)."""
    out: dict[str, Any] = {}
    for key in ("unet", "text_encoder"):
        model = run["unwrap"](run[key])
        out[key] = {k: v.flatten().tolist() for k, v in model.state_dict().items()}
        out[f"{key}-config"] = dict(model.config)
    ema = run["ema"]
    out["ema"] = [s.flatten().tolist() for s in ema.shadow]
    out["ema-step"] = ema.optimization_step
    return out


def saves(rank: int, run_dir: str, name: str, seed: int) -> dict[str, Any]:
    """Train, then save from the main process only (as diffusers' scripts save)."""
    run = script(name, seed)
    accelerator = run["accelerator"]
    train(run, 3, seed)
    if accelerator.is_main_process:
        accelerator.save_state(os.path.join(run_dir, name))
    accelerator.wait_for_everyone()
    found = {
        "wrapped": type(run["unet"]).__name__,
        "state": observed(run),
        "seen": run["seen"],
    }
    if name == "accelkw":
        accelerator.end_training()
    return found


def loads(rank: int, run_dir: str, name: str, sources: list[str]) -> dict[str, Any]:
    """Load each of ``sources``' checkpoints in turn (each framework's), on every process."""
    run = script(name, seed=99)
    accelerator = run["accelerator"]
    found: dict[str, Any] = {"wrapped": type(run["unet"]).__name__}
    for source in sources:
        accelerator.load_state(os.path.join(run_dir, source))
        found[source] = observed(run)
    found["seen"] = run["seen"]
    if name == "accelkw":
        accelerator.end_training()
    return found


def compiled(run_dir: str) -> dict[str, Any]:
    """One accelkw process with the model compiled (torch.compile, eager backend): the hooks
    get the models uncompiled, on save and on load."""
    from accelkw_compile import TorchDynamoPlugin

    run = script("accelkw", seed=5, dynamo_plugin=TorchDynamoPlugin(backend="eager"))
    accelerator = run["accelerator"]
    train(run, 2, seed=5)
    accelerator.save_state(Path(run_dir) / "compiled")
    saved = observed(run)
    train(run, 1, seed=6)
    accelerator.load_state(Path(run_dir) / "compiled")
    found = {
        "wrapped": type(run["unet"]).__name__,
        "saved": saved,
        "loaded": observed(run),
        "seen": run["seen"],
    }
    accelerator.end_training()
    return found

"""Handlers and worker functions for the runtime tests, written against the core only.

They contribute to the extension points the way the built-in plugins do (forward context,
backward and around-step through a grad scaler, model wrapper, process group), so the runtime is
tested with no plugin installed. Workers live
here, in a plain module, because ``run_workers`` unpickles its target by module name.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest

from accelkw_core.plugin import (
    AROUND_BACKWARD,
    AROUND_STEP,
    ATTRIBUTE,
    CHECKPOINT,
    FORWARD_CONTEXT,
    MODEL_WRAPPER,
    TEARDOWN,
    KwargsHandler,
    Plan,
    StepContext,
    handler_field,
    hookimpl,
)

RUN_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
)


def clean_env(monkeypatch: pytest.MonkeyPatch, cwd: Path) -> None:
    """No ACCELKW_* or torchrun variables, and a working directory with no config file."""
    for key in list(os.environ):
        if key.startswith("ACCELKW_") or key in RUN_VARIABLES:
            monkeypatch.delenv(key)
    monkeypatch.chdir(cwd)


@dataclass
class CastKwargs(KwargsHandler):
    """Autocast to bfloat16 on CPU under mixed precision 'bf16' (like accelkw-autocast)."""

    name: ClassVar[str] = "cast"
    enabled: bool = handler_field(True, doc="autocast on or off")

    def context(self, state: Any) -> Any:
        import torch

        if state.mixed_precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.enabled)

    def plan(self, state: Any) -> Plan:
        return Plan(self.name).contribute(
            FORWARD_CONTEXT,
            functools.partial(self.context, state),
            f"autocast enabled={self.enabled}",
            provides=("mixed_precision",),
        )


@dataclass
class ScaleKwargs(KwargsHandler):
    """A real torch.amp.GradScaler under fp16 (like accelkw-grad-scaler)."""

    name: ClassVar[str] = "scale"
    init_scale: float = handler_field(2.0**16, doc="first scale", gt=0)

    def plan(self, state: Any) -> Plan:
        plan = Plan(self.name)
        if state.mixed_precision != "fp16":
            return plan.note("no scaler")
        import torch

        scaler = torch.amp.GradScaler("cpu", init_scale=self.init_scale)

        def backward(loss: Any, proceed: Callable[[Any], None]) -> None:
            proceed(scaler.scale(loss))

        def around(step: StepContext, proceed: Callable[[], Any]) -> Any:
            # Public GradScaler calls only: unscale, step when finite, update.
            scaler.unscale_(step.optimizer)
            grads = [p.grad for g in step.optimizer.param_groups for p in g["params"]]
            finite = all(bool(torch.isfinite(g).all()) for g in grads if g is not None)
            result = proceed() if finite else None
            scaler.update()
            return result

        plan.contribute(AROUND_BACKWARD, backward, f"scaler init_scale={self.init_scale}")
        plan.contribute(AROUND_STEP, around, "steps unscaled, skipped on inf")
        plan.contribute(ATTRIBUTE, scaler, "accelerator.scaler", key="scaler")
        return plan.contribute(CHECKPOINT, scaler, "scaler saved with the run")


@dataclass
class GroupKwargs(KwargsHandler):
    """A gloo process group for world size > 1, destroyed on teardown (like accelkw-process-group).

    Named like the built-in so the runtime's missing-plugin checks see it as the real one.
    """

    name: ClassVar[str] = "process_group"
    timeout_s: int = handler_field(60, doc="seconds", ge=1)

    def plan(self, state: Any) -> Plan:
        if state.world_size == 1:
            return Plan(self.name).note("world size 1")
        return Plan(self.name).run(self._create, "gloo group", provides=("process_group",))

    def _create(self, state: Any) -> None:
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            rank=state.rank,
            world_size=state.world_size,
            timeout=timedelta(seconds=self.timeout_s),
        )
        state.contribute(TEARDOWN, self.name, dist.destroy_process_group)


@dataclass
class SyncKwargs(KwargsHandler):
    """Wrap models in DistributedDataParallel for world size > 1 (like accelkw-ddp, same name)."""

    name: ClassVar[str] = "ddp"
    after: ClassVar[tuple[str, ...]] = ("process_group",)
    bucket_cap_mb: int = handler_field(25, doc="bucket size", ge=1)

    def plan(self, state: Any) -> Plan:
        if state.world_size == 1:
            return Plan(self.name).note("world size 1")

        def wrap(model: Any) -> Any:
            import torch

            return torch.nn.parallel.DistributedDataParallel(
                model, bucket_cap_mb=self.bucket_cap_mb
            )

        return Plan(self.name).contribute(
            MODEL_WRAPPER, wrap, "models wrapped in DDP", provides=("gradient_sync",)
        )


@dataclass
class KnobsKwargs(KwargsHandler):
    """Every kind of field a config can set, and a teardown counter."""

    name: ClassVar[str] = "knobs"
    level: int = handler_field(1, doc="an int", ge=0, le=10)
    ratio: float = handler_field(0.5, doc="a float", ge=0.0, le=1.0)
    mode: Literal["fast", "safe"] = handler_field("fast", doc="a literal")
    window: timedelta | None = handler_field(None, doc="a duration")
    tags: list[str] = handler_field(default_factory=list, doc="a list")
    verbose: bool = handler_field(False, doc="a bool")
    hook: Callable[[], None] | None = field(default=None, metadata={"doc": "set in code"})

    def check_values(self) -> None:
        from accelkw_core import ConfigError

        if self.mode == "safe" and self.level > 5:
            raise ConfigError(self.name, "level", self.level, "at most 5 when mode is 'safe'")

    def plan(self, state: Any) -> Plan:
        return Plan(self.name).run(self._count_teardowns, f"level {self.level}")

    def _count_teardowns(self, state: Any) -> None:
        state.contribute(TEARDOWN, self.name, lambda: TEARDOWNS_RUN.append(self.name))


#: The handlers whose ``KnobsKwargs``-style teardown ran, in order (tests clear it).
TEARDOWNS_RUN: list[str] = []


@hookimpl
def accelkw_register_handlers(register: Any) -> None:
    for cls in (CastKwargs, ScaleKwargs, GroupKwargs, SyncKwargs, KnobsKwargs):
        register(cls)


def registry(**kwargs: Any) -> Any:
    """A registry holding only this module's handlers."""
    import sys

    from accelkw_core.testing import isolated_registry

    return isolated_registry([sys.modules[__name__]], **kwargs)


# -- workers for run_workers -----------------------------------------------------------------


def collectives_worker(rank: int) -> dict[str, Any]:
    import torch

    from accelkw_core import Accelerator

    with Accelerator(cpu=True, registry=registry()) as acc:
        gathered = acc.gather(torch.tensor([[rank, rank + 10]]))
        scalar = acc.gather(torch.tensor(float(rank)))
        nested = acc.gather({"a": torch.tensor([rank]), "b": [torch.tensor([rank * 2])]})
        total = acc.reduce(torch.tensor([1.0, float(rank)]), "sum")
        mean = acc.reduce(torch.tensor([2.0, float(rank)]), "mean")
        acc.wait_for_everyone()
        # Numbers agreed across processes (a handler's step.agree_value / state.agree_value):
        # rank 0 holds 1.5, rank 1 holds 4.
        mine = [1.5, 4][rank]
        step = StepContext(None, None, 0, acc.state)
        agreed = {op: step.agree_value(mine, op=op) for op in ("sum", "mean", "max", "min")}
        agreed["state_mean"] = acc.state.agree_value(mine)
        agreed["flag"] = step.agree(rank == 1)
        wrapped = acc.prepare(torch.nn.Linear(2, 1))
        out = {
            "gathered": gathered.tolist(),
            "scalar": scalar.tolist(),
            "nested": {"a": nested["a"].tolist(), "b": nested["b"][0].tolist()},
            "sum": total.tolist(),
            "mean": mean.tolist(),
            "agreed": agreed,
            "wrapped": type(wrapped).__name__,
            "unwrapped": type(acc.unwrap_model(wrapped)).__name__,
            "process_index": acc.process_index,
            "num_processes": acc.num_processes,
            "is_main": acc.is_main_process,
            "log": acc.state.summary(),
        }
    import torch.distributed as dist

    out["group_after_end"] = dist.is_initialized()
    return out


def loader_worker(rank: int) -> dict[str, Any]:
    import torch

    from accelkw_core import Accelerator

    data = torch.utils.data.TensorDataset(torch.arange(16))
    with Accelerator(cpu=True, registry=registry()) as acc:
        shuffled = acc.prepare(torch.utils.data.DataLoader(data, batch_size=3, shuffle=True))
        ordered = acc.prepare(torch.utils.data.DataLoader(data, batch_size=4))
        epoch0 = [b[0].tolist() for b in shuffled]
        epoch1 = [b[0].tolist() for b in shuffled]
        return {
            "epoch0": epoch0,
            "epoch1": epoch1,
            "ordered": [b[0].tolist() for b in ordered],
            "batch_size": shuffled.batch_size,
        }


def no_sync_worker(rank: int) -> list[str]:
    """Group but no model wrapper: the Accelerator must warn that gradients are not synced."""
    import warnings

    from accelkw_core import Accelerator

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc = Accelerator(cpu=True, registry=only("process_group"))
    acc.end_training()
    return [str(w.message) for w in caught]


def only(*names: str) -> Any:
    """A registry with only the handlers of this module named ``names``."""
    every = (CastKwargs, ScaleKwargs, GroupKwargs, SyncKwargs, KnobsKwargs)
    return registry_of(*(cls for cls in every if cls.name in names))


def registry_of(*classes: type) -> Any:
    """A registry (no entry points) holding exactly ``classes``."""
    from accelkw_core.testing import isolated_registry

    class Plugin:
        @staticmethod
        @hookimpl
        def accelkw_register_handlers(register: Any) -> None:
            for cls in classes:
                register(cls)

    return isolated_registry([Plugin])

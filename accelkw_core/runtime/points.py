"""The extension points: where a handler takes part in a run, each with a declared cardinality.

A handler contributes to a point from its plan (:meth:`Plan.contribute
<accelkw_core.handlers.plan.Plan.contribute>`); the runtime reads every point generically and
knows no handler by name. The built-in handlers use these points and nothing else, exactly as a
third party's handler does.

Cardinalities:

- ``one``: at most one contribution; a second is a :class:`~accelkw_core.errors.PointConflictError`
  that names both handlers and their distributions;
- ``many``: every contribution, in composition order;
- ``keyed``: one contribution per key (a second for the same key is a conflict);
- ``stack``: run in reverse order of contribution (teardowns).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "ACCUMULATION",
    "AFTER_STEP",
    "AROUND_STEP",
    "ATTRIBUTE",
    "BACKWARD",
    "CHECKPOINT",
    "DATA_LOADER_WRAPPER",
    "FORWARD_CONTEXT",
    "FORWARD_OUTPUT",
    "KEYED",
    "MANY",
    "MODEL_CHECKPOINT",
    "MODEL_STATE",
    "MODEL_WRAPPER",
    "NO_SYNC",
    "ONE",
    "OPTIMIZER_WRAPPER",
    "POINTS",
    "PROFILER",
    "STACK",
    "TEARDOWN",
    "UNSCALE_GRADIENTS",
    "ExtensionPoint",
]

ONE, MANY, KEYED, STACK = "one", "many", "keyed", "stack"


class ExtensionPoint(NamedTuple):
    """One extension point: its name, cardinality, what a contribution is and how it is used."""

    name: str
    cardinality: str
    contribution: str
    used: str


FORWARD_CONTEXT = ExtensionPoint(
    "forward_context",
    MANY,
    "a zero-argument callable returning a context manager",
    "entered around every forward of a prepared model and by ``accelerator.autocast()``; the "
    "first contribution is the outermost context",
)
FORWARD_OUTPUT = ExtensionPoint(
    "forward_output",
    MANY,
    "a callable ``convert(outputs) -> outputs``",
    "applied in order to what every forward of a prepared model returns, outside the forward "
    "contexts (mixed precision converts outputs back to fp32)",
)
MODEL_WRAPPER = ExtensionPoint(
    "model_wrapper",
    MANY,
    "a callable ``wrap(model) -> model``",
    "applied by ``prepare`` in composition order, after the model moved to the device: the "
    "wrapper of the handler composed last ends up outermost",
)
OPTIMIZER_WRAPPER = ExtensionPoint(
    "optimizer_wrapper",
    MANY,
    "a callable ``wrap(optimizer) -> optimizer``",
    "applied by ``prepare`` in composition order, before the runtime's own optimizer wrapper",
)
DATA_LOADER_WRAPPER = ExtensionPoint(
    "data_loader_wrapper",
    MANY,
    "a callable ``wrap(loader) -> loader``",
    "applied by ``prepare`` in composition order, after the runtime's default sharding",
)
BACKWARD = ExtensionPoint(
    "backward",
    ONE,
    "a callable ``backward(loss, **kwargs)``",
    "what ``accelerator.backward(loss)`` runs instead of ``loss.backward()``",
)
AROUND_STEP = ExtensionPoint(
    "around_step",
    MANY,
    "a callable ``around(step: StepContext, proceed) -> result``",
    "nested around every optimizer step, the first contribution outermost: code before "
    "``proceed()``, the step (and the inner contributions) inside it, code after it; not "
    "calling ``proceed()`` skips the step",
)
AFTER_STEP = ExtensionPoint(
    "after_step",
    MANY,
    "a callable ``after(step: StepContext) -> None``",
    "called after every optimizer step, in composition order (``step.skipped`` says whether "
    "the parameters changed)",
)
UNSCALE_GRADIENTS = ExtensionPoint(
    "unscale_gradients",
    ONE,
    "a callable ``unscale(optimizer)``",
    "called for every prepared optimizer (the optimizer its step chain sees) by "
    "``clip_grad_norm_``, ``clip_grad_value_`` and ``unscale_gradients`` before gradients are "
    "read, so they hold their true values; the handler that scales losses contributes it",
)
NO_SYNC = ExtensionPoint(
    "no_sync",
    ONE,
    "a callable ``suspend(model) -> context manager``",
    "entered by ``accelerator.no_sync(model)`` (and on the micro-steps of gradient "
    "accumulation) to hold back gradient synchronisation; without a contribution the model's "
    "own ``no_sync()`` is used when it has one, as in Accelerate",
)
ACCUMULATION = ExtensionPoint(
    "accumulation",
    ONE,
    "an object with ``num_steps``, ``adjust_scheduler``, ``sync_each_batch`` and "
    "``advance(step, end_of_dataloader) -> (step, sync)`` "
    "(:class:`~accelkw_core.runtime.accumulation.AccumulationPolicy`)",
    "asked by ``accelerator.accumulate()`` on every micro-step whether it ends in a gradient "
    "sync and an optimizer step; ``num_steps`` divides the loss in ``backward``; without a "
    "contribution every micro-step syncs",
)
MODEL_STATE = ExtensionPoint(
    "model_state",
    ONE,
    "an object with ``state_dict(model) -> dict`` and ``load_state_dict(model, state)``",
    "how ``get_state_dict``, ``save_state``/``load_state`` and ``save_model`` read and write a "
    "prepared model's weights (a sharded model gathers them); without one, the unwrapped "
    "model's own ``state_dict()``",
)
MODEL_CHECKPOINT = ExtensionPoint(
    "model_checkpoint",
    ONE,
    "an object with ``save_checkpoint(writer, models, optimizers)`` and "
    "``read_checkpoint(reader, models, optimizers) -> apply`` (a zero-argument callable)",
    "owns how ``save_state``/``load_state`` write and read the prepared models' and "
    "optimizers' state, on every process (sharded training writes each rank's shards with "
    "``torch.distributed.checkpoint``); ``read_checkpoint`` reads and checks everything and "
    "returns the step that applies it, so a damaged checkpoint changes nothing; without a "
    "contribution the main process writes Accelerate's ``model.safetensors`` and "
    "``optimizer.bin``",
)
PROFILER = ExtensionPoint(
    "profiler",
    ONE,
    "a zero-argument callable returning a context manager that yields a profiler",
    "what ``accelerator.profile()`` enters",
)
CHECKPOINT = ExtensionPoint(
    "checkpoint",
    KEYED,
    "an object with ``state_dict()`` and ``load_state_dict(state)`` (the main process saves "
    "it as ``<key>.pt``), or one that owns its files: ``save_checkpoint(writer)`` on every "
    "process and ``read_checkpoint(reader) -> apply | None``",
    "saved and loaded with the run by ``save_state``/``load_state``, keyed by handler name; "
    "state must load with ``torch.load(weights_only=True)`` (checked at save time); a handler "
    "with no state in a checkpoint (``None`` from ``read_checkpoint``, or no ``<key>.pt``) "
    "starts fresh with a warning",
)
ATTRIBUTE = ExtensionPoint(
    "attribute",
    KEYED,
    "any object, keyed by an attribute name of ``Accelerator``",
    "read with ``accelerator.extra(name, kind)`` (typed) or a typed accessor the plugin exports "
    "(``ema_of(accelerator)``); Accelerate's own attribute ``scaler`` is a typed property that "
    "reads it; a name that is already an ``Accelerator`` attribute is a composition error",
)
TEARDOWN = ExtensionPoint(
    "teardown",
    STACK,
    "a zero-argument callable",
    "run once, in reverse order, by ``end_training``, on a failed composition, or at exit",
)

POINTS: dict[str, ExtensionPoint] = {
    p.name: p
    for p in (
        FORWARD_CONTEXT,
        FORWARD_OUTPUT,
        MODEL_WRAPPER,
        OPTIMIZER_WRAPPER,
        DATA_LOADER_WRAPPER,
        BACKWARD,
        AROUND_STEP,
        AFTER_STEP,
        UNSCALE_GRADIENTS,
        NO_SYNC,
        ACCUMULATION,
        MODEL_STATE,
        MODEL_CHECKPOINT,
        PROFILER,
        CHECKPOINT,
        ATTRIBUTE,
        TEARDOWN,
    )
}

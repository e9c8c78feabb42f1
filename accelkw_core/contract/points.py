"""The extension points: where a handler takes part in a run, each typed and with a declared cardinality.

A handler contributes to a point from its plan (:meth:`Plan.contribute
<accelkw_core.contract.plan.Plan.contribute>`) by its constant: ``plan.contribute(MODEL_WRAPPER,
wrap, "...")``. Each constant is an ``ExtensionPoint[T]``, ``T`` the type of a contribution
(:mod:`accelkw_core.contract.contributions`), so ``mypy`` checks what a plugin contributes. The
runtime reads every point generically and knows no handler by name. The built-in handlers use
these points and nothing else, exactly as a third party's handler does.

Cardinalities:

- ``one``: at most one contribution; a second is a :class:`~accelkw_core.errors.PointConflictError`
  that names both handlers and their distributions;
- ``many``: every contribution, in composition order;
- ``keyed``: one contribution per key (a second for the same key is a conflict);
- ``stack``: run in reverse order of contribution (teardowns).

Roles: the points of cardinality one belong to one owner each, grouped as Lightning groups
them: the **precision** role (how numbers are computed: ``unscale_gradients`` and the deprecated
``backward``, with the shared ``forward_context``, ``forward_output`` and ``around_backward``) and the **distribution** role (how
the model is spread over processes: ``no_sync``, ``model_state``, ``model_checkpoint``, with the
shared ``model_wrapper`` and ``optimizer_wrapper``). The other points are ``shared`` (anyone
adds to them) or belong to the ``loop`` (``accumulation``, ``profiler``) or to ``checkpoint``
(``checkpoint_executor``: where a save is written).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from accelkw_core.contract.contributions import (
    AccumulationPolicy,
    AfterStep,
    AroundBackward,
    AroundStep,
    Backward,
    CheckpointContribution,
    CheckpointExecutor,
    ForwardContext,
    LossTransform,
    ModelCheckpoint,
    ModelState,
    ModelWrapper,
    OptimizerWrapper,
    OutputConverter,
    ProfilerFactory,
    SuspendSync,
    Teardown,
    Unscale,
)
from accelkw_core.contract.extension_point import (
    EVERY_RANK,
    KEYED,
    MANY,
    ONE,
    ROLES,
    STACK,
    ExtensionPoint,
    constant_name,
)

__all__ = [
    "ACCUMULATION",
    "AFTER_STEP",
    "AROUND_BACKWARD",
    "AROUND_STEP",
    "ATTRIBUTE",
    "BACKWARD",
    "CHECKPOINT",
    "CHECKPOINT_EXECUTOR",
    "EVERY_RANK",
    "FORWARD_CONTEXT",
    "FORWARD_OUTPUT",
    "KEYED",
    "LOSS",
    "MANY",
    "MODEL_CHECKPOINT",
    "MODEL_STATE",
    "MODEL_WRAPPER",
    "NO_SYNC",
    "ONE",
    "OPTIMIZER_WRAPPER",
    "POINTS",
    "PROFILER",
    "ROLES",
    "STACK",
    "TEARDOWN",
    "UNSCALE_GRADIENTS",
    "ExtensionPoint",
    "constant_name",
    "point_conflicts",
    "single_slot",
]

FORWARD_CONTEXT: ExtensionPoint[ForwardContext] = ExtensionPoint(
    "forward_context",
    MANY,
    "a zero-argument callable returning a context manager (``ForwardContext``)",
    "entered around every forward of a prepared model and by ``accelerator.autocast()``; the "
    "first contribution is the outermost context",
    "shared",
    "every rank, every forward",
)
FORWARD_OUTPUT: ExtensionPoint[OutputConverter] = ExtensionPoint(
    "forward_output",
    MANY,
    "a callable ``convert(outputs) -> outputs`` (``OutputConverter``)",
    "applied in order to what every forward of a prepared model returns, outside the forward "
    "contexts (mixed precision converts outputs back to fp32)",
    "precision",
    "every rank, every forward",
)
MODEL_WRAPPER: ExtensionPoint[ModelWrapper] = ExtensionPoint(
    "model_wrapper",
    MANY,
    "a callable ``wrap(model) -> model`` (``ModelWrapper``)",
    "applied by ``prepare`` in composition order, after the model moved to the device: the "
    "wrapper of the handler composed last ends up outermost",
    "shared",
    "every rank, in ``prepare``",
)
OPTIMIZER_WRAPPER: ExtensionPoint[OptimizerWrapper] = ExtensionPoint(
    "optimizer_wrapper",
    MANY,
    "a callable ``wrap(optimizer) -> optimizer`` (``OptimizerWrapper``)",
    "applied by ``prepare`` in composition order, before the runtime's own optimizer wrapper",
    "distribution",
    "every rank, in ``prepare``",
)
LOSS: ExtensionPoint[LossTransform] = ExtensionPoint(
    "loss",
    MANY,
    "a callable ``transform(loss) -> loss`` (``LossTransform``); return the loss unchanged to "
    "only observe it",
    "applied in composition order by ``accelerator.backward(loss)`` to the loss it will "
    "backpropagate (already divided by ``gradient_accumulation_steps``), before the "
    "``around_backward`` chain: under fp16 it sees the loss before the scaler scales it",
    "shared",
    "every rank, every ``backward`` call (each micro-step)",
)
AROUND_BACKWARD: ExtensionPoint[AroundBackward] = ExtensionPoint(
    "around_backward",
    MANY,
    "a callable ``around(loss, proceed)`` (``AroundBackward``); ``proceed(loss)`` runs the "
    "inner contributions and the backward with the loss it is given",
    "nested around the backward of every ``accelerator.backward(loss)``, after the ``loss`` "
    "contributions, the first contribution outermost (as ``around_step``): a loss scaler calls "
    "``proceed(scaler.scale(loss))``, so the contributions composed after it see the scaled "
    "loss and those before it the true one; the innermost ``proceed`` runs "
    "``loss.backward(**kwargs)``; not calling ``proceed`` skips the backward",
    "shared",
    "every rank, every ``backward`` call (each micro-step)",
)
BACKWARD: ExtensionPoint[Backward] = ExtensionPoint(
    "backward",
    ONE,
    "a callable ``backward(loss, **kwargs)`` (``Backward``)",
    "deprecated: what the innermost ``proceed`` of ``around_backward`` runs instead of "
    "``loss.backward(**kwargs)``, with the loss the wrappers passed (scaled under fp16)",
    "precision",
    "every rank, every ``backward`` call",
    deprecated="contribute to AROUND_BACKWARD instead (around(loss, proceed) calling "
    "proceed(loss)), which composes with the grad scaler and other plugins",
)
AROUND_STEP: ExtensionPoint[AroundStep] = ExtensionPoint(
    "around_step",
    MANY,
    "a callable ``around(step: StepContext, proceed) -> result`` (``AroundStep``)",
    "nested around every optimizer step, the first contribution outermost: code before "
    "``proceed()``, the step (and the inner contributions) inside it, code after it; not "
    "calling ``proceed()`` skips the step. Agree across ranks with ``step.agree(flag)``",
    "shared",
    "every rank, every optimizer step for the outermost; an inner one only where the outer "
    "ones proceed, which a loss scaler decides on each rank alone",
)
AFTER_STEP: ExtensionPoint[AfterStep] = ExtensionPoint(
    "after_step",
    MANY,
    "a callable ``after(step: StepContext) -> None`` (``AfterStep``)",
    "called after every optimizer step, in composition order (``step.skipped`` says whether "
    "the parameters changed)",
    "shared",
    "every rank, every optimizer step (skipped or not)",
)
UNSCALE_GRADIENTS: ExtensionPoint[Unscale] = ExtensionPoint(
    "unscale_gradients",
    ONE,
    "a callable ``unscale(optimizer)`` (``Unscale``)",
    "called for every prepared optimizer (the optimizer its step chain sees) by "
    "``clip_grad_norm_``, ``clip_grad_value_`` and ``unscale_gradients`` before gradients are "
    "read, so they hold their true values; the handler that scales losses contributes it",
    "precision",
    "the ranks that clip or unscale (every rank in a usual loop)",
)
NO_SYNC: ExtensionPoint[SuspendSync] = ExtensionPoint(
    "no_sync",
    ONE,
    "a callable ``suspend(model) -> context manager`` (``SuspendSync``)",
    "entered by ``accelerator.no_sync(model)`` (and on the micro-steps of gradient "
    "accumulation) to hold back gradient synchronisation; without a contribution the model's "
    "own ``no_sync()`` is used when it has one, as in Accelerate",
    "distribution",
    "every rank, every micro-step that holds back",
)
ACCUMULATION: ExtensionPoint[AccumulationPolicy] = ExtensionPoint(
    "accumulation",
    ONE,
    "an object with ``num_steps``, ``adjust_scheduler``, ``sync_each_batch`` and "
    "``advance(step, end_of_dataloader) -> (step, sync)`` (``AccumulationPolicy``)",
    "asked by ``accelerator.accumulate()`` on every micro-step whether it ends in a gradient "
    "sync and an optimizer step; ``num_steps`` divides the loss in ``backward``; without a "
    "contribution every micro-step syncs",
    "loop",
    "every rank, every ``accumulate()``",
)
MODEL_STATE: ExtensionPoint[ModelState] = ExtensionPoint(
    "model_state",
    ONE,
    "an object with ``state_dict(model) -> dict`` and ``load_state_dict(model, state)`` "
    "(``ModelState``)",
    "how ``get_state_dict``, ``save_state``/``load_state`` and ``save_model`` read and write a "
    "prepared model's weights (a sharded model gathers them); without one, the unwrapped "
    "model's own ``state_dict()``",
    "distribution",
    "every rank that calls ``get_state_dict``/``save_model`` (all of them for a sharded model)",
)
MODEL_CHECKPOINT: ExtensionPoint[ModelCheckpoint] = ExtensionPoint(
    "model_checkpoint",
    ONE,
    "an object with ``save_checkpoint(writer, models, optimizers)`` and "
    "``read_checkpoint(reader, models, optimizers) -> apply`` (``ModelCheckpoint``)",
    "owns how ``save_state``/``load_state`` write and read the prepared models' and "
    "optimizers' state (sharded training writes each rank's shards with "
    "``torch.distributed.checkpoint``); ``read_checkpoint`` reads and checks everything and "
    "returns the step that applies it, so a damaged checkpoint changes nothing; without a "
    "contribution the main process writes Accelerate's ``model.safetensors`` and "
    "``optimizer.bin``",
    "distribution",
    "every rank, in ``save_state``/``load_state``",
)
PROFILER: ExtensionPoint[ProfilerFactory] = ExtensionPoint(
    "profiler",
    ONE,
    "a zero-argument callable returning a context manager that yields a profiler "
    "(``ProfilerFactory``)",
    "what ``accelerator.profile()`` enters",
    "loop",
    "every rank that enters ``profile()``",
)
CHECKPOINT: ExtensionPoint[CheckpointContribution] = ExtensionPoint(
    "checkpoint",
    KEYED,
    "an object with ``state_dict()`` and ``load_state_dict(state)`` (``Stateful``: the main "
    "process saves it as ``<key>.pt``), or one that owns its files (``CheckpointOwner``): "
    "``save_checkpoint(writer)`` and ``read_checkpoint(reader) -> apply | None``",
    "saved and loaded with the run by ``save_state``/``load_state``, keyed by handler name; "
    "state must load with ``torch.load(weights_only=True)`` (checked at save time); a handler "
    "with no state in a checkpoint (``None`` from ``read_checkpoint``, or no ``<key>.pt``) "
    "starts fresh with a warning, and one with ``checkpoint_loaded_without_state()`` "
    "(``StartsFresh``) is called once the rest is loaded; a ``load_state_dict`` that raises "
    "has every object the load changed restored, and fails the load naming the handler "
    '(docs/checkpoints.md, "For plugin authors")',
    "shared",
    "every rank for an owner's ``save_checkpoint``/``read_checkpoint``; the main process "
    "for ``state_dict()``, every rank for ``load_state_dict``",
)
CHECKPOINT_EXECUTOR: ExtensionPoint[CheckpointExecutor] = ExtensionPoint(
    "checkpoint_executor",
    ONE,
    "an object with ``submit(job)`` and ``wait()`` (``CheckpointExecutor``)",
    "given every ``save_state`` as a ``SaveJob``: it stages the job on the caller's thread "
    "(the state copied to CPU memory) and commits it where it likes (a background thread), "
    "with the synchronous save's protocol and files; ``load_state``, ``wait_for_everyone``, "
    "``end_training`` and ``wait_for_checkpoints()`` call ``wait()``, which raises a failed "
    "save's error; without a contribution ``save_state`` writes and commits before it returns",
    "checkpoint",
    "every rank, in ``save_state`` (``submit``) and wherever saves are waited for (``wait``)",
)
ATTRIBUTE: ExtensionPoint[object] = ExtensionPoint(
    "attribute",
    KEYED,
    "any object, keyed by a name (``seed``, ``scaler``)",
    "read with ``accelerator.extra(name, kind)`` (typed) or a typed accessor the plugin exports "
    "(``ema_of(accelerator)``); Accelerate's own attribute ``scaler`` is a typed property that "
    "reads it; a contribution never becomes an ``Accelerator`` attribute, so its name shadows "
    "none",
    "shared",
    "wherever the attribute is read",
)
TEARDOWN: ExtensionPoint[Teardown] = ExtensionPoint(
    "teardown",
    STACK,
    "a zero-argument callable (``Teardown``)",
    "run once, in reverse order, by ``end_training``, on a failed composition, or at exit",
    "shared",
    "every rank, once",
)

POINTS: dict[str, ExtensionPoint[Any]] = {
    p.name: p
    for p in (
        FORWARD_CONTEXT,
        FORWARD_OUTPUT,
        MODEL_WRAPPER,
        OPTIMIZER_WRAPPER,
        LOSS,
        AROUND_BACKWARD,
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
        CHECKPOINT_EXECUTOR,
        ATTRIBUTE,
        TEARDOWN,
    )
}


def single_slot(
    point: ExtensionPoint[Any], handler: str, key: str | None
) -> tuple[str, str | None] | None:
    """Where a contribution takes the only place: ``(point, None)`` for a point of cardinality
    one (whatever its key), ``(point, key)`` for a keyed point (the key defaults to the handler's
    name), ``None`` for the points that take many.

    Two contributions with one slot conflict: the runtime's ``state.contribute`` and the plan's
    check before a run (:func:`point_conflicts`) both go by this rule.
    """
    if point.cardinality == ONE:
        return (point.name, None)
    if point.cardinality == KEYED:
        return (point.name, handler if key is None else key)
    return None


def point_conflicts(
    contributions: Iterable[tuple[str, str, str | None]],
) -> list[tuple[str, str | None, list[str]]]:
    """``(point, key, handlers)`` for each slot (:func:`single_slot`) that more than one of
    ``contributions`` takes, the handlers in the order given; ``contributions`` are
    ``(handler, point name, key)`` in apply order (unknown point names are left out)."""
    slots: dict[tuple[str, str | None], list[str]] = {}
    for handler, name, key in contributions:
        spec = POINTS.get(name)
        place = single_slot(spec, handler, key) if spec is not None else None
        if place is not None:
            slots.setdefault(place, []).append(handler)
    return [
        (point, key if POINTS[point].cardinality == KEYED else None, handlers)
        for (point, key), handlers in slots.items()
        if len(handlers) > 1
    ]

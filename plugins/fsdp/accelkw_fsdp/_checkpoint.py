"""The ``model_checkpoint`` contribution: sharded models and their optimizers in ``save_state``.

Accelerate's layout for FSDP. ``FULL_STATE_DICT``: ``pytorch_model_fsdp.bin``
(``pytorch_model_fsdp_<i>.bin`` for model ``i`` > 0), the full weights gathered on rank 0, and
``optimizer.bin`` (``optimizer_<i>.bin``), the full optimizer state keyed by parameter name, both
written by the main process. ``SHARDED_STATE_DICT``: the folders ``pytorch_model_fsdp_<i>`` and
``optimizer_<i>``, into which every rank writes its own shards with
``torch.distributed.checkpoint`` (DCP), under the keys ``model`` and ``optimizer``; with
``async_save`` when the save is written in the background (:mod:`accelkw_fsdp._background`).

Loading reads whichever layout the checkpoint holds (DCP reshards for another world size), and
reads and checks everything before it changes anything: the full files on the main process
(broadcast into the shards when applied); the DCP folders on every rank, each rank checking its
share of the files against the manifest, the ranks agreeing, then DCP reading the shards into
fresh tensors.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from accelkw_core.plugin import AccelkwError, CheckpointError, CheckpointReader, CheckpointWriter
from accelkw_fsdp._background import save_later
from accelkw_fsdp._shard import resharded

__all__ = ["FSDPCheckpoint"]

MODEL = "pytorch_model_fsdp"
OPTIMIZER = "optimizer"
Apply = Callable[[], None]


def _file(stem: str, index: int) -> str:
    """``optimizer.bin`` for the first, ``optimizer_1.bin`` for the second (Accelerate's names)."""
    return f"{stem}.bin" if index == 0 else f"{stem}_{index}.bin"


def _unwrapped(optimizer: Any) -> Any:
    """The torch optimizer under the ``Accelerator``'s wrapper (its ``step`` runs the step chain)."""
    import torch

    inner = optimizer
    while isinstance(getattr(inner, "optimizer", None), torch.optim.Optimizer):
        inner = inner.optimizer
    return inner


def _pairs(models: Sequence[Any], optimizers: Sequence[Any]) -> list[tuple[Any, Any]]:
    """Each (unwrapped) optimizer with the FSDP root of the model whose parameters it steps."""
    roots = [resharded(model) for model in models]
    owned = [{id(p) for p in root.parameters()} for root in roots]
    pairs = []
    for i, optimizer in enumerate(optimizers):
        raw = _unwrapped(optimizer)
        params = {id(p) for group in raw.param_groups for p in group["params"]}
        owner = next((root for root, ids in zip(roots, owned, strict=True) if params <= ids), None)
        if owner is None:
            raise AccelkwError(
                f"fsdp: optimizer {i} ({type(raw).__name__}) steps parameters of no single "
                "prepared model; FSDP checkpoints save an optimizer's state by the parameter "
                "names of its model, so give each model its own optimizer and prepare both"
            )
        pairs.append((owner, raw))
    return pairs


@contextlib.contextmanager
def _kept_fresh(optimizer: Any) -> Iterator[bool]:
    """Yields whether ``optimizer`` has state; if it has none, it still has none afterwards.

    torch's state-dict API gives a stateless optimizer its state by stepping it once with zero
    gradients and lr 0, and only when no parameter holds a gradient: AdamW's step count would
    become 1 and change every later step. Gradients are set aside so the state is always made
    (a load needs its shapes), then the state is dropped and the gradients put back.
    """
    if optimizer.state:
        yield True
        return
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        yield False
    finally:
        optimizer.state.clear()
        for p, grad in zip(params, grads, strict=True):
            p.grad = grad


def _optimizer_state(root: Any, optimizer: Any, options: Any) -> dict[str, Any]:
    """``get_optimizer_state_dict``, with an empty ``state`` for an optimizer that has none."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    with _kept_fresh(optimizer) as has_state:
        osd: dict[str, Any] = dict(get_optimizer_state_dict(root, optimizer, options=options))
    if not has_state:
        osd["state"] = {}
    return osd


def _fresh(value: Any) -> Any:
    """A new tensor like ``value`` (a ``DTensor`` keeps its placement) for DCP to read into."""
    import torch

    return torch.empty_like(value) if isinstance(value, torch.Tensor) else copy.deepcopy(value)


def _problem_list(label: str, names: Sequence[str]) -> str:
    return f"{label} " + ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")


def _check_weights(path: Path, root: Any, shapes: dict[str, tuple[int, ...]], saved: Any) -> None:
    """``saved`` (full weights) has exactly the model's keys, with its (global) shapes."""
    if not isinstance(saved, dict):
        raise CheckpointError(path, f"is not a state dict (it holds a {type(saved).__name__})")
    missing = sorted(set(shapes) - set(saved))
    unexpected = sorted(set(saved) - set(shapes))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(_problem_list("lacks", missing))
        if unexpected:
            parts.append(_problem_list("has unexpected", unexpected))
        raise CheckpointError(
            path, f"does not fit the model ({type(root).__name__}): " + "; ".join(parts)
        )
    for key, shape in shapes.items():
        got = tuple(getattr(saved[key], "shape", ()))
        if got != shape:
            raise CheckpointError(
                path, f"does not fit the model: {key} has shape {got}, the model's is {shape}"
            )


def _check_optimizer(path: Path, optimizer: Any, names: set[str], saved: Any) -> None:
    """``saved`` is an optimizer state keyed by parameter name, with the optimizer's groups."""
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    if not isinstance(groups, list) or not isinstance(saved.get("state"), dict):
        raise CheckpointError(path, "is not an optimizer state_dict")
    sizes = [len(g.get("params", ())) for g in groups]
    mine = [len(g["params"]) for g in optimizer.param_groups]
    if sizes != mine:
        raise CheckpointError(
            path,
            f"does not fit the optimizer: parameter groups of sizes {sizes}, "
            f"the optimizer's are {mine}",
        )
    unknown = sorted(str(k) for k in saved["state"] if k not in names)
    if unknown:
        raise CheckpointError(
            path,
            "does not fit the model: the optimizer state is for "
            + _problem_list("parameters it does not have:", unknown)
            + " (a state keyed by number was saved without FSDP)",
        )


def _agree(folder: Path, error: BaseException | None) -> None:
    """Raise on every rank if any rank failed: its own error, else the first failure's.

    DCP's reads are collective: a rank must not start them while another gave up.
    """
    import torch.distributed as dist

    mine = None
    if error is not None:
        if isinstance(error, CheckpointError):
            mine = (str(error.path), error.problem)
        else:
            mine = (str(folder), f"cannot be loaded ({type(error).__name__}: {error})")
    reports: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(reports, (dist.get_rank(), mine))
    if error is not None:
        raise error
    for rank, report in reports:
        if report is not None:
            path, problem = report
            raise CheckpointError(path, f"{problem} (found by process {rank})")


def _verify_share(reader: CheckpointReader, name: str) -> Path:
    """Check this rank's share of the files under ``name`` (every rank checks a different one)."""
    if reader.manifest is None:
        # An Accelerate checkpoint: no sizes or checksums to check; DCP reports what it finds.
        return reader.verify_tree(name)
    files = sorted(f for f in reader.manifest.files if f.startswith(name + "/"))
    if not files:
        return reader.verify_tree(name)  # raises: the manifest lists nothing under it
    for file in files[reader.rank :: reader.world_size]:
        reader.verify(file)
    return reader.folder / name


def _dcp_error(path: Path, exc: BaseException) -> CheckpointError:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return CheckpointError(path, f"cannot be read by torch.distributed.checkpoint ({line})")


class FSDPCheckpoint:
    """The ``model_checkpoint`` contribution: Accelerate's FSDP layout, every rank taking part.

    ``kind`` is ``"full"`` (FULL_STATE_DICT) or ``"sharded"`` (SHARDED_STATE_DICT): what
    ``save_checkpoint`` writes; ``cpu_offload`` gathers full weights into CPU memory.
    """

    def __init__(self, kind: str, cpu_offload: bool) -> None:
        self.kind = kind
        self.cpu_offload = cpu_offload

    # -- saving ------------------------------------------------------------------------------

    def save_checkpoint(
        self, writer: CheckpointWriter, models: Sequence[Any], optimizers: Sequence[Any]
    ) -> None:
        """Write the models' and optimizers' state; called on every rank (all take part)."""
        pairs = _pairs(models, optimizers)
        if self.kind == "full":
            self._save_full(writer, models, pairs)
        else:
            self._save_sharded(writer, models, pairs)

    def _save_full(
        self, writer: CheckpointWriter, models: Sequence[Any], pairs: list[tuple[Any, Any]]
    ) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        weights = StateDictOptions(full_state_dict=True, cpu_offload=self.cpu_offload)
        for i, model in enumerate(models):
            full = get_model_state_dict(resharded(model), options=weights)
            if writer.is_main_process:
                writer.save(_file(MODEL, i), full)
        state = StateDictOptions(full_state_dict=True, cpu_offload=True)
        for i, (root, optimizer) in enumerate(pairs):
            osd = _optimizer_state(root, optimizer, state)
            if writer.is_main_process:
                writer.save(_file(OPTIMIZER, i), osd)

    def _save_sharded(
        self, writer: CheckpointWriter, models: Sequence[Any], pairs: list[tuple[Any, Any]]
    ) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions()
        for i, model in enumerate(models):
            shards = get_model_state_dict(resharded(model), options=options)
            self._dcp_save(writer, f"{MODEL}_{i}", {"model": shards})
        for i, (root, optimizer) in enumerate(pairs):
            osd = _optimizer_state(root, optimizer, options)
            self._dcp_save(writer, f"{OPTIMIZER}_{i}", {"optimizer": osd})

    def _dcp_save(self, writer: CheckpointWriter, name: str, state: dict[str, Any]) -> None:
        """DCP-save ``state`` into the folder ``name``: through ``async_save`` when the save is
        written in the background on a process group of its own, else now."""
        if writer.writes_later and writer.group is not None:
            save_later(writer, name, state, lambda real: self._record_share(real, name))
            return
        from torch.distributed.checkpoint.filesystem import FileSystemWriter
        from torch.distributed.checkpoint.state_dict_saver import save

        save(state, storage_writer=FileSystemWriter(writer.folder / name))
        self._record_share(writer, name)

    @staticmethod
    def _record_share(writer: CheckpointWriter, name: str) -> None:
        """Record (fsync, size, XXH3-64 hash) this rank's share of the files DCP wrote under ``name``.

        ``dcp.save`` returns once every rank's shards and the metadata are written; the ranks
        split the reading so none reads the whole checkpoint; the core merges what each recorded.
        """
        root = writer.folder / name
        files = sorted(
            p.relative_to(writer.folder).as_posix() for p in root.rglob("*") if p.is_file()
        )
        for file in files[writer.rank :: writer.world_size]:
            writer.record(file)

    # -- loading -----------------------------------------------------------------------------

    def read_checkpoint(
        self, reader: CheckpointReader, models: Sequence[Any], optimizers: Sequence[Any]
    ) -> Apply:
        """Read and check the models' and optimizers' state; returns the step that applies it.

        Called on every rank. Reads the layout the checkpoint holds, whatever ``kind`` is.
        """
        pairs = _pairs(models, optimizers)
        if reader.has(f"{MODEL}_0") or reader.has(f"{OPTIMIZER}_0"):
            return self._read_sharded(reader, models, pairs)
        return self._read_full(reader, models, pairs)

    def _read_full(
        self, reader: CheckpointReader, models: Sequence[Any], pairs: list[tuple[Any, Any]]
    ) -> Apply:
        import torch
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        roots = [resharded(model) for model in models]
        # Shapes on every rank alike (the state-dict call may be collective); global shapes.
        shapes = [
            {
                k: tuple(v.shape)
                for k, v in get_model_state_dict(root).items()
                if isinstance(v, torch.Tensor)  # a DTensor is one, with its global shape
            }
            for root in roots
        ]
        weights: list[dict[str, Any]] = [{} for _ in roots]
        states: list[dict[str, Any]] = [{} for _ in pairs]
        if reader.is_main_process:
            for i, root in enumerate(roots):
                name = _file(MODEL, i)
                weights[i] = reader.load(name)
                _check_weights(reader.folder / name, root, shapes[i], weights[i])
            for i, (root, optimizer) in enumerate(pairs):
                name = _file(OPTIMIZER, i)
                states[i] = reader.load(name)
                names = set(shapes[roots.index(root)])
                _check_optimizer(reader.folder / name, optimizer, names, states[i])

        def apply() -> None:
            options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
            for root, full in zip(roots, weights, strict=True):
                set_model_state_dict(resharded(root), dict(full), options=options)
            for (root, optimizer), osd in zip(pairs, states, strict=True):
                # torch gives a stateless optimizer zero state before loading into it; a saved
                # optimizer that had none must stay without (rank 0 alone read which it was).
                fresh = [bool(osd) and not osd["state"]]
                dist.broadcast_object_list(fresh, src=0)
                set_optimizer_state_dict(resharded(root), optimizer, osd, options=options)
                if fresh[0]:
                    optimizer.state.clear()

        return apply

    def _read_sharded(
        self, reader: CheckpointReader, models: Sequence[Any], pairs: list[tuple[Any, Any]]
    ) -> Apply:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = StateDictOptions()
        roots = [resharded(model) for model in models]
        model_dirs = [f"{MODEL}_{i}" for i in range(len(roots))]
        optimizer_dirs = [f"{OPTIMIZER}_{i}" for i in range(len(pairs))]
        weights: list[dict[str, Any]] = []
        states: list[dict[str, Any]] = []
        error: BaseException | None = None
        try:
            for name in model_dirs + optimizer_dirs:
                _verify_share(reader, name)
            for root, name in zip(roots, model_dirs, strict=True):
                saved = self._saved_keys(reader.folder / name)
                template = {k: _fresh(v) for k, v in get_model_state_dict(root).items()}
                self._check_keys(reader.folder / name, root, template, saved)
                weights.append(template)
            for (root, optimizer), name in zip(pairs, optimizer_dirs, strict=True):
                saved = self._saved_keys(reader.folder / name)
                with _kept_fresh(optimizer):
                    osd = get_optimizer_state_dict(root, optimizer, options=options)
                # Only the states the checkpoint holds: an optimizer saved before its first
                # step has none, and a parameter that never had a gradient has none.
                state = {}
                # torch types every value of an optimizer state dict with one union; "state"
                # maps each parameter's name to the dict of its states.
                per_param = cast(dict[str, dict[str, Any]], osd["state"])
                for fqn, values in per_param.items():
                    kept = {
                        k: _fresh(v)
                        for k, v in values.items()
                        if f"optimizer.state.{fqn}.{k}" in saved
                    }
                    if kept:
                        state[fqn] = kept
                states.append({"state": state, "param_groups": copy.deepcopy(osd["param_groups"])})
        except Exception as exc:
            error = exc
        _agree(reader.folder, error)
        for name, template in zip(model_dirs, weights, strict=True):
            self._dcp_load(reader.folder / name, {"model": template})
        for (root, optimizer), name, osd in zip(pairs, optimizer_dirs, states, strict=True):
            self._dcp_load(reader.folder / name, {"optimizer": osd})
            names = set(get_model_state_dict(root))
            _check_optimizer(reader.folder / name, optimizer, names, osd)

        def apply() -> None:
            for root, template in zip(roots, weights, strict=True):
                set_model_state_dict(resharded(root), template, options=options)
            for (root, optimizer), osd in zip(pairs, states, strict=True):
                set_optimizer_state_dict(resharded(root), optimizer, osd, options=options)

        return apply

    @staticmethod
    def _saved_keys(folder: Path) -> dict[str, Any]:
        """The flattened keys DCP saved under ``folder``, with their metadata (sizes)."""
        from torch.distributed.checkpoint.filesystem import FileSystemReader

        try:
            metadata = FileSystemReader(folder).read_metadata()
        except Exception as exc:
            raise _dcp_error(folder, exc) from exc
        return dict(metadata.state_dict_metadata)

    @staticmethod
    def _check_keys(
        folder: Path, root: Any, template: dict[str, Any], saved: dict[str, Any]
    ) -> None:
        """The DCP checkpoint has every weight of the model, with its (global) shape."""
        missing = sorted(k for k in template if f"model.{k}" not in saved)
        if missing:
            raise CheckpointError(
                folder,
                f"does not fit the model ({type(root).__name__}): "
                + _problem_list("lacks", missing),
            )
        for key, value in template.items():
            size = getattr(saved[f"model.{key}"], "size", None)
            shape = tuple(getattr(value, "shape", ()))
            if size is not None and tuple(size) != shape:
                raise CheckpointError(
                    folder,
                    f"does not fit the model: {key} has shape {tuple(size)}, the model's is {shape}",
                )

    @staticmethod
    def _dcp_load(folder: Path, state: dict[str, Any]) -> None:
        """Read ``folder``'s shards into ``state``'s fresh tensors (collective; errors on all)."""
        from torch.distributed.checkpoint.filesystem import FileSystemReader
        from torch.distributed.checkpoint.state_dict_loader import load

        try:
            load(state, storage_reader=FileSystemReader(folder))
        except Exception as exc:
            raise _dcp_error(folder, exc) from exc

    def __repr__(self) -> str:
        return f"FSDPCheckpoint({self.kind!r}, cpu_offload={self.cpu_offload})"

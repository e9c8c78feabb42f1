"""``save_model``'s files: a model's unwrapped weights for ``from_pretrained``-style loading.

``model.safetensors`` (``pytorch_model.bin`` with ``safe_serialization=False``), split into
``model-00001-of-0000N.safetensors`` shards with an index above ``max_shard_size``, as Accelerate
writes them. Each file is written under a temporary name, fsynced, and renamed into place.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from accelkw_core.runtime.checkpoints import atomic_folders
from accelkw_core.runtime.checkpoints.aliases import without_aliases
from accelkw_core.runtime.checkpoints.layout import MODEL, SAFE_MODEL

__all__ = ["save_object", "save_pretrained"]

_SHARD = re.compile(r".*-\d{5}-of-\d{5}\.(bin|safetensors)")


def save_pretrained(
    weights: dict[str, Any], folder: Path, *, max_shard_size: int | str, safe_serialization: bool
) -> None:
    """Write ``weights`` into ``folder`` (made if needed), replacing a previous save's files."""
    from huggingface_hub import split_torch_state_dict_into_shards

    folder.mkdir(parents=True, exist_ok=True)
    if safe_serialization:
        weights = without_aliases(weights)
    name = SAFE_MODEL if safe_serialization else MODEL
    stem, suffix = name.rsplit(".", 1)
    split = split_torch_state_dict_into_shards(
        weights,
        filename_pattern=stem + "{suffix}." + suffix,
        max_shard_size=max_shard_size,
    )
    for filename, keys in split.filename_to_tensors.items():
        _replace_file(folder / filename, {k: weights[k] for k in keys}, safe_serialization)
    for stale in folder.iterdir():
        if (
            stale.name.startswith(stem)
            and _SHARD.fullmatch(stale.name)
            and stale.name not in split.filename_to_tensors
        ):
            stale.unlink()
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        text = json.dumps(index, indent=2, sort_keys=True) + "\n"
        _replace_bytes(folder / (name + ".index.json"), text.encode())


def _replace_bytes(path: Path, data: bytes | memoryview) -> None:
    temporary = path.with_name(f".{path.name}{atomic_folders.TMP_SUFFIX}")
    atomic_folders.write_durably(temporary, data)
    os.replace(temporary, path)
    atomic_folders.fsync_dir(path.parent)


def _serialized(obj: Any, safe: bool) -> bytes | memoryview:
    """``obj`` as a file's bytes: a dict of tensors as safetensors, else ``torch.save``'s."""
    import io

    import torch

    if safe:
        from safetensors.torch import save

        return save({k: v.detach().contiguous() for k, v in obj.items()}, metadata={"format": "pt"})
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getbuffer()


def _replace_file(path: Path, tensors: dict[str, Any], safe: bool) -> None:
    _replace_bytes(path, _serialized(tensors, safe))


def save_object(obj: Any, f: Any, *, safe_serialization: bool) -> None:
    """Write ``obj`` to ``f`` (a path or a binary file object) as Accelerate's ``save`` does.

    ``safe_serialization``: ``obj`` is a dict of tensors written as safetensors (tensors sharing
    storage kept once); else ``torch.save``. A path is written under a temporary name and
    renamed into place, so a reader never sees half a file.
    """
    data = _serialized(
        without_aliases(dict(obj)) if safe_serialization else obj, safe_serialization
    )
    if isinstance(f, str | os.PathLike):
        _replace_bytes(Path(f), data)
    else:
        f.write(data)

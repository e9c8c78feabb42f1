"""``DataLoaderConfiguration``: how ``Accelerator.prepare`` shards data loaders (Accelerate's class).

Every field is Accelerate 1.15's, with its default. Each is either carried out by the runtime
(``split_batches``, ``dispatch_batches``, ``even_batches``, ``use_seedable_sampler``,
``data_seed``, ``non_blocking``) or refused when set to what the runtime cannot do
(``use_stateful_dataloader=True``), with the reason, rather than silently ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from accelkw_core.errors import ConfigError

__all__ = ["DataLoaderConfiguration"]

_NAME = "dataloader_config"

# Settings accelkw refuses, with why: a value that cannot take effect is an error, not a no-op.
_REFUSED = {
    "use_stateful_dataloader": (
        "False: torchdata's StatefulDataLoader is not supported; save_state keeps a prepared "
        "loader's epoch and shuffling generator instead"
    ),
}


@dataclass
class DataLoaderConfiguration:
    """How prepared data loaders are built (``Accelerator(dataloader_config=...)``).

    - ``split_batches``: each batch the loader yields is split across the processes (its batch
      size must then be a multiple of the number of processes); by default each process gets
      whole batches, so the batch size per step is ``batch_size * num_processes``.
    - ``dispatch_batches``: the main process reads the loader and sends each process its slice
      of every batch; ``None`` (the default) means ``True`` for a loader over an
      ``IterableDataset`` and ``False`` otherwise, where every process reads its own share.
    - ``even_batches``: complete the last round with samples from the start so every process
      gets as many batches of the same size (``False``: the last batches are left short and
      some processes may get one batch fewer). Map-style loaders read by every process only,
      as in Accelerate: a stream, or a dispatched loader, always completes its last batch
      unless ``drop_last``.
    - ``use_seedable_sampler``: a shuffling loader draws each epoch's order from a generator
      seeded with ``data_seed`` (else torch's initial seed) plus the epoch.
    - ``non_blocking``: batches are moved to the device with ``non_blocking=True``.
    - ``use_stateful_dataloader``: only ``False``.
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise :class:`~accelkw_core.errors.ConfigError` for a field set to what cannot apply.

        Construction checks; ``prepare`` checks again, since a field may be set afterwards.
        """
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "data_seed":
                if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                    raise ConfigError(_NAME, f.name, value, "an int or None")
                continue
            optional = f.name == "dispatch_batches"
            if not isinstance(value, bool) and not (optional and value is None):
                raise ConfigError(_NAME, f.name, value, "True or False" + (" or None" * optional))
        for name, expected in _REFUSED.items():
            if getattr(self, name):
                raise ConfigError(_NAME, name, getattr(self, name), expected)

    def to_dict(self) -> dict[str, Any]:
        """Every field and its value."""
        return dataclasses.asdict(self)

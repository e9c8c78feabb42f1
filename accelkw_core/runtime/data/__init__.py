"""The run's data loaders: sharded across processes, their batches on the device, their position
kept.

:mod:`.loading` (``DataLoading``, the ``Accelerator``'s collaborator for data), :mod:`.data_loader`
(the prepared loader, its samplers, ``skip_first_batches``), :mod:`.dataloader_config`
(``DataLoaderConfiguration``), :mod:`.batch_dispatch` (a stream shared across processes),
:mod:`.read_ahead` (what a pass drew ahead of the loop, replayed by a resumed pass),
:mod:`.generators` (the process's global generators as one) and :mod:`.worker_draws` (worker
processes' generators, sent with their batches and set when they start).
"""

__all__: list[str] = []

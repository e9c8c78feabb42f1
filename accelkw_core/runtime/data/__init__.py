"""The run's data loaders: sharded across processes, their batches on the device, their position
kept.

:mod:`.loading` (``DataLoading``, the ``Accelerator``'s collaborator for data), :mod:`.data_loader`
(the prepared loader, its samplers, ``skip_first_batches``), :mod:`.dataloader_config`
(``DataLoaderConfiguration``) and :mod:`.batch_dispatch` (a stream shared across processes).
"""

__all__: list[str] = []

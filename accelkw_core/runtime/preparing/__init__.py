"""``prepare``: models, optimizers, schedulers and data loaders made ready, and the record of them.

:mod:`.preparation` (``Preparation``, the ``Accelerator``'s collaborator for ``prepare``),
:mod:`.prepared` (``Prepared``, the record the collaborators share), :mod:`.optimizer`
(``AcceleratedOptimizer``) and :mod:`.scheduler` (``AcceleratedScheduler``).
"""

__all__: list[str] = []

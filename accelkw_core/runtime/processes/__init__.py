"""The run's processes: which kind of run this is, and how they take turns or share work.

:mod:`.coordination` (``Processes``, the ``Accelerator``'s collaborator:
``split_between_processes``, ``main_process_first``, ``on_process``, gathering, waiting) and
:mod:`.operations` (Accelerate's free collective helpers, ``accelkw_core.utils.gather`` and
friends). The collectives the runtime itself uses are :mod:`accelkw_core.runtime.collectives`.
"""

__all__: list[str] = []

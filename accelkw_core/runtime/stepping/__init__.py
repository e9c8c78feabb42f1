"""What happens between two batches: forward contexts, backward, accumulation, clipping, the step
chain.

:mod:`.training_step` (``Stepping``, the ``Accelerator``'s collaborator, and the optimizer's step
chain), :mod:`.forward` (a prepared model's forward under the contexts) and :mod:`.clipping`
(unscale, then clip). The gradient-sync state they read is
:mod:`accelkw_core.runtime.accumulation`'s ``GradientState``.
"""

__all__: list[str] = []

"""The run under the ``Accelerator``: its state and the collaborators the ``Accelerator`` uses.

At the bottom, what every other part reads: :mod:`.state` (``RunState``, the facts of the run and
what handlers contributed), :mod:`.kinds` (``DistributedType``), :mod:`.collectives` (gather,
reduce and barrier across the processes) and :mod:`.accumulation` (``GradientState``, the one owner
of the gradient-sync facts). Over them :mod:`.checkpoints` (the save and load protocols and their
manager), then, by role: :mod:`.composing` (the state built from handlers), :mod:`.preparing`,
:mod:`.stepping`, :mod:`.data`, :mod:`.processes`, and one collaborator each in
:mod:`.attribute_contributions`, :mod:`.profiling` and :mod:`.trackers`. :mod:`.availability`,
:mod:`.memory` and :mod:`.seeding` are Accelerate's free helpers that ``accelkw_core.utils``
serves.
"""

__all__: list[str] = []

"""The run's state built from handlers: composed, planned, claimed keywords, missing capabilities.

:mod:`.composition` (the user's handlers plus defaults, ordered, applied all or nothing),
:mod:`.planning` (each handler's plan on a state: what ``accelkw plan`` prints and ``apply``
carries out), :mod:`.keywords` (``Accelerator`` keywords that handlers claim) and
:mod:`.missing_capabilities` (what a multi-process run lacks when no handler provides it, said out
loud).
"""

__all__: list[str] = []

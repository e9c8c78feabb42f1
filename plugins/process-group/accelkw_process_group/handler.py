"""``InitProcessGroupKwargs``: how the ``torch.distributed`` process group is initialised."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from accelkw_core.plugin import TEARDOWN, ConfigError, KwargsHandler, Plan, handler_field
from accelkw_process_group._backends import (
    available_backends,
    backend_names,
    check_backend,
    cuda_usable,
    fallback_backend,
    is_available,
)
from accelkw_process_group._exit_guard import release_retired, retire, settle_workers_at_exit

if TYPE_CHECKING:
    from accelkw_core.plugin import AcceleratorState

__all__ = ["GroupPlan", "InitProcessGroupKwargs"]

NAME = "process_group"


@dataclass(frozen=True)
class GroupPlan:
    """What :meth:`InitProcessGroupKwargs.plan` passes to ``init_process_group``, and why.

    ``None`` for ``backend``, ``init_method`` or ``timeout`` means the argument is left to
    torch (its default backend, ``env://``, its backend-dependent timeout). ``notes`` explain
    each choice; ``fallback`` is set when the default ``'nccl'`` was replaced.
    """

    backend: str | None
    init_method: str | None
    timeout: timedelta | None
    notes: tuple[str, ...]
    fallback: str | None = None

    def init_kwargs(self, rank: int, world_size: int) -> dict[str, Any]:
        """Keyword arguments for ``torch.distributed.init_process_group``."""
        kwargs: dict[str, Any] = {"backend": self.backend, "rank": rank, "world_size": world_size}
        if self.init_method is not None:
            kwargs["init_method"] = self.init_method
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        return kwargs


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Customise how the distributed process group is initialised (Accelerate's handler).

    On a run with more than one process, ``apply`` calls
    ``torch.distributed.init_process_group(backend, init_method=..., timeout=..., rank=...,
    world_size=...)`` unless a group already exists, and registers a teardown that destroys
    the group it created. Every value you set is used, even one equal to a default; the default
    ``'nccl'`` becomes ``'gloo'`` on a run without CUDA (and the state's log says so), while an
    explicit ``'nccl'`` there is a :class:`~accelkw_core.ConfigError`.

    Example::

        from datetime import timedelta
        from accelkw_process_group import InitProcessGroupKwargs

        accelerator = Accelerator(
            kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=800))]
        )
    """

    name: ClassVar[str] = NAME

    backend: str | None = handler_field(
        "nccl",
        doc="The torch.distributed backend ('gloo', 'nccl', 'mpi', 'ucc', 'xccl' or a per-device "
        "string such as 'cpu:gloo,cuda:nccl'); None lets torch choose. The default 'nccl' "
        "becomes 'gloo' on a run without CUDA.",
    )
    init_method: str | None = handler_field(
        None,
        doc="Rendezvous URL ('env://', 'tcp://HOST:PORT', 'file:///PATH'); None means env:// "
        "with MASTER_ADDR and MASTER_PORT, as torchrun sets them.",
    )
    # handler_field returns dataclasses.field(...), which ruff cannot see through.
    timeout: timedelta | None = handler_field(
        None,
        doc="How long collectives and the rendezvous wait before failing; None keeps torch's "
        "backend-dependent default. An explicit value is always passed, even one equal to a "
        "default.",
    )

    def check_values(self) -> None:
        """Reject unknown backend names and init methods that are not URLs."""
        if self.backend is not None:
            check_backend(NAME, self.backend)
        if self.init_method is not None and "://" not in self.init_method:
            raise ConfigError(
                NAME,
                "init_method",
                self.init_method,
                "a URL such as 'env://', 'tcp://HOST:PORT' or 'file:///PATH', or None",
            )

    def group_plan(self, state: AcceleratorState) -> GroupPlan:
        """What ``apply`` would pass to ``init_process_group`` on ``state``; creates nothing.

        Raises :class:`~accelkw_core.ConfigError` when the backend cannot run here or no
        rendezvous is configured.
        """
        explicit = self.explicit_fields()
        backend, backend_note, fallback = self._plan_backend(state, "backend" in explicit)
        init_method, init_note = self._plan_init_method(state)
        if self.timeout is not None:
            timeout_note = f"timeout {_show(self.timeout)} (set explicitly)"
        else:
            timeout_note = "timeout: torch's default for the backend"
        return GroupPlan(
            backend, init_method, self.timeout, (backend_note, init_note, timeout_note), fallback
        )

    def plan(self, state: AcceleratorState) -> Plan:
        """Initialise the process group on a multi-process ``state`` (or use the existing one).

        Raises :class:`~accelkw_core.plugin.ConfigError` when the backend cannot run here or no
        rendezvous is configured. Creates nothing: the group is created when the plan is
        carried out.
        """
        plan = Plan(NAME)
        if state.world_size <= 1:
            return plan.note("world size 1: no process group")
        import torch.distributed as dist

        if not dist.is_available():
            raise ConfigError(
                NAME, "backend", self.backend, "a torch build with torch.distributed support"
            )
        if dist.is_initialized():
            return self._use_existing(plan, state)
        group = self.group_plan(state)
        if group.fallback is not None:
            plan.note(group.fallback)
        return plan.run(
            functools.partial(_init_group, group),
            f"initialise the process group: rank {state.rank} of {state.world_size}; "
            + "; ".join(group.notes),
            provides=("process_group",),
        )

    def _plan_backend(
        self, state: AcceleratorState, explicit: bool
    ) -> tuple[str | None, str, str | None]:
        value = self.backend
        if value is None:
            return None, "backend: torch's default for this machine (backend=None)", None
        names = backend_names(value) or []
        if "nccl" in names and not cuda_usable(state):
            where = (
                "this run is on CPU"
                if state.device_type == "cpu"
                else f"CUDA is not available (device type {state.device_type!r})"
            )
            if not explicit:
                chosen = fallback_backend(state.device_type)
                why = f"the default backend 'nccl' needs CUDA and {where}: using {chosen!r}"
                note = f"backend {chosen!r} (in place of the default 'nccl', which needs CUDA)"
                return chosen, note, f"{why} (set backend to choose)"
            if value.strip().lower() == "nccl":
                raise ConfigError(
                    NAME,
                    "backend",
                    value,
                    f"a backend that runs without CUDA: 'nccl' needs CUDA and {where}; "
                    "set backend='gloo' (or backend=None for torch's default)",
                )
        for name in names:
            if not is_available(name):
                raise ConfigError(
                    NAME,
                    "backend",
                    value,
                    f"a backend this torch build provides ({', '.join(available_backends())}); "
                    f"{name!r} is not built in",
                )
        origin = "set explicitly" if explicit else "the default"
        return value, f"backend {value!r} ({origin})", None

    def _plan_init_method(self, state: AcceleratorState) -> tuple[str | None, str]:
        if self.init_method is not None:
            return self.init_method, f"init_method {self.init_method!r} (set explicitly)"
        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if addr and port:
            return None, f"init_method env:// (MASTER_ADDR={addr}, MASTER_PORT={port})"
        if state.master_addr and state.master_port:
            host = f"[{state.master_addr}]" if ":" in state.master_addr else state.master_addr
            url = f"tcp://{host}:{state.master_port}"
            return url, f"init_method {url} (the run's master address; MASTER_ADDR is not set)"
        raise ConfigError(
            NAME,
            "init_method",
            None,
            "a rendezvous: MASTER_ADDR and MASTER_PORT are not set (torchrun and "
            "`accelkw launch` set them); set them, or set init_method='tcp://HOST:PORT'",
        )

    def _use_existing(self, plan: Plan, state: AcceleratorState) -> Plan:
        import torch.distributed as dist

        existing = str(dist.get_backend())
        size = dist.get_world_size()
        plan.note(
            f"using the existing process group (backend {existing!r}, {size} processes); "
            "it was not created here, so teardown leaves it alone",
        )
        unapplied = self._unapplied(existing)
        if unapplied:
            plan.note(
                "could not apply to the existing process group: "
                + ", ".join(unapplied)
                + " (set them where that group is created)"
            )
        if size != state.world_size:
            plan.note(f"the existing group has {size} processes but the run has {state.world_size}")
        return plan

    def _unapplied(self, existing_backend: str) -> list[str]:
        """The explicit settings an existing group (with ``existing_backend``) does not reflect."""
        out: list[str] = []
        for field_name in self._ordered(self.explicit_fields()):
            value = getattr(self, field_name)
            if (
                field_name == "backend"
                and isinstance(value, str)
                and value.strip().lower() == existing_backend.lower()
            ):
                continue
            out.append(f"{field_name}={_show(value)}")
        return out


def _show(value: object) -> str:
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    return repr(value)


#: Per rendezvous (its URL, address, port, rank and world size): the key-value store met
#: there, kept for the process's life, and how many groups this process started on it.
_RENDEZVOUS: dict[tuple[Any, ...], tuple[Any, int]] = {}


def _store_for(group: GroupPlan, state: AcceleratorState) -> Any:
    """The store a new group rendezvous through: the process's one store for that rendezvous,
    under a prefix of its own for each group this process starts on it.

    torch names the keys of each new default group alike, so a group started after an earlier
    one was destroyed (a second ``Accelerator`` after a handler's ``apply`` failed and undid
    the first) would read the first one's addresses: gloo then fails to connect, or waits.
    Keeping the store (and with it rank 0's server) for the process's life means every group
    meets on the same live server; a prefix per group means no key is ever read stale. The
    processes start their groups in the same order, so the n-th of each shares a prefix.
    """
    from torch.distributed.constants import default_pg_timeout
    from torch.distributed.distributed_c10d import PrefixStore
    from torch.distributed.rendezvous import rendezvous

    url = group.init_method or "env://"
    key = (
        url,
        os.environ.get("MASTER_ADDR"),
        os.environ.get("MASTER_PORT"),
        state.rank,
        state.world_size,
    )
    found = _RENDEZVOUS.get(key)
    if found is None:
        timeout = group.timeout or default_pg_timeout
        store, _, _ = next(rendezvous(url, state.rank, state.world_size, timeout=timeout))
        found = (store, 0)
    store, started = found
    _RENDEZVOUS[key] = (store, started + 1)
    return PrefixStore(f"accelkw_process_group/{started}", store)


def _init_group(group: GroupPlan, state: AcceleratorState) -> None:
    import torch.distributed as dist

    release_retired()  # an earlier run's destroyed groups, long idle now
    kwargs = group.init_kwargs(state.rank, state.world_size)
    kwargs.pop("init_method", None)  # met through the store instead
    store = _store_for(group, state)
    dist.init_process_group(store=store, **kwargs)
    # gloo's init returns on one process as soon as its own side of each connection is made;
    # a process whose next handler fails at once would destroy the group while a slower peer
    # is still connecting to it ("Connection closed by peer" there, seen under load). Each
    # process marks itself connected and waits for the others' marks: from here on, any
    # process may undo the group. The store, not a collective: nothing of the group is used.
    store.set(f"connected/{state.rank}", "1")
    store.wait([f"connected/{r}" for r in range(state.world_size)])
    created = dist.group.WORLD
    settle_workers_at_exit()

    def destroy() -> None:
        # Only the group made here: a user may have replaced it since.
        if dist.is_initialized() and dist.group.WORLD is created:
            dist.destroy_process_group()
            # Kept: freeing it here, or wherever a user drops the last model holding it,
            # could join a gloo worker that waits for the GIL this thread holds.
            retire(created)
            state.record(NAME, "destroyed the process group it created")
        else:
            state.record(
                NAME, "teardown: the group it created was already destroyed", applied=False
            )

    state.contribute(TEARDOWN, NAME, destroy)

"""Workers of tests/test_cuda.py (importable by the processes ``run_workers`` starts)."""

from __future__ import annotations

from typing import Any

BUILTINS = ["autocast", "ddp", "profile", "grad_scaler", "process_group"]


def accelerator(**kwargs: Any) -> Any:
    from accelkw_core import Accelerator
    from accelkw_core.discovery.registry import Registry

    return Accelerator(registry=Registry(allow=BUILTINS), **kwargs)


def nccl_ddp_worker(rank: int, comm_hook: str) -> dict[str, Any]:
    """nccl group, DDP on cuda:LOCAL_RANK with device_ids, an optional comm hook, one step."""
    import torch
    import torch.distributed as dist

    from accelkw_core.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    acc = accelerator(
        kwargs_handlers=[
            InitProcessGroupKwargs(backend="nccl"),
            DistributedDataParallelKwargs(comm_hook=comm_hook),
        ]
    )
    model = acc.prepare(torch.nn.Linear(4, 2))
    x = torch.full((3, 4), float(rank + 1), device=acc.device)
    acc.backward(model(x).sum())
    grads = acc.gather(model.module.weight.grad[None].float())
    out = {
        "backend": dist.get_backend(),
        "device": str(acc.device),
        "device_ids": model.device_ids,
        "distributed_type": acc.distributed_type.value,
        "synced": bool(torch.equal(grads[0], grads[1])),
    }
    acc.end_training()
    return out

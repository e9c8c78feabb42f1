"""Programs over Accelerate's everyday surface, run under Accelerate and accelkw alike.

Workers of ``run_workers`` live here so the spawned children import them; each takes the
framework's name and imports from it, as a ported script does.
"""

from __future__ import annotations

from typing import Any

from tests.conformance.runtime_programs import framework


def _batches(loader: Any) -> list[list[int]]:
    return [b.tolist() for b in loader]


def data_worker(rank: int, name: str) -> dict[str, Any]:
    """Data loader settings, skipping, triggers, LocalSGD and the free collectives, on 2 ranks."""
    import torch

    Accelerator, utils = framework(name)
    if name == "accelerate":
        from accelerate import skip_first_batches
        from accelerate.local_sgd import LocalSGD
    else:
        from accelkw_core import skip_first_batches
        from accelkw_core.local_sgd import LocalSGD
    config = utils.DataLoaderConfiguration()
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    out: dict[str, Any] = {"use_distributed": accelerator.use_distributed}

    def prepared(*, shuffle: bool = False, size: int = 4) -> Any:
        return accelerator.prepare(
            torch.utils.data.DataLoader(torch.arange(10), batch_size=size, shuffle=shuffle)
        )

    out["default"] = _batches(prepared())
    config.split_batches = True
    out["split"] = _batches(prepared())
    accelerator.even_batches = False
    out["split_uneven"] = _batches(prepared())
    config.split_batches = False
    out["uneven"] = _batches(prepared())
    accelerator.even_batches = True
    loader = prepared()
    out["skipped"] = _batches(accelerator.skip_first_batches(loader, num_batches=1))
    out["skipped_free"] = _batches(skip_first_batches(loader, num_batches=1))
    config.use_seedable_sampler = True
    config.data_seed = 7
    loader = prepared(shuffle=True)
    out["seedable"] = [_batches(loader), _batches(loader)]
    config.use_seedable_sampler = False

    if rank == 1:
        accelerator.set_trigger()
    out["triggers"] = [accelerator.check_trigger(), accelerator.check_trigger()]

    t = torch.tensor([float(rank + 1), 2.0 * (rank + 1)])
    out["gather"] = utils.gather(t).tolist()
    out["reduce"] = {r: utils.reduce(t, reduction=r).tolist() for r in ("mean", "sum", "max")}
    out["broadcast"] = utils.broadcast(t.clone(), from_process=1).tolist()
    ragged = torch.arange(rank + 1)
    out["padded"] = utils.pad_across_processes(ragged, pad_index=-1).tolist()
    out["padded_first"] = utils.pad_across_processes(ragged, pad_first=True).tolist()
    out["objects"] = utils.gather_object([f"r{rank}"])
    out["object_list"] = utils.broadcast_object_list([f"r{rank}", rank], from_process=1)

    utils.set_seed(3, device_specific=True)
    out["seeded"] = torch.rand(2).tolist()
    utils.set_seed(3)
    model = accelerator.prepare(torch.nn.Linear(3, 1))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    weights = []
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=2) as local_sgd:
        for step in range(3):
            x = torch.full((2, 3), float(rank + step))
            accelerator.backward(model(x).pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()
            local_sgd.step()
            weights.append(accelerator.unwrap_model(model).weight.flatten().tolist())
    weights.append(accelerator.unwrap_model(model).weight.flatten().tolist())
    out["local_sgd"] = weights
    accelerator.end_training()
    return out


def single_process(name: str) -> dict[str, Any]:
    """The same surface on one process, plus find_executable_batch_size and schedule-free."""
    import schedulefree
    import torch

    Accelerator, utils = framework(name)
    accelerator = Accelerator(cpu=True)
    out: dict[str, Any] = {"use_distributed": accelerator.use_distributed}
    tried: list[int] = []

    @utils.find_executable_batch_size(starting_batch_size=64)
    def train(batch_size: int, scale: int) -> int:
        tried.append(batch_size)
        if batch_size > 40:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")
        return batch_size * scale

    out["found"] = train(2)
    out["tried"] = tried
    utils.set_seed(11)
    out["seeded"] = [torch.rand(1).item(), __import__("random").random()]
    loader = accelerator.prepare(torch.utils.data.DataLoader(torch.arange(7), batch_size=2))
    out["skipped"] = _batches(accelerator.skip_first_batches(loader, 2))
    out["reduced"] = utils.reduce({"a": torch.tensor([1.0, 3.0])}, reduction="mean")["a"].tolist()
    out["sent"] = utils.send_to_device({"x": torch.ones(1), "keep": [1]}, "cpu", skip_keys="keep")[
        "keep"
    ]
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    optimizer = accelerator.prepare(schedulefree.SGDScheduleFree(model.parameters(), lr=0.5))
    optimizer.train()
    for _ in range(2):
        accelerator.backward(model(torch.ones(4, 2)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    optimizer.eval()
    out["schedule_free"] = accelerator.unwrap_model(model).weight.flatten().tolist()
    out["available"] = {
        n: bool(getattr(utils, n)())
        for n in (
            "is_schedulefree_available",
            "is_tensorboard_available",
            "is_wandb_available",
            "is_transformers_available",
            "is_datasets_available",
            "is_timm_available",
            "is_cuda_available",
            "is_bf16_available",
            "is_npu_available",
            "is_xpu_available",
        )
    }
    accelerator.end_training()
    return out

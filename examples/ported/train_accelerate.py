"""A small training script written for Hugging Face Accelerate.

train_accelkw.py is this file with only its import lines changed; tests/test_ported_script.py
runs both, on one and two CPU processes, and compares what they print.

Run: python train_accelerate.py --mixed-precision bf16 --checkpoint-dir ckpt --out result.json
(or under torchrun --nproc_per_node 2).
"""

import argparse
import json

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, GradScalerKwargs


def data(n, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    y = (x @ torch.linspace(-1, 1, 8)).unsqueeze(1) + 0.1 * torch.randn(n, 1, generator=generator)
    return torch.utils.data.TensorDataset(x, y)


def train_epoch(accelerator, model, optimizer, scheduler, loader):
    model.train()
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(accelerator.gather(loss.detach()[None]).mean().item())
    return losses


def evaluate(accelerator, model, loader):
    model.eval()
    predictions, targets = [], []
    with torch.no_grad():
        for x, y in loader:
            prediction, target = accelerator.gather_for_metrics((model(x), y))
            predictions.append(prediction)
            targets.append(target)
    predictions, targets = torch.cat(predictions), torch.cat(targets)
    mse = torch.nn.functional.mse_loss(predictions.float(), targets).item()
    return {"samples": len(targets), "mse": mse}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mixed-precision", default="no")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    handlers = [DistributedDataParallelKwargs(bucket_cap_mb=25)]
    if args.mixed_precision == "fp16":
        handlers.append(GradScalerKwargs(init_scale=1024, growth_interval=4))
    accelerator = Accelerator(
        cpu=True, mixed_precision=args.mixed_precision, kwargs_handlers=handlers
    )

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.8)
    train_loader = torch.utils.data.DataLoader(data(64, 1), batch_size=4, shuffle=True)
    eval_loader = torch.utils.data.DataLoader(data(11, 2), batch_size=4)
    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler
    )

    losses = train_epoch(accelerator, model, optimizer, scheduler, train_loader)
    accelerator.save_state(args.checkpoint_dir)
    later = []
    for _ in range(args.epochs - 1):
        later += train_epoch(accelerator, model, optimizer, scheduler, train_loader)
    result = {
        "losses": losses + later,
        "eval": evaluate(accelerator, model, eval_loader),
        "lr": scheduler.get_last_lr(),
        "scaler": accelerator.scaler is not None,
        "num_processes": accelerator.num_processes,
    }

    # Resume from the checkpoint taken after the first epoch: the later epochs again.
    accelerator.load_state(args.checkpoint_dir)
    resumed = []
    for _ in range(args.epochs - 1):
        resumed += train_epoch(accelerator, model, optimizer, scheduler, train_loader)
    result["resumed_losses"] = resumed
    result["resumed_equal"] = resumed == later

    if accelerator.is_main_process:
        with open(args.out, "w") as f:
            json.dump(result, f)
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""Accumulation with a loss normalised by the tokens of the whole update (what
``gradient_accumulation_for_autoregressive_models`` covers).

Calls: ``local_main_process_first`` and ``main_process_first`` around data preparation,
``gather`` of each process's counted tokens (so every process divides by the update's total),
the prepared model's ``no_sync`` on all but the last batch of an update when ``num_processes``
is above one, ``backward``, ``clip_grad_norm_`` (its returned norm printed), a constant scheduler
from torch, ``gather`` of the summed losses, ``gather_for_metrics`` of evaluation losses.
"""

import contextlib
import math

import toolkit
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed


def main():
    parser = toolkit.parser()
    parser.add_argument("--gradient_accumulation_steps", type=int, default=2)
    args = parser.parse_args()
    window = args.gradient_accumulation_steps

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    with accelerator.local_main_process_first():
        train_rows = toolkit.sequence_rows(44, seed=12)
    with accelerator.main_process_first():
        held_rows = [row for row in toolkit.sequence_rows(15, seed=13) if len(row["tokens"]) > 1]
    set_seed(17)
    train = torch.utils.data.DataLoader(train_rows, 3, shuffle=True, collate_fn=toolkit.shift)
    held = torch.utils.data.DataLoader(held_rows, 2, collate_fn=toolkit.shift)
    model = toolkit.NextToken()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.03)
    schedule = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0)
    model, optimizer, train, held, schedule = accelerator.prepare(
        model, optimizer, train, held, schedule
    )
    updates = math.ceil(len(train) / window)
    for epoch in range(2):
        model.train()
        batches = iter(train)
        for update in range(updates):
            group = [next(batches) for _ in range(min(window, len(train) - update * window))]
            here = sum((batch["targets"] != -100).sum() for batch in group)
            counted = accelerator.gather(here).sum().item()
            total = torch.zeros(())
            for i, batch in enumerate(group):
                last = i == len(group) - 1
                quiet = model.no_sync if accelerator.num_processes > 1 and not last else None
                with quiet() if quiet else contextlib.nullcontext():
                    # DDP averages over processes: scale back to a sum over the whole update.
                    loss = model(**batch, counted=counted) * accelerator.num_processes
                    accelerator.backward(loss)
                    total += loss.detach()
            norm = accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            mean = accelerator.gather(total[None]).sum().item() / accelerator.num_processes
            accelerator.print(
                f"epoch {epoch} update {update}: norm {norm.item():.6f} loss {mean:.6f}"
            )
        model.eval()
        losses = []
        for batch in held:
            with torch.no_grad():
                losses.append(accelerator.gather_for_metrics(model(**batch)[None]))
        accelerator.print(f"epoch {epoch}: perplexity {math.exp(torch.cat(losses).mean()):.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""Classify token rows: the plain loop (what ``nlp_example`` covers).

Calls: ``Accelerator(cpu=, mixed_precision=)``, ``distributed_type`` against ``DistributedType``,
``num_processes``, ``main_process_first``, ``prepare`` of a model, an optimizer, two loaders and
a scheduler, ``device``, ``backward``, the prepared optimizer's and scheduler's steps,
``gather_for_metrics`` over a short last batch (in ``toolkit.evaluate``), ``print``,
``end_training``; ``set_seed`` from ``accelerate.utils``.
"""

import toolkit
import torch
from accelerate import Accelerator, DistributedType
from accelerate.utils import set_seed


def main():
    parser = toolkit.parser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    if accelerator.distributed_type == DistributedType.MULTI_CPU:
        accelerator.print(f"data parallel over {accelerator.num_processes} processes")
    with accelerator.main_process_first():
        train_rows, held_rows = toolkit.token_rows(32, seed=1), toolkit.token_rows(21, seed=2)
    set_seed(7)
    train = torch.utils.data.DataLoader(train_rows, 4, shuffle=True, collate_fn=toolkit.pad)
    held = torch.utils.data.DataLoader(held_rows, 5, collate_fn=toolkit.pad)
    model = toolkit.BagOfTokens().to(accelerator.device)
    optimizer, schedule = toolkit.optimizer_and_schedule(model, args.epochs * len(train))
    model, optimizer, train, held, schedule = accelerator.prepare(
        model, optimizer, train, held, schedule
    )
    for epoch in range(args.epochs):
        loss = toolkit.train_epoch(accelerator, model, optimizer, schedule, train)
        result = toolkit.evaluate(accelerator, model, held)
        accelerator.print(f"epoch {epoch}: loss {loss} here, {result}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

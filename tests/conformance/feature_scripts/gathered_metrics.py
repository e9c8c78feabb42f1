"""Metrics over every process's rows, gathered by hand and by the helper (what
``multi_process_metrics`` covers).

Calls: ``gather`` of predictions and labels, trimmed by hand on the last batch when
``use_distributed`` (the samples the padded sampler repeated dropped by counting
``len(loader.dataset)``), next to ``gather_for_metrics`` of the same batches; both sets printed.
"""

import toolkit
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed


def main():
    parser = toolkit.parser()
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    set_seed(53)
    train = torch.utils.data.DataLoader(
        toolkit.token_rows(32, seed=26), 4, shuffle=True, collate_fn=toolkit.pad
    )
    # 23 rows in batches of 3: on two processes the last round repeats a row.
    held = torch.utils.data.DataLoader(toolkit.token_rows(23, seed=27), 3, collate_fn=toolkit.pad)
    model = toolkit.BagOfTokens()
    optimizer, schedule = toolkit.optimizer_and_schedule(model, 2 * len(train))
    model, optimizer, train, held, schedule = accelerator.prepare(
        model, optimizer, train, held, schedule
    )
    for epoch in range(2):
        toolkit.train_epoch(accelerator, model, optimizer, schedule, train)
        model.eval()
        by_hand, helped, seen = [], [], 0
        for step, batch in enumerate(held):
            with torch.no_grad():
                guesses = model(batch["tokens"])["logits"].argmax(-1)
            gathered, labels = accelerator.gather((guesses, batch["labels"]))
            if accelerator.use_distributed and step == len(held) - 1:
                gathered = gathered[: len(held.dataset) - seen]
                labels = labels[: len(held.dataset) - seen]
            seen += labels.numel()
            by_hand.append((gathered, labels))
            helped.append(accelerator.gather_for_metrics((guesses, batch["labels"])))
        for name, pairs in (("gather", by_hand), ("gather_for_metrics", helped)):
            guesses, labels = (torch.cat(part) for part in zip(*pairs, strict=True))
            result = toolkit.scores(guesses, labels)
            accelerator.print(f"epoch {epoch} {name}: {result} over {labels.numel()} rows")
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""Train one model per fold and average their predictions (what ``cross_validation`` covers).

Calls: ``free_memory(model, optimizer)`` between folds (returning the released objects), a fresh
``prepare`` per fold of new loaders and a new model, ``gather_for_metrics`` on the fold's held-out
rows and on a shared test set whose gathered logits are averaged over the folds,
``distributed_type``, ``main_process_first``.
"""

import toolkit
import torch
from accelerate import Accelerator, DistributedType
from accelerate.utils import set_seed

FOLDS = 3


def fold_rows(rows, fold):
    """Every FOLDS-th row (from ``fold``) held out, the rest trained on."""
    held = rows[fold::FOLDS]
    return [row for i, row in enumerate(rows) if i % FOLDS != fold], held


def predict(accelerator, model, loader):
    model.eval()
    logits, labels = [], []
    for batch in loader:
        with torch.no_grad():
            out = model(batch["tokens"])["logits"]
        out, label = accelerator.gather_for_metrics((out, batch["labels"]))
        logits.append(out)
        labels.append(label)
    return torch.cat(logits), torch.cat(labels)


def main():
    parser = toolkit.parser()
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    if accelerator.distributed_type == DistributedType.MULTI_CPU:
        accelerator.print("folds trained data parallel")
    with accelerator.main_process_first():
        rows, test_rows = toolkit.token_rows(42, seed=16), toolkit.token_rows(13, seed=17)
    set_seed(31)
    summed = None
    model = optimizer = None
    for fold in range(FOLDS):
        model, optimizer = accelerator.free_memory(model, optimizer)
        train_rows, held_rows = fold_rows(rows, fold)
        make = torch.utils.data.DataLoader
        train = make(train_rows, 4, shuffle=True, collate_fn=toolkit.pad)
        held = make(held_rows, 3, collate_fn=toolkit.pad)
        test = make(test_rows, 3, collate_fn=toolkit.pad)
        model = toolkit.BagOfTokens()
        optimizer, schedule = toolkit.optimizer_and_schedule(model, 2 * len(train))
        model, optimizer, train, held, test, schedule = accelerator.prepare(
            model, optimizer, train, held, test, schedule
        )
        for epoch in range(2):
            toolkit.train_epoch(accelerator, model, optimizer, schedule, train)
            logits, labels = predict(accelerator, model, held)
            result = toolkit.scores(logits.argmax(-1), labels)
            accelerator.print(f"fold {fold} epoch {epoch}: {result}")
        logits, test_labels = predict(accelerator, model, test)
        summed = logits if summed is None else summed + logits
    result = toolkit.scores((summed / FOLDS).argmax(-1), test_labels)
    accelerator.print(f"averaged over {FOLDS} folds: {result}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""Classify pictures by where their bright square is (what ``cv_example`` covers).

Calls: ``Accelerator(cpu=, mixed_precision=)``, ``set_seed`` from ``accelerate.utils`` before a
training transform that draws from torch's generator in the loader, ``device`` (the
normalisation's tensors moved to it), ``prepare``, ``backward``, a one-cycle scheduler stepped
per batch, ``gather_for_metrics``, ``print``, ``end_training``.
"""

import toolkit
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed


def main():
    parser = toolkit.parser()
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    set_seed(3)
    rows = toolkit.picture_rows(45, seed=5)
    train = torch.utils.data.DataLoader(
        toolkit.Transformed(rows[:30], toolkit.Jitter()), batch_size=5, shuffle=True
    )
    held = torch.utils.data.DataLoader(toolkit.Transformed(rows[30:]), batch_size=4)
    model = toolkit.SquareNet().to(accelerator.device)
    centre = torch.full((1, 3, 1, 1), 0.5, device=accelerator.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=0.3, epochs=3, steps_per_epoch=len(train)
    )
    model, optimizer, train, held, schedule = accelerator.prepare(
        model, optimizer, train, held, schedule
    )
    for epoch in range(3):
        model.train()
        for batch in train:
            logits = model(batch["pixels"] - centre)
            loss = torch.nn.functional.cross_entropy(logits, batch["label"])
            accelerator.backward(loss)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
        model.eval()
        right = seen = 0
        for batch in held:
            with torch.no_grad():
                guesses = model(batch["pixels"] - centre).argmax(-1)
            guesses, labels = accelerator.gather_for_metrics((guesses, batch["label"]))
            right += int((guesses == labels).sum())
            seen += labels.numel()
        accelerator.print(
            f"epoch {epoch}: {right}/{seen} right, lr {schedule.get_last_lr()[0]:.6f}"
        )
    accelerator.end_training()


if __name__ == "__main__":
    main()

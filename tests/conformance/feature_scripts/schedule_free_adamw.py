"""Schedule-free AdamW, switched between its training and evaluation weights (what
``schedule_free`` covers).

Calls: ``is_schedulefree_available`` from ``accelerate.utils``, ``prepare`` of a
``schedulefree.AdamWScheduleFree`` (no scheduler), the prepared optimizer's ``train()`` before an
epoch and ``eval()`` before evaluating (which the wrapper passes to the optimizer),
``gather_for_metrics``.
"""

import toolkit
from accelerate import Accelerator
from accelerate.utils import is_schedulefree_available, set_seed

if not is_schedulefree_available():
    raise SystemExit("schedule_free_adamw.py needs `pip install schedulefree`")
import schedulefree


def main():
    parser = toolkit.parser()
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    set_seed(61)
    train, held = toolkit.token_loaders(32, 11, seed=30, batch_size=4, held_batch_size=4)
    model = toolkit.BagOfTokens()
    optimizer = schedulefree.AdamWScheduleFree(model.parameters(), lr=0.05, warmup_steps=4)
    model, optimizer, train, held = accelerator.prepare(model, optimizer, train, held)
    for epoch in range(3):
        model.train()
        optimizer.train()
        for batch in train:
            accelerator.backward(model(**batch)["loss"])
            optimizer.step()
            optimizer.zero_grad()
        optimizer.eval()
        accelerator.print(f"epoch {epoch}: {toolkit.evaluate(accelerator, model, held)}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

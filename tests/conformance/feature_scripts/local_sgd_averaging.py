"""Local SGD: each process steps alone, the weights averaged every few steps (what ``local_sgd``
covers).

Calls: ``LocalSGD(accelerator=, model=, local_sgd_steps=, enabled=)`` from
``accelerate.local_sgd`` as a context manager around each epoch, its ``step()`` after each
optimizer step, inside ``accumulate`` with ``gradient_accumulation_steps=``; the weights agree
across processes at the end of each block.
"""

import toolkit
from accelerate import Accelerator
from accelerate.local_sgd import LocalSGD
from accelerate.utils import set_seed


def main():
    parser = toolkit.parser()
    parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
    parser.add_argument("--local_sgd_steps", type=int, default=None)
    args = parser.parse_args()

    accelerator = Accelerator(
        cpu=args.cpu,
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
    )
    set_seed(43)
    train, held = toolkit.token_loaders(40, 10, seed=22, batch_size=4, held_batch_size=4)
    model = toolkit.BagOfTokens()
    optimizer, schedule = toolkit.optimizer_and_schedule(model, 3 * len(train))
    model, optimizer, train, held, schedule = accelerator.prepare(
        model, optimizer, train, held, schedule
    )
    for epoch in range(3):
        model.train()
        with LocalSGD(
            accelerator=accelerator,
            model=model,
            local_sgd_steps=args.local_sgd_steps,
            enabled=args.local_sgd_steps is not None,
        ) as averaging:
            for batch in train:
                with accelerator.accumulate(model):
                    accelerator.backward(model(**batch)["loss"])
                    optimizer.step()
                    schedule.step()
                    optimizer.zero_grad()
                    averaging.step()
        accelerator.print(f"epoch {epoch}: {toolkit.evaluate(accelerator, model, held)}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

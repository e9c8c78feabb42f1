"""Gradient accumulation by the context manager (what ``gradient_accumulation`` covers).

Calls: ``Accelerator(gradient_accumulation_steps=)``, ``accumulate(model)`` around every batch
(the optimizer and scheduler stepped on every batch, acting only on the N-th and at the loader's
end), ``sync_gradients`` read inside it, ``distributed_type``, ``backward``,
``gather_for_metrics``.
"""

import toolkit
from accelerate import Accelerator, DistributedType
from accelerate.utils import set_seed


def main():
    parser = toolkit.parser()
    parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
    args = parser.parse_args()

    accelerator = Accelerator(
        cpu=args.cpu,
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
    )
    if accelerator.distributed_type == DistributedType.XLA:
        raise SystemExit("not on XLA")
    set_seed(5)
    # 30 rows in batches of 4: the last accumulation window is short.
    train, held = toolkit.token_loaders(30, 17, seed=8, batch_size=4, held_batch_size=4)
    model = toolkit.BagOfTokens()
    optimizer, schedule = toolkit.optimizer_and_schedule(model, 3 * len(train))
    model, optimizer, train, held, schedule = accelerator.prepare(
        model, optimizer, train, held, schedule
    )
    for epoch in range(3):
        model.train()
        updates = 0
        for batch in train:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch)["loss"])
                updates += int(accelerator.sync_gradients)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
        result = toolkit.evaluate(accelerator, model, held)
        accelerator.print(f"epoch {epoch}: {updates} updates, {result}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

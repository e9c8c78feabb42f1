"""Find the largest batch that fits, then train with it (what ``memory`` covers).

Calls: ``find_executable_batch_size`` from ``accelerate.utils`` with ``starting_batch_size=`` and
a ``reduce_batch_size_fn=`` that halves, the wrapped function taking the batch size first and an
argument of its own; retried while the script raises torch's CUDA out-of-memory wording for
batches above 6 and never for other errors (a ``ValueError`` passes through, caught and printed);
``free_memory()`` at each try, ``prepare``, ``gather_for_metrics``.
"""

import toolkit
import torch
from accelerate import Accelerator
from accelerate.utils import find_executable_batch_size, set_seed

LIMIT = 6


def main():
    parser = toolkit.parser()
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    sizes = {"next": 32}

    def halve():
        sizes["next"] //= 2
        return sizes["next"]

    @find_executable_batch_size(starting_batch_size=32, reduce_batch_size_fn=halve)
    def train(batch_size, epochs):
        accelerator.free_memory()
        accelerator.print(f"trying batches of {batch_size}")
        if batch_size > LIMIT:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (pretend)")
        set_seed(47)
        loader = torch.utils.data.DataLoader(
            toolkit.token_rows(36, seed=24), batch_size, shuffle=True, collate_fn=toolkit.pad
        )
        held = torch.utils.data.DataLoader(toolkit.token_rows(13, 25), 3, collate_fn=toolkit.pad)
        model = toolkit.BagOfTokens()
        optimizer, schedule = toolkit.optimizer_and_schedule(model, epochs * len(loader))
        model, optimizer, loader, held, schedule = accelerator.prepare(
            model, optimizer, loader, held, schedule
        )
        for epoch in range(epochs):
            toolkit.train_epoch(accelerator, model, optimizer, schedule, loader)
            accelerator.print(f"epoch {epoch}: {toolkit.evaluate(accelerator, model, held)}")
        return batch_size

    accelerator.print(f"trained with batches of {train(3)}")

    @find_executable_batch_size(starting_batch_size=8)
    def refuses(batch_size):
        raise ValueError(f"not a memory error at {batch_size}")

    try:
        refuses()
    except ValueError as error:
        accelerator.print(f"passed through: {error}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

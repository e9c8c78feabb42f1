"""Accumulation sized by the batch that fits (what ``automatic_gradient_accumulation`` covers).

Calls: ``find_executable_batch_size(starting_batch_size=)`` from ``accelerate.utils`` as a
decorator, retried here on an out-of-memory error the script raises itself for batches above 8
(torch's CPU allocator wording, which both frameworks recognise); inside it the
``gradient_accumulation_steps`` property set so that batch x steps stays 16, ``free_memory()``
before rebuilding, ``prepare``, ``accumulate``, ``gather_for_metrics``.
"""

import toolkit
import torch
from accelerate import Accelerator
from accelerate.utils import find_executable_batch_size, set_seed

WANTED = 16
FITS = 8


def main():
    parser = toolkit.parser()
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    rows = toolkit.token_rows(48, seed=10)
    tried = []

    @find_executable_batch_size(starting_batch_size=WANTED)
    def train(batch_size):
        tried.append(batch_size)
        accelerator.gradient_accumulation_steps = WANTED // batch_size
        accelerator.free_memory()
        set_seed(13)
        loader = torch.utils.data.DataLoader(rows, batch_size, shuffle=True, collate_fn=toolkit.pad)
        held = torch.utils.data.DataLoader(toolkit.token_rows(9, 11), 2, collate_fn=toolkit.pad)
        model = toolkit.BagOfTokens()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        model, optimizer, loader, held = accelerator.prepare(model, optimizer, loader, held)
        for epoch in range(3):
            model.train()
            for batch in loader:
                if batch["tokens"].shape[0] > FITS:
                    raise RuntimeError("DefaultCPUAllocator: can't allocate memory: (pretend)")
                with accelerator.accumulate(model):
                    accelerator.backward(model(**batch)["loss"])
                    optimizer.step()
                    optimizer.zero_grad()
            accelerator.print(f"epoch {epoch}: {toolkit.evaluate(accelerator, model, held)}")

    train()
    accelerator.print(f"tried {tried}, {accelerator.gradient_accumulation_steps} steps per update")
    accelerator.end_training()


if __name__ == "__main__":
    main()

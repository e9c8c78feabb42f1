"""Stop every process when one of them says so (what ``early_stopping`` covers).

Calls: ``set_trigger`` on the process whose own batch loss fell below a threshold (the processes
see different batches, so usually only one sets it), ``check_trigger`` on every process after
each step (true everywhere once any process set it, then reset), ``backward``, ``print``.
"""

import toolkit
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed


def main():
    parser = toolkit.parser()
    parser.add_argument("--good_enough", type=float, default=0.05)
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    set_seed(41)
    train, held = toolkit.token_loaders(48, 9, seed=20, batch_size=2, held_batch_size=2)
    model = toolkit.BagOfTokens()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    model, optimizer, train, held = accelerator.prepare(model, optimizer, train, held)
    stopped = None
    for epoch in range(3):
        model.train()
        for step, batch in enumerate(train):
            loss = model(**batch)["loss"]
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if loss.item() < args.good_enough:
                accelerator.set_trigger()
            if accelerator.check_trigger():
                stopped = (epoch, step)
                break
        accelerator.print(f"epoch {epoch}: {toolkit.evaluate(accelerator, model, held)}")
        if stopped:
            break
    accelerator.print(f"stopped at {stopped}; a second check says {accelerator.check_trigger()}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

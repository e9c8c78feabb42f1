"""Token rows with trackers and checkpoints (what ``complete_nlp_example`` covers).

Calls, beyond ``pairs.py``'s: ``DataLoaderConfiguration(use_stateful_dataloader=)`` passed as
``dataloader_config=``, ``log_with=`` (``"all"`` by default) with ``project_dir=``, ``init_trackers`` with a config,
``log`` at a step, ``save_state`` to a named folder every N steps or at each epoch's end,
``load_state`` from either, and ``skip_first_batches`` to resume mid-epoch.
"""

import os

import toolkit
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed


def where_to_resume(folder, steps_per_epoch):
    """(epoch, batches to skip in it) after the checkpoint ``folder`` (``epoch_E`` or ``step_S``)."""
    kind, number = os.path.basename(folder.rstrip("/")).split("_")
    if kind == "epoch":
        return int(number) + 1, 0
    return divmod(int(number), steps_per_epoch)


def main():
    parser = toolkit.parser()
    parser.add_argument("--use_stateful_dataloader", action="store_true")
    parser.add_argument("--save_every", default=None, help="'epoch' or a number of steps")
    parser.add_argument("--output_dir", default=".")
    parser.add_argument("--resume_from", default=None)
    parser.add_argument("--with_tracking", action="store_true")
    parser.add_argument("--log_with", default="all")
    parser.add_argument("--project_dir", default="logs")
    args = parser.parse_args()

    config = DataLoaderConfiguration(use_stateful_dataloader=args.use_stateful_dataloader)
    tracking = (
        {"log_with": args.log_with, "project_dir": args.project_dir} if args.with_tracking else {}
    )
    accelerator = Accelerator(
        cpu=args.cpu, mixed_precision=args.mixed_precision, dataloader_config=config, **tracking
    )
    hyper = {"lr": 0.05, "epochs": 3, "seed": 11, "batch_size": 4}
    if args.with_tracking:
        accelerator.init_trackers("token_pairs", hyper)
    set_seed(hyper["seed"])
    train = torch.utils.data.DataLoader(
        toolkit.token_rows(40, seed=3), hyper["batch_size"], shuffle=True, collate_fn=toolkit.pad
    )
    held = torch.utils.data.DataLoader(toolkit.token_rows(19, seed=4), 6, collate_fn=toolkit.pad)
    model = toolkit.BagOfTokens(width=6)
    optimizer, schedule = toolkit.optimizer_and_schedule(
        model, hyper["epochs"] * len(train), hyper["lr"]
    )
    model, optimizer, train, held, schedule = accelerator.prepare(
        model, optimizer, train, held, schedule
    )
    first_epoch, skip = 0, 0
    if args.resume_from:
        accelerator.load_state(args.resume_from)
        first_epoch, skip = where_to_resume(args.resume_from, len(train))
        accelerator.print(f"resumed at epoch {first_epoch}, batch {skip}")
    every = int(args.save_every) if (args.save_every or "").isdigit() else None
    for epoch in range(first_epoch, hyper["epochs"]):
        model.train()
        batches = accelerator.skip_first_batches(train, skip) if skip else train
        running = 0.0
        for step, batch in enumerate(batches, start=epoch * len(train) + skip):
            loss = model(**batch)["loss"]
            running += loss.item()
            accelerator.backward(loss)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            if every and (step + 1) % every == 0:
                accelerator.save_state(os.path.join(args.output_dir, f"step_{step + 1}"))
        skip = 0
        result = toolkit.evaluate(accelerator, model, held)
        accelerator.print(f"epoch {epoch}: {result}")
        if args.with_tracking:
            accelerator.log({"train_loss": running, "epoch": epoch, **result}, step=epoch)
        if args.save_every == "epoch":
            accelerator.save_state(os.path.join(args.output_dir, f"epoch_{epoch}"))
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""Metrics sent to every installed tracker (what ``tracking`` covers).

Calls: ``Accelerator(log_with="all", project_dir=)``, ``init_trackers(project_name, config)``
(the config holding an int, a float, a string and a bool), ``log`` of a dict at an explicit
``step`` each epoch, ``end_training`` (which finishes the trackers); without ``--with_tracking``
the same loop runs untracked.
"""

import toolkit
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed


def main():
    parser = toolkit.parser()
    parser.add_argument("--with_tracking", action="store_true")
    parser.add_argument("--project_dir", default="logs")
    args = parser.parse_args()

    options = {"log_with": "all", "project_dir": args.project_dir} if args.with_tracking else {}
    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision, **options)
    config = {"lr": 0.04, "epochs": 3, "optimizer": "adamw", "shuffle": True}
    if args.with_tracking:
        accelerator.init_trackers("tracked_run", config)
    set_seed(67)
    train = torch.utils.data.DataLoader(
        toolkit.token_rows(28, seed=32), 4, shuffle=config["shuffle"], collate_fn=toolkit.pad
    )
    held = torch.utils.data.DataLoader(toolkit.token_rows(9, seed=33), 4, collate_fn=toolkit.pad)
    model = toolkit.BagOfTokens()
    optimizer, schedule = toolkit.optimizer_and_schedule(model, 3 * len(train), config["lr"])
    model, optimizer, train, held, schedule = accelerator.prepare(
        model, optimizer, train, held, schedule
    )
    for epoch in range(config["epochs"]):
        loss = toolkit.train_epoch(accelerator, model, optimizer, schedule, train)
        result = toolkit.evaluate(accelerator, model, held)
        accelerator.print(f"epoch {epoch}: {result}")
        if args.with_tracking:
            accelerator.log({"loss": loss, **result, "epoch": epoch}, step=epoch)
    accelerator.end_training()


if __name__ == "__main__":
    main()

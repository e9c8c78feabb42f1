"""Pictures with trackers and checkpoints (what ``complete_cv_example`` covers).

Calls, beyond ``squares.py``'s: ``DataLoaderConfiguration`` as ``dataloader_config=``,
``log_with=`` one tracker by name (TensorBoard) and ``project_dir=``, ``init_trackers`` named
after the script, ``log`` each
epoch, ``save_state`` every N steps and at epoch ends into ``output_dir``, ``load_state`` of the
checkpoint taken after a given step, ``skip_first_batches`` for a checkpoint taken mid-epoch.
"""

import os

import toolkit
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed


def main():
    parser = toolkit.parser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--save_steps", type=int, default=0)
    parser.add_argument("--resume_after", type=int, default=0, help="a step saved before")
    parser.add_argument("--project_dir", default="logs")
    args = parser.parse_args()

    accelerator = Accelerator(
        cpu=args.cpu,
        mixed_precision=args.mixed_precision,
        dataloader_config=DataLoaderConfiguration(),
        log_with="tensorboard",
        project_dir=args.project_dir,
    )
    accelerator.init_trackers(os.path.basename(__file__)[:-3], {"lr": 0.2, "epochs": 3})
    set_seed(21)
    rows = toolkit.picture_rows(42, seed=6)
    train = torch.utils.data.DataLoader(
        toolkit.Transformed(rows[:32], toolkit.Jitter()), batch_size=4, shuffle=True
    )
    held = torch.utils.data.DataLoader(toolkit.Transformed(rows[32:]), batch_size=3)
    model = toolkit.SquareNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.7)
    model, optimizer, train, held, schedule = accelerator.prepare(
        model, optimizer, train, held, schedule
    )
    steps = args.resume_after
    if steps:
        accelerator.load_state(os.path.join(args.output_dir, f"at-{steps}"))
        accelerator.print(f"resumed after step {steps}")
    os.makedirs(args.output_dir, exist_ok=True)
    for epoch in range(steps // len(train), 3):
        model.train()
        skip = steps - epoch * len(train)
        for batch in accelerator.skip_first_batches(train, skip) if skip else train:
            loss = torch.nn.functional.cross_entropy(model(batch["pixels"]), batch["label"])
            accelerator.backward(loss)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            steps += 1
            if args.save_steps and steps % args.save_steps == 0:
                accelerator.save_state(os.path.join(args.output_dir, f"at-{steps}"))
        model.eval()
        guesses, labels = [], []
        for batch in held:
            with torch.no_grad():
                guess = model(batch["pixels"]).argmax(-1)
            guess, label = accelerator.gather_for_metrics((guess, batch["label"]))
            guesses.append(guess)
            labels.append(label)
        result = toolkit.scores(torch.cat(guesses), torch.cat(labels))
        accelerator.print(f"epoch {epoch}: {result}")
        accelerator.log({"accuracy": result["accuracy"], "train_loss": loss.item()}, step=steps)
        accelerator.save_state(os.path.join(args.output_dir, f"at-{steps}"))
    accelerator.end_training()


if __name__ == "__main__":
    main()

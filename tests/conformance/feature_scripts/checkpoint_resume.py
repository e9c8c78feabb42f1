"""Checkpoints at steps and at epochs, and resuming from either (what ``checkpointing`` covers).

Calls: ``register_for_checkpointing`` of an object of the script's own (a running count with
``state_dict``/``load_state_dict``), ``save_state`` into ``step_S`` folders every N optimizer
steps and ``epoch_E`` folders at epoch ends, ``load_state`` of the folder asked for, which brings
back the model, the optimizer, the prepared scheduler, the random states and the registered
object; ``skip_first_batches`` for the rest of a resumed epoch; ``gather_for_metrics``.
"""

import os

import toolkit
from accelerate import Accelerator
from accelerate.utils import set_seed


class Tally:
    """Rows trained on so far, saved with the run."""

    def __init__(self):
        self.rows = 0

    def state_dict(self):
        return {"rows": self.rows}

    def load_state_dict(self, state):
        self.rows = state["rows"]


def main():
    parser = toolkit.parser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--every_steps", type=int, default=0)
    parser.add_argument("--resume_from", default=None, help="step_S or epoch_E in output_dir")
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    set_seed(29)
    train, held = toolkit.token_loaders(36, 11, seed=14, batch_size=3, held_batch_size=4)
    model = toolkit.BagOfTokens()
    optimizer, schedule = toolkit.optimizer_and_schedule(model, 3 * len(train), lr=0.08)
    model, optimizer, train, held, schedule = accelerator.prepare(
        model, optimizer, train, held, schedule
    )
    tally = Tally()
    accelerator.register_for_checkpointing(tally)
    done = 0
    if args.resume_from:
        accelerator.load_state(os.path.join(args.output_dir, args.resume_from))
        kind, number = args.resume_from.split("_")
        done = int(number) if kind == "step" else (int(number) + 1) * len(train)
        accelerator.print(f"resumed {args.resume_from}: {tally.rows} rows seen")
    for epoch in range(done // len(train), 3):
        model.train()
        skip = done - epoch * len(train)
        for batch in accelerator.skip_first_batches(train, skip) if skip else train:
            accelerator.backward(model(**batch)["loss"])
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            tally.rows += batch["labels"].numel()
            done += 1
            if args.every_steps and done % args.every_steps == 0:
                accelerator.save_state(os.path.join(args.output_dir, f"step_{done}"))
        result = toolkit.evaluate(accelerator, model, held)
        accelerator.print(
            f"epoch {epoch}: {result}, {tally.rows} rows, lr {schedule.get_last_lr()}"
        )
        accelerator.save_state(os.path.join(args.output_dir, f"epoch_{epoch}"))
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""A profiled epoch (what ``profiler`` covers).

Calls: ``ProfileKwargs(record_shapes=, profile_memory=, with_flops=, output_trace_dir=)`` in
``kwargs_handlers=``, ``accelerator.profile()`` as a context manager around an epoch of
``accumulate`` steps, the profiler it yields (``key_averages().table(...)``, printed on the main
process: its timings differ run to run, and the runner keeps only lines starting with "epoch"),
and the trace file written into ``output_trace_dir`` (its presence printed).
"""

import os

import toolkit
import torch
from accelerate import Accelerator
from accelerate.utils import ProfileKwargs, set_seed


def main():
    parser = toolkit.parser()
    parser.add_argument("--trace_dir", default=None)
    args = parser.parse_args()

    handler = ProfileKwargs(
        record_shapes=True, profile_memory=True, with_flops=True, output_trace_dir=args.trace_dir
    )
    accelerator = Accelerator(
        cpu=args.cpu, mixed_precision=args.mixed_precision, kwargs_handlers=[handler]
    )
    set_seed(59)
    train, held = toolkit.token_loaders(24, 7, seed=28, batch_size=4, held_batch_size=2)
    model = toolkit.BagOfTokens()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    model, optimizer, train, held = accelerator.prepare(model, optimizer, train, held)
    for epoch in range(2):
        model.train()
        with accelerator.profile() as profiler:
            for batch in train:
                with accelerator.accumulate(model):
                    accelerator.backward(model(**batch)["loss"])
                    optimizer.step()
                    optimizer.zero_grad()
        accelerator.print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=5))
        accelerator.print(f"epoch {epoch}: {toolkit.evaluate(accelerator, model, held)}")
    if args.trace_dir:
        traces = [name for name in os.listdir(args.trace_dir) if name.endswith(".json")]
        accelerator.print(f"epoch-end traces written: {len(traces) > 0}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""A DDP communication hook, and a wrapper around it (what ``ddp_comm_hook`` covers).

Calls: ``DDPCommunicationHookType`` built from its string values, passed as ``comm_hook=`` and
``comm_wrapper=`` of ``DistributedDataParallelKwargs`` in ``kwargs_handlers=``, the hook acting
(with several processes) on gradients reduced inside ``accumulate``; ``distributed_type``.
"""

import toolkit
import torch
from accelerate import Accelerator, DistributedType
from accelerate.utils import DDPCommunicationHookType, DistributedDataParallelKwargs, set_seed


def main():
    parser = toolkit.parser()
    parser.add_argument("--hook", default="no", choices=[t.value for t in DDPCommunicationHookType])
    parser.add_argument("--wrapper", default="no", choices=["no", "fp16", "bf16"])
    args = parser.parse_args()

    handler = DistributedDataParallelKwargs(
        comm_hook=DDPCommunicationHookType(args.hook),
        comm_wrapper=DDPCommunicationHookType(args.wrapper),
    )
    accelerator = Accelerator(
        cpu=args.cpu,
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=2,
        kwargs_handlers=[handler],
    )
    accelerator.print(f"{accelerator.distributed_type == DistributedType.MULTI_CPU}: {args.hook}")
    set_seed(37)
    train, held = toolkit.token_loaders(32, 10, seed=18, batch_size=4, held_batch_size=3)
    model = toolkit.BagOfTokens()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    model, optimizer, train, held = accelerator.prepare(model, optimizer, train, held)
    for epoch in range(3):
        model.train()
        for batch in train:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch)["loss"])
                optimizer.step()
                optimizer.zero_grad()
        accelerator.print(f"epoch {epoch}: {toolkit.evaluate(accelerator, model, held)}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

"""A training script written for Hugging Face Accelerate: FSDP2 sharding and torch.compile.

train_fsdp_compile_accelkw.py is this file with only its import lines changed;
tests/test_ported_fsdp_compile.py runs that one on two CPU processes.

Run: torchrun --nproc_per_node 2 train_fsdp_compile_accelerate.py --out result.json
"""

import argparse
import json

import torch
from accelkw_core import Accelerator
from accelkw_core.utils import FullyShardedDataParallelPlugin, TorchDynamoPlugin


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x):
        return x + torch.tanh(self.linear(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    fsdp_plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
        state_dict_type="FULL_STATE_DICT",
    )
    dynamo_plugin = TorchDynamoPlugin(backend="eager")
    accelerator = Accelerator(cpu=True, fsdp_plugin=fsdp_plugin, dynamo_plugin=dynamo_plugin)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), Block(), Block(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    losses = []
    for _ in range(3):
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    state = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        with open(args.out, "w") as fh:
            json.dump({"losses": losses, "keys": sorted(state)}, fh)
    accelerator.end_training()


if __name__ == "__main__":
    main()

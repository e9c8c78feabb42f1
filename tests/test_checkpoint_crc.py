"""The optimizer's file is written without the zip format's CRC-32s (the manifest's hash covers
it), and torch's process-wide CRC option is left as the user set it, for their own files.

Through the public API: a save with an AdamW state, then the file read by plain ``torch.load``
(as Accelerate's ``load_state`` reads it) and by ``load_state``; the user's ``torch.save`` after
the save still gets its CRCs, and an option the user switched off stays off.
"""

from __future__ import annotations

import copy
import zipfile
from pathlib import Path

import pytest
import torch

from accelkw_core import Accelerator


@pytest.mark.parametrize("users_option", [True, False])
def test_optimizer_file_loads_and_the_users_crc_option_is_kept(
    tmp_path: Path, users_option: bool
) -> None:
    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = acc.prepare(model, opt)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    expected = copy.deepcopy(opt.state_dict())
    torch.serialization.set_crc32_options(users_option)
    try:
        acc.save_state(tmp_path / "ckpt")
        assert torch.serialization.get_crc32_options() is users_option

        loaded = torch.load(tmp_path / "ckpt" / "optimizer.bin", weights_only=True)
        for key, state in expected["state"].items():
            for name, value in state.items():
                assert torch.equal(loaded["state"][key][name], value), (key, name)
        assert loaded["param_groups"] == expected["param_groups"]

        # The user's own file, saved after: its CRCs written as their option says.
        torch.save({"w": torch.arange(100.0)}, tmp_path / "best_model.pt")
        bad = zipfile.ZipFile(tmp_path / "best_model.pt").testzip()
        assert (bad is None) is users_option
    finally:
        torch.serialization.set_crc32_options(True)

    opt.zero_grad()
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    acc.load_state(tmp_path / "ckpt")  # checked against the manifest, then applied
    for key, state in expected["state"].items():
        for name, value in state.items():
            assert torch.equal(opt.state_dict()["state"][key][name], value), (key, name)

"""A checkpoint names the distribution that shipped each handler state it holds: loading it where
that plugin is not installed warns with what to install (a real distribution, read from a
scratch site-packages through its entry point)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accelkw_core import Accelerator
from accelkw_core.discovery.registry import Registry
from accelkw_core.errors import CheckpointWarning
from tests import runtime_helpers as rh
from tests.conftest import write_dist

PLUGIN = """
    from dataclasses import dataclass
    from accelkw_core.plugin import CHECKPOINT, KwargsHandler, Plan, hookimpl

    class Count:
        def __init__(self):
            self.n = 3

        def state_dict(self):
            return {"n": self.n}

        def load_state_dict(self, state):
            self.n = state["n"]

    @dataclass
    class TallyKwargs(KwargsHandler):
        \"\"\"Keeps a count in checkpoints.\"\"\"
        name = "tally"

        def plan(self, state):
            return Plan(self.name).contribute(CHECKPOINT, Count(), "a count saved with the run")

    @hookimpl
    def accelkw_register_handlers(register):
        register(TallyKwargs)
"""


def test_an_uninstalled_plugins_state_warns_naming_the_distribution_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rh.clean_env(monkeypatch, tmp_path)
    site = tmp_path / "site"
    write_dist(site, "acme-tally", {"tally": "acme_tally"}, {"acme_tally.py": PLUGIN})
    monkeypatch.syspath_prepend(str(site))
    installed = Registry(allow=["acme-tally"])
    assert installed.handlers()["tally"].distribution == "acme-tally"

    with Accelerator(cpu=True, registry=installed) as acc:
        acc.prepare(torch.nn.Linear(2, 1))
        acc.save_state(tmp_path / "ckpt")
    manifest = json.loads((tmp_path / "ckpt" / "accelkw_checkpoint.json").read_text())
    assert manifest["handlers"] == ["tally"]
    assert manifest["distributions"] == {"tally": "acme-tally"}

    with Accelerator(cpu=True, registry=rh.registry()) as without:  # the plugin is not here
        without.prepare(torch.nn.Linear(2, 1))
        with pytest.warns(CheckpointWarning) as caught:
            without.load_state(tmp_path / "ckpt")
    (message,) = [str(w.message) for w in caught if "'tally'" in str(w.message)]
    assert "state of handler 'tally' (from acme-tally), which is not in this run" in message
    assert "install acme-tally (pip install acme-tally)" in message

"""accelkw-grad-accum, accelkw-fsdp, accelkw-compile and accelkw-fp8, each installed alone: a fresh venv with
only accelkw-core and torch, then the plugin; it lists ``loaded`` and takes part in a run.

The venv is built as in ``test_install_venv.py`` (torch and the core's other dependencies shared
from this interpreter, our distributions installed for real from copies of their sources).
"""

from __future__ import annotations

import json
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.test_install_venv import (
    REPO,
    Venv,
    copy_source,
    dependency_closure,
    link_distributions,
)

# Per plugin: (its folder under plugins/, its registry name, a run that prints JSON).
RUNS = {
    "grad-accum": (
        "grad_accum",
        """
        import json
        import torch
        import accelkw_core
        from accelkw_core import Accelerator

        acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
        model = torch.nn.Linear(2, 1)
        model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
        syncs = []
        for _ in range(4):
            with acc.accumulate(model):
                acc.backward(model(torch.ones(1, 2)).sum())
                syncs.append(acc.sync_gradients)
                opt.step()
                opt.zero_grad()
        print(json.dumps({"core": accelkw_core.__file__, "handlers": list(acc.state.handlers),
                          "syncs": syncs}))
        """,
    ),
    "fsdp": (
        "fsdp",
        """
        import json, torch
        import accelkw_core
        from accelkw_core import Accelerator
        from accelkw_core.utils import FullyShardedDataParallelPlugin

        with Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin()) as acc:
            model = acc.prepare(torch.nn.Linear(2, 1))
            print(json.dumps({"core": accelkw_core.__file__, "handlers": list(acc.state.handlers),
                              "log": acc.state.messages("fsdp")}))
        """,
    ),
    "compile": (
        "compile",
        """
        import json, torch
        import accelkw_core
        from accelkw_core import Accelerator

        with Accelerator(cpu=True, dynamo_backend="eager") as acc:
            model = acc.prepare(torch.nn.Linear(2, 1))
            model(torch.ones(1, 2))
            print(json.dumps({"core": accelkw_core.__file__, "handlers": list(acc.state.handlers),
                              "log": acc.state.messages("compile")}))
        """,
    ),
    "fp8": (
        "fp8",
        """
        import json, torch
        import accelkw_core
        from accelkw_core import Accelerator

        with Accelerator(cpu=True, mixed_precision="fp8") as acc:
            model = acc.prepare(torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(3))))
            model(torch.ones(2, 16))
            print(json.dumps({"core": accelkw_core.__file__, "handlers": list(acc.state.handlers),
                              "log": acc.state.messages("ao_recipe")}))
        """,
    ),
}
# The handlers a plugin's run composes, where they are not the plugin's own name.
HANDLERS = {"fp8": ["ao_recipe"]}
# What a plugin needs besides the core's requirements, shared from this interpreter too.
EXTRA_DEPENDENCIES = {"fp8": ["torchao"]}


def _check(folder: str, result: dict[str, Any]) -> None:
    if folder == "grad-accum":
        assert result["syncs"] == [False, True, False, True]
    elif folder == "fsdp":
        assert any("world size 1: model not sharded" in line for line in result["log"])
    elif folder == "fp8":
        assert "converted to Float8Linear: 1" in result["log"], result["log"]
    else:
        assert any("compiled Linear" in line for line in result["log"]), result["log"]


@pytest.mark.parametrize("folder", sorted(RUNS))
def test_the_plugin_installs_alone_lists_loaded_and_takes_part(tmp_path: Path, folder: str) -> None:
    name, code = RUNS[folder]
    env = Venv(root=tmp_path / "venv", work=tmp_path / "work")
    env.work.mkdir()
    env.run("create venv", [sys.executable, "-m", "venv", "--without-pip", str(env.root)])
    core_deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    extra = EXTRA_DEPENDENCIES.get(folder, [])
    link_distributions(dependency_closure([*core_deps, "setuptools", *extra]), tmp_path / "shared")
    purelib = sysconfig.get_path("purelib", vars={"base": str(env.root)})
    Path(purelib, "_shared_dependencies.pth").write_text(f"{tmp_path / 'shared'}\n")
    core = tmp_path / "src" / "core"
    core.mkdir(parents=True)
    for item in REPO.iterdir():
        if item.is_file():
            (core / item.name).write_bytes(item.read_bytes())
    copy_source(REPO / "accelkw_core", core / "accelkw_core")
    plugin = copy_source(REPO / "plugins" / folder, tmp_path / "src" / folder)
    env.pip(f"install core + {folder}", "install", str(core), str(plugin))

    listed = env.listing("plugins list")
    assert set(listed) == {name}, listed
    entry = listed[name]
    assert (entry["distribution"], entry["status"]) == (f"accelkw-{folder}", "loaded"), entry

    result = json.loads(env.python_code(folder, code))
    assert result["core"].startswith(str(env.root)), result["core"]
    assert result["handlers"] == HANDLERS.get(folder, [name])
    _check(folder, result)

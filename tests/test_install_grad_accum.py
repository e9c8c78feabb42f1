"""accelkw-grad-accum installed alone: a fresh venv with only accelkw-core and torch, then the plugin.

The venv is built as in ``test_install_venv.py`` (torch and the core's other dependencies shared
from this interpreter, our distributions installed for real from copies of their sources).
"""

from __future__ import annotations

import json
import sys
import sysconfig
import tomllib
from pathlib import Path

from tests.test_install_venv import (
    REPO,
    Venv,
    copy_source,
    dependency_closure,
    link_distributions,
)

ACCUMULATE = """
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
"""


def test_the_plugin_installs_alone_and_lists_loaded(tmp_path: Path) -> None:
    env = Venv(root=tmp_path / "venv", work=tmp_path / "work")
    env.work.mkdir()
    env.run("create venv", [sys.executable, "-m", "venv", "--without-pip", str(env.root)])
    core_deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    link_distributions(dependency_closure([*core_deps, "setuptools"]), tmp_path / "shared")
    purelib = sysconfig.get_path("purelib", vars={"base": str(env.root)})
    Path(purelib, "_shared_dependencies.pth").write_text(f"{tmp_path / 'shared'}\n")
    core = tmp_path / "src" / "core"
    core.mkdir(parents=True)
    for item in REPO.iterdir():
        if item.is_file():
            (core / item.name).write_bytes(item.read_bytes())
    copy_source(REPO / "accelkw_core", core / "accelkw_core")
    plugin = copy_source(REPO / "plugins" / "grad-accum", tmp_path / "src" / "grad-accum")
    env.pip("install core + grad-accum", "install", str(core), str(plugin))

    listed = env.listing("plugins list")
    assert set(listed) == {"grad_accum"}, listed
    entry = listed["grad_accum"]
    assert (entry["distribution"], entry["status"]) == ("accelkw-grad-accum", "loaded"), entry

    result = json.loads(env.python_code("accumulate", ACCUMULATE))
    assert result["core"].startswith(str(env.root)), result["core"]
    assert result["handlers"] == ["grad_accum"]
    assert result["syncs"] == [False, True, False, True]

"""accelkw-fsdp and accelkw-compile, each installed alone with only accelkw-core and torch.

The venv is built as in ``test_install_venv.py`` (torch and the core's other dependencies shared
from this interpreter, our distributions installed for real from copies of their sources).
"""

from __future__ import annotations

import json
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from tests.test_install_venv import (
    REPO,
    Venv,
    copy_source,
    dependency_closure,
    link_distributions,
)

RUNS = {
    "fsdp": """
    import json, torch
    from accelkw_core import Accelerator
    from accelkw_core.utils import FullyShardedDataParallelPlugin

    with Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin()) as acc:
        model = acc.prepare(torch.nn.Linear(2, 1))
        print(json.dumps({"handlers": list(acc.state.handlers),
                          "log": acc.state.messages("fsdp")}))
    """,
    "compile": """
    import json, torch
    from accelkw_core import Accelerator

    with Accelerator(cpu=True, dynamo_backend="eager") as acc:
        model = acc.prepare(torch.nn.Linear(2, 1))
        model(torch.ones(1, 2))
        print(json.dumps({"handlers": list(acc.state.handlers),
                          "log": acc.state.messages("compile")}))
    """,
}
EXPECTED_LOG = {"fsdp": "world size 1: model not sharded", "compile": "compiled Linear"}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_plugin_installs_alone_and_lists_loaded(tmp_path: Path, name: str) -> None:
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
    plugin = copy_source(REPO / "plugins" / name, tmp_path / "src" / name)
    env.pip(f"install core + {name}", "install", str(core), str(plugin))

    listed = env.listing("plugins list")
    assert set(listed) == {name}, listed
    entry = listed[name]
    assert (entry["distribution"], entry["status"]) == (f"accelkw-{name}", "loaded"), entry

    result = json.loads(env.python_code(name, RUNS[name]))
    assert result["handlers"] == [name]
    assert any(EXPECTED_LOG[name] in line for line in result["log"]), result["log"]

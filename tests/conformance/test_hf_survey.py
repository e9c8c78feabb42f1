"""``port_imports`` over what Hugging Face's example scripts use: the survey of issue 33.

``hf_scripts/survey.json`` lists, for each example script of transformers
(``examples/pytorch/**/*_no_trainer.py``), diffusers and peft that imports Accelerate, the
Accelerate names it imports and the ``accelerator.<member>`` names it uses (names only: the
scripts are not ours; ``bench/hf_script_survey.py --write`` makes it from the repositories).
Each script is ported again here as a synthetic file made of those names.

``register_save_state_pre_hook`` / ``register_load_state_pre_hook`` (how diffusers' scripts save
their models) come with the save-state hooks of issue 33's items 3-5: until those members
exist, the scripts using them are refused, naming them.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest

from accelkw_core.errors import PortError
from accelkw_core.tools.porting import (
    ACCELERATOR_MEMBERS,
    MEMBERS_NOT_PROVIDED,
    lookup,
    member_provided,
    port_imports,
)

HERE = Path(__file__).resolve().parent
SCRIPTS: list[dict[str, Any]] = json.loads(
    (HERE / "hf_scripts" / "survey.json").read_text(encoding="utf-8")
)["scripts"]
MIGRATING = HERE.parent.parent / "docs" / "migrating.md"

# Names a few scripts import that accelkw leaves out on purpose (docs/migrating.md says why).
LEFT_OUT = {
    "accelerate.utils:DummyOptim",  # DeepSpeed
    "accelerate.utils:DummyScheduler",  # DeepSpeed
    "accelerate:cpu_offload_with_hook",  # big-model inference
    "accelerate:init_empty_weights",
    "accelerate:dispatch_model",
    "accelerate.hooks:AlignDevicesHook",
    "accelerate.hooks:CpuOffload",
    "accelerate.hooks:remove_hook_from_module",
    "accelerate.utils:set_module_tensor_to_device",
    "accelerate.utils:write_basic_config",  # `accelkw config` writes the config
}


def _synthetic(imports: list[str], members: list[str]) -> str:
    lines = []
    for name in imports:
        if name.startswith("import "):
            lines.append(name)
        else:
            module, _, imported = name.partition(":")
            lines.append(f"from {module} import {imported}")
    lines.append("accelerator = Accelerator()")
    lines += [f"accelerator.{member}" for member in members]
    return "\n".join(lines) + "\n"


def _refusal(source: str) -> str | None:
    try:
        port_imports(source)
    except PortError as exc:
        return str(exc)
    return None


def test_the_survey_holds_every_repository() -> None:
    counts = collections.Counter(s["repo"] for s in SCRIPTS)
    assert counts["transformers"] >= 16 and counts["diffusers"] >= 100 and counts["peft"] >= 20


def test_port_imports_accepts_at_least_90_percent_of_the_scripts() -> None:
    # 131 of 139 once the save-state hooks exist (issue 33, items 3-5); 57 without them.
    refused = {}
    for script in SCRIPTS:
        why = _refusal(_synthetic(script["imports"], script["members"]))
        if why is not None:
            refused[f"{script['repo']}/{script['path']}"] = why.splitlines()[1:]
    accepted = len(SCRIPTS) - len(refused)
    assert accepted >= 0.9 * len(SCRIPTS), (
        f"port_imports accepts {accepted} of {len(SCRIPTS)}; refused: "
        + json.dumps(refused, indent=1)[:3000]
    )


NAMES = sorted({n for s in SCRIPTS for n in s["imports"]})
MEMBERS = sorted({m for s in SCRIPTS for m in s["members"]})


@pytest.mark.parametrize("name", NAMES)
def test_each_imported_name_is_ported_or_refused_with_its_reason(name: str) -> None:
    why = _refusal(_synthetic([name, "accelerate:Accelerator"], []))
    if name not in LEFT_OUT:
        assert why is None, why
        return
    module, _, imported = name.partition(":")
    row = lookup(module, imported)
    assert why is not None and row is not None and row.note and row.note in why, why


@pytest.mark.parametrize("member", MEMBERS)
def test_each_member_the_scripts_use_is_provided(member: str) -> None:
    # register_save_state_pre_hook / register_load_state_pre_hook: issue 33, items 3-5.
    assert member_provided(member), f"accelerator.{member}"
    assert _refusal(_synthetic(["accelerate:Accelerator"], [member])) is None


def test_the_member_table_is_accelerates_and_every_missing_member_says_why() -> None:
    import inspect
    import re

    import accelerate

    cls = accelerate.Accelerator
    set_in_init = set(
        re.findall(r"self\.([a-z][a-z0-9_]*)\s*[:=]", inspect.getsource(cls.__init__))
    )
    assert {n for n in dir(cls) if not n.startswith("_")} | set_in_init == ACCELERATOR_MEMBERS
    missing = {m for m in ACCELERATOR_MEMBERS if not member_provided(m)}
    # Every member not provided is listed with its reason, and none listed is provided.
    assert missing == set(MEMBERS_NOT_PROVIDED), missing ^ set(MEMBERS_NOT_PROVIDED)
    page = MIGRATING.read_text(encoding="utf-8")
    assert all(f"`{m}`" in page for m in MEMBERS_NOT_PROVIDED), [
        m for m in MEMBERS_NOT_PROVIDED if f"`{m}`" not in page
    ]


def test_a_refused_member_names_itself_its_reason_and_the_page() -> None:
    why = _refusal(_synthetic(["accelerate:Accelerator"], ["deepspeed_plugin"]))
    assert why is not None
    assert "accelerator.deepspeed_plugin: DeepSpeed" in why and "docs/migrating.md" in why


def test_import_accelerate_binds_the_accelerate_api_module() -> None:
    ported = port_imports("import accelerate\nimport os, accelerate as acc\n")
    assert ported == (
        "import accelkw_core.as_accelerate as accelerate\n"
        "import os\nimport accelkw_core.as_accelerate as acc\n"
    )
    namespace: dict[str, Any] = {}
    exec(ported + "v = accelerate.__version__\ninit = accelerate.state.is_initialized\n", namespace)
    assert namespace["v"] == "1.15.0" and callable(namespace["init"])


def test_import_of_an_accelerate_submodule_under_a_name_binds_accelkws() -> None:
    assert port_imports("import accelerate.utils as au\n") == "import accelkw_core.utils as au\n"
    with pytest.raises(PortError, match=r"accelerate\.hooks"):
        port_imports("import accelerate.hooks as h\n")

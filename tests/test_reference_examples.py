"""The reference's examples (shared/SEED.md and its Arabic source page) run with only their
import lines changed, and ``accelkw_core.utils`` serves the reference names lazily."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime_helpers as rh

from accelkw_core.discovery.catalog import REFERENCE_NAMES
from accelkw_core.discovery.default_registry import set_registry

# Each example verbatim from the reference page, with the module its class comes from.
EXAMPLES = {
    "AutocastKwargs": (
        "accelkw_autocast",
        """
        from accelerate import Accelerator
        from accelerate.utils import AutocastKwargs

        kwargs = AutocastKwargs(cache_enabled=True)
        accelerator = Accelerator(kwargs_handlers=[kwargs])
        """,
    ),
    "DistributedDataParallelKwargs": (
        "accelkw_ddp",
        """
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs

        kwargs = DistributedDataParallelKwargs(find_unused_parameters=True)
        accelerator = Accelerator(kwargs_handlers=[kwargs])
        """,
    ),
    "ProfileKwargs": (
        "accelkw_profile",
        """
        from accelerate import Accelerator
        from accelerate.utils import ProfileKwargs

        kwargs = ProfileKwargs(activities=["cpu", "cuda"])
        accelerator = Accelerator(kwargs_handlers=[kwargs])
        """,
    ),
    "GradScalerKwargs": (
        "accelkw_grad_scaler",
        """
        from accelerate import Accelerator
        from accelerate.utils import GradScalerKwargs

        kwargs = GradScalerKwargs(backoff_factor=0.25)
        accelerator = Accelerator(kwargs_handlers=[kwargs])
        """,
    ),
    "InitProcessGroupKwargs": (
        "accelkw_process_group",
        """
        from datetime import timedelta
        from accelerate import Accelerator
        from accelerate.utils import InitProcessGroupKwargs

        kwargs = InitProcessGroupKwargs(timeout=timedelta(seconds=800))
        accelerator = Accelerator(kwargs_handlers=[kwargs])
        """,
    ),
}


def port(source: str) -> str:
    """The only change a user makes: the import lines."""
    return (
        textwrap.dedent(source)
        .replace("from accelerate import Accelerator", "from accelkw_core import Accelerator")
        .replace("from accelerate.utils import", "from accelkw_core.utils import")
    )


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rh.clean_env(monkeypatch, tmp_path)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_reference_example_runs_with_only_its_imports_changed(name: str) -> None:
    module, source = EXAMPLES[name]
    importlib.import_module(module)  # integration: a broken install fails, never skips
    code = port(source)
    assert code.count("\n") == textwrap.dedent(source).count("\n")
    namespace: dict[str, object] = {}
    exec(compile(code, f"<{name} example>", "exec"), namespace)
    accelerator = namespace["accelerator"]
    kwargs = namespace["kwargs"]
    try:
        handler = accelerator.state.handlers[type(kwargs).name]  # type: ignore[attr-defined]
        assert handler is kwargs  # the user's instance is the one applied
        assert accelerator.state.messages(type(kwargs).name)  # type: ignore[attr-defined]
    finally:
        accelerator.end_training()  # type: ignore[attr-defined]


def test_profile_example_with_cuda_on_a_cpu_machine_fails_when_profile_is_entered() -> None:
    import accelkw_profile  # noqa: F401  (integration: a broken install fails, never skips)
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA, so the example profiles it")
    from accelkw_core import ConfigError

    namespace: dict[str, object] = {}
    exec(port(EXAMPLES["ProfileKwargs"][1]), namespace)
    accelerator = namespace["accelerator"]
    # Building succeeds (plans and configs can mention CUDA); entering profile() says why not.
    with (
        pytest.raises(ConfigError, match=r"profile.activities: got 'cuda', expected an activity "),
        accelerator.profile(),  # type: ignore[attr-defined]
    ):
        pass
    accelerator.end_training()  # type: ignore[attr-defined]


# -- accelkw_core.utils ----------------------------------------------------------------------


@pytest.fixture
def no_plugins() -> Iterator[None]:
    undo = set_registry(rh.registry())
    yield
    undo()


@pytest.mark.parametrize(
    ("name", "distribution"),
    # Every reference name a built-in serves (classes and enums), from the one catalog.
    sorted((ref, dist) for ref, (_, dist) in REFERENCE_NAMES.items()),
)
def test_a_missing_plugin_class_names_the_distribution_to_install(
    name: str, distribution: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import accelkw_core.utils as utils

    monkeypatch.setitem(sys.modules, REFERENCE_NAMES[name][0], None)  # import now fails
    monkeypatch.delitem(vars(utils), name, raising=False)
    with pytest.raises(ImportError, match=rf"provided by the {distribution} distribution.*"):
        exec(f"from accelkw_core.utils import {name}", {})
    with pytest.raises(ImportError, match=rf"pip install {distribution}$"):
        getattr(utils, name)


def test_utils_serves_only_its_catalog(no_plugins: None) -> None:
    from accelkw_core import KwargsHandler
    from accelkw_core.utils import KwargsHandler as Base

    assert Base is KwargsHandler
    # A registered third party's class is imported from its own package, not from utils.
    assert rh.KnobsKwargs.__name__ == "KnobsKwargs"
    for name in ("KnobsKwargs", "NoSuchKwargs"):
        with pytest.raises(ImportError, match=f"cannot import name '{name}'"):
            exec(f"from accelkw_core.utils import {name}", {})


def test_an_unknown_utils_name_loads_no_plugin() -> None:
    code = (
        "import sys, accelkw_core.utils as u\n"
        "try:\n    u.NoSuchKwargs\nexcept AttributeError as exc:\n    print(exc)\n"
        "print(sorted(m for m in sys.modules if m.startswith('accelkw_') and "
        "not m.startswith('accelkw_core')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    message, loaded = out.stdout.strip().splitlines()
    assert "has no attribute 'NoSuchKwargs'" in message and "its own package" in message
    assert loaded == "[]"


def test_importing_utils_imports_no_plugin_and_no_torch() -> None:
    code = (
        "import sys, accelkw_core.utils as u;"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('accelkw_') and "
        "not m.startswith('accelkw_core')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

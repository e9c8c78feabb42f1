"""The built-in plugins together: listed without torch, composed in one 2-process run."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from accelkw_core.discovery.catalog import BUILTINS as CATALOG
from accelkw_core.testing import run_workers
from tests.builtin_workers import five_builtins_worker
from tests.conftest import run_python

# Registry name -> (module, distribution) of every built-in, from the one catalog.
BUILTINS = {b.name: (b.module, b.distribution) for b in CATALOG}


def composed_by_default() -> set[str]:
    """The built-ins every run composes when installed (not opt-in)."""
    return {b.name for b in CATALOG if not getattr(importlib.import_module(b.module), b.cls).opt_in}


@pytest.fixture(scope="module", autouse=True)
def _builtins_installed() -> None:
    # Integration tests: a missing or broken built-in fails them, never skips them.
    for module, _dist in BUILTINS.values():
        importlib.import_module(module)


def test_the_five_are_listed_loaded_without_importing_torch() -> None:
    result = run_python(
        """
        import io, json, sys, contextlib
        from accelkw_core.cli.main import main
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = main(["plugins", "list", "--json"])
        print(json.dumps({"code": code, "torch": "torch" in sys.modules,
                          "plugins": json.loads(buf.getvalue())}))
        """
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["code"] == 0 and data["torch"] is False
    # One plugin may contribute several handlers (accelkw-fp8's four recipes).
    by_handler = {h["name"]: p for p in data["plugins"] for h in p["handlers"]}
    for name, (module, dist) in BUILTINS.items():
        plugin = by_handler[name]
        assert plugin["status"] == "loaded", plugin
        assert plugin["distribution"] == dist
        assert plugin["entry_point"] == f"{module}.plugin"
        shipped = sorted(n for n, (_, d) in BUILTINS.items() if d == dist)
        assert sorted(h["name"] for h in plugin["handlers"]) == shipped


@pytest.mark.multiprocess
def test_all_five_compose_in_one_two_process_bf16_run(tmp_path: Path) -> None:
    r0, r1 = run_workers(five_builtins_worker, 2, args=(str(tmp_path), 3), timeout=180)
    for r in (r0, r1):
        assert composed_by_default() <= set(r["applied"])
        order = r["order"]
        assert order.index("process_group") < order.index("ddp")
        assert order.index("autocast") < order.index("grad_scaler")
        assert r["forward_dtype"] == "torch.bfloat16"  # inside the forward, under autocast
        assert r["output_dtype"] == "torch.float32"  # outputs converted back, as Accelerate
        assert r["wrapped"] == "DistributedDataParallel"
        assert r["bucket_bytes_cap"] == 1024 * 1024
        # bf16 needs no loss scaling: the handler says so instead of silently doing nothing.
        assert r["scaler"] is False
        assert any(line.startswith("grad_scaler: mixed precision 'bf16'") for line in r["log"])
        assert r["ranks_equal"] is True
        assert r["last_loss"] < r["first_loss"]
        assert r["group_during"] is True and r["group_after"] is False
    assert r0["trace"] is True and r0["trace_has_linear"] is True
    assert r1["trace"] is False  # profile_ranks=[0]

"""Quiet by default on a real two-process launch (issue 42, item 4).

A broken plugin's warning is printed once per launch (by ``accelkw launch``, not again by each
worker); a script's own ``logging.basicConfig(level=logging.INFO)`` shows its own INFO lines
and none of accelkw's, which ``ACCELKW_LOG_LEVEL=INFO`` turns on, from the main process only.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import good_plugin, run_accelkw, write_dist

SCRIPT = """
import logging
import sys

logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
from accelkw_core import Accelerator

with Accelerator(cpu=True) as accelerator:
    logging.getLogger("user").info("rank %d trains", accelerator.process_index)
    accelerator.wait_for_everyone()
"""
ENV = {"ACCELKW_PLUGINS": "acme-broken,accelkw-process-group,accelkw-ddp"}


def launch(site: Path, tmp_path: Path, **env: str) -> tuple[str, str]:
    write_dist(site, "acme-broken", {"broken": "acme_broken"}, {"acme_broken.py": "import nope\n"})
    write_dist(site, "acme-fine", {"fine": "acme_fine"}, {"acme_fine.py": good_plugin("fine")})
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    args = ["launch", "--num_processes", "2", str(script)]
    result = run_accelkw(args, site, {**ENV, **env}, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, result.stderr


def test_a_broken_plugin_is_warned_once_and_accelkw_logs_stay_out_of_a_users_info(
    site: Path, tmp_path: Path
) -> None:
    out, err = launch(site, tmp_path)
    both = out + err
    assert both.count("plugin 'broken' (acme-broken) failed to load") == 1, both
    assert "user rank 0 trains" in out and "user rank 1 trains" in out
    assert not [line for line in out.splitlines() if line.startswith("accelkw")], out


def test_accelkw_log_level_shows_accelkws_lines_from_the_main_process_only(
    site: Path, tmp_path: Path
) -> None:
    out, err = launch(site, tmp_path, ACCELKW_LOG_LEVEL="INFO")
    ours = [line for line in (out + err).splitlines() if line.startswith("accelkw.")]
    assert any("process_group" in line and "rank 0:" in line for line in ours), ours
    assert not [line for line in ours if "rank 1:" in line], ours

"""Each handler's apply and teardown time is recorded; everything logs through ``logging``
(issue 15 item 3)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from accelkw_core import Accelerator, ConfigError
from accelkw_core.plugin import TEARDOWN, KwargsHandler, Plan, hookimpl
from accelkw_core.testing import isolated_registry
from tests.conftest import run_accelkw, run_python


@dataclass
class Slow(KwargsHandler):
    name: ClassVar[str] = "slow"

    def plan(self, state: Any) -> Plan:
        def work(state: Any) -> None:
            time.sleep(0.02)
            state.contribute(TEARDOWN, self.name, lambda: time.sleep(0.01))

        return Plan(self.name).run(work, "sleeps a while")


class SlowPlugin:
    @hookimpl
    def accelkw_register_handlers(self, register: Any) -> None:
        register(Slow)


def test_apply_and_teardown_times_are_recorded_per_handler() -> None:
    acc = Accelerator(cpu=True, registry=isolated_registry([SlowPlugin()]))
    assert acc.state.timings["slow"]["apply_ms"] >= 20.0
    acc.end_training()
    assert acc.state.timings["slow"]["teardown_ms"] >= 10.0


def test_log_lines_go_to_the_accelkw_handler_logger(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="accelkw"):
        acc = Accelerator(cpu=True, registry=isolated_registry([SlowPlugin()]))
        acc.end_training()
    by_slow = [r for r in caplog.records if r.name == "accelkw.slow"]
    assert any(
        r.getMessage() == "rank 0: sleeps a while" and r.levelno == logging.INFO for r in by_slow
    )
    assert any("apply took" in r.getMessage() for r in by_slow)


def test_quiet_by_default_and_accelkw_log_level_turns_it_up() -> None:
    code = "from accelkw_core import Accelerator; Accelerator(cpu=True).end_training()"
    quiet = run_python(code)
    assert quiet.returncode == 0 and "accelkw." not in quiet.stderr, quiet.stderr
    loud = run_python(code, env={"ACCELKW_LOG_LEVEL": "debug"})
    assert loud.returncode == 0, loud.stderr
    assert "accelkw.process_group INFO rank 0: world size 1: no process group" not in loud.stderr
    assert "accelkw.process_group DEBUG rank 0: world size 1: no process group" in loud.stderr
    assert "accelkw.autocast DEBUG rank 0: apply took" in loud.stderr
    bad = run_accelkw(["plan"], env={"ACCELKW_LOG_LEVEL": "loud"})
    assert bad.returncode == 1
    assert "ACCELKW_LOG_LEVEL" in bad.stderr and "one of DEBUG, INFO" in bad.stderr


def test_plan_json_reports_how_long_each_plan_took() -> None:
    out = run_accelkw(["plan", "--json"])
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["handlers"] and all(h["plan_ms"] >= 0 for h in data["handlers"])


def test_a_bad_level_names_the_variable() -> None:
    from accelkw_core.facts.environment import env_log_level

    with pytest.raises(ConfigError, match="did you mean 'INFO'"):
        env_log_level({"ACCELKW_LOG_LEVEL": "INF"})
    assert env_log_level({"ACCELKW_LOG_LEVEL": "warning"}) == "WARNING"

"""Point conflicts before the run: ``plan``, ``plan --json``, ``config check`` and ``plugins list
--strict`` name every contributor, as the run's own error does, with advice for where each came
from. The plugins are real distributions installed in a scratch folder (entry points read by
importlib_metadata), with the allow-list keeping the built-ins out of the picture."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from accelkw_core.cli.main import main
from accelkw_core.discovery.default_registry import set_registry
from tests import runtime_helpers as rh
from tests.conftest import run_accelkw, run_python, write_dist

PLUGIN = """
    import contextlib
    from dataclasses import dataclass
    from accelkw_core.plugin import PROFILER, KwargsHandler, Plan, handler_field, hookimpl

    @dataclass
    class {cls}(KwargsHandler):
        \"\"\"Contributes a profiler (a point that takes one contribution).\"\"\"
        name = "{name}"
        level: int = handler_field(1, doc="how much", ge=0)

        def plan(self, state):
            return Plan(self.name).contribute(PROFILER, contextlib.nullcontext, "{name} profiles")

    @hookimpl
    def accelkw_register_handlers(register):
        register({cls})
"""

NAMES = ("alpha", "beta", "gamma")
ALLOW = {"ACCELKW_PLUGINS": ",".join(f"acme-{n}" for n in NAMES), "ACCELKW_NO_CACHE": "1"}


def install(site: Path, tmp_path: Path) -> Path:
    for name in NAMES:
        module = f"acme_{name}"
        source = PLUGIN.format(name=name, cls=name.title() + "Kwargs")
        write_dist(site, f"acme-{name}", {name: module}, {f"{module}.py": source})
    config = tmp_path / "conf" / "accelkw.toml"  # given with --config: the working folder has none
    config.parent.mkdir()
    config.write_text("[handlers.beta]\nlevel = 2\n")  # beta asked for by the config
    return config


@pytest.fixture
def installed(
    site: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """The three distributions on this process's path, and ``accelkw ARGS`` run in-process
    with a registry that reads their entry points (as the command does) under ``env``."""
    install(site, tmp_path)
    monkeypatch.syspath_prepend(str(site))
    rh.clean_env(monkeypatch, tmp_path)
    undo = set_registry(None)

    def accelkw(*argv: str, env: dict[str, str] = ALLOW) -> tuple[int, str, str]:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        set_registry(None)  # a fresh one, reading the variables just set
        code = main(list(argv))
        out = capsys.readouterr()
        for key in env:
            monkeypatch.delenv(key)
        return code, out.out, out.err

    yield accelkw
    undo()


def test_plan_config_check_and_strict_listing_name_every_contributor(
    installed: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    config = str(tmp_path / "conf" / "accelkw.toml")

    code, _, message = installed("plan", "--config", config)
    assert code == 1, message
    assert "extension point 'profiler' takes one contribution" in message
    assert (
        "'alpha' (acme-alpha, installed and on by default), 'beta' (acme-beta, asked for by the "
        "config or environment) and 'gamma' (acme-gamma, installed and on by default) all "
        "contribute" in message
    )
    # Advice for each: a default is disabled or uninstalled, a configured one is un-asked for.
    assert "ACCELKW_DISABLE_PLUGINS=acme-alpha) or uninstall acme-alpha" in message
    assert "ACCELKW_DISABLE_PLUGINS=acme-gamma) or uninstall acme-gamma" in message
    assert "remove what asks for 'beta' ([handlers.beta]" in message
    assert "kwargs_handlers" not in message  # none was passed in code

    code, out, _ = installed("plan", "--json", "--config", config)
    assert code == 1
    (conflict,) = json.loads(out)["conflicts"]
    assert conflict["point"] == "profiler" and conflict["key"] is None
    assert [(h["name"], h["distribution"], h["origin"]) for h in conflict["handlers"]] == [
        ("alpha", "acme-alpha", "default"),
        ("beta", "acme-beta", "config"),
        ("gamma", "acme-gamma", "default"),
    ]
    assert conflict["message"] in message

    code, out, err = installed("config", "check", config)
    assert code == 1 and conflict["message"] in err and "invalid: 1 error(s)" in out
    code, out, _ = installed("config", "check", "--json", config)
    assert code == 1 and json.loads(out)["conflicts"] == [conflict]

    code, _, err = installed("plugins", "list", "--strict", "--refresh")
    # No config here: beta too is on by default.
    assert code == 1, err
    assert "'beta' (acme-beta, installed and on by default) and 'gamma'" in err
    code, _, err = installed("plugins", "list", "--refresh")
    assert code == 0 and "takes one contribution" not in err

    # Two plugins turned off by the deny-list: no conflict left, and plan lists them as disabled.
    deny = {**ALLOW, "ACCELKW_DISABLE_PLUGINS": "acme-beta,gamma"}
    code, out, err = installed("plan", env=deny)
    assert code == 0, err
    assert "disabled: plugin beta (acme-beta: in the deny-list ACCELKW_DISABLE_PLUGINS)" in out
    assert "disabled: plugin gamma (acme-gamma: in the deny-list" in out
    code, out, _ = installed("plan", "--json", env=deny)
    disabled = json.loads(out)["disabled"]
    assert {"plugin beta", "plugin gamma"} <= set(disabled)
    assert disabled["plugin beta"].endswith("in the deny-list ACCELKW_DISABLE_PLUGINS")


def test_the_command_fails_as_installed(site: Path, tmp_path: Path) -> None:
    # The same, end to end: the installed command in a fresh interpreter.
    config = install(site, tmp_path)
    plan = run_accelkw(["plan", "--config", str(config)], site, ALLOW)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "'alpha' (acme-alpha, installed and on by default), 'beta'" in plan.stderr


def test_the_run_raises_the_plans_error_with_advice_for_a_handler_passed_in_code(
    site: Path, tmp_path: Path
) -> None:
    config = install(site, tmp_path)
    code = f"""
        from acme_alpha import AlphaKwargs
        from accelkw_core import Accelerator, PointConflictError
        try:
            Accelerator(cpu=True, kwargs_handlers=[AlphaKwargs()], config={str(config)!r})
        except PointConflictError as exc:
            print([tuple(c) for c in exc.contributors])
            print(exc)
        else:
            print("composed")
    """
    result = run_python(code, site, ALLOW)
    assert result.returncode == 0, result.stderr
    contributors, message = result.stdout.splitlines()
    assert contributors == str(
        [
            ("alpha", "acme-alpha", "code"),
            ("beta", "acme-beta", "config"),
            ("gamma", "acme-gamma", "default"),
        ]
    )
    assert "'alpha' (acme-alpha, passed in code), 'beta'" in message
    assert "drop 'alpha' from kwargs_handlers (it was passed in code)" in message
    assert "remove what asks for 'beta'" in message
    assert "ACCELKW_DISABLE_PLUGINS=acme-gamma" in message
    assert "ACCELKW_DISABLE_PLUGINS=acme-alpha" not in message  # alpha came from code


def test_the_shared_rule_finds_keyed_conflicts_and_leaves_many_and_distinct_keys_alone() -> None:
    from accelkw_core.contract.points import point_conflicts

    steps = [
        ("a", "attribute", "scaler"),
        ("b", "attribute", "scaler"),  # one key of a keyed point: a conflict
        ("a", "checkpoint", None),  # keyed by handler name: a's and b's differ
        ("b", "checkpoint", None),
        ("a", "model_wrapper", None),  # many: never a conflict
        ("b", "model_wrapper", None),
        ("a", "backward", "x"),  # one: whatever the key
        ("c", "backward", "y"),
        ("d", "no_such_point", None),
    ]
    assert point_conflicts(steps) == [
        ("attribute", "scaler", ["a", "b"]),
        ("backward", None, ["a", "c"]),
    ]

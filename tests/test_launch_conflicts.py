"""Point conflicts refused before a launch starts any worker (issue 42, item 3).

Two installed distributions whose handlers both contribute to the ``profiler`` point (which
takes one) under ``mixed_precision='fp16'`` only: ``accelkw launch`` in fp16 refuses before any
worker starts, naming the precision and the run; in ``'no'`` it runs. ``plugins list --strict``
says the conflict appears only under fp16, and a plain ``plugins list`` kept since marks both
rows. The distributions are real ones in a scratch site folder (entry points read by
importlib_metadata); the allow-list keeps the built-ins out of the picture.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_accelkw, write_dist

PLUGIN = """
    import contextlib
    from dataclasses import dataclass
    from accelkw_core.plugin import PROFILER, KwargsHandler, Plan, hookimpl

    @dataclass
    class {cls}(KwargsHandler):
        \"\"\"Profiles fp16 runs (the profiler point takes one contribution).\"\"\"
        name = "{name}"

        def plan(self, state):
            plan = Plan(self.name)
            if state.mixed_precision != "fp16":
                return plan.note("profiles fp16 runs only")
            return plan.contribute(PROFILER, contextlib.nullcontext, "{name} profiles fp16")

    @hookimpl
    def accelkw_register_handlers(register):
        register({cls})
"""
NAMES = ("tick", "tock")
ENV = {"ACCELKW_PLUGINS": ",".join(f"acme-{n}" for n in NAMES)}


def install(site: Path) -> None:
    for name in NAMES:
        module = f"acme_{name}"
        source = PLUGIN.format(name=name, cls=name.title() + "Kwargs")
        write_dist(site, f"acme-{name}", {name: module}, {f"{module}.py": source})


def script(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "started"
    path = tmp_path / "train.py"
    path.write_text(f"open({str(marker)!r}, 'a').write('x')\n")
    return path, marker


def test_a_launch_in_the_conflicting_precision_starts_no_worker(site: Path, tmp_path: Path) -> None:
    install(site)
    train, marker = script(tmp_path)
    for nproc in ("2", "1"):
        args = ["launch", "--mixed_precision", "fp16", "--num_processes", nproc, str(train)]
        result = run_accelkw(args, site, ENV)
        assert result.returncode == 1, result.stdout + result.stderr
        assert not marker.exists()
        (line,) = result.stderr.splitlines()
        assert line.startswith(
            f"accelkw: error: not starting the workers (mixed_precision='fp16', {nproc} "
        ), line
        assert "extension point 'profiler' takes one contribution" in line
        assert "'tick' (acme-tick" in line and "'tock' (acme-tock" in line
        assert "only under mixed_precision='fp16'" in line
        assert "torchrun" not in result.stderr.lower()
    ran = run_accelkw(["launch", "--num_processes", "1", str(train)], site, ENV)
    assert ran.returncode == 0, ran.stderr
    assert marker.read_text() == "x"


def test_strict_says_the_precision_and_a_plain_listing_marks_the_rows(
    site: Path, tmp_path: Path
) -> None:
    install(site)
    env = {**ENV, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    strict = run_accelkw(["plugins", "list", "--strict"], site, env)
    assert strict.returncode == 1
    errors = [line for line in strict.stderr.splitlines() if "takes one contribution" in line]
    assert len(errors) == 1 and errors[0].endswith("(only under mixed_precision='fp16')"), errors
    plain = run_accelkw(["plugins", "list"], site, env)
    assert plain.returncode == 0 and "takes one contribution" not in plain.stderr
    rows = {line.split()[1]: line for line in plain.stdout.splitlines() if "acme-t" in line}
    assert "loaded, conflict" in rows["tick"] and "loaded, conflict" in rows["tock"], plain.stdout
    assert "point conflict with 'tock' (only under mixed_precision='fp16')" in rows["tick"]
    assert "point conflict with 'tick' (only under mixed_precision='fp16')" in rows["tock"]

"""What the command line says in the small cases of issue 14: a plugin that exits at import,
a docstring example in ``plugins show``, and help texts that match what the commands do."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import run_accelkw, write_dist


def test_a_plugin_calling_sys_exit_at_import_shows_why(site: Path) -> None:
    write_dist(
        site,
        "acme-quitter",
        {"quitter": "acme_quitter"},
        {"acme_quitter.py": "raise SystemExit(3)\n"},
    )
    data = run_accelkw(["plugins", "list", "--json"], site=site).json()
    (record,) = [r for r in data if r["name"] == "quitter"]
    assert record["status"] == "failed"
    assert record["error"] == {
        "type": "SystemExit",
        "message": "SystemExit(3) at import: the module called sys.exit()",
    }


DOCUMENTED = '''
    from dataclasses import dataclass
    from accelkw_core.plugin import KwargsHandler, handler_field, hookimpl

    @dataclass
    class GizmoKwargs(KwargsHandler):
        """A handler with an example.

        Example::

            accelerator = Accelerator(kwargs_handlers=[GizmoKwargs(level=2)])
            for batch in loader:
                step(batch)
        """
        name = "gizmo"
        level: int = handler_field(1, doc="how much", ge=0)

        def apply(self, state):
            pass

    @hookimpl
    def accelkw_register_handlers(register):
        register(GizmoKwargs)
'''


def test_plugins_show_keeps_the_indentation_of_docstring_examples(site: Path) -> None:
    write_dist(site, "acme-gizmo", {"gizmo": "acme_gizmo"}, {"acme_gizmo.py": DOCUMENTED})
    out = run_accelkw(["plugins", "show", "gizmo"], site=site)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    start = lines.index("  Example::")
    assert lines[start + 1 : start + 5] == [
        "",
        "      accelerator = Accelerator(kwargs_handlers=[GizmoKwargs(level=2)])",
        "      for batch in loader:",
        "          step(batch)",
    ]
    assert "  A handler with an example." in lines


def test_help_texts_say_what_the_commands_do() -> None:
    new = " ".join(run_accelkw(["plugins", "new", "--help"]).stdout.split())  # argparse wraps
    assert "--kind {handler,tracker}" in new
    assert "./accelkw-NAME, with NAME's" in new and "accelkw-" in new and "grad-clip" in new
    demo = run_accelkw(["demo", "--help"]).stdout
    # Python 3.13's argparse writes the metavar once, after the last spelling.
    assert re.search(r"--nproc-per-node( N)?, --nproc_per_node N\n", demo)
    assert "processes to train on" in demo
    assert "only the summary, as JSON, on stdout" in " ".join(demo.split())
    env = run_accelkw(["env", "--help"]).stdout
    assert "Print what a bug report needs" in env
    assert "print the same facts as JSON" in env

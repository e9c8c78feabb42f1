"""Run the feature scripts of this folder one after another, under each framework in turn.

``python run_scripts.py --frameworks accelerate,accelkw --out DIR [--work DIR] NAME[:ARG,ARG]
...``, alone or under torchrun. Each NAME is a script of this folder (``pairs``,
``local_sgd_averaging``), written with Accelerate's imports; under ``accelkw`` it first goes
through :func:`accelkw_core.tools.porting.port_imports` (its imports changed, nothing else), into
``--work``. Each runs as ``__main__`` with ``--cpu`` and its extra arguments, ``{out}`` in them
standing for ``DIR/<framework>/files``; what it prints on this process, and a digest of the final
weights of every model it built (see ``toolkit.MODELS``), go to ``DIR/<framework>/rank<N>.json``.

One launch serves both frameworks: torch, its compiler and schedulefree are imported once; each
framework is imported in a fork of that process (so neither sees the other's modules), and each
script runs in a fork of that one (see :func:`_forked`), on its own port of ``--ports`` (one
free port per script and framework) when there are several processes.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import io
import json
import os
import runpy
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _weights(model: Any) -> dict[str, Any]:
    digest = hashlib.sha256()
    total = 0.0
    for name, tensor in model.state_dict().items():
        data = tensor.detach().cpu().contiguous()
        digest.update(name.encode() + str(data.dtype).encode() + data.numpy().tobytes())
        total += float(data.double().sum())
    return {"sha256": digest.hexdigest(), "sum": total}


def run(framework: str, spec: str, work: Path) -> dict[str, Any]:
    import toolkit

    name, _, extra = spec.partition(":")
    source = (HERE / f"{name}.py").read_text()
    if framework == "accelkw":
        from accelkw_core.tools.porting import port_imports

        source = port_imports(source)
    # One copy per rank: the ranks write at the same time, and one must not read the other's
    # half-written file.
    path = work / framework / f"rank{os.environ.get('RANK', '0')}" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    toolkit.MODELS.clear()
    sys.argv = [str(path), "--cpu", *(a for a in extra.split(",") if a)]
    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(path), run_name="__main__")
    return {
        "stdout": out.getvalue(),
        "models": [_weights(m) for m in toolkit.MODELS],
        "seconds": round(time.perf_counter() - started, 2),  # not compared: to keep them lean
    }


def _preload_shared() -> None:
    """Import what every script imports under either framework, once, before any fork."""
    import schedulefree  # noqa: F401
    import toolkit  # noqa: F401

    # torch imports its compiler (torch._dynamo, with sympy: some 800 modules, 1.5-2 s) the
    # first time an optimizer is built: in every fork, unless imported here.
    import torch._dynamo  # noqa: F401

    _freeze()


def _preload(framework: str) -> None:
    """Import the framework, once, before its scripts are forked."""
    if framework == "accelerate":
        import accelerate  # noqa: F401
    else:
        import accelkw_core.utils  # noqa: F401
        from accelkw_core import Accelerator  # noqa: F401
        from accelkw_core.discovery.default_registry import get_registry

        get_registry().handlers()
    _freeze()


def _freeze() -> None:
    """Keep what is imported so far out of the garbage collector's sight.

    It lives as long as the process: a ``gc.collect()`` (``find_executable_batch_size`` and
    ``free_memory`` call it at each try) then walks only the script's own objects, in
    milliseconds instead of a fifth of a second.
    """
    gc.freeze()


def _own_group(framework: str, port: str) -> None:
    """Create this script's gloo group on a store at ``port``, before the script runs.

    A script destroys the group it made in ``end_training``, and a DDP model freed after that
    can deadlock (gloo's destructor joins a thread that waits for the GIL, seen here about one
    run in three under Accelerate). So the group exists before the script and outlives it (the
    fork ends with ``os._exit``): accelkw uses an existing group and leaves it, and Accelerate
    leaves it when told by ``FORK_LAUNCHED=1``, as its notebook launcher does.
    """
    import torch.distributed as dist

    os.environ["MASTER_PORT"] = port
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"
    dist.init_process_group("gloo")
    if framework == "accelerate":
        os.environ["FORK_LAUNCHED"] = "1"


def _in_fork(body: Callable[[], None], what: str) -> None:
    """Run ``body`` in a child process of this one; exit, naming ``what``, if it fails."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            body()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{what} failed (exit status {status}); see above")


def _forked(framework: str, spec: str, work: Path, out: Path, port: str | None) -> dict[str, Any]:
    """``run`` in a child process: its own Accelerate singletons and its own process group.

    Each script creates the process group and destroys it at its end; torch cannot create a
    second group in one process over the same store, so each script runs in a fork of this
    process (which imported torch and the framework once, and holds no group), on its own
    store port when there are several processes.
    """
    partial = out / f"{spec.replace('/', '__').split(':')[0]}.rank{os.environ.get('RANK', '0')}"

    def body() -> None:
        if port is not None:
            _own_group(framework, port)
        partial.write_text(json.dumps(run(framework, spec, work)))

    _in_fork(body, f"{spec} under {framework}")
    result: dict[str, Any] = json.loads(partial.read_text())
    partial.unlink()
    return result


def _framework(
    framework: str, specs: list[str], out: Path, work: Path, ports: list[str | None]
) -> None:
    """Every script of ``specs`` under ``framework``, in a fork of this process (which imports
    the framework; the next framework's fork never sees it); the results go to
    ``out/rank<N>.json``."""

    def body() -> None:
        _preload(framework)
        out.mkdir(parents=True, exist_ok=True)
        results = {
            spec: _forked(framework, spec.replace("{out}", str(out / "files")), work, out, port)
            for spec, port in zip(specs, ports, strict=True)
        }
        rank = os.environ.get("RANK", "0")
        (out / f"rank{rank}.json").write_text(json.dumps(results, indent=1))

    _in_fork(body, f"the scripts under {framework}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frameworks", default="accelerate,accelkw", help="in this order")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument(
        "--ports", default="", help="one free port per script and framework (several processes)"
    )
    parser.add_argument("scripts", nargs="+")
    args = parser.parse_args()
    frameworks = args.frameworks.split(",")
    if not frameworks or set(frameworks) - {"accelerate", "accelkw"}:
        parser.error(
            f"--frameworks: accelerate, accelkw or both, comma-separated; got {args.frameworks!r}"
        )
    count = len(args.scripts)
    ports: list[str | None] = [None] * (count * len(frameworks))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        given = [p for p in args.ports.split(",") if p]
        if len(given) != len(ports):
            parser.error(
                "with several processes, --ports needs one free port per script and framework"
            )
        ports = list(given)
    sys.path.insert(0, str(HERE))
    _preload_shared()
    for i, framework in enumerate(frameworks):
        mine = ports[i * count : (i + 1) * count]
        _framework(framework, args.scripts, args.out / framework, args.work, mine)


if __name__ == "__main__":
    main()

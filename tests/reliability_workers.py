"""A training script whose ranks fail on request, for tests/test_reliability_processes.py.

Run by ``accelkw launch`` (or ``run_workers`` through :func:`train`)::

    accelkw launch --nproc-per-node 2 tests/reliability_workers.py RUN_DIR MODE VICTIM STEP TIMEOUT

Every rank writes ``RUN_DIR/rank<R>.json`` as it goes: its pid, the last step done, and, if it
stopped with an error, the error text and when. The victim rank, at step ``STEP``, records the
time of the fault in ``RUN_DIR/fault.json`` and then:

- ``kill``: sends itself SIGKILL (a crash: no exception, no cleanup);
- ``stall``: sleeps for five timeouts, then exits (a hang: the survivors wait in a collective
  until the timeout; a supervisor stops the sleeper);
- ``spin``: no fault; every rank trains until stopped from outside (Ctrl-C on the launcher).

``TIMEOUT`` is the process-group timeout in seconds, passed to ``InitProcessGroupKwargs``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def train(rank: int, run_dir: str, mode: str, victim: int, fault_step: int, timeout: float) -> Any:
    import torch
    from accelkw_process_group import InitProcessGroupKwargs

    from accelkw_core import Accelerator

    out = Path(run_dir)
    report: dict[str, Any] = {
        "rank": rank,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "step": -1,
        "error": None,
    }
    _write(out / f"rank{rank}.json", report)
    handler = InitProcessGroupKwargs(backend="gloo", timeout=timedelta(seconds=timeout))
    try:
        with Accelerator(cpu=True, kwargs_handlers=[handler]) as accelerator:
            torch.manual_seed(0)
            model = torch.nn.Linear(8, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            model, optimizer = accelerator.prepare(model, optimizer)
            x, y = torch.randn(16, 8), torch.randn(16, 1)
            step = 0
            while True:
                if rank == victim and step == fault_step and mode in ("kill", "stall"):
                    _write(out / "fault.json", {"rank": rank, "time": time.time(), "mode": mode})
                    if mode == "kill":
                        os.kill(os.getpid(), signal.SIGKILL)
                    # Long past the survivors' timeout; then gone, so no run waits on it.
                    time.sleep(5 * timeout)
                    os._exit(3)
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                # A collective every step, with or without a DDP wrapper installed.
                accelerator.reduce(loss.detach(), "mean")
                report["step"] = step
                _write(out / f"rank{rank}.json", report)
                step += 1
                if mode == "spin":
                    time.sleep(0.05)
    except Exception as exc:
        report.update(error=f"{type(exc).__name__}: {exc}", error_time=time.time())
        report["initialized_after"] = _group_alive()
        _write(out / f"rank{rank}.json", report)
        raise


def _group_alive() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def main(argv: list[str]) -> None:
    run_dir, mode, victim, step, timeout = argv
    train(int(os.environ["RANK"]), run_dir, mode, int(victim), int(step), float(timeout))


if __name__ == "__main__":
    main(sys.argv[1:])

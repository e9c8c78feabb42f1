"""``accelkw launch``: torchrun underneath, config carried, exit status and signals passed on,
and a real two-process training run that matches a single-process full-batch run."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from accelkw_core.cli.launch_cmd import PASSTHROUGH, WORKER, build_command, restart_warning
from accelkw_core.errors import ConfigFileError

TIMEOUT = 180


def launch_args(**given: object) -> argparse.Namespace:
    ns = argparse.Namespace(nproc_per_node=None, config=None)
    for key in PASSTHROUGH:
        setattr(ns, key, None)
    for key, value in given.items():
        setattr(ns, key, value)
    return ns


def accelkw(
    *args: str, cwd: Path, extra_env: dict[str, str] | None = None, **kw: object
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "accelkw_core", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        **kw,  # type: ignore[call-overload]
    )


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


# -- the command line built ------------------------------------------------------------------


def test_one_process_and_no_option_runs_the_script_directly() -> None:
    cmd, _ = build_command(launch_args(), "train.py", ["--lr", "1"])
    assert cmd == [sys.executable, "-m", WORKER, "train.py", "--lr", "1"]
    cmd, _ = build_command(launch_args(nproc_per_node="1"), "pkg.train", [], module=True)
    assert cmd == [sys.executable, "-m", WORKER, "--module", "pkg.train"]


def test_several_processes_go_through_torchrun_on_a_port_torchrun_picks() -> None:
    cmd, _ = build_command(launch_args(nproc_per_node="2"), "train.py", ["-x"])
    assert cmd[:5] == [sys.executable, "-m", "accelkw_core.cli.torchrun", "--nproc-per-node", "2"]
    # A c10d rendezvous on port 0: the store takes a free port when it starts, so no port is
    # found free here and released for another process to take first (torchrun's --standalone).
    assert cmd[cmd.index("--rdzv-backend") + 1] == "c10d"
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "127.0.0.1:0"
    assert cmd[cmd.index("--local-addr") + 1] == "127.0.0.1"
    assert "--master-port" not in cmd
    # Each worker starts through accelkw_core.cli.worker, which runs the script.
    assert cmd[-4:] == ["--module", WORKER, "train.py", "-x"]


def test_multi_node_options_pass_through_unchanged() -> None:
    given = dict(
        nproc_per_node="4",
        nnodes="2",
        node_rank="1",
        rdzv_endpoint="head:29400",
        rdzv_backend="c10d",
        rdzv_id="job7",
        max_restarts="3",
    )
    cmd, _ = build_command(launch_args(**given), "train.py", [], module=True)
    assert cmd[3:] == [
        "--nproc-per-node",
        "4",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--rdzv-endpoint",
        "head:29400",
        "--rdzv-backend",
        "c10d",
        "--rdzv-id",
        "job7",
        "--max-restarts",
        "3",
        "--module",
        WORKER,
        "--module",
        "train.py",
    ]
    # One node with an explicit port: nothing added.
    cmd, _ = build_command(launch_args(nproc_per_node="2", master_port="1234"), "t.py", [])
    assert "--master-addr" not in cmd and cmd[cmd.index("--master-port") + 1] == "1234"


def test_restarts_on_one_machine_use_a_rendezvous_the_restarted_workers_can_meet_in() -> None:
    # torchrun's static rendezvous serves every attempt from one store: the restarted workers
    # would read the killed ones' addresses there. c10d on a free local port, and a store of
    # the workers' own per attempt, let each attempt meet afresh.
    cmd, env = build_command(launch_args(nproc_per_node="2", max_restarts="2"), "t.py", [], env={})
    assert "--master-addr" not in cmd and "--master-port" not in cmd
    assert cmd[cmd.index("--rdzv-backend") + 1] == "c10d"
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "127.0.0.1:0"
    assert cmd[cmd.index("--local-addr") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--max-restarts") + 1] == "2"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    # One process with restarts runs under torchrun too (it restarts); a value the user set
    # is kept; no restarts, nothing changes.
    cmd, env = build_command(
        launch_args(max_restarts="1"), "t.py", [], env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}
    )
    assert "accelkw_core.cli.torchrun" in cmd and "--rdzv-endpoint" in cmd
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"
    for restarts in (None, "0"):
        given = launch_args(nproc_per_node="2", max_restarts=restarts)
        cmd, env = build_command(given, "t.py", [], env={})
        assert cmd[cmd.index("--rdzv-endpoint") + 1] == "127.0.0.1:0"
        assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in env


def test_restarts_with_the_static_rendezvous_are_warned_about() -> None:
    static = [
        dict(max_restarts="1", master_port="1234"),
        dict(max_restarts="1", nnodes="2", node_rank="0", master_addr="10.0.0.1"),
        dict(max_restarts="1", nnodes="2", rdzv_endpoint="head:29400"),
    ]
    for given in static:
        warning = restart_warning(launch_args(nproc_per_node="2", **given))
        assert warning and "--rdzv-backend c10d --rdzv-endpoint HOST:PORT" in warning, given
    fine = [
        dict(max_restarts="1"),
        dict(max_restarts="0", master_port="1234"),
        dict(max_restarts="1", nnodes="2", rdzv_backend="c10d", rdzv_endpoint="head:29400"),
        dict(nnodes="2", node_rank="1", master_addr="10.0.0.1"),
    ]
    for given in fine:
        assert restart_warning(launch_args(nproc_per_node="2", **given)) is None, given


def test_the_config_is_checked_once_and_carried_as_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "run.toml").write_text("[accelerator]\ncpu = true\n")
    monkeypatch.chdir(tmp_path)
    _, env = build_command(launch_args(config="run.toml"), "t.py", [], env={})
    assert env["ACCELKW_CONFIG"] == str(tmp_path / "run.toml")
    (tmp_path / "bad.toml").write_text("[accelerator\n")
    with pytest.raises(ConfigFileError, match=r"bad.toml:1:\d+: invalid TOML"):
        build_command(launch_args(config="bad.toml"), "t.py", [], env={})


# -- real runs -------------------------------------------------------------------------------


def test_direct_run_passes_arguments_and_the_exit_status(tmp_path: Path) -> None:
    script(tmp_path, "exit.py", "import sys; print(sys.argv[1:]); sys.exit(3)")
    out = accelkw("launch", "exit.py", "--lr", "1", "--", "x", cwd=tmp_path)
    assert out.returncode == 3
    assert out.stdout.strip() == "['--lr', '1', '--', 'x']"


@pytest.mark.multiprocess
def test_workers_get_torchrun_variables_and_the_config_and_a_failure_status(
    tmp_path: Path,
) -> None:
    (tmp_path / "run.toml").write_text("[accelerator]\ncpu = true\n")
    script(
        tmp_path,
        "report.py",
        """
        import json, os, sys, time
        rank = int(os.environ["RANK"])
        keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "ACCELKW_CONFIG")
        with open(f"rank{rank}.json.tmp", "w") as fh:
            json.dump({k: os.environ.get(k) for k in keys} | {"argv": sys.argv[1:]}, fh)
        os.replace(f"rank{rank}.json.tmp", f"rank{rank}.json")
        # Rank 1 fails only once rank 0 has reported: torchrun stops the others at a failure.
        while rank == 1 and not os.path.exists("rank0.json"):
            time.sleep(0.05)
        sys.exit(7 if rank == 1 else 0)
        """,
    )
    out = accelkw(
        "launch", "--nproc-per-node", "2", "--config", "run.toml", "report.py", "a", cwd=tmp_path
    )
    assert out.returncode == 7, out.stderr[-2000:]
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen["RANK"] == seen["LOCAL_RANK"] == str(rank)
        assert seen["WORLD_SIZE"] == "2" and seen["MASTER_ADDR"] == "127.0.0.1"
        assert seen["ACCELKW_CONFIG"] == str(tmp_path / "run.toml")
        assert seen["argv"] == ["a"]
    assert "exitcode" in out.stderr  # torchrun's failure report is shown


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its entry remains until its parent reaps it.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.multiprocess
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_launch_stops_every_worker(tmp_path: Path, signum: int) -> None:
    script(
        tmp_path,
        "sleep.py",
        """
        import os, time
        rank = os.environ['RANK']
        with open(f"pid{rank}.tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(f"pid{rank}.tmp", f"pid{rank}")  # complete when it appears
        time.sleep(120)
        """,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "accelkw_core", "launch", "--nproc-per-node", "2", "sleep.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        while not all((tmp_path / f"pid{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline, "workers did not start"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        pids = [int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)]
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
        assert code != 0
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in pids), "a worker outlived the launch"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


TRAIN = """
import json, sys
import torch
from accelkw_core import Accelerator

out, global_batch = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)
torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
x = torch.randn(64, 4, generator=gen)
y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(64, 1, generator=gen)
with Accelerator(cpu=True) as acc:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=global_batch // acc.num_processes)
    model, opt, loader = acc.prepare(model, opt, loader)
    for epoch in range(3):
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
    params = [p.detach().reshape(-1).tolist() for p in acc.unwrap_model(model).parameters()]
    with open(f"{out}/rank{acc.process_index}-of-{acc.num_processes}.json", "w") as fh:
        json.dump({"params": params, "log": acc.state.summary()}, fh)
"""


@pytest.mark.multiprocess
def test_two_process_training_matches_a_single_process_full_batch_run(tmp_path: Path) -> None:
    # An integration test: it needs the built-ins, and a broken install fails it, never skips.
    import accelkw_ddp  # noqa: F401
    import accelkw_process_group  # noqa: F401

    script(tmp_path, "train.py", TRAIN)
    two = accelkw("launch", "--nproc-per-node", "2", "train.py", str(tmp_path), "16", cwd=tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    one = accelkw("launch", "train.py", str(tmp_path), "16", cwd=tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]

    def load(name: str) -> dict[str, list[list[float]]]:
        return json.loads((tmp_path / name).read_text())

    r0, r1, single = load("rank0-of-2.json"), load("rank1-of-2.json"), load("rank0-of-1.json")
    assert r0["params"] == r1["params"], "ranks ended with different parameters"
    flat = [v for p in r0["params"] for v in p]
    ref = [v for p in single["params"] for v in p]
    assert max(abs(a - b) for a, b in zip(flat, ref, strict=True)) < 1e-5
    assert ref != [v for p in _initial(tmp_path) for v in p]  # training moved the parameters
    log = "\n".join(r0["log"])
    assert "ddp: wrapped Sequential in DistributedDataParallel" in log
    assert "data loader sharded over 2 processes" in log


def _initial(tmp_path: Path) -> list[list[float]]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    return [p.detach().reshape(-1).tolist() for p in model.parameters()]


# -- checked before any worker starts ----------------------------------------------------------

MARKER = """
import os
open(f"started{os.environ.get('RANK', '0')}", "w").close()
"""


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--nproc-per-node", "0", "an integer >= 1, or one of 'auto', 'cpu', 'gpu', 'xpu'"),
        ("--nproc-per-node", "-1", "an integer >= 1, or one of 'auto', 'cpu', 'gpu', 'xpu'"),
        ("--nproc-per-node", "abc", "an integer >= 1, or one of 'auto', 'cpu', 'gpu', 'xpu'"),
        ("--master-port", "99999", "an integer from 1 to 65535"),
        ("--max-restarts", "-1", "an integer >= 0"),
        ("--nnodes", "2:1", "MIN:MAX with MIN <= MAX"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_1_before_any_worker(
    tmp_path: Path, option: str, value: str, expected: str
) -> None:
    script(tmp_path, "ok.py", MARKER)
    given = [option, value] if option == "--nproc-per-node" else ["--nproc-per-node", "2"]
    given += [] if option == "--nproc-per-node" else [option, value]
    out = accelkw("launch", *given, "ok.py", cwd=tmp_path)
    assert out.returncode == 1
    field = option.lstrip("-").replace("-", "_")
    assert out.stderr.splitlines() == [
        f"accelkw: error: option {option}: launch.{field}: got {value!r}, expected {expected}"
    ]
    assert not list(tmp_path.glob("started*"))


def test_a_missing_script_and_a_bad_config_are_one_line_before_any_worker(tmp_path: Path) -> None:
    out = accelkw("launch", "--nproc-per-node", "2", "missing.py", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        "accelkw: error: SCRIPT: launch.script: got 'missing.py', expected a Python file "
        "(this path does not exist)"
    ]
    script(tmp_path, "ok.py", MARKER)
    # Valid TOML, valid shape: only the effective settings show the misspelt field.
    (tmp_path / "typo.toml").write_text("[accelerator]\nmixed_precision = 'fp17'\n")
    out = accelkw("launch", "--nproc-per-node", "2", "--config", "typo.toml", "ok.py", cwd=tmp_path)
    assert out.returncode == 1
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert "typo.toml [accelerator]: accelerator.mixed_precision: got 'fp17'" in out.stderr
    assert "did you mean 'fp16'?" in out.stderr
    assert not list(tmp_path.glob("started*"))


def test_usage_errors_exit_2() -> None:
    out = accelkw("launch", "--no-such-option", "x.py", cwd=Path.cwd())
    assert out.returncode == 2
    assert "Traceback" not in out.stderr


@pytest.mark.multiprocess
def test_a_config_error_in_the_workers_is_printed_once_without_a_traceback(
    tmp_path: Path,
) -> None:
    script(
        tmp_path,
        "bad.py",
        """
        from accelkw_core import Accelerator
        Accelerator(mixed_precision="fp17", cpu=True)
        """,
    )
    out = accelkw("launch", "--nproc-per-node", "2", "bad.py", cwd=tmp_path)
    assert out.returncode == 1
    errors = [line for line in out.stderr.splitlines() if line.startswith("accelkw: error:")]
    message = (
        "accelkw: error: code: accelerator.mixed_precision: got 'fp17', expected one of 'no', "
        "'fp16', 'bf16', 'fp8' (did you mean 'fp16'?)"
    )
    # Once, naming the ranks that reported it: torchrun stops the other rank as soon as one
    # fails, so on a loaded machine only the first may get to report.
    assert len(errors) == 1, out.stderr
    assert errors[0] in {f"{message} (ranks 0, 1)", f"{message} (rank 0)", f"{message} (rank 1)"}
    assert "Traceback" not in out.stderr and "ChildFailedError" not in out.stderr
    one = accelkw("launch", "bad.py", cwd=tmp_path)  # a direct run: the same line
    assert one.returncode == 1
    assert one.stderr.splitlines() == [message]


@pytest.mark.multiprocess
def test_a_restarted_run_reports_only_the_errors_of_its_last_attempt(tmp_path: Path) -> None:
    # Attempt 0 raises a ConfigError (left for the agent to print); attempt 1 fails otherwise.
    # The launch exits with attempt 1's status, and attempt 0's message is not reported.
    script(
        tmp_path,
        "flaky.py",
        """
        import os, sys
        from accelkw_core import Accelerator
        if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
            Accelerator(mixed_precision="fp17", cpu=True)
        print(f"restart {os.environ['TORCHELASTIC_RESTART_COUNT']}")
        sys.exit(3)
        """,
    )
    out = accelkw("launch", "--max-restarts", "1", "flaky.py", cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    assert out.stdout.splitlines() == ["restart 1"]
    assert "fp17" not in out.stderr and "accelkw: error" not in out.stderr


@pytest.mark.multiprocess
def test_launch_sets_one_thread_per_worker_without_torchruns_banner(tmp_path: Path) -> None:
    script(
        tmp_path,
        "threads.py",
        """
        import os, sys
        # One write per line: torchrun runs workers unbuffered (python -u), so print's
        # separate newline write could interleave with the other rank's line.
        sys.stdout.write(f"rank {os.environ['RANK']} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}\\n")
        """,
    )
    out = accelkw("launch", "--nproc-per-node", "2", "threads.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == [
        "rank 0 OMP_NUM_THREADS=1",
        "rank 1 OMP_NUM_THREADS=1",
    ]
    assert "OMP_NUM_THREADS" not in out.stderr  # torchrun's banner
    mine = accelkw(
        "launch",
        "--nproc-per-node",
        "2",
        "threads.py",
        cwd=tmp_path,
        extra_env={"OMP_NUM_THREADS": "3"},
    )
    assert "rank 0 OMP_NUM_THREADS=3" in mine.stdout


# -- no worker outlives the launch -------------------------------------------------------------


def marked(marker: str) -> list[int]:
    """The live (not zombie) processes whose environment holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes() and _alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def start_marked(
    tmp_path: Path, marker: str, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELKW_")}
    env["LAUNCH_TEST_MARK"] = marker  # inherited by the agent and every worker
    env.update(extra_env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "accelkw_core", "launch", "--nproc-per-node", "2", "sleep.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


SLEEP = """
import os, time
rank = os.environ["RANK"]
with open(f"pid{rank}.tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.replace(f"pid{rank}.tmp", f"pid{rank}")
time.sleep(120)
"""


def wait_gone(marker: str, within: float) -> list[int]:
    deadline = time.monotonic() + within
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return marked(marker)


@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
def test_kill_9_of_the_launcher_takes_torchrun_and_every_worker_with_it(tmp_path: Path) -> None:
    script(tmp_path, "sleep.py", SLEEP)
    marker = f"accelkw-test-{os.getpid()}-{time.monotonic_ns()}"
    proc = start_marked(tmp_path, marker)
    try:
        deadline = time.monotonic() + 90
        while not all((tmp_path / f"pid{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline and proc.poll() is None, "workers did not start"
            time.sleep(0.1)
        assert len(marked(marker)) >= 4  # launcher, torchrun's agent, two workers
        proc.kill()
        proc.wait()
        assert wait_gone(marker, within=10) == [], "a process outlived a kill -9 of the launch"
    finally:
        for pid in marked(marker):
            os.kill(pid, signal.SIGKILL)


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def _cmdline_has(pid: int, part: bytes) -> bool:
    try:
        return part in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


# The worker writes started<rank> first, then imports torch (a second or more), then pid<rank>:
# between the two files its interpreter is importing.
IMPORTING = """
import os, time
rank = os.environ["RANK"]
open(f"started{rank}", "w").close()
import torch  # slow on purpose: the window a Ctrl-C lands in
with open(f"pid{rank}.tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.replace(f"pid{rank}.tmp", f"pid{rank}")
time.sleep(120)
"""


def _wait_for_phase(tmp_path: Path, marker: str, phase: str, proc: subprocess.Popen[bytes]) -> str:
    """Poll until the launch is in ``phase``; return what was seen, checked just before the
    caller sends the Ctrl-C."""
    deadline = time.monotonic() + 90
    while True:
        assert time.monotonic() < deadline and proc.poll() is None, f"never saw {phase!r}"
        if phase == "torchrun starting":
            pids = marked(marker)
            agent = [p for p in pids if _cmdline_has(p, b"accelkw_core.cli.torchrun")]
            workers = [p for p in pids if _environ_has(p, b"\0LOCAL_RANK=")]
            if agent and not workers:
                return f"agent {agent}, no worker"
        else:
            started = all((tmp_path / f"started{r}").exists() for r in (0, 1))
            if started and not any((tmp_path / f"pid{r}").exists() for r in (0, 1)):
                return "both workers started, neither past its imports"
        time.sleep(0.01)


@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("phase", ["torchrun starting", "workers importing"])
def test_an_early_ctrl_c_stops_everything_within_5_seconds(tmp_path: Path, phase: str) -> None:
    """A Ctrl-C while torchrun's agent starts (it runs, no worker does yet), or while the
    workers import (each has started, none has reached its script's body): the phase is
    observed before the signal is sent, and after it no worker ever ran past that phase."""
    script(tmp_path, "sleep.py", IMPORTING)
    marker = f"accelkw-test-{os.getpid()}-{time.monotonic_ns()}"
    proc = start_marked(tmp_path, marker)
    try:
        seen = _wait_for_phase(tmp_path, marker, phase, proc)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the foreground group
        code = proc.wait(timeout=60)
        left = wait_gone(marker, within=5)
        stopped = time.monotonic() - sent
        assert code == 130, proc.stderr.read().decode() if proc.stderr else ""
        assert left == [], "a process outlived the Ctrl-C"
        # The phase held: no worker reached the body of its script.
        ran = [f.name for f in tmp_path.glob("pid*") if not f.name.endswith(".tmp")]
        assert ran == [], f"{phase}: workers ran past it ({ran}) though the test saw {seen}"
        # The bound, a correctness one: torchrun alone waited 30 s for its workers.
        assert stopped < 5, stopped
    finally:
        for pid in marked(marker):
            os.kill(pid, signal.SIGKILL)


# A sitecustomize for the launch's processes. In torchrun's agent, the audit event
# "subprocess.Popen" is raised just before each worker is forked: when it announces worker 1,
# worker 0 is running and torchrun has not yet recorded either. There the agent waits until
# worker 0 runs its script's body, then sends the launch a terminal's Ctrl-C and waits for the
# forwarded signal, which torchrun's handler raises here, in the middle of starting its workers.
CTRL_C_AT_SPAWN = """
import os, signal, sys, time

def _ctrl_c_when_worker_1_is_spawned(event, args):
    if event != "subprocess.Popen" or (args[3] or {}).get("LOCAL_RANK") != "1":
        return
    deadline = time.monotonic() + 60
    while not os.path.exists("pid0") and time.monotonic() < deadline:
        time.sleep(0.01)
    open("ctrl-c-sent", "w").close()
    os.killpg(os.getpgid(os.getppid()), signal.SIGINT)
    time.sleep(60)

sys.addaudithook(_ctrl_c_when_worker_1_is_spawned)
"""

STOPPABLE = """
import os, time
rank = os.environ["RANK"]
try:
    with open(f"pid{rank}.tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(f"pid{rank}.tmp", f"pid{rank}")
    time.sleep(120)
except KeyboardInterrupt:
    open(f"interrupted{rank}", "w").close()
"""


@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_ctrl_c_while_torchrun_starts_the_workers_reaches_the_ones_already_started(
    tmp_path: Path,
) -> None:
    """torchrun's agent takes a signal as an exception in its main thread; landing between
    the first worker's fork and the agent's record of its workers, it left those already started
    running in sessions of their own, without the Ctrl-C, until the agent exited."""
    script(tmp_path, "sleep.py", STOPPABLE)
    site = tmp_path / "site"
    site.mkdir()
    script(site, "sitecustomize.py", CTRL_C_AT_SPAWN)
    marker = f"accelkw-test-{os.getpid()}-{time.monotonic_ns()}"
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    proc = start_marked(tmp_path, marker, extra_env={"PYTHONPATH": path})
    try:
        code = proc.wait(timeout=90)
        err = proc.stderr.read().decode() if proc.stderr else ""
        assert (tmp_path / "ctrl-c-sent").exists(), f"torchrun never started worker 1: {err}"
        assert code == 130, err
        assert wait_gone(marker, within=10) == [], "a process outlived the Ctrl-C"
        assert not (tmp_path / "pid1").exists()  # the Ctrl-C came before worker 1
        # Worker 0 got the Ctrl-C as torchrun's own workers get it, not a kill at the agent's exit.
        assert (tmp_path / "interrupted0").exists(), err
    finally:
        for pid in marked(marker):
            os.kill(pid, signal.SIGKILL)

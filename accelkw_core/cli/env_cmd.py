"""``accelkw env``: the facts a bug report needs (versions, plugins, devices, backends, variables)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["add_parser", "cmd_env", "collect_env"]

# torchrun's variables and the ones that commonly change how a distributed run behaves.
RUN_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "NCCL_DEBUG",
    "TORCH_DISTRIBUTED_DEBUG",
)


def add_parser(sub: Any) -> None:
    env = sub.add_parser(
        "env",
        help="versions, plugins, devices, backends and variables, for bug reports",
        description="Print what a bug report needs: the versions of Python, torch and "
        "accelkw-core, every plugin with its distribution, version, status and what it "
        "contributes (handlers, trackers), the devices and distributed backends torch sees, the ACCELKW_* and torchrun variables that are set, "
        "and each of Accelerate's variables (ACCELERATE_*, FSDP_*) that is set, with what "
        "accelkw does with it (honoured, refused or unused, and why). Paste the output into "
        "the report.",
    )
    env.add_argument("--json", action="store_true", help="print the same facts as JSON")
    env.set_defaults(func=cmd_env)


def _torch_facts() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:  # a broken torch is exactly what a bug report must show
        return {"torch": f"not importable: {type(exc).__name__}: {exc}"}
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda available": cuda,
        "cuda version": torch.version.cuda,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda
        else ["cpu"],
        "cpu threads": torch.get_num_threads(),
    }
    backends = []
    if dist.is_available():
        for name in ("gloo", "nccl", "mpi", "ucc", "xccl"):
            check = getattr(dist, f"is_{name}_available", None)
            if check is not None and check():
                backends.append(name)
    facts["distributed backends"] = backends if dist.is_available() else "torch.distributed off"
    return facts


def collect_env() -> dict[str, Any]:
    """Everything ``accelkw env`` prints, as JSON data."""
    import platform  # here, not at the top: every command builds this module's parser

    from accelkw_core._version import __version__
    from accelkw_core.config.files import find_config
    from accelkw_core.discovery.default_registry import get_registry

    registry = get_registry()
    plugins = [
        {
            "name": r.name,
            "distribution": r.distribution,
            "version": r.version,
            "status": r.status,
            "handlers": sorted(cls.name for cls in r.handlers),
            "trackers": sorted(str(cls.name) for cls in r.trackers),
            "reason": r.reason or None,
        }
        for r in registry.plugins()
    ]
    try:
        config: str | None = str(find_config() or "") or None
    except Exception as exc:
        config = f"error: {exc}"
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "executable": sys.executable,
        "accelkw-core": __version__,
        **_torch_facts(),
        "plugins": plugins,
        "config": config,
        "environment": {
            k: v
            for k, v in sorted(os.environ.items())
            if k.startswith("ACCELKW_") or k in RUN_VARIABLES
        },
        "accelerate variables": _accelerate_variables(registry),
    }
    extra: dict[str, Any] = {}
    try:
        registry.hook.accelkw_env_info(info=extra)
    except Exception as exc:
        extra["accelkw_env_info"] = f"a plugin's hook failed: {type(exc).__name__}: {exc}"
    if extra:
        info["from plugins"] = extra
    return info


def _accelerate_variables(registry: Any) -> dict[str, str]:
    """Each ``ACCELERATE_*``/``FSDP_*`` variable set, with what accelkw does with it."""
    from accelkw_core.config.accelerate_env import describe_accelerate_env

    classes = {name: info.cls for name, info in registry.handlers().items()}
    return {
        f.variable: f"{f.value!r}: {f.action}: {f.what}"
        for f in describe_accelerate_env(os.environ, classes)
    }


def cmd_env(args: argparse.Namespace) -> int:
    from accelkw_core.cli.render import jsonable, print_json

    info = collect_env()
    if args.json:
        print_json(jsonable(info))
        return 0
    for key, value in info.items():
        if key == "plugins":
            print("plugins:" if value else "plugins: none installed")
            for p in value:
                line = f"  {p['distribution'] or p['name']} {p['version'] or ''}".rstrip()
                # What it contributes: handlers, trackers, or both; "-" only for neither.
                kinds = [
                    f"{kind}: {', '.join(p[kind])}" for kind in ("handlers", "trackers") if p[kind]
                ]
                line += f": {p['status']} ({'; '.join(kinds) or 'handlers: -'})"
                print(line + (f": {p['reason']}" if p["reason"] else ""))
        elif isinstance(value, dict):
            print(f"{key}:" if value else f"{key}: (none set)")
            for k, v in value.items():
                print(f"  {k}={v}" if key == "environment" else f"  {k}: {v}")
        elif isinstance(value, list):
            print(f"{key}: {', '.join(map(str, value)) or '-'}")
        else:
            print(f"{key}: {value}")
    return 0

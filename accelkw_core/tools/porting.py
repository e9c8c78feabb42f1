"""Where each Accelerate 1.15 name a training script imports lives in accelkw, and the port.

:data:`NAMES` is the one list: docs/migrating.md's import table is generated from it (a test
fails when the committed table is stale), and :func:`port_imports` rewrites a script's
``from accelerate... import ...`` lines with it, so a script written for Accelerate runs on
accelkw with only its imports changed. A name accelkw does not provide has ``accelkw=None`` and
says why.
"""

from __future__ import annotations

import ast
from typing import NamedTuple

from accelkw_core.discovery.catalog import ACCELERATE_TOP_LEVEL, ACCELKW_ONLY, REFERENCE_NAMES
from accelkw_core.errors import PortError

__all__ = ["NAMES", "Name", "PortError", "lookup", "port_imports"]


class Name(NamedTuple):
    """An Accelerate name: where Accelerate exports it, where accelkw does (``None``: not at all).

    ``note`` says what to know: the plugin that ships a handler class, or why a name is absent.
    """

    accelerate: str
    name: str
    accelkw: str | None
    note: str = ""


_CORE = "accelkw_core"
_UTILS = "accelkw_core.utils"
_BIG_MODEL = "big-model inference (accelerate.big_modeling) is not part of accelkw"
_LAUNCH = "run scripts with `accelkw launch` (torchrun), not from Python"
_DEEPSPEED = "DeepSpeed and Megatron-LM are out of scope (see Out of scope)"


def _plugin(distribution: str) -> str:
    return f"served from its plugin, {distribution} (pip install {distribution})"


def _rows(module: str, target: str | None, names: str, note: str = "") -> list[Name]:
    return [Name(module, n, target, note) for n in names.split()]


# The built-ins' reference classes, from the catalog: Accelerate exports every one from
# accelerate.utils, and some from accelerate itself too (accelkw's own handlers are not its).
_UTILS_HANDLERS = sorted(
    (name, dist) for name, (_, dist) in REFERENCE_NAMES.items() if name not in ACCELKW_ONLY
)
_HANDLERS = [(name, dist) for name, dist in _UTILS_HANDLERS if name in ACCELERATE_TOP_LEVEL]

NAMES: tuple[Name, ...] = (
    # -- ``from accelerate import ...`` -----------------------------------------------------------
    Name("accelerate", "Accelerator", _CORE),
    *_rows(
        "accelerate",
        _CORE,
        "DataLoaderConfiguration DistributedType find_executable_batch_size skip_first_batches",
    ),
    *(Name("accelerate", n, _UTILS, _plugin(d)) for n, d in _HANDLERS),
    Name("accelerate", "is_rich_available", _UTILS),
    Name("accelerate", "DeepSpeedPlugin", None, _DEEPSPEED),
    Name(
        "accelerate", "ParallelismConfig", None, "tensor and context parallelism are not provided"
    ),
    Name(
        "accelerate",
        "PartialState",
        None,
        "no process-wide state singleton: read the run's facts from the Accelerator "
        "(process_index, num_processes, device, is_main_process)",
    ),
    *_rows(
        "accelerate",
        None,
        "cpu_offload cpu_offload_with_hook disk_offload dispatch_model infer_auto_device_map "
        "init_empty_weights init_on_device load_checkpoint_and_dispatch load_checkpoint_in_model",
        _BIG_MODEL,
    ),
    *_rows("accelerate", None, "debug_launcher notebook_launcher", _LAUNCH),
    Name("accelerate", "prepare_pippy", None, "pipeline-parallel inference is not provided"),
    Name(
        "accelerate",
        "synchronize_rng_states",
        None,
        "prepared data loaders synchronise their shuffling themselves",
    ),
    # -- other Accelerate modules -----------------------------------------------------------------
    Name("accelerate.local_sgd", "LocalSGD", "accelkw_core.local_sgd"),
    Name("accelerate.data_loader", "skip_first_batches", _CORE),
    Name(
        "accelerate.logging",
        "get_logger",
        None,
        "use logging.getLogger and log on the main process (accelerator.is_main_process)",
    ),
    Name(
        "accelerate.test_utils.training",
        "mocked_dataloaders",
        None,
        "Accelerate's test fixtures (they download a tokenizer)",
    ),
    # -- ``from accelerate.utils import ...`` -----------------------------------------------------
    *(Name("accelerate.utils", n, _UTILS, _plugin(d)) for n, d in _UTILS_HANDLERS),
    *_rows("accelerate.utils", _UTILS, "DataLoaderConfiguration DistributedType KwargsHandler"),
    *_rows(
        "accelerate.utils",
        _UTILS,
        "set_seed find_executable_batch_size gather gather_object reduce broadcast "
        "broadcast_object_list pad_across_processes send_to_device concatenate find_batch_size "
        "recursively_apply",
    ),
    # Accelerate defines these in submodules of accelerate.utils without re-exporting them.
    *_rows("accelerate.utils.memory", _UTILS, "should_reduce_batch_size clear_device_cache"),
    *_rows("accelerate.utils.imports", _UTILS, "is_torch_distributed_available is_tqdm_available"),
    *_rows(
        "accelerate.utils",
        _UTILS,
        "is_aim_available is_bf16_available is_boto3_available is_clearml_available "
        "is_comet_ml_available is_cuda_available is_datasets_available is_deepspeed_available "
        "is_dvclive_available is_fp16_available is_fp8_available is_hpu_available "
        "is_matplotlib_available is_mlflow_available is_mlu_available is_mps_available "
        "is_msamp_available is_musa_available is_neuron_available is_npu_available "
        "is_pandas_available is_peft_available is_pytest_available is_rich_available "
        "is_sagemaker_available is_schedulefree_available is_sdaa_available "
        "is_swanlab_available is_tensorboard_available is_timm_available "
        "is_torch_xla_available is_torchao_available "
        "is_torchdata_available is_torchvision_available "
        "is_trackio_available is_transformer_engine_available is_transformers_available "
        "is_wandb_available is_xpu_available",
    ),
    Name("accelerate.utils", "ProjectConfiguration", _UTILS, "checkpoints: docs/checkpoints.md"),
    Name("accelerate.utils", "LoggerType", _UTILS, "trackers: docs/trackers.md"),
    *_rows(
        "accelerate.tracking",
        "accelkw_core.tracking",
        "GeneralTracker on_main_process filter_trackers",
        "trackers are plugins: docs/trackers.md",
    ),
    *_rows(
        "accelerate.utils",
        None,
        "DeepSpeedPlugin MegatronLMPlugin MegatronLMDummyScheduler",
        _DEEPSPEED,
    ),
    # Exported from accelerate.utils only where DeepSpeed is installed.
    *_rows("accelerate.utils.deepspeed", None, "DummyOptim DummyScheduler", _DEEPSPEED),
    *_rows("accelerate.utils", None, "PrepareForLaunch patch_environment", _LAUNCH),
    Name("accelerate.utils", "write_basic_config", None, "write a config with `accelkw config`"),
)

_BY_PLACE = {(n.accelerate, n.name): n for n in NAMES}


def lookup(module: str, name: str) -> Name | None:
    """The row of ``name`` imported from Accelerate's ``module``, or ``None`` when unknown.

    Within ``accelerate.utils`` and its submodules a name is one name wherever it is imported
    from (Accelerate re-exports most of them, some only when an optional package is installed).
    """
    found = _BY_PLACE.get((module, name))
    if found is None and (module == "accelerate.utils" or module.startswith("accelerate.utils.")):
        found = next(
            (n for n in NAMES if n.name == name and n.accelerate.startswith("accelerate.utils")),
            None,
        )
    return found


def port_imports(source: str) -> str:
    """``source`` with every ``from accelerate... import ...`` replaced by accelkw's imports.

    Each statement becomes one ``from <accelkw module> import ...`` line per target module, at
    its indentation and in the order the names came; nothing else changes. Raises
    :class:`PortError` naming every name accelkw does not provide, with why, and every name it
    does not know.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    problems: list[str] = []
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
            continue
        if node.module != "accelerate" and not node.module.startswith("accelerate."):
            continue
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            row = lookup(node.module, alias.name)
            if row is None or row.accelkw is None:
                why = row.note if row is not None else "not in accelkw's table of Accelerate names"
                problems.append(f"line {node.lineno}: {node.module}.{alias.name}: {why}")
                continue
            spelled = alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"
            groups.setdefault(row.accelkw, []).append(spelled)
        indent = " " * node.col_offset
        text = "".join(f"{indent}from {m} import {', '.join(ns)}\n" for m, ns in groups.items())
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, text))
    if problems:
        raise PortError(
            "cannot port these imports, accelkw does not provide them:\n  " + "\n  ".join(problems)
        )
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    return "".join(lines)

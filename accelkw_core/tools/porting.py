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

__all__ = [
    "ACCELERATE_MODULE",
    "ACCELERATOR_MEMBERS",
    "MEMBERS_NOT_PROVIDED",
    "NAMES",
    "Name",
    "PortError",
    "lookup",
    "lookup_module",
    "member_provided",
    "port_imports",
]


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


def _words(text: str) -> list[str]:
    return text.split()


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
    Name("accelerate", "PartialState", "accelkw_core.state"),
    *_rows(
        "accelerate",
        None,
        "cpu_offload cpu_offload_with_hook disk_offload dispatch_model infer_auto_device_map "
        "init_empty_weights init_on_device load_checkpoint_and_dispatch load_checkpoint_in_model",
        _BIG_MODEL,
    ),
    *_rows("accelerate", None, "debug_launcher notebook_launcher", _LAUNCH),
    *_rows(
        "accelerate.hooks",
        None,
        "AlignDevicesHook CpuOffload add_hook_to_module remove_hook_from_module",
        _BIG_MODEL,
    ),
    Name("accelerate.utils", "set_module_tensor_to_device", None, _BIG_MODEL),
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
    *_rows("accelerate.logging", "accelkw_core.logging", "get_logger MultiProcessAdapter"),
    *_rows(
        "accelerate.state",
        "accelkw_core.state",
        "AcceleratorState GradientState PartialState is_initialized",
    ),
    Name("accelerate.state", "DistributedType", _CORE),
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

#: What a ported ``import accelerate`` binds (``accelerate.__version__``, ``accelerate.state``).
ACCELERATE_MODULE = "accelkw_core.as_accelerate"

#: Every public member of Accelerate 1.15's ``Accelerator`` (methods, properties and the
#: attributes its ``__init__`` sets). A script's ``accelerator.<member>`` is checked against it.
ACCELERATOR_MEMBERS: frozenset[str] = frozenset(
    _words("""
    accumulate ao_recipe_handler autocast autocast_handler backward check_trigger clear
    clip_grad_norm_ clip_grad_value_ context_parallel_rank data_parallel_rank
    data_parallel_shard_rank dataloader_config ddp_handler deepspeed_engine_wrapped
    deepspeed_plugin deepspeed_ulysses_dl_adapter delayed_fp8_autocast device device_placement
    dispatch_batches distributed_type end_training even_batches flag_tensor fp8_backend
    fp8_enabled fp8_recipe_handler free_memory gather gather_for_metrics get_state_dict
    get_tracker gradient_accumulation_steps gradient_state has_fp8_handler has_lomo_optimizer
    init_handler init_trackers is_composable_parallelism_enabled is_fsdp2 is_last_process
    is_local_main_process is_main_process join_uneven_inputs load_state local_main_process_first
    local_process_index log log_with logging_dir lomo_backward main_process_first
    maybe_context_parallel mixed_precision msamp_recipe_handler multi_device native_amp no_sync
    non_blocking num_processes on_last_process on_local_main_process on_local_process
    on_main_process on_process optimizer_step_was_skipped pad_across_processes
    parallelism_config pipeline_parallel_rank prepare prepare_data_loader prepare_model
    prepare_optimizer prepare_scheduler print process_index profile profile_handler
    project_configuration project_dir reduce register_for_checkpointing
    register_load_state_pre_hook register_save_state_pre_hook rng_types save save_iteration
    save_model save_state scaler scaler_handler set_trigger should_save_model skip_first_batches
    split_batches split_between_processes state step step_scheduler_with_optimizer
    sync_gradients te_recipe_handler tensor_parallel_rank torch_device_mesh trackers
    trigger_sync_in_backward unscale_gradients unwrap_model use_distributed
    use_seedable_sampler use_stateful_dataloader verify_device_map wait_for_everyone
    """)
)

_FP8 = (
    "fp8 is a handler plugin (accelkw-fp8, docs/handlers/ao_recipe.md): accelerator.mixed_precision "
    "== 'fp8' says it is on, and accelerator.state.handlers['ao_recipe'] holds the recipe"
)
_PARALLEL = "tensor, context and pipeline parallelism are not provided"
_HANDLER = (
    "handlers are plugins: read one's settings from accelerator.state.handlers[<name>] "
    "(docs/handlers.md)"
)
_INTERNAL = "an internal of Accelerate's Accelerator that accelkw has no counterpart for"

#: The members accelkw's ``Accelerator`` does not have, and why (docs/migrating.md lists them).
MEMBERS_NOT_PROVIDED: dict[str, str] = {
    **dict.fromkeys(
        _words("deepspeed_engine_wrapped deepspeed_plugin deepspeed_ulysses_dl_adapter"),
        _DEEPSPEED,
    ),
    **dict.fromkeys(["lomo_backward", "has_lomo_optimizer"], "LOMO optimizers are not provided"),
    **dict.fromkeys(
        _words(
            "ao_recipe_handler delayed_fp8_autocast fp8_backend fp8_enabled fp8_recipe_handler "
            "has_fp8_handler msamp_recipe_handler te_recipe_handler"
        ),
        _FP8,
    ),
    **dict.fromkeys(
        _words(
            "context_parallel_rank data_parallel_rank data_parallel_shard_rank pipeline_parallel_rank "
            "tensor_parallel_rank torch_device_mesh parallelism_config "
            "is_composable_parallelism_enabled maybe_context_parallel"
        ),
        _PARALLEL,
    ),
    **dict.fromkeys(
        _words("autocast_handler ddp_handler init_handler profile_handler scaler_handler"),
        _HANDLER,
    ),
    "flag_tensor": "the trigger's tensor: use set_trigger() and check_trigger()",
    "verify_device_map": _BIG_MODEL,
    "is_fsdp2": "FSDP is the accelkw-fsdp plugin, FSDP2 only: it is always FSDP2",
    **dict.fromkeys(
        _words(
            "device_placement multi_device prepare_data_loader rng_types should_save_model "
            "step_scheduler_with_optimizer trigger_sync_in_backward"
        ),
        _INTERNAL,
    ),
}

# Set in Accelerator.__init__, so not attributes of the class itself.
_INSTANCE_MEMBERS = frozenset({"state", "gradient_state", "native_amp", "settings"})


def member_provided(member: str) -> bool:
    """Whether accelkw's ``Accelerator`` has ``member`` (an attribute of Accelerate's)."""
    from accelkw_core.accelerator import Accelerator

    return member in _INSTANCE_MEMBERS or hasattr(Accelerator, member)


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


def _is_accelerate(module: str) -> bool:
    return module == "accelerate" or module.startswith("accelerate.")


def _accelerator_names(tree: ast.AST) -> set[str]:
    """The names a script's ``Accelerator`` goes by: ``accelerator`` (the ecosystem's name for
    it, as a variable and a parameter) and every name assigned an ``Accelerator(...)``."""
    classes = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "accelerate"
        for alias in node.names
        if alias.name == "Accelerator"
    }
    names = {"accelerator"}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id in classes
        ):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _member_problems(tree: ast.AST) -> list[str]:
    """A line for each ``accelerator.<member>`` of Accelerate's that accelkw does not have."""
    names = _accelerator_names(tree)
    problems: dict[str, tuple[int, str]] = {}
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in names
        ):
            continue
        member = node.attr
        if member not in ACCELERATOR_MEMBERS or member in problems or member_provided(member):
            continue
        why = MEMBERS_NOT_PROVIDED.get(member, "not provided by this accelkw")
        problems[member] = (
            node.lineno,
            f"line {node.lineno}: {node.value.id}.{member}: {why} "
            "(docs/migrating.md, Accelerator members not provided)",
        )
    return [line for _, line in sorted(problems.values())]


def _module_import(node: ast.Import) -> str:
    """``import accelerate`` (and its submodules) as accelkw's stand-in module, others kept."""
    indent = " " * node.col_offset
    out = []
    for alias in node.names:
        if _is_accelerate(alias.name):
            bound = alias.asname or "accelerate"
            if alias.asname is not None and alias.name != "accelerate":
                # ``import accelerate.utils as au`` binds the submodule itself.
                target = lookup_module(alias.name)
                out.append(f"{indent}import {target} as {bound}\n")
                continue
            out.append(f"{indent}import {ACCELERATE_MODULE} as {bound}\n")
        else:
            spelled = alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"
            out.append(f"{indent}import {spelled}\n")
    return "".join(out)


def lookup_module(module: str) -> str:
    """accelkw's module for Accelerate's ``module`` (``accelerate.utils`` -> ``accelkw_core.utils``).

    Raises :class:`PortError` for a module accelkw has no counterpart of.
    """
    targets = {n.accelkw for n in NAMES if n.accelerate == module and n.accelkw}
    if module.startswith("accelerate.utils"):
        targets = {_UTILS}
    if len(targets) != 1:
        raise PortError(f"cannot port `import {module}`: accelkw has no one module for it")
    return targets.pop()


def port_imports(source: str) -> str:
    """``source`` with every ``from accelerate... import ...`` replaced by accelkw's imports.

    Each statement becomes one ``from <accelkw module> import ...`` line per target module, at
    its indentation and in the order the names came; ``import accelerate`` binds
    :data:`ACCELERATE_MODULE` under the same name; nothing else changes. Raises
    :class:`PortError` naming every name accelkw does not provide, with why, every name it
    does not know, and every member of Accelerate's ``Accelerator`` the script uses
    (``accelerator.<member>``) that accelkw's does not have.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    problems: list[str] = []
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(_is_accelerate(a.name) for a in node.names):
            try:
                text = _module_import(node)
            except PortError as exc:
                problems.append(f"line {node.lineno}: {exc}")
                continue
            edits.append((node.lineno - 1, node.end_lineno or node.lineno, text))
            continue
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
    if edits or problems:
        problems += _member_problems(tree)
    if problems:
        raise PortError(
            "cannot port these imports, accelkw does not provide them:\n  " + "\n  ".join(problems)
        )
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    return "".join(lines)

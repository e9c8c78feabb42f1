"""The reference's import path: ``from accelkw_core.utils import AutocastKwargs`` and friends.

What training scripts import from ``accelerate.utils``: the core's utilities (``set_seed``,
``find_executable_batch_size``, ``DataLoaderConfiguration``, ``gather``, ``is_*_available``,
...), re-exported from the modules that define them, and the handler classes. Handler classes
live in their plugin packages; this module imports them on first access, so
``import accelkw_core.utils`` stays cheap (no torch) and a missing plugin fails with the
distribution to install. Only these names are served: a third-party handler class is imported
from its own package. docs/migrating.md lists every name and where it lives.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from accelkw_core.contract.handler import KwargsHandler
from accelkw_core.discovery.catalog import REFERENCE_NAMES
from accelkw_core.runtime.availability import (
    is_aim_available,
    is_bf16_available,
    is_boto3_available,
    is_clearml_available,
    is_comet_ml_available,
    is_cuda_available,
    is_datasets_available,
    is_deepspeed_available,
    is_dvclive_available,
    is_fp8_available,
    is_fp16_available,
    is_hpu_available,
    is_matplotlib_available,
    is_mlflow_available,
    is_mlu_available,
    is_mps_available,
    is_msamp_available,
    is_musa_available,
    is_neuron_available,
    is_npu_available,
    is_pandas_available,
    is_peft_available,
    is_pytest_available,
    is_rich_available,
    is_sagemaker_available,
    is_schedulefree_available,
    is_sdaa_available,
    is_swanlab_available,
    is_tensorboard_available,
    is_timm_available,
    is_torch_distributed_available,
    is_torch_xla_available,
    is_torchao_available,
    is_torchdata_available,
    is_torchvision_available,
    is_tqdm_available,
    is_trackio_available,
    is_transformer_engine_available,
    is_transformers_available,
    is_wandb_available,
    is_xpu_available,
)
from accelkw_core.runtime.checkpoints.project import ProjectConfiguration
from accelkw_core.runtime.data.dataloader_config import DataLoaderConfiguration
from accelkw_core.runtime.memory import (
    clear_device_cache,
    find_executable_batch_size,
    should_reduce_batch_size,
)
from accelkw_core.runtime.processes.coordination import DistributedType
from accelkw_core.runtime.processes.operations import (
    broadcast,
    broadcast_object_list,
    concatenate,
    find_batch_size,
    gather,
    gather_object,
    pad_across_processes,
    recursively_apply,
    reduce,
    send_to_device,
)
from accelkw_core.runtime.seeding import set_seed
from accelkw_core.tracking.selection import LoggerType

if TYPE_CHECKING:
    # What the lazy lookup below returns, for type checkers, which do not see that lookup: a
    # misspelt name is then an error, not an ``Any``. The handler classes are the catalog's
    # reference names (a test keeps the two in step); where a plugin's distribution is not
    # installed, a type checker cannot find its module and sees ``Any`` for its names.
    from accelkw_async_checkpoint import AsyncCheckpointKwargs as AsyncCheckpointKwargs
    from accelkw_autocast import AutocastKwargs as AutocastKwargs
    from accelkw_compile import DynamoBackend as DynamoBackend
    from accelkw_compile import TorchDynamoPlugin as TorchDynamoPlugin
    from accelkw_ddp import DDPCommunicationHookType as DDPCommunicationHookType
    from accelkw_ddp import DistributedDataParallelKwargs as DistributedDataParallelKwargs
    from accelkw_fp8 import AORecipeKwargs as AORecipeKwargs
    from accelkw_fp8 import FP8RecipeKwargs as FP8RecipeKwargs
    from accelkw_fp8 import MSAMPRecipeKwargs as MSAMPRecipeKwargs
    from accelkw_fp8 import TERecipeKwargs as TERecipeKwargs
    from accelkw_fsdp import FullyShardedDataParallelPlugin as FullyShardedDataParallelPlugin
    from accelkw_grad_accum import GradientAccumulationPlugin as GradientAccumulationPlugin
    from accelkw_grad_scaler import GradScalerKwargs as GradScalerKwargs
    from accelkw_process_group import InitProcessGroupKwargs as InitProcessGroupKwargs
    from accelkw_profile import ProfileKwargs as ProfileKwargs

    from accelkw_core.runtime.data.data_loader import SeedableRandomSampler as SeedableRandomSampler
    from accelkw_core.runtime.data.data_loader import SkipBatchSampler as SkipBatchSampler
    from accelkw_core.runtime.data.data_loader import skip_first_batches as skip_first_batches

# Names whose module imports torch: imported on first access, like the handler classes.
_LAZY = {
    "skip_first_batches": "accelkw_core.runtime.data.data_loader",
    "SeedableRandomSampler": "accelkw_core.runtime.data.data_loader",
    "SkipBatchSampler": "accelkw_core.runtime.data.data_loader",
}

__all__ = [
    "DataLoaderConfiguration",
    "DistributedType",
    "KwargsHandler",
    "LoggerType",
    "ProjectConfiguration",
    "broadcast",
    "broadcast_object_list",
    "clear_device_cache",
    "concatenate",
    "find_batch_size",
    "find_executable_batch_size",
    "gather",
    "gather_object",
    "is_aim_available",
    "is_bf16_available",
    "is_boto3_available",
    "is_clearml_available",
    "is_comet_ml_available",
    "is_cuda_available",
    "is_datasets_available",
    "is_deepspeed_available",
    "is_dvclive_available",
    "is_fp16_available",
    "is_fp8_available",
    "is_hpu_available",
    "is_matplotlib_available",
    "is_mlflow_available",
    "is_mlu_available",
    "is_mps_available",
    "is_msamp_available",
    "is_musa_available",
    "is_neuron_available",
    "is_npu_available",
    "is_pandas_available",
    "is_peft_available",
    "is_pytest_available",
    "is_rich_available",
    "is_sagemaker_available",
    "is_schedulefree_available",
    "is_sdaa_available",
    "is_swanlab_available",
    "is_tensorboard_available",
    "is_timm_available",
    "is_torch_distributed_available",
    "is_torch_xla_available",
    "is_torchao_available",
    "is_torchdata_available",
    "is_torchvision_available",
    "is_tqdm_available",
    "is_trackio_available",
    "is_transformer_engine_available",
    "is_transformers_available",
    "is_wandb_available",
    "is_xpu_available",
    "pad_across_processes",
    "recursively_apply",
    "reduce",
    "send_to_device",
    "should_reduce_batch_size",
    "set_seed",
    *_LAZY,
    *REFERENCE_NAMES,
]


# Hidden from type checkers, which read the imports above instead.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        return _lazy(name)


def _lazy(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    lazy = _LAZY.get(name)
    if lazy is not None:
        value = getattr(importlib.import_module(lazy), name)
        globals()[name] = value
        return value
    known = REFERENCE_NAMES.get(name)
    if known is not None:
        module_name, distribution = known
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ImportError(
                f"cannot import name {name!r} from 'accelkw_core.utils': it is provided by the "
                f"{distribution} distribution, which is not installed or failed to import "
                f"({exc}). Install it with: pip install {distribution}",
                name=name,
            ) from exc
        value = getattr(module, name)
        globals()[name] = value
        return value
    # Only the catalog's names: an unknown one is a typo or a third party's class, which is
    # imported from its own package. Nothing is loaded to look for it.
    raise AttributeError(
        f"module 'accelkw_core.utils' has no attribute {name!r}; it serves the names Accelerate's "
        f"utils has (docs/migrating.md) and a third-party handler class is imported from its "
        f"own package",
        name=name,
    )

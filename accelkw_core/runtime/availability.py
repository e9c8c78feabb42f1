"""Accelerate's ``is_*_available`` checks, which scripts use to pick optional code paths.

A package check is Accelerate's: the module can be found *and* its distribution is installed
(so a stray folder of that name does not count). Device checks ask torch; nothing here imports
torch or the package checked at module import time.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from functools import cache

from accelkw_core.facts.environment import TRUE_WORDS

__all__ = [
    "is_aim_available",
    "is_bf16_available",
    "is_boto3_available",
    "is_clearml_available",
    "is_comet_ml_available",
    "is_cuda_available",
    "is_datasets_available",
    "is_deepspeed_available",
    "is_dvclive_available",
    "is_fp8_available",
    "is_fp16_available",
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
]


@cache
def _package(module: str, distribution: str | None = None) -> bool:
    if importlib.util.find_spec(module) is None:
        return False
    try:
        importlib.metadata.metadata(distribution or module)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# -- packages ----------------------------------------------------------------------------------


def is_schedulefree_available() -> bool:
    return _package("schedulefree")


def is_transformers_available() -> bool:
    return _package("transformers")


def is_datasets_available() -> bool:
    return _package("datasets")


def is_peft_available() -> bool:
    return _package("peft")


def is_timm_available() -> bool:
    return _package("timm")


def is_torchvision_available() -> bool:
    return _package("torchvision")


def is_torchdata_available() -> bool:
    return _package("torchdata")


def is_deepspeed_available() -> bool:
    return _package("deepspeed")


def is_msamp_available() -> bool:
    return _package("msamp", "ms-amp")


def is_transformer_engine_available() -> bool:
    return _package("transformer_engine", "transformer-engine")


def is_torchao_available() -> bool:
    return _package("torchao")


def is_tensorboard_available() -> bool:
    return _package("tensorboard") or _package("tensorboardX")


def is_wandb_available() -> bool:
    return _package("wandb")


def is_comet_ml_available() -> bool:
    return _package("comet_ml")


def is_aim_available() -> bool:
    if not _package("aim"):
        return False
    from packaging.version import Version

    return Version(importlib.metadata.version("aim")) < Version("4.0.0")


def is_mlflow_available() -> bool:
    return _package("mlflow") or _package("mlflow", "mlflow-skinny")


def is_clearml_available() -> bool:
    return _package("clearml")


def is_dvclive_available() -> bool:
    return _package("dvclive")


def is_swanlab_available() -> bool:
    return _package("swanlab")


def is_trackio_available() -> bool:
    return sys.version_info >= (3, 10) and _package("trackio")


def is_boto3_available() -> bool:
    return _package("boto3")


def is_sagemaker_available() -> bool:
    return _package("sagemaker")


def is_tqdm_available() -> bool:
    return _package("tqdm")


def is_pandas_available() -> bool:
    return _package("pandas")


def is_matplotlib_available() -> bool:
    return _package("matplotlib")


def is_pytest_available() -> bool:
    return _package("pytest")


def is_rich_available() -> bool:
    """Whether rich is installed and ``ACCELERATE_ENABLE_RICH`` turns it on (as Accelerate)."""
    flag = os.environ.get("ACCELERATE_ENABLE_RICH", "").strip().lower()
    # Accelerate's reading of its own switches also takes "y" and "t".
    return _package("rich") and (flag in TRUE_WORDS or flag in ("y", "t"))


# -- devices -----------------------------------------------------------------------------------


def is_torch_distributed_available() -> bool:
    import torch

    return bool(torch.distributed.is_available())


def is_cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """Always ``False``: accelkw's runtime does not run on XLA (docs/migrating.md)."""
    return False


def is_mps_available(min_version: str = "1.12") -> bool:
    import torch

    return bool(torch.backends.mps.is_available() and torch.backends.mps.is_built())


def _vendor_device(module: str, attribute: str) -> bool:
    if not _package(module, module.replace("_", "-")) and module != "torch":
        return False
    import torch

    device = getattr(torch, attribute, None)
    available = getattr(device, "is_available", None)
    return bool(available()) if callable(available) else False


def is_xpu_available(check_device: bool = False) -> bool:
    return _vendor_device("torch", "xpu")


def is_npu_available(check_device: bool = False) -> bool:
    return _vendor_device("torch_npu", "npu")


def is_mlu_available(check_device: bool = False) -> bool:
    return _vendor_device("torch_mlu", "mlu")


def is_musa_available(check_device: bool = False) -> bool:
    return _vendor_device("torch_musa", "musa")


def is_sdaa_available(check_device: bool = False) -> bool:
    return _vendor_device("torch_sdaa", "sdaa")


def is_hpu_available(init_hccl: bool = False) -> bool:
    return _vendor_device("habana_frameworks", "hpu")


def is_neuron_available(check_device: bool = False) -> bool:
    return _vendor_device("torch_neuronx", "neuron")


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """Whether bf16 runs here: CUDA's answer on a CUDA machine, else ``True`` (CPU runs it)."""
    import torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    if is_xpu_available():
        return bool(torch.xpu.is_bf16_supported())
    return True


def is_fp16_available() -> bool:
    return True


def is_fp8_available() -> bool:
    return is_msamp_available() or is_transformer_engine_available() or is_torchao_available()

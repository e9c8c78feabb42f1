#!/usr/bin/env bash
# The CUDA checks, for a machine with at least one NVIDIA GPU: every test marked `cuda`, then a
# tiny nccl run through `accelkw launch` (two processes when there are two GPUs, one per device).
# Usage: .ci/gpu-check.sh [python]   (default: .venv/bin/python, else python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-}"
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "gpu-check: torch sees no CUDA device")'
GPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
NPROC=$(( GPUS >= 2 ? 2 : 1 ))
echo "gpu-check: $GPUS GPU(s); torch $("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)')"

"$PY" -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda.py

DEMO=$(mktemp -d)
trap 'rm -rf "$DEMO"' EXIT
cat > "$DEMO/nccl_demo.py" <<'PYEOF'
import torch
import torch.distributed as dist

from accelkw_core import Accelerator
from accelkw_core.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

acc = Accelerator(
    mixed_precision="bf16",
    kwargs_handlers=[
        InitProcessGroupKwargs(backend="nccl"),
        DistributedDataParallelKwargs(comm_hook="bf16" if torch.cuda.device_count() > 1 else "no"),
    ],
)
model = acc.prepare(torch.nn.Linear(16, 16))
optimizer = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
x = torch.randn(8, 16, device=acc.device)
acc.backward(model(x).float().pow(2).mean())
acc.clip_grad_norm_(model.parameters(), 1.0)
optimizer.step()
total = acc.reduce(torch.ones(1, device=acc.device)).item()
backend = dist.get_backend() if dist.is_initialized() else "none (one process)"
acc.print(f"nccl demo: {acc.num_processes} process(es), backend {backend}, "
          f"{acc.distributed_type.value}, reduce -> {total:g}, device {acc.device}")
assert total == acc.num_processes
acc.end_training()
PYEOF
"$PY" -m accelkw_core launch --nproc-per-node "$NPROC" "$DEMO/nccl_demo.py"
echo "gpu-check: ok"

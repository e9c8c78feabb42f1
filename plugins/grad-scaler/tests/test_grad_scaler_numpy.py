"""NumPy scalars, which torch's GradScaler accepts, are accepted and stored as Python numbers."""

from __future__ import annotations

import numpy as np
from accelkw_grad_scaler import GradScalerKwargs


def test_numpy_scalars_become_python_numbers() -> None:
    handler = GradScalerKwargs(
        init_scale=np.float32(1024),  # type: ignore[arg-type]
        growth_factor=np.float64(3.0),
        backoff_factor=np.float32(0.25),  # type: ignore[arg-type]
        growth_interval=np.int64(100),  # type: ignore[arg-type]
        enabled=np.bool_(True),  # type: ignore[arg-type]
    )
    values = handler.to_dict()
    assert values == {"init_scale": 1024.0, "growth_factor": 3.0, "backoff_factor": 0.25,
                      "growth_interval": 100, "enabled": True}  # fmt: skip
    assert [type(v) for v in values.values()] == [float, float, float, int, bool]
    scaler = handler.build("cpu")
    assert scaler.get_growth_interval() == 100 and scaler.is_enabled()

"""Three Ray Train runs of examples/ray/train.py on one local Ray cluster (tests/test_ray_train.py).

``python tests/ray_driver.py FOLDER``: an uninterrupted DDP run, the same run with worker 1
killed at step 10 (Ray restarts the group, the run resumes from the newest checkpoint Ray
registered), and a
short FSDP2 run. Each leaves its weights and facts in FOLDER. One cluster for the three keeps
the start-up (the slow part) to once. The example's folder must be on PYTHONPATH, so Ray's
workers import the loop from it.
"""

from __future__ import annotations

import os
import sys

# Ray Train's own knobs, read by its controller (and passed on to the workers), that cost time
# and prove nothing here: the controller polls the workers every 2 s by default (each run's end,
# and the killed worker, are seen up to that late); the preemption watcher, one more actor (a
# Python process that imports Ray Train) per run, watches for a node being drained, which a
# local cluster never is.
RAY_TRAIN_SETTINGS = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
}


def main(folder: str) -> None:
    for key, value in RAY_TRAIN_SETTINGS.items():
        os.environ.setdefault(key, value)
    import ray
    import train  # examples/ray/train.py, through PYTHONPATH

    ray.init(num_cpus=3, object_store_memory=100 * 1024 * 1024, include_dashboard=False)
    try:
        for name, given in (
            ("plain", {}),
            ("killed", {"fail_at_step": 10}),
            ("fsdp", {"fsdp": True, "epochs": 1}),
        ):
            storage = os.path.join(folder, name)
            os.makedirs(storage)
            config = train.make_config(storage, os.path.join(folder, f"{name}.pt"), **given)
            result = train.fit(config, storage, name=name)
            if result.error is not None:
                raise SystemExit(f"{name}: {result.error!r}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])

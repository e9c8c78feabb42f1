"""An ``IterableDataset``'s loader under Accelerate 1.15.0 and accelkw: each process sees alike.

One 2-process launch per framework prepares loaders over a stream whose length does not divide
by the processes, with ``split_batches`` on and off and ``dispatch_batches`` on, off and unset
(Accelerate's default: dispatched), with and without ``drop_last`` and a length; every batch each
rank sees, where the loader says it ends, what ``gather_for_metrics`` keeps of each batch, the
batches after ``skip_first_batches(loader, 1)`` and ``len(loader)`` must be equal; and so for a
map-style loader with ``dispatch_batches=True``, and for ``skip_first_batches`` of a plain one.
"""

from __future__ import annotations

from types import ModuleType

from accelkw_core.testing import run_workers
from tests.conformance import stream_programs as programs
from tests.conformance.runtime_programs import BUILTINS


def test_a_stream_is_sharded_and_dispatched_as_accelerate_does(accelerate: ModuleType) -> None:
    env = {"ACCELKW_PLUGINS": BUILTINS, "OMP_NUM_THREADS": "1"}
    ref = run_workers(programs.stream_worker, 2, args=("accelerate",), env=env, timeout=240)
    ours = run_workers(programs.stream_worker, 2, args=("accelkw",), env=env, timeout=240)
    assert len(ref[0]) == 17  # 2 split x 3 dispatch settings x 2 streams, 4 map-style, 1 plain
    for rank in (0, 1):
        for case, seen in ref[rank].items():
            assert ours[rank][case] == seen, f"rank {rank}, {case}"
    # What the comparison covers: sharded, each process reads the stream and keeps its batch of
    # every round, the short last round completed from the start and nothing dropped from it;
    # dispatched, the last global batch is cut in equal slices and the repeats are dropped.
    shard = ours[1]["sized split=False dispatch=False"]
    assert shard["batches"] == [[4.0, 5.0, 6.0, 7.0], [1.0, 2.0, 3.0, 4.0]]
    assert shard["metrics"][-1] == [8.0, 9.0, 10.0, 0.0, 1.0, 2.0, 3.0, 4.0]
    dispatched = ours[1]["sized split=False dispatch=None"]
    assert dispatched["batches"] == [[4.0, 5.0, 6.0, 7.0], [10.0, 0.0]]
    assert dispatched["ends"] == [False, True]
    assert dispatched["metrics"][-1] == [8.0, 9.0, 10.0]
    assert ours[0]["plain skipped"] == [[4.0, 5.0], [6.0]]

"""Distributed inference with ``PartialState()`` alone, written for Accelerate 1.15.

The pattern of Accelerate's distributed-inference guide: no ``Accelerator``, a
``PartialState(cpu=True)`` that starts the processes, ``split_between_processes`` over lists,
dicts and tensors (with and without ``apply_padding``), ``gather``/``gather_object`` of the
results, ``get_logger(...)`` lines logged ``in_order``, and the ``on_*_process`` decorators. Every
process appends its log lines to one file (``log.txt``) and writes what it saw to
``rank<i>.json`` under the folder given as the first argument: the differential test compares
both, byte for byte, with Accelerate's.
"""

import json
import logging
import sys
from pathlib import Path

import torch
from accelerate import PartialState
from accelerate.logging import get_logger
from accelerate.utils import gather, gather_object

OUT = Path(sys.argv[1])
# The user's own logging at INFO: a library's INFO lines must not land here unasked.
logging.basicConfig(
    filename=OUT / "log.txt", format="%(levelname)s %(name)s %(message)s", level=logging.INFO
)
logger = get_logger("inference")

state = PartialState(cpu=True)
rank = state.process_index
seen: dict[str, object] = {
    "num_processes": state.num_processes,
    "use_distributed": state.use_distributed,
}

prompts = [f"prompt {i}" for i in range(7)]
with state.split_between_processes(prompts) as mine:
    seen["prompts"] = mine
    answers = [p.upper() for p in mine]
logger.info(f"prompts {mine}", main_process_only=False, in_order=True)
seen["answers"] = gather_object(answers)

with state.split_between_processes(prompts, apply_padding=True) as padded:
    seen["padded_prompts"] = padded
seen["padded_answers"] = gather_object([p[::-1] for p in padded])

table = {"ids": list(range(5)), "text": [f"row {i}" for i in range(5)]}
with state.split_between_processes(table) as rows:
    seen["rows"] = rows
logger.info(f"rows {rows['ids']}", main_process_only=False, in_order=True)

inputs = torch.arange(21, dtype=torch.float32).reshape(7, 3)
with state.split_between_processes(inputs, apply_padding=True) as batch:
    seen["batch"] = batch.tolist()
    outputs = (batch * 0.5 + 1.0).sum(dim=1)
gathered = gather(outputs)
seen["gathered"] = gathered[: len(inputs)].tolist()
seen["gathered_length"] = len(gathered)
with state.split_between_processes(inputs[:2]) as few:
    seen["few"] = few.tolist()

logger.info("main process only")
logger.warning(f"rank {rank} done", main_process_only=False, in_order=True)


@state.on_main_process
def on_main() -> str:
    return "main"


@state.on_last_process
def on_last() -> str:
    return "last"


@state.on_process(process_index=1)
def on_one() -> str:
    return "one"


@state.on_local_main_process
def on_local_main() -> str:
    return "local main"


seen["decorated"] = [on_main(), on_last(), on_one(), on_local_main()]
seen["flags"] = [state.is_main_process, state.is_last_process, state.is_local_main_process]
state.wait_for_everyone()
(OUT / f"rank{rank}.json").write_text(json.dumps(seen, sort_keys=True))

"""Sequence classification trained as transformers' ``run_glue_no_trainer.py`` (what it covers).

Calls: ``get_logger``, ``Accelerator(log_with=, project_dir=)`` as the script builds it with
``--with_tracking``, ``logger.info(accelerator.state, main_process_only=False)``,
``main_process_first``, ``prepare`` of a BERT classifier built from a tiny config, ``backward``,
``gather_for_metrics((predictions, references))`` for the accuracy, ``init_trackers`` and
``log``, ``save_state`` at each epoch's end, ``unwrap_model(...).save_pretrained(
is_main_process=, save_function=accelerator.save)``, ``is_main_process``, ``end_training``;
and, beyond the script, the second epoch under ``join_uneven_inputs([model],
even_batches=False)`` (on two processes one gets a batch more), ``logger.info(...,
in_order=True)``, ``logger.warning_once``, ``@accelerator.on_last_process`` and
``@accelerator.on_process(process_index=)``.
Padding per batch, as ``DataCollatorWithPadding`` pads; no tokenizer is downloaded.
"""

import hashlib
import logging
import os
import sys

import toolkit
import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from transformers import BertConfig, BertForSequenceClassification, get_scheduler

logger = get_logger(__name__)


def collate(rows):
    longest = max(len(r["tokens"]) for r in rows)
    ids = torch.tensor([r["tokens"] + [0] * (longest - len(r["tokens"])) for r in rows])
    return {
        "input_ids": ids,
        "attention_mask": (ids != 0).long(),
        "labels": torch.tensor([r["label"] for r in rows]),
    }


def main():
    parser = toolkit.parser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--with_tracking", action="store_true")
    args = parser.parse_args()

    kwargs = (
        {"log_with": "tensorboard", "project_dir": args.output_dir} if args.with_tracking else {}
    )
    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision, **kwargs)
    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(lambda record: record.name == __name__)
    logging.basicConfig(
        format="%(levelname)s - %(message)s", level=logging.INFO, handlers=[handler], force=True
    )
    logger.info(accelerator.state, main_process_only=False)
    set_seed(11)
    with accelerator.main_process_first():
        train_rows, eval_rows = toolkit.token_rows(42, 8), toolkit.token_rows(14, 9)
    config = BertConfig(
        vocab_size=toolkit.VOCAB,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    toolkit.MODELS.append(model)
    train_loader = torch.utils.data.DataLoader(
        train_rows, shuffle=True, collate_fn=collate, batch_size=4
    )
    eval_loader = torch.utils.data.DataLoader(eval_rows, collate_fn=collate, batch_size=4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    scheduler = get_scheduler(
        "linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=2 * len(train_loader)
    )
    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler
    )
    if args.with_tracking:
        accelerator.init_trackers("glue_no_trainer", {"lr": 5e-3, "epochs": 2})
    for epoch in range(2):
        model.train()
        total_loss = 0
        uneven = epoch == 1
        with accelerator.join_uneven_inputs([model], even_batches=False if uneven else None):
            for batch in train_loader:
                outputs = model(**batch)
                total_loss += outputs.loss.detach().float()
                accelerator.backward(outputs.loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
        logger.info(f"epoch {epoch}: this process's loss {total_loss.item()!r}", in_order=True)
        logger.warning_once("evaluating")
        model.eval()
        correct = seen = 0
        for batch in eval_loader:
            with torch.no_grad():
                outputs = model(**batch)
            predictions, references = accelerator.gather_for_metrics(
                (outputs.logits.argmax(dim=-1), batch["labels"])
            )
            correct += int((predictions == references).sum())
            seen += len(references)
        logger.info(
            f"epoch {epoch}: accuracy {correct}/{seen} train_loss {total_loss.item() / len(train_loader)!r}"
        )
        if args.with_tracking:
            accelerator.log(
                {"accuracy": correct / seen, "train_loss": total_loss.item() / len(train_loader)},
                step=epoch,
            )
        accelerator.save_state(os.path.join(args.output_dir, f"epoch_{epoch}"))
    accelerator.wait_for_everyone()

    @accelerator.on_last_process
    def last():
        print(
            f"last process: {accelerator.process_index} is_last_process={accelerator.is_last_process}"
        )

    @accelerator.on_process(process_index=0)
    def first():
        print(f"process 0: {accelerator.process_index}")

    last()
    first()
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained(
        args.output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save
    )
    accelerator.wait_for_everyone()
    for folder, _, names in sorted(os.walk(args.output_dir)):
        for name in sorted(
            n for n in names if n.startswith("model") and n.endswith(".safetensors")
        ):
            with open(os.path.join(folder, name), "rb") as saved:
                digest = hashlib.sha256(saved.read()).hexdigest()
            print(os.path.relpath(os.path.join(folder, name), args.output_dir), digest)
    accelerator.end_training()


if __name__ == "__main__":
    main()

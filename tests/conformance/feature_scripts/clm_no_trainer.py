"""A causal LM trained as transformers' ``run_clm_no_trainer.py`` trains one (what it covers).

Calls: ``get_logger`` (``accelerate.logging``) with ``logger.info(accelerator.state,
main_process_only=False)``, ``Accelerator(gradient_accumulation_steps=, log_with=,
project_dir=)``, ``main_process_first``, ``prepare`` of a GPT-2 built from a tiny config (its
``lm_head`` tied to the embedding), ``accumulate``, ``sync_gradients``, ``save_state`` every N
steps, ``gather_for_metrics`` of repeated losses for the perplexity, ``log``,
``wait_for_everyone``, ``unwrap_model(...).save_pretrained(is_main_process=,
save_function=accelerator.save)``, ``end_training``. Nothing is downloaded: the tokens are
``toolkit``'s rows grouped into blocks, as the script groups its tokenised texts.
"""

import hashlib
import logging
import math
import os
import sys

import toolkit
import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from transformers import GPT2Config, GPT2LMHeadModel, default_data_collator, get_scheduler

logger = get_logger(__name__)
BLOCK = 8


def blocks(count, seed):
    tokens = [t for row in toolkit.token_rows(count, seed) for t in row["tokens"]]
    total = len(tokens) // BLOCK * BLOCK
    return [
        {
            "input_ids": torch.tensor(tokens[i : i + BLOCK]),
            "labels": torch.tensor(tokens[i : i + BLOCK]),
        }
        for i in range(0, total, BLOCK)
    ]


def main():
    parser = toolkit.parser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--checkpointing_steps", type=int, default=0)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=2)
    args = parser.parse_args()

    accelerator = Accelerator(
        cpu=args.cpu,
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
    )
    # The script's own lines, on stdout so the run compares them (the frameworks' own loggers
    # are left out).
    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(lambda record: record.name == __name__)
    logging.basicConfig(
        format="%(levelname)s - %(message)s", level=logging.INFO, handlers=[handler], force=True
    )
    logger.info(accelerator.state, main_process_only=False)
    set_seed(7)
    with accelerator.main_process_first():
        train_rows, eval_rows = blocks(60, 3), blocks(16, 4)
    config = GPT2Config(vocab_size=toolkit.VOCAB, n_positions=BLOCK, n_embd=16, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    toolkit.MODELS.append(model)
    train_loader = torch.utils.data.DataLoader(
        train_rows, shuffle=True, collate_fn=default_data_collator, batch_size=4
    )
    eval_loader = torch.utils.data.DataLoader(
        eval_rows, collate_fn=default_data_collator, batch_size=4
    )
    no_decay = ["bias", "layer_norm.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight"]
    groups = [
        {
            "params": [
                p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)
            ],
            "weight_decay": 0.01,
        },
        {
            "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(groups, lr=1e-2)
    epochs = 2
    steps_per_epoch = math.ceil(len(train_loader) / args.gradient_accumulation_steps)
    scheduler = get_scheduler(
        "linear",
        optimizer=optimizer,
        num_warmup_steps=2 * accelerator.num_processes,
        num_training_steps=epochs * steps_per_epoch * accelerator.num_processes,
    )
    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler
    )
    logger.info(
        f"  Num examples = {len(train_rows)}, per device batch 4, accumulation {args.gradient_accumulation_steps}"
    )
    completed = 0
    for epoch in range(epochs):
        model.train()
        for batch in train_loader:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                completed += 1
                if args.checkpointing_steps and completed % args.checkpointing_steps == 0:
                    accelerator.save_state(os.path.join(args.output_dir, f"step_{completed}"))
        model.eval()
        losses = []
        for batch in eval_loader:
            with torch.no_grad():
                loss = model(**batch).loss
            losses.append(accelerator.gather_for_metrics(loss.repeat(batch["input_ids"].shape[0])))
        losses = torch.cat(losses)
        eval_loss = torch.mean(losses)
        perplexity = math.exp(eval_loss)
        logger.info(f"epoch {epoch}: perplexity: {perplexity!r} eval_loss: {eval_loss.item()!r}")
        accelerator.log(
            {"perplexity": perplexity, "eval_loss": eval_loss, "epoch": epoch}, step=completed
        )
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained(
        args.output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save
    )
    accelerator.wait_for_everyone()
    # The weights saved, final and in every checkpoint, bit for bit.
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

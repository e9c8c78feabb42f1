"""A LoRA adapter trained as peft's Accelerate examples train one (what it covers).

Calls, as ``peft_lora_clm_accelerate_*.py`` / ``peft_lora_seq2seq_accelerate_*.py`` make them:
``get_peft_model`` before ``prepare``, ``accelerator.print`` of the trainable parameters,
``accumulate``-free steps with ``backward``, generation on each process followed by
``pad_across_processes(..., dim=1, pad_index=)`` and ``gather_for_metrics``, ``is_main_process``
around ``save_pretrained`` of the adapter with ``save_function=accelerator.save``
(``safe_serialization=False``: through ``accelerator.save``), ``get_state_dict``,
``wait_for_everyone``. A tiny GPT-2 from a config; nothing downloaded.
"""

import hashlib
import os

import toolkit
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from peft import LoraConfig, TaskType, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel, default_data_collator


def main():
    parser = toolkit.parser()
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args()

    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    set_seed(5)
    rows = [
        {"input_ids": torch.tensor(r["tokens"][:3]), "labels": torch.tensor(r["tokens"][:3])}
        for r in toolkit.token_rows(36, 12)
    ]
    base = GPT2LMHeadModel(
        GPT2Config(vocab_size=toolkit.VOCAB, n_positions=12, n_embd=16, n_layer=2, n_head=2)
    )
    config = LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=4,
        lora_alpha=8,
        lora_dropout=0.1,
        fan_in_fan_out=True,
        target_modules=["c_attn"],
    )
    model = get_peft_model(base, config)
    toolkit.MODELS.append(model)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    accelerator.print(f"trainable params: {trainable}")
    train_loader = torch.utils.data.DataLoader(
        rows[:28], shuffle=True, collate_fn=default_data_collator, batch_size=4
    )
    eval_loader = torch.utils.data.DataLoader(
        rows[28:], collate_fn=default_data_collator, batch_size=3
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    model, train_loader, eval_loader, optimizer = accelerator.prepare(
        model, train_loader, eval_loader, optimizer
    )
    for epoch in range(2):
        model.train()
        for batch in train_loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        model.eval()
        predictions = []
        for step, batch in enumerate(eval_loader):
            with torch.no_grad():
                # Each process continues its prompts by a number of tokens of its own, as
                # generation stops at different lengths: padded before they are gathered.
                new = 2 + (accelerator.process_index + step) % 2
                out = accelerator.unwrap_model(model).generate(
                    input_ids=batch["input_ids"],
                    max_new_tokens=new,
                    min_new_tokens=new,
                    do_sample=False,
                    pad_token_id=0,
                )
            out = accelerator.pad_across_processes(out, dim=1, pad_index=0)
            predictions += accelerator.gather_for_metrics(out).tolist()
        accelerator.print(f"epoch {epoch}: {predictions}")
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    if accelerator.is_main_process:
        unwrapped.save_pretrained(
            args.output_dir, save_function=accelerator.save, safe_serialization=False
        )
    unwrapped.save_pretrained(
        os.path.join(args.output_dir, "all_ranks"),
        is_main_process=accelerator.is_main_process,
        save_function=accelerator.save,
        safe_serialization=False,
        state_dict=accelerator.get_state_dict(model),
    )
    accelerator.wait_for_everyone()
    for folder, _, names in sorted(os.walk(args.output_dir)):
        for name in sorted(n for n in names if n.endswith(".bin")):
            adapter = torch.load(os.path.join(folder, name), weights_only=True)
            digest = hashlib.sha256(
                b"".join(adapter[k].numpy().tobytes() for k in sorted(adapter))
            ).hexdigest()
            accelerator.print(
                os.path.relpath(os.path.join(folder, name), args.output_dir),
                sorted(adapter)[:2],
                digest,
            )
    accelerator.end_training()


if __name__ == "__main__":
    main()

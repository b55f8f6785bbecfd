"""Instruction fine-tuning of a causal LM with Accelerate and gradient accumulation, from allenai/open-instruct.

Source: https://github.com/allenai/open-instruct
Commit: dfd49a8497842c56757e6404f544244ec4522012
Files: ``open_instruct/finetune.py`` (``encode_with_prompt_completion_format``, ``main``: optimizer groups,
scheduler, the ``accelerator.accumulate`` loop), ``scripts/finetune_with_accelerate.sh`` (the hyperparameters).
License: Apache-2.0 (full text in LICENSES/allenai-open-instruct.txt).
Domain: causal LM supervised fine-tuning (prompt/completion pairs, prompt tokens masked with -100, Llama
architecture, Accelerate gradient accumulation, AdamW with no-decay groups, linear schedule with warmup).

Kept as written: ``encode_with_prompt_completion_format`` (prompt and completion joined with a space, EOS
appended, the prompt's tokens set to -100 in the labels, attention mask of ones), the filter dropping examples
whose labels are all -100, ``DataCollatorForSeq2Seq(tokenizer, model, padding="longest")``, the optimizer (AdamW
over the two groups split by ``["bias", "layer_norm.weight"]``, weight_decay 0.), ``get_scheduler("linear")`` with
``warmup_ratio`` 0.03 of the training steps, ``Accelerator(gradient_accumulation_steps=...)`` and ``prepare``, the
loop body (``with accelerator.accumulate(model)``: forward with ``use_cache=False``, ``outputs.loss``,
``accelerator.backward``, ``optimizer.step``, ``optimizer.zero_grad``, ``lr_scheduler.step``).

Deviations from the original:
- the 7B Llama checkpoint becomes ``AutoModelForCausalLM.from_config`` of a tiny ``LlamaConfig`` (hidden 32,
  2 layers, 2 heads, intermediate 64); no flash-attention patch, no LoRA, no DeepSpeed, no bf16 (CPU).
- the Llama tokenizer becomes a character-level ``PreTrainedTokenizerFast`` built with ``tokenizers`` (``<s>``,
  ``</s>``, ``<unk>``; the script's Llama branch then adds ``<pad>``, the embeddings resized as written).
- the oasst1 jsonl becomes synthetic prompt/completion pairs made from ``seed``: the prompt ``"rev: <letters> ="``
  and the completion the letters reversed (a learnable rule).
- sizes: per_device_train_batch_size 8, gradient_accumulation_steps 2 (the script's 128 / 4 GPUs / 2 = 16), max_seq_length
  64, learning_rate 1e-3 instead of 2e-5 (a model from scratch in 30 updates), max_train_steps 200.
- ``train_step`` runs the loop body over micro-batches until Accelerate performs an optimization step
  (``accelerator.sync_gradients``), the loader cycled with ``model.train()`` at each epoch's start; tracking,
  checkpointing, logging and saving are dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
from functools import partial

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import set_seed
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from torch.utils.data import DataLoader
from transformers import (
    AutoModelForCausalLM,
    DataCollatorForSeq2Seq,
    LlamaConfig,
    PreTrainedTokenizerFast,
    get_scheduler,
)

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

LETTERS = "abcdefgh"
N_EXAMPLES = 512


def encode_with_prompt_completion_format(example, tokenizer, max_seq_length, bug=None):
    '''
    Here we assume each example has 'prompt' and 'completion' fields.
    We concatenate prompt and completion and tokenize them together because otherwise prompt will be padded/trancated
    and it doesn't make sense to follow directly with the completion.
    '''
    # if prompt doesn't end with space and completion doesn't start with space, add space
    if not example['prompt'].endswith((' ', '\n', '\t')) and not example['completion'].startswith((' ', '\n', '\t')):
        example_text = example['prompt'] + ' ' + example['completion']
    else:
        example_text = example['prompt'] + example['completion']
    example_text = example_text + tokenizer.eos_token
    tokenized_example = tokenizer(example_text, return_tensors='pt', max_length=max_seq_length, truncation=True)
    input_ids = tokenized_example.input_ids
    labels = input_ids.clone()
    tokenized_prompt = tokenizer(example['prompt'], return_tensors='pt', max_length=max_seq_length, truncation=True)
    # mask the prompt part for avoiding loss
    if bug != "prompt_not_masked":
        labels[:, :tokenized_prompt.input_ids.shape[1]] = -100
    attention_mask = torch.ones_like(input_ids)
    return {
        'input_ids': input_ids.flatten(),
        'labels': labels.flatten(),
        'attention_mask': attention_mask.flatten(),
    }


def make_tokenizer():
    """A character-level stand-in for the Llama tokenizer (no download here)."""
    chars = list(LETTERS + " =:rev")
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def make_raw_train(seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(N_EXAMPLES):
        s = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 6)))
        rows.append({"prompt": f"rev: {s} =", "completion": s[::-1]})
    return rows


def _build(seed, bug=None):
    args = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2, "learning_rate": 1e-3,
                "lr_scheduler_type": "linear", "warmup_ratio": 0.03, "weight_decay": 0., "max_seq_length": 64,
                "max_train_steps": 200}
    # a fresh process state (each run of the script is its own process)
    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(gradient_accumulation_steps=args["gradient_accumulation_steps"], cpu=True)
    set_seed(seed)

    config = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=args["max_seq_length"])
    tokenizer = make_tokenizer()
    model = AutoModelForCausalLM.from_config(config)

    # no default pad token for llama!
    num_added_tokens = tokenizer.add_special_tokens({"pad_token": "<pad>"})
    assert num_added_tokens in [0, 1]

    # We resize the embeddings only when necessary to avoid index errors. If you are creating a model from scratch
    # on a small vocab and want a smaller embedding size, remove this test.
    embedding_size = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > embedding_size:
        model.resize_token_embeddings(len(tokenizer))

    encode_function = partial(
        encode_with_prompt_completion_format,
        tokenizer=tokenizer,
        max_seq_length=args["max_seq_length"],
        bug=bug,
    )
    lm_datasets = [encode_function(ex) for ex in make_raw_train(seed)]
    lm_datasets = [ex for ex in lm_datasets if (ex['labels'] != -100).any()]
    train_dataset = [{k: v.tolist() for k, v in ex.items()} for ex in lm_datasets]

    # DataLoaders creation:
    train_dataloader = DataLoader(
        train_dataset,
        shuffle=True,
        collate_fn=DataCollatorForSeq2Seq(tokenizer=tokenizer, model=model, padding="longest"),
        batch_size=args["per_device_train_batch_size"],
        generator=torch.Generator().manual_seed(seed),
    )

    # Optimizer
    # Split weights in two groups, one with weight decay and the other not.
    no_decay = ["bias", "layer_norm.weight"]
    optimizer_grouped_parameters = [
        {
            "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
            "weight_decay": args["weight_decay"],
        },
        {
            "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args["learning_rate"])

    num_training_steps_for_scheduler = args["max_train_steps"]
    lr_scheduler = get_scheduler(
        name=args["lr_scheduler_type"],
        optimizer=optimizer,
        num_training_steps=num_training_steps_for_scheduler,
        num_warmup_steps=int(num_training_steps_for_scheduler * args["warmup_ratio"]),
    )
    assert math.ceil(len(train_dataloader) / args["gradient_accumulation_steps"]) > 0

    # Prepare everything with `accelerator`.
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, lr_scheduler
    )

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):  # `for epoch in ...: model.train(); for step, batch in ...`
            model.train()
            state["it"] = iter(train_dataloader)
            return next(state["it"])

    def train_step():
        losses = []
        while True:
            batch = next_batch()
            with accelerator.accumulate(model):
                if bug == "zero_grad_every_micro_batch":
                    model.zero_grad()
                outputs = model(**batch, use_cache=False)
                loss = outputs.loss
                losses.append(loss.detach().float())
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                lr_scheduler.step()
            if accelerator.sync_gradients:
                return torch.stack(losses).mean()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            outputs = model(**batch, use_cache=False)
        return float(outputs.loss)

    first = next(iter(DataLoader(train_dataset, batch_size=args["per_device_train_batch_size"],
                                 collate_fn=DataCollatorForSeq2Seq(tokenizer=tokenizer, model=model, padding="longest"))))
    return Program(name="openinstruct_finetune", model=model, batch=first, loss_fn=lambda outputs, _labels: outputs.loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the prompt's label positions are not set to -100 (classic: prompt tokens left in the SFT loss): the model is
    # trained to produce the random prompt too, and the completion's share of the loss is diluted.
    Bug("prompt_not_masked", functools.partial(_build, bug="prompt_not_masked"), "learning_ledger", ("OBJECTIVE",)),
    # model.zero_grad() at the top of every micro-batch inside accelerator.accumulate (classic; Accelerate only
    # skips the wrapped optimizer's zero_grad while accumulating): each update keeps only its last micro-batch's
    # gradient; a slip of the whole model's step.
    Bug("zero_grad_every_micro_batch", functools.partial(_build, bug="zero_grad_every_micro_batch"), "step_probe", (),
        kind="step.gradient_discarded"),
]

"""GPT-2 causal LM fine-tuning loop in the Hugging Face idiom: ``GPT2LMHeadModel`` from a tiny ``GPT2Config``
(random weights), dict batches ``{"input_ids", "attention_mask", "labels"}`` with ``labels = input_ids`` (the
model shifts internally and returns ``out.loss``), AdamW, ``get_linear_schedule_with_warmup``, grad clipping 1.0.

Synthetic text: each sequence counts up by a stride fixed per sequence from its first token, so every next
token follows from the previous two.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

VOCAB = 64
SEQ_LEN = 12
BATCH = 8
N_BATCHES = 6


def make_sequences(gen, n):
    start = torch.randint(VOCAB, (n, 1), generator=gen)
    stride = torch.randint(1, 4, (n, 1), generator=gen)
    return (start + stride * torch.arange(SEQ_LEN)) % VOCAB


def task_probe(inputs):
    # causal LM convention: the labels are the input ids themselves (the model shifts them)
    return inputs["input_ids"]


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, n_inner=64, vocab_size=VOCAB, n_positions=32,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    batches = []
    for _ in range(N_BATCHES):
        input_ids = make_sequences(gen, BATCH)
        labels = input_ids.clone()
        if bug == "double_shift":
            # "GPT-2 predicts the next token, so shift the labels": the model already shifts them
            labels = torch.full_like(input_ids, -100)
            labels[:, :-1] = input_ids[:, 1:]
        batches.append({"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels})

    if bug == "frozen_wte":
        # freeze the token embeddings "to fine-tune only the transformer blocks"; lm_head shares this weight
        for p in model.transformer.wte.parameters():
            p.requires_grad = False
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-4, weight_decay=0.01)
    num_training_steps = 200
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=10, num_training_steps=num_training_steps)
    state = {"step": 0}

    def train_step():
        model.train()
        batch = batches[state["step"] % len(batches)]
        state["step"] += 1
        outputs = model(**batch)
        loss = outputs.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model(**batch).loss
        model.train()
        return float(torch.exp(loss))

    return Program(name="gpt2_hf", model=model, batch=batches[0], loss_fn=lambda out, labels: out.loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="language_model",
                   task_probe=task_probe)


build = functools.partial(_build)

BUGS = [
    # labels shifted by hand AND by the model: position t is trained to predict token t+2.
    Bug("double_shift", functools.partial(_build, bug="double_shift"), "learning_ledger", ("TASK",)),
    # the frozen embedding is also the output projection (tied lm_head): the vocabulary head never trains. Freezing a
    # tied embedding can be meant and the blocks still learn, so no instrument can know it is a bug: a WARN that names it.
    Bug("frozen_wte", functools.partial(_build, bug="frozen_wte"), "four_structures", ("transformer.wte.weight",),
        "frozen.tied", status="WARN"),
]

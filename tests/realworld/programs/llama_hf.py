"""Llama causal LM pre-training loop in the Hugging Face idiom: ``LlamaForCausalLM`` from a tiny ``LlamaConfig``
(grouped-query attention with one kv head, random weights), ``labels = input_ids``, AdamW over the two classic
param groups (weight decay on matrices, none on norms and biases), ``get_cosine_schedule_with_warmup``, clip 1.0.

Synthetic text: every sequence repeats a short random motif, so later tokens follow from earlier ones.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, get_cosine_schedule_with_warmup
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

VOCAB = 64
SEQ_LEN = 16
BATCH = 8


def make_batch(gen):
    period = 4
    motif = torch.randint(3, VOCAB, (BATCH, period), generator=gen)
    input_ids = motif.repeat(1, SEQ_LEN // period)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": input_ids.clone()}


def task_probe(inputs):
    return inputs["input_ids"]


def param_groups(model, weight_decay, bug=None):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim < 2 or "norm" in name or name.endswith(".bias"):
            no_decay.append(param)
        else:
            decay.append(param)
    if bug == "decay_group_lr_zero":
        # copied from a config where "lr" was meant to be the weight decay's own multiplier
        return [{"params": decay, "weight_decay": weight_decay, "lr": 0.0},
                {"params": no_decay, "weight_decay": 0.0}]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(config)
    batches = [make_batch(gen) for _ in range(6)]
    optimizer = torch.optim.AdamW(param_groups(model, 0.1, bug), lr=1e-3, betas=(0.9, 0.95))
    scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=5, num_training_steps=300)
    state = {"step": 0}

    def train_step():
        model.train()
        batch = batches[state["step"] % len(batches)]
        state["step"] += 1
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return Program(name="llama_hf", model=model, batch=batches[0], loss_fn=lambda out, labels: out.loss,
                   optimizer=optimizer, train_step=train_step, task="language_model", task_probe=task_probe)


build = functools.partial(_build)

BUGS = [
    # the decay group (every weight matrix) gets lr 0: only norms move; the embedding never does.
    Bug("decay_group_lr_zero", functools.partial(_build, bug="decay_group_lr_zero"), "step_probe",
        ("model.embed_tokens.weight",)),
]

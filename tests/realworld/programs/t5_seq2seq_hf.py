"""T5 sequence-to-sequence training on a reverse-the-sequence task: ``T5ForConditionalGeneration`` from a tiny
``T5Config`` (random weights), dict batches ``{"input_ids", "attention_mask", "labels"}`` where the model builds
its decoder inputs from ``labels`` (shift right with ``decoder_start_token_id``) and returns ``out.loss``;
AdamW with a constant lr, clip 1.0.

Synthetic task: the target is the source sequence reversed (ids 2..63; 0 pad/decoder start, 1 eos).
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from transformers import T5Config, T5ForConditionalGeneration
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

PAD, EOS = 0, 1
VOCAB = 64
SRC_LEN = 8
BATCH = 8


def make_batch(gen, bug=None):
    src = torch.randint(2, VOCAB, (BATCH, SRC_LEN), generator=gen)
    target = src.flip(1)
    input_ids = torch.cat([src, torch.full((BATCH, 1), EOS)], 1)
    labels = torch.cat([target, torch.full((BATCH, 1), EOS)], 1)
    if bug == "labels_from_input_ids":
        # the collator copied the source column into "labels"
        labels = input_ids.clone()
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


def task_probe(inputs):
    ids = inputs["input_ids"]
    return torch.cat([ids[:, :-1].flip(1), ids[:, -1:]], 1)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
                      num_heads=2, dropout_rate=0.1, decoder_start_token_id=PAD, pad_token_id=PAD,
                      eos_token_id=EOS)
    model = T5ForConditionalGeneration(config)
    batches = [make_batch(gen, bug) for _ in range(6)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
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
        optimizer.zero_grad()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            logits = model(**batch).logits
        model.train()
        return float((logits.argmax(-1) == batch["labels"]).float().mean())

    return Program(name="t5_seq2seq_hf", model=model, batch=batches[0], loss_fn=lambda out, labels: out.loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="language_model",
                   task_probe=task_probe)


build = functools.partial(_build)

BUGS = [
    # labels = input_ids: the model is trained to copy the source, not to reverse it.
    Bug("labels_from_input_ids", functools.partial(_build, bug="labels_from_input_ids"), "learning_ledger", ("TASK",)),
]

"""BERT sequence classification fine-tuning, loss computed outside the model: ``BertForSequenceClassification``
from a tiny ``BertConfig`` (num_labels=3, random weights), tokenizer-shaped dict batches (``input_ids`` with
[CLS] ... [SEP] and right padding, ``attention_mask``, ``token_type_ids``, ``labels``),
``F.cross_entropy(out.logits, labels)``, AdamW at a fine-tuning lr with a linear schedule, clip 1.0.

Synthetic rule: the label is the bucket (low / middle / high ids) most of the sentence's words come from.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

PAD, CLS, SEP = 0, 1, 2
FIRST_WORD = 4
VOCAB = 64
NUM_LABELS = 3
MAX_LEN = 12
BATCH = 16
BUCKET = (VOCAB - FIRST_WORD) // NUM_LABELS


def make_batch(gen):
    labels = torch.randint(NUM_LABELS, (BATCH,), generator=gen)
    lengths = torch.randint(6, MAX_LEN - 1, (BATCH,), generator=gen)
    lengths[0] = MAX_LEN - 2
    input_ids = torch.full((BATCH, MAX_LEN), PAD)
    for b in range(BATCH):
        n = int(lengths[b])
        words = FIRST_WORD + labels[b] * BUCKET + torch.randint(BUCKET, (n,), generator=gen)
        noise = torch.rand(n, generator=gen) < 0.2
        words[noise] = FIRST_WORD + torch.randint(NUM_LABELS * BUCKET, (int(noise.sum()),), generator=gen)
        input_ids[b, 0], input_ids[b, 1:n + 1], input_ids[b, n + 1] = CLS, words, SEP
    attention_mask = (input_ids != PAD).long()
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "token_type_ids": torch.zeros_like(input_ids), "labels": labels}


def task_probe(inputs):
    ids = inputs["input_ids"]
    words = (ids >= FIRST_WORD) & (ids < FIRST_WORD + NUM_LABELS * BUCKET)
    bucket = ((ids - FIRST_WORD).clamp(min=0) // BUCKET).clamp(max=NUM_LABELS - 1)
    counts = torch.stack([((bucket == k) & words).sum(1) for k in range(NUM_LABELS)], 1)
    return counts.argmax(1)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, num_labels=NUM_LABELS, pad_token_id=PAD)
    model = BertForSequenceClassification(config)
    batches = [make_batch(gen) for _ in range(6)]
    params = model.bert.parameters() if bug == "optimizer_over_bert_only" else model.parameters()
    optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=0, num_training_steps=500)
    state = {"step": 0}

    def compute_loss(logits, labels):
        if bug == "softmax_before_cross_entropy":
            logits = logits.softmax(-1)  # "probabilities" handed to cross_entropy, which softmaxes again
        return F.cross_entropy(logits, labels)

    def train_step():
        model.train()
        batch = batches[state["step"] % len(batches)]
        state["step"] += 1
        optimizer.zero_grad()
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"])
        loss = compute_loss(out.logits, batch["labels"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           token_type_ids=batch["token_type_ids"]).logits
        model.train()
        return float((logits.argmax(-1) == batch["labels"]).float().mean())

    return Program(name="bert_seqcls_hf", model=model, batch=batches[0],
                   loss_fn=lambda out, labels: compute_loss(out.logits, labels), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, task="classification", task_probe=task_probe)


build = functools.partial(_build)

BUGS = [
    # AdamW(model.bert.parameters()): the freshly initialised classifier head is never stepped.
    Bug("optimizer_over_bert_only", functools.partial(_build, bug="optimizer_over_bert_only"), "four_structures",
        ("classifier",)),
    # a softmax before F.cross_entropy: the loss is bounded near ln 3 and its gradients vanish.
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"), "learning_ledger",
        ("OBJECTIVE",)),
]

"""BERT masked-language-model pre-training in the Hugging Face idiom: ``BertForMaskedLM`` from a tiny
``BertConfig`` (random weights), a data collator that picks 15% of the non-special tokens (80% -> [MASK],
10% -> random word, 10% kept) and sets ``labels = -100`` everywhere else, ``out.loss``, AdamW 1e-4 with a linear
schedule, clip 1.0.

Synthetic text: [CLS] s, s+1, s+2, ... [SEP] (consecutive word ids from a random start), so every masked word
follows from its neighbours.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from transformers import BertConfig, BertForMaskedLM, get_linear_schedule_with_warmup
from transformers.utils import logging as hf_logging

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

hf_logging.set_verbosity_error()

PAD, CLS, SEP, MASK = 0, 1, 2, 3
FIRST_WORD = 4
VOCAB = 64
N_WORDS = VOCAB - FIRST_WORD
SEQ_LEN = 16
BATCH = 8
MLM_PROBABILITY = 0.15


def make_sentences(gen):
    start = torch.randint(N_WORDS, (BATCH, 1), generator=gen)
    words = FIRST_WORD + (start + torch.arange(SEQ_LEN - 2)) % N_WORDS
    return torch.cat([torch.full((BATCH, 1), CLS), words, torch.full((BATCH, 1), SEP)], 1)


def mask_tokens(input_ids, gen, bug=None):
    """DataCollatorForLanguageModeling.torch_mask_tokens, by hand."""
    labels = input_ids.clone()
    inputs = input_ids.clone()
    special = (input_ids == CLS) | (input_ids == SEP) | (input_ids == PAD)
    probability_matrix = torch.full(labels.shape, MLM_PROBABILITY).masked_fill(special, 0.0)
    masked_indices = torch.bernoulli(probability_matrix, generator=gen).bool()
    masked_indices[:, 1] |= ~masked_indices.any(1)  # at least one prediction per sentence
    if bug != "labels_not_masked":
        labels[~masked_indices] = -100  # only compute loss on masked tokens
    replaced = torch.bernoulli(torch.full(labels.shape, 0.8), generator=gen).bool() & masked_indices
    inputs[replaced] = MASK
    random_words = torch.bernoulli(torch.full(labels.shape, 0.5), generator=gen).bool() & masked_indices & ~replaced
    inputs[random_words] = FIRST_WORD + torch.randint(N_WORDS, labels.shape, generator=gen)[random_words]
    return inputs, labels


def make_batch(gen, bug=None):
    input_ids, labels = mask_tokens(make_sentences(gen), gen, bug)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
            "token_type_ids": torch.zeros_like(input_ids), "labels": labels}


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, pad_token_id=PAD)
    model = BertForMaskedLM(config)
    batches = [make_batch(gen, bug) for _ in range(8)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=0, num_training_steps=1000)
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
            logits = model(**batch).logits
        model.train()
        keep = batch["labels"] != -100
        return float((logits.argmax(-1)[keep] == batch["labels"][keep]).float().mean())

    return Program(name="masked_lm_bert", model=model, batch=batches[0], loss_fn=lambda out, labels: out.loss,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="language_model")


build = functools.partial(_build)

BUGS = [
    # the collator forgot `labels[~masked_indices] = -100`: 85%+ of the supervised positions ask the model to copy
    # its own visible input token (a label leak that dominates the loss).
    Bug("labels_not_masked", functools.partial(_build, bug="labels_not_masked"), "learning_ledger", ("TASK",)),
]

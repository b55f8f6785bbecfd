"""``nn.TransformerEncoder`` text classifier (batch_first) over dynamically padded batches: token embedding +
learned positions, ``src_key_padding_mask = tokens == pad`` (True = ignore), mean pooling over the non-pad
tokens, a Linear head, cross-entropy, AdamW with a linear warmup (LambdaLR), clip 1.0.

Synthetic rule: the label is whether token A (id 5) appears before token B (id 6) in the sentence; each
sentence holds both exactly once.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

PAD = 0
TOK_A, TOK_B = 5, 6
VOCAB = 64
MAX_LEN = 12
BATCH = 16
D_MODEL = 32


class TransformerClassifier(nn.Module):
    def __init__(self, vocab_size, d_model=D_MODEL, nhead=2, num_layers=2, num_classes=2, invert_mask=False):
        super().__init__()
        self.invert_mask = invert_mask
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.pos_embedding = nn.Embedding(MAX_LEN, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.embedding(tokens) * math.sqrt(self.embedding.embedding_dim) + self.pos_embedding(positions)
        pad_mask = tokens != PAD if self.invert_mask else tokens == PAD
        x = self.encoder(x, src_key_padding_mask=pad_mask)
        keep = (tokens != PAD).unsqueeze(-1).float()
        pooled = (x * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.classifier(pooled)


def make_batch(gen):
    lengths = torch.randint(4, MAX_LEN + 1, (BATCH,), generator=gen)
    width = int(lengths.max())  # dynamic padding: the longest sentence sets the width
    tokens = torch.full((BATCH, width), PAD)
    labels = torch.zeros(BATCH, dtype=torch.long)
    for b in range(BATCH):
        n = int(lengths[b])
        sent = torch.randint(7, VOCAB, (n,), generator=gen)
        i, j = torch.randperm(n, generator=gen)[:2].tolist()
        sent[i], sent[j] = TOK_A, TOK_B
        tokens[b, :n] = sent
        labels[b] = int(i < j)
    return tokens, labels


def task_probe(tokens):
    pos_a = (tokens == TOK_A).float().argmax(1)
    pos_b = (tokens == TOK_B).float().argmax(1)
    return (pos_a < pos_b).long()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    batches = [make_batch(gen) for _ in range(8)]
    model = TransformerClassifier(VOCAB, invert_mask=bug == "inverted_padding_mask")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    warmup = 5
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    state = {"step": 0}

    def train_step():
        model.train()
        tokens, labels = batches[state["step"] % len(batches)]
        state["step"] += 1
        optimizer.zero_grad()
        logits = model(tokens)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        return loss.detach()

    def eval_fn(model, batch):
        tokens, labels = batch
        model.eval()
        with torch.no_grad():
            acc = (model(tokens).argmax(-1) == labels).float().mean()
        model.train()
        return float(acc)

    return Program(name="transformer_encoder_padmask", model=model, batch=batches[0], loss_fn=F.cross_entropy,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="classification",
                   task_probe=task_probe)


build = functools.partial(_build)

BUGS = [
    # mask = tokens != pad: every real token is hidden from attention (tokens attend to pads only). Training mode
    # still runs (order is recoverable from positions without attention), but the longest sentence of every batch
    # has no key left, and the eval-mode fast path turns its fully masked rows into NaN: eval_fn's logits are NaN.
    Bug("inverted_padding_mask", functools.partial(_build, bug="inverted_padding_mask"), "six_claims",
        ("EVALUATION",)),
]

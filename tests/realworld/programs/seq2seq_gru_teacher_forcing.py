"""GRU encoder-decoder with teacher forcing (batch_first), reverse-the-sequence task: the encoder's last hidden
state initialises the decoder, which reads the target shifted right (``<sos>`` first) and predicts the target;
cross-entropy with ``ignore_index=PAD``; Adam; clip 1.0.

Batches are dicts ``{"src", "decoder_input", "labels"}`` (``model(src, decoder_input)``; the loss gets ``labels``).
Sequences have variable lengths: targets are right-padded with PAD.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

PAD, SOS = 0, 1
VOCAB = 32
MAX_LEN = 8
BATCH = 16
HIDDEN = 32


class Seq2Seq(nn.Module):
    def __init__(self, vocab, hidden=HIDDEN):
        super().__init__()
        self.src_embedding = nn.Embedding(vocab, hidden, padding_idx=PAD)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.tgt_embedding = nn.Embedding(vocab, hidden, padding_idx=PAD)
        self.decoder = nn.GRU(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, src, decoder_input):
        _, hidden = self.encoder(self.src_embedding(src))
        dec_out, _ = self.decoder(self.tgt_embedding(decoder_input), hidden)
        return self.out(dec_out)


def make_batch(gen, bug=None):
    lengths = torch.randint(4, MAX_LEN + 1, (BATCH,), generator=gen)
    src = torch.full((BATCH, MAX_LEN), PAD)
    tgt = torch.full((BATCH, MAX_LEN), PAD)
    for b in range(BATCH):
        n = int(lengths[b])
        seq = torch.randint(2, VOCAB, (n,), generator=gen)
        src[b, :n] = seq
        tgt[b, :n] = seq.flip(0)
    if bug == "decoder_sees_target":
        decoder_input = tgt.clone()  # "teacher forcing": fed the targets, forgot to shift them right
    else:
        decoder_input = torch.cat([torch.full((BATCH, 1), SOS), tgt[:, :-1]], 1)
    return {"src": src, "decoder_input": decoder_input, "labels": tgt}


def task_probe(inputs):
    src = inputs["src"]
    out = torch.full_like(src, PAD)
    for b in range(src.size(0)):
        n = int((src[b] != PAD).sum())
        out[b, :n] = src[b, :n].flip(0)
    return out


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    batches = [make_batch(gen, bug) for _ in range(8)]
    model = Seq2Seq(VOCAB)
    criterion = nn.CrossEntropyLoss(ignore_index=PAD)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    def loss_fn(logits, labels):
        return criterion(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))

    state = {"step": 0}

    def train_step():
        model.train()
        batch = batches[state["step"] % len(batches)]
        state["step"] += 1
        optimizer.zero_grad()
        logits = model(batch["src"], batch["decoder_input"])
        loss = loss_fn(logits, batch["labels"])
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            pred = model(batch["src"], batch["decoder_input"]).argmax(-1)
        model.train()
        keep = batch["labels"] != PAD
        return float((pred[keep] == batch["labels"][keep]).float().mean())

    return Program(name="seq2seq_gru_teacher_forcing", model=model, batch=batches[0], loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="classification",
                   task_probe=task_probe)


build = functools.partial(_build)

BUGS = [
    # decoder_input == labels: at step t the decoder reads the very token it must predict (a label leak);
    # the labels themselves are right, so the leak is in what the prediction depends on.
    Bug("decoder_sees_target", functools.partial(_build, bug="decoder_sees_target"), "learning_ledger",
        ("DEPENDENCY",)),
]

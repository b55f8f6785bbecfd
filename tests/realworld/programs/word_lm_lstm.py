"""Word-level LSTM language model, the classic recipe: a token stream batchified into ``[T, B]`` columns
(sequence-first), bptt windows, the hidden state carried across windows and detached (``repackage_hidden``),
``clip_grad_norm_(0.25)`` and a hand-written SGD update with lr=20 (no optimizer object).

Synthetic corpus: runs of consecutive token ids (each run starts at a random id and counts up), so the next
token is almost always ``(t + 1) % ntokens``.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NTOKENS = 64
EMSIZE = 32
NHID = 32
NLAYERS = 1
BPTT = 8
BSZ = 10
LR = 20.0
CLIP = 0.25


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout if nlayers > 1 else 0.0)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid = nhid
        self.nlayers = nlayers
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden=None):
        if hidden is None:
            hidden = self.init_hidden(input.size(1))
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        return decoded, hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def make_corpus(gen, n_tokens):
    ids = []
    while len(ids) < n_tokens:
        start = int(torch.randint(NTOKENS, (1,), generator=gen))
        length = int(torch.randint(6, 16, (1,), generator=gen))
        ids.extend((start + k) % NTOKENS for k in range(length))
    return torch.tensor(ids[:n_tokens], dtype=torch.long)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len]
    return data, target


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_data = batchify(make_corpus(gen, BSZ * (BPTT * 12 + 1)), BSZ)
    model = RNNModel(NTOKENS, EMSIZE, NHID, NLAYERS)
    criterion = nn.CrossEntropyLoss()

    def loss_fn(output, targets):
        output = output[0] if isinstance(output, tuple) else output
        return criterion(output.view(-1, NTOKENS), targets.reshape(-1))

    state = {"i": 0, "hidden": model.init_hidden(BSZ)}

    def train_step():
        model.train()
        if state["i"] >= train_data.size(0) - 1 - BPTT:
            state["i"], state["hidden"] = 0, model.init_hidden(BSZ)
        data, targets = get_batch(train_data, state["i"])
        state["i"] += BPTT
        # Starting each batch, we detach the hidden state from how it was previously produced.
        state["hidden"] = repackage_hidden(state["hidden"])
        if bug != "no_zero_grad":
            model.zero_grad()
        output, state["hidden"] = model(data, state["hidden"])
        loss = criterion(output.view(-1, NTOKENS), targets.reshape(-1))
        loss.backward()
        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-LR)
        return loss.detach()

    def eval_fn(model, batch):
        data, targets = batch
        model.eval()
        with torch.no_grad():
            output, _ = model(data)
            loss = F.cross_entropy(output.view(-1, NTOKENS), targets.reshape(-1))
        model.train()
        return float(loss)

    batch = get_batch(train_data, 0)
    return Program(name="word_lm_lstm", model=model, batch=batch, loss_fn=loss_fn, optimizer=None,
                   train_step=train_step, eval_fn=eval_fn, task="language_model", batch_axis=1)


build = functools.partial(_build)

BUGS = [
    # model.zero_grad() dropped: every step adds this batch's gradient to all the previous ones.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", ("encoder.weight",)),
]

"""char-rnn in PyTorch: a character-level language model (``CharRNN``: embedding, a 2-layer GRU stepped one
character at a time, a linear decoder) trained on random chunks of a text file: ``random_training_set`` cuts
``chunk_len + 1`` characters per row (inputs ``chunk[:-1]``, targets ``chunk[1:]``), ``train`` starts each batch from
a zero hidden state, sums ``CrossEntropyLoss`` over the chunk's positions, one backward, Adam lr 0.01.

Source: https://github.com/spro/char-rnn.pytorch
Commit: 282bcb6b15ab3929d6a588b455cfc0f19f32add4
Files: train.py, model.py, helpers.py
License: MIT (Copyright (c) 2017 Sean Robertson; full text in LICENSES/spro-char-rnn.pytorch.txt)
Domain: recurrent character-level language model (GRU)

Deviations from the original:
- sizes: hidden_size 100 -> 32, chunk_len 200 -> 24, batch_size 100 -> 16 (n_layers 2, model "gru", learning rate
  0.01 unchanged);
- data: the text file (read with ``unidecode``, not installed) is replaced by a synthetic text made from ``seed``:
  lower-case "words" of 3-6 letters from a small lexicon, each word followed by a space and repeated 2-4 times, so a
  character is predictable from the ones before it; ``random.randint`` comes from a ``random.Random(seed)``;
- ``random_training_set`` draws ``start_index`` up to ``file_len - chunk_len - 1``: the original's bound lets the
  last chunk come out one character short, which stops training with a size error (the out-of-array fix of
  https://github.com/spro/char-rnn.pytorch/pull/10);
- ``Variable`` (a no-op since PyTorch 0.4) is kept out; ``loss.data[0]`` (an error on a 0-dim tensor since PyTorch
  0.5) is ``loss.item()``; ``--cuda`` paths are dropped;
- one ``train_step`` is one epoch of the script's loop (``train(*random_training_set(chunk_len, batch_size))``);
  it returns the per-character loss ``train`` returns; printing, generation and saving are left out;
- the program's batch (for ``model``/``loss_fn``) is the first character step of a training batch: the model's own
  call ``decoder(inp[:, c], hidden)`` with the zero hidden state ``train`` starts from, and ``target[:, c]``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, E722, PLR0402, S112  (the original's style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import string
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

HIDDEN_SIZE = 32
N_LAYERS = 2
LEARNING_RATE = 0.01
CHUNK_LEN = 24
BATCH_SIZE = 16


# ---- helpers.py ----------------------------------------------------------------------------------------------

all_characters = string.printable
n_characters = len(all_characters)


# Turning a string into a tensor

def char_tensor(string):
    tensor = torch.zeros(len(string)).long()
    for c in range(len(string)):
        try:
            tensor[c] = all_characters.index(string[c])
        except:
            continue
    return tensor


# ---- model.py ------------------------------------------------------------------------------------------------

class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, model="gru", n_layers=1, bug=None):
        super(CharRNN, self).__init__()
        self.model = model.lower()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers
        self.bug = bug

        self.encoder = nn.Embedding(input_size, hidden_size)
        if self.model == "gru":
            self.rnn = nn.GRU(hidden_size, hidden_size, n_layers)
        elif self.model == "lstm":
            self.rnn = nn.LSTM(hidden_size, hidden_size, n_layers)
        self.decoder = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden):
        batch_size = input.size(0)
        encoded = self.encoder(input)
        output, hidden = self.rnn(encoded.view(1, batch_size, -1), hidden)
        output = self.decoder(output.view(batch_size, -1))
        if self.bug == "softmax_before_cross_entropy":
            output = F.softmax(output, dim=1)  # probabilities handed to CrossEntropyLoss, which expects logits
        return output, hidden

    def init_hidden(self, batch_size):
        if self.model == "lstm":
            return (torch.zeros(self.n_layers, batch_size, self.hidden_size),
                    torch.zeros(self.n_layers, batch_size, self.hidden_size))
        return torch.zeros(self.n_layers, batch_size, self.hidden_size)


# ---- train.py ------------------------------------------------------------------------------------------------

def make_text(rng, n):
    """Words of 3-6 letters from a 12-word lexicon, each followed by a space and repeated 2-4 times."""
    lexicon = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 6))) for _ in range(12)]
    out = []
    while sum(map(len, out)) < n:
        out.extend([rng.choice(lexicon) + " "] * rng.randint(2, 4))
    return "".join(out)[:n]


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    file = make_text(rng, 20000)
    file_len = len(file)

    def random_training_set(chunk_len, batch_size):
        inp = torch.LongTensor(batch_size, chunk_len)
        target = torch.LongTensor(batch_size, chunk_len)
        for bi in range(batch_size):
            start_index = rng.randint(0, file_len - chunk_len - 1)
            end_index = start_index + chunk_len + 1
            chunk = file[start_index:end_index]
            inp[bi] = char_tensor(chunk[:-1])
            if bug == "targets_not_shifted":
                target[bi] = char_tensor(chunk[:-1])
            else:
                target[bi] = char_tensor(chunk[1:])
        return inp, target

    # Initialize models and start training

    decoder = CharRNN(
        n_characters,
        HIDDEN_SIZE,
        n_characters,
        model="gru",
        n_layers=N_LAYERS,
        bug=bug,
    )
    if bug == "optimizer_over_rnn_only":
        decoder_optimizer = torch.optim.Adam(decoder.rnn.parameters(), lr=LEARNING_RATE)
    else:
        decoder_optimizer = torch.optim.Adam(decoder.parameters(), lr=LEARNING_RATE)
    criterion = nn.CrossEntropyLoss()

    def train(inp, target):
        hidden = decoder.init_hidden(BATCH_SIZE)
        decoder.zero_grad()
        loss = 0

        for c in range(CHUNK_LEN):
            output, hidden = decoder(inp[:, c], hidden)
            loss += criterion(output.view(BATCH_SIZE, -1), target[:, c])

        loss.backward()
        decoder_optimizer.step()

        return loss.item() / CHUNK_LEN

    def train_step():
        return train(*random_training_set(CHUNK_LEN, BATCH_SIZE))

    first_inp, first_target = random_training_set(CHUNK_LEN, BATCH_SIZE)
    batch = ({"input": first_inp[:, 0], "hidden": decoder.init_hidden(BATCH_SIZE)}, first_target[:, 0])

    def loss_fn(outputs, targets):
        output, _hidden = outputs
        return criterion(output.view(BATCH_SIZE, -1), targets)

    def eval_fn(model, batch):
        inputs, targets = batch
        model.eval()
        with torch.no_grad():
            loss = loss_fn(model(**inputs), targets)
        model.train()
        return float(loss)

    return Program(name="charrnn_gru", model=decoder, batch=batch, loss_fn=loss_fn, optimizer=decoder_optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the targets cut from the same characters as the inputs (chunk[:-1] twice): the net learns to echo its input
    # (classic).
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger", ("TASK",)),
    # a softmax at the end of forward, before CrossEntropyLoss (classic).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # the optimizer built over the GRU only: the embedding and the output layer never move (classic).
    Bug("optimizer_over_rnn_only", functools.partial(_build, bug="optimizer_over_rnn_only"), "four_structures",
        ("encoder.weight",)),
]

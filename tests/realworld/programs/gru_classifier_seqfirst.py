"""Character-level name classifier (the "classify names by language" shape): names as one-hot letter tensors
``[T, B, n_letters]`` (sequence-first), a GRU, a Linear on the last hidden state, ``nn.LogSoftmax(dim=1)`` and
``nn.NLLLoss``, plain SGD.

Synthetic names: random letters; the "language" is given by the last letter's group (a suffix rule, as in
real names: -ov, -ez, -ini ...).
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

ALL_LETTERS = "abcdefghijklmnop"
N_LETTERS = len(ALL_LETTERS)
ALL_CATEGORIES = ["Russian", "Spanish", "Italian", "Irish"]
N_CATEGORIES = len(ALL_CATEGORIES)
N_HIDDEN = 32
MAX_LEN = 8
BATCH = 12
LEARNING_RATE = 0.05


class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, softmax_dim=1):
        super().__init__()
        self.rnn = nn.GRU(input_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=softmax_dim)

    def forward(self, line_tensor):
        _rnn_out, hidden = self.rnn(line_tensor)
        output = self.h2o(hidden[0])
        output = self.softmax(output)
        return output


def line_to_tensor(lines):
    """Turn a list of equal-length names into a <line_length x batch x n_letters> one-hot tensor."""
    tensor = torch.zeros(len(lines[0]), len(lines), N_LETTERS)
    for b, line in enumerate(lines):
        for li, letter in enumerate(line):
            tensor[li][b][ALL_LETTERS.find(letter)] = 1
    return tensor


def category_of(name):
    return ALL_LETTERS.find(name[-1]) // (N_LETTERS // N_CATEGORIES)


def task_probe(line_tensor):
    return line_tensor[-1].argmax(-1) // (N_LETTERS // N_CATEGORIES)


def random_names(gen, n):
    idx = torch.randint(N_LETTERS, (n, MAX_LEN), generator=gen)
    return ["".join(ALL_LETTERS[i] for i in row) for row in idx.tolist()]


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    names = random_names(gen, BATCH * 8)
    batches = []
    for k in range(0, len(names), BATCH):
        chunk = names[k:k + BATCH]
        labels = torch.tensor([category_of(n) for n in chunk], dtype=torch.long)
        batches.append((line_to_tensor(chunk), labels))
    rnn = CharRNN(N_LETTERS, N_HIDDEN, N_CATEGORIES, softmax_dim=0 if bug == "logsoftmax_dim0" else 1)
    criterion = nn.NLLLoss()
    optimizer = torch.optim.SGD(rnn.parameters(), lr=LEARNING_RATE, momentum=0.9)
    state = {"k": 0}

    def train_step():
        rnn.train()
        line_tensor, category_tensor = batches[state["k"] % len(batches)]
        state["k"] += 1
        optimizer.zero_grad()
        output = rnn(line_tensor)
        loss = criterion(output, category_tensor)
        loss.backward()
        nn.utils.clip_grad_norm_(rnn.parameters(), 3)
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        line_tensor, category_tensor = batch
        model.eval()
        with torch.no_grad():
            guess = model(line_tensor).argmax(1)
        model.train()
        return float((guess == category_tensor).float().mean())

    return Program(name="gru_classifier_seqfirst", model=rnn, batch=batches[0], loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, task="classification", task_probe=task_probe, batch_axis=1)


build = functools.partial(_build)

BUGS = [
    # LogSoftmax over the batch axis: each class column is normalised across names, not each name across classes.
    Bug("logsoftmax_dim0", functools.partial(_build, bug="logsoftmax_dim0"), "learning_ledger", ("OBJECTIVE",)),
]

# ruff: noqa: UP008, PLR0402, PIE808, RUF059
"""Generating names with a conditional character-level RNN (the language as a one-hot category input), from Sean
Robertson's practical-pytorch.

Source: https://github.com/spro/practical-pytorch
Commit: c520c52e68e945d88fff563dba1c028b6ec0197b
Files: ``conditional-char-rnn/train.py``, ``conditional-char-rnn/model.py``, ``conditional-char-rnn/data.py``
License: MIT (Copyright (c) 2017 Sean Robertson; full text in LICENSES/spro-practical-pytorch.txt)
Domain: language modelling, character-level (a category-conditioned recurrent LM over names, one name per step)

Kept as written: ``RNN`` (``i2h`` and ``i2o`` over the concatenated category, letter and hidden state, ``o2o`` over
the new hidden state and output; the unused ``LogSoftmax`` module kept), ``data.py``'s one-hot category and letter
inputs (``all_letters`` plus an EOS index), ``make_target`` (the next letters, then EOS), ``random_training_set``
(a random category, then a random line of it), ``train`` (a fresh hidden state, zero_grad, the cross-entropy of
every letter summed over the name, backward, step, the loss returned divided by the length), ``hidden_size`` 128,
``Adam(lr=0.0005)``, ``nn.CrossEntropyLoss()``.

Deviations from the original:
- the names files (``../data/names/*.txt``) are not here: six synthetic "languages" are made from ``seed``, each a
  small set of syllables (its own letters) strung into capitalized names of 2-4 syllables, 200 names each; Python's
  ``random`` is seeded with ``seed``.
- ``criterion(output, target_line_tensor[i])``: the target letter is indexed as a one-element tensor
  (``target_line_tensor[i:i + 1]``): torch 0.3's ``Variable`` indexing gave one, today's indexing gives a 0-d
  tensor that ``CrossEntropyLoss`` refuses against a ``[1, C]`` output; ``loss.data[0]`` is ``loss.item()``.
- one ``train_step`` is one ``train(*random_training_set())`` call of the epoch loop; the prints, plots and
  ``save`` are dropped. ``eval_fn`` is the mean per-letter loss over 30 fixed held-out names (no update).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import string
import sys

import torch
import torch.nn as nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# data.py
all_letters = string.ascii_letters + " .,;'-"
n_letters = len(all_letters) + 1  # Plus EOS marker
EOS = n_letters - 1


# model.py
class RNN(nn.Module):
    def __init__(self, category_size, input_size, hidden_size, output_size):
        super(RNN, self).__init__()
        self.category_size = category_size
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size

        self.i2h = nn.Linear(category_size + input_size + hidden_size, hidden_size)
        self.i2o = nn.Linear(category_size + input_size + hidden_size, output_size)
        self.o2o = nn.Linear(hidden_size + output_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)  # (port) dim given: the implicit dim is deprecated; never called

    def forward(self, category, input, hidden):
        input_combined = torch.cat((category, input, hidden), 1)
        hidden = self.i2h(input_combined)
        output = self.i2o(input_combined)
        output_combined = torch.cat((hidden, output), 1)
        output = self.o2o(output_combined)
        return output, hidden

    def init_hidden(self):
        return torch.zeros(1, self.hidden_size)


# ----------------------------------------------------------------------------------------------- (port) data
def synthetic_names(rng, n_categories=6, per_category=200):
    """Six "languages": each strings 2-4 syllables of its own small syllable set into a capitalized name."""
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiouy"
    category_lines = {}
    for c in range(n_categories):
        sylls = [rng.choice(consonants) + rng.choice(vowels) + rng.choice(["", "n", "r", "s"]) for _ in range(5)]
        lines = []
        for _ in range(per_category):
            lines.append("".join(rng.choice(sylls) for _ in range(rng.randint(2, 4))).capitalize())
        category_lines[f"Lang{c}"] = lines
    return category_lines


def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    category_lines = synthetic_names(random.Random(seed))
    held_out = {k: v[-5:] for k, v in category_lines.items()}
    category_lines = {k: v[:-5] for k, v in category_lines.items()}
    all_categories = list(category_lines)
    n_categories = len(all_categories)

    # data.py: Preparing for Training
    def random_training_pair():
        category = random.choice(all_categories)
        line = random.choice(category_lines[category])
        return category, line

    def make_category_input(category):
        li = all_categories.index(category)
        tensor = torch.zeros(1, n_categories)
        tensor[0][li] = 1
        return tensor

    def make_chars_input(chars):
        tensor = torch.zeros(len(chars), n_letters)
        for ci in range(len(chars)):
            char = chars[ci]
            tensor[ci][all_letters.find(char)] = 1
        tensor = tensor.view(-1, 1, n_letters)
        return tensor

    def make_target(line):
        if bug == "targets_not_shifted":
            letter_indexes = [all_letters.find(line[li]) for li in range(0, len(line) - 1)]
        else:
            letter_indexes = [all_letters.find(line[li]) for li in range(1, len(line))]
        letter_indexes.append(n_letters - 1)  # EOS
        tensor = torch.LongTensor(letter_indexes)
        return tensor

    def random_training_set():
        category, line = random_training_pair()
        category_input = make_category_input(category)
        line_input = make_chars_input(line)
        line_target = make_target(line)
        return category_input, line_input, line_target

    hidden_size = 128
    learning_rate = 0.0005

    rnn = RNN(n_categories, n_letters, hidden_size, n_letters)
    optimizer = torch.optim.Adam(rnn.parameters(), lr=learning_rate)
    criterion = nn.CrossEntropyLoss()

    # train.py: Training the Network
    def train(category_tensor, input_line_tensor, target_line_tensor):
        hidden = rnn.init_hidden()
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss = 0

        for i in range(input_line_tensor.size()[0]):
            output, hidden = rnn(category_tensor, input_line_tensor[i], hidden)
            if bug == "hidden_detached_every_letter":
                hidden = hidden.detach()
            loss += criterion(output, target_line_tensor[i:i + 1])  # (port) [i] in torch 0.3

        loss.backward()
        optimizer.step()

        return output, loss.item() / input_line_tensor.size()[0]

    def train_step():
        output, loss = train(*random_training_set())
        return loss

    eval_set = [(make_category_input(c), make_chars_input(line), make_target(line))
                for c, lines in held_out.items() for line in lines]

    def evaluate(model, _batch=None):
        total, n = 0.0, 0
        with torch.no_grad():
            for category_tensor, input_line_tensor, target_line_tensor in eval_set:
                hidden = model.init_hidden()
                for i in range(input_line_tensor.size()[0]):
                    output, hidden = model(category_tensor, input_line_tensor[i], hidden)
                    total += float(criterion(output, target_line_tensor[i:i + 1]))
                    n += 1
        return total / n

    # the Program's batch: one name's first letter with its category and a fresh hidden state, and its target
    category_tensor, input_line_tensor, target_line_tensor = eval_set[0]
    batch = ((category_tensor, input_line_tensor[0], rnn.init_hidden()), target_line_tensor[0:1])

    def loss_fn(outputs, target):
        output = outputs[0] if isinstance(outputs, tuple) else outputs
        return criterion(output, target)

    return Program(name="practicalpytorch_conditional_char_rnn", model=rnn, batch=batch, loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=evaluate)


build = functools.partial(_build, bug=None)

BUGS = [
    # make_target from range(0, len - 1): each letter is its own target (classic off-by-one, the shift lost).
    Bug("targets_not_shifted", functools.partial(_build, bug="targets_not_shifted"), "learning_ledger",
        ("TASK",)),
    # the hidden state detached after every letter (classic: truncated back-propagation through time of one step).
    Bug("hidden_detached_every_letter", functools.partial(_build, bug="hidden_detached_every_letter"),
        "learning_ledger", ("DEPENDENCY",)),
    # optimizer.zero_grad() left out: gradients accumulate over the names (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

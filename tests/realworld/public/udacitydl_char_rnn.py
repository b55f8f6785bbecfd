"""Character-level LSTM language model from Udacity's deep-learning-v2-pytorch (``Character_Level_RNN_Solution``):
one-hot characters into a 2-layer ``nn.LSTM`` (batch_first, dropout between layers), dropout, a linear layer to
the characters; ``get_batches`` cuts the encoded text into ``batch_size`` parallel streams read ``seq_length``
characters at a time, and the loop carries the LSTM state from batch to batch, cut from the graph with
``h = tuple([each.data for each in h])`` (truncated BPTT), with ``CrossEntropyLoss``, Adam and
``clip_grad_norm_``; every ``print_every`` steps a validation pass in eval mode, then ``net.train()`` again.

Source: https://github.com/udacity/deep-learning-v2-pytorch
Commit: c9404fc86181fc3f0906b368697268257f348535
Files: ``recurrent-neural-networks/char-rnn/Character_Level_RNN_Solution.ipynb`` (``one_hot_encode``,
``get_batches``, ``CharRNN``, ``train`` and the cells that call them)
License: MIT (Copyright (c) 2018 Udacity; full text in LICENSES/udacity-deep-learning-v2-pytorch.txt)
Domain: recurrent LM (char LSTM, truncated BPTT with the hidden state carried across batches)

Kept as written: ``one_hot_encode``, ``get_batches`` (targets shifted by one, the last target from the next
window or wrapped to column 0), ``CharRNN`` (``init_hidden`` from ``weight.new(...).zero_()``), ``train``'s loop
body (``net.train()``, Adam at lr 0.001, ``CrossEntropyLoss``, a fresh hidden state each epoch, the ``.data``
detach of the carried state, ``net.zero_grad()``, the loss on ``targets.view(batch_size*seq_length)``, clip 5,
val_frac 0.1, the validation pass every ``print_every`` = 10 steps with its own hidden state, then ``net.train()``),
n_layers 2, drop_prob 0.5.

Deviations from the original:
- ``data/anna.txt`` is replaced by a synthetic text made from ``seed``: 7,200 characters over a 20-letter
  alphabet, each character followed by its successor under a seeded permutation 85% of the time, by a random
  letter otherwise; ``chars = tuple(set(text))`` is sorted so that a seed fixes the encoding;
- sizes for 2 CPU cores: n_hidden 512 -> 64, batch_size 128 -> 16, seq_length 100 -> 32 (12 training batches an
  epoch); no GPU (``train_on_gpu`` is False);
- ``train``'s epoch loop is unrolled: one ``train_step`` is one batch of it (a new ``get_batches`` generator and
  ``net.init_hidden`` at the start of an epoch); the validation pass keeps its place in the loop but its print is
  dropped (the mean validation loss is kept); ``eval_fn`` is that validation pass; sampling and the checkpoint are
  dropped;
- the Program's ``batch`` is the first batch with a zero hidden state; its ``loss_fn`` is the loop's criterion on
  ``net``'s output;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

train_on_gpu = False  # (port) CPU only


def one_hot_encode(arr, n_labels):

    # Initialize the the encoded array
    one_hot = np.zeros((arr.size, n_labels), dtype=np.float32)

    # Fill the appropriate elements with ones
    one_hot[np.arange(one_hot.shape[0]), arr.flatten()] = 1.

    # Finally reshape it to get back to the original array
    one_hot = one_hot.reshape((*arr.shape, n_labels))

    return one_hot


def get_batches(arr, batch_size, seq_length):
    '''Create a generator that returns batches of size
       batch_size x seq_length from arr.
    '''

    batch_size_total = batch_size * seq_length
    # total number of batches we can make
    n_batches = len(arr)//batch_size_total

    # Keep only enough characters to make full batches
    arr = arr[:n_batches * batch_size_total]
    # Reshape into batch_size rows
    arr = arr.reshape((batch_size, -1))

    # iterate through the array, one sequence at a time
    for n in range(0, arr.shape[1], seq_length):
        # The features
        x = arr[:, n:n+seq_length]
        # The targets, shifted by one
        y = np.zeros_like(x)
        try:
            y[:, :-1], y[:, -1] = x[:, 1:], arr[:, n+seq_length]
        except IndexError:
            y[:, :-1], y[:, -1] = x[:, 1:], arr[:, 0]
        yield x, y


class CharRNN(nn.Module):

    def __init__(self, tokens, n_hidden=256, n_layers=2,
                               drop_prob=0.5, lr=0.001):
        super().__init__()
        self.drop_prob = drop_prob
        self.n_layers = n_layers
        self.n_hidden = n_hidden
        self.lr = lr

        # creating character dictionaries
        self.chars = tokens
        self.int2char = dict(enumerate(self.chars))
        self.char2int = {ch: ii for ii, ch in self.int2char.items()}

        ## TODO: define the LSTM
        self.lstm = nn.LSTM(len(self.chars), n_hidden, n_layers,
                            dropout=drop_prob, batch_first=True)

        ## TODO: define a dropout layer
        self.dropout = nn.Dropout(drop_prob)

        ## TODO: define the final, fully-connected output layer
        self.fc = nn.Linear(n_hidden, len(self.chars))

    def forward(self, x, hidden):
        ''' Forward pass through the network.
            These inputs are x, and the hidden/cell state `hidden`. '''

        ## TODO: Get the outputs and the new hidden state from the lstm
        r_output, hidden = self.lstm(x, hidden)

        ## TODO: pass through a dropout layer
        out = self.dropout(r_output)

        # Stack up LSTM outputs using view
        # you may need to use contiguous to reshape the output
        out = out.contiguous().view(-1, self.n_hidden)

        ## TODO: put x through the fully-connected layer
        out = self.fc(out)

        # return the final output and the hidden state
        return out, hidden

    def init_hidden(self, batch_size):
        ''' Initializes hidden state '''
        # Create two new tensors with sizes n_layers x batch_size x n_hidden,
        # initialized to zero, for hidden state and cell state of LSTM
        weight = next(self.parameters()).data

        hidden = (weight.new(self.n_layers, batch_size, self.n_hidden).zero_(),
                  weight.new(self.n_layers, batch_size, self.n_hidden).zero_())

        return hidden


def _text(seed, n=7200, n_letters=20):
    """(port) The synthetic text: a seeded successor permutation over 20 letters, followed 85% of the time."""
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrst"[:n_letters]
    succ = rng.permutation(n_letters)
    out = [int(rng.integers(n_letters))]
    for _ in range(n - 1):
        out.append(int(succ[out[-1]]) if rng.random() < 0.85 else int(rng.integers(n_letters)))
    return "".join(letters[i] for i in out)


def _validate(net, val_data, batch_size, seq_length, criterion, n_chars, bug=None):
    # the validation block of train(), as written
    val_h = net.init_hidden(batch_size)
    val_losses = []
    net.eval()
    for x, y in get_batches(val_data, batch_size, seq_length):
        # One-hot encode our data and make them Torch tensors
        x = one_hot_encode(x, n_chars)
        x, y = torch.from_numpy(x), torch.from_numpy(y)

        # Creating new variables for the hidden state, otherwise
        # we'd backprop through the entire training history
        val_h = tuple([each.data for each in val_h])

        inputs, targets = x, y

        output, val_h = net(inputs, val_h)
        val_loss = criterion(output, targets.view(batch_size*seq_length).long())

        val_losses.append(val_loss.item())

    if bug != "train_mode_not_restored":
        net.train()  # reset to train mode after iterationg through validation data
    return float(np.mean(val_losses))


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    text = _text(seed)
    chars = tuple(sorted(set(text)))  # (port) sorted: a seed fixes the encoding
    int2char = dict(enumerate(chars))
    char2int = {ch: ii for ii, ch in int2char.items()}
    encoded = np.array([char2int[ch] for ch in text])

    n_hidden = 64  # (port) 512
    n_layers = 2
    net = CharRNN(chars, n_hidden, n_layers)
    batch_size, seq_length, lr, clip, val_frac, print_every = 16, 32, 0.001, 5, 0.1, 10  # (port) 128, 100

    # train(net, encoded, ...): its set-up
    data = encoded
    net.train()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss()
    val_idx = int(len(data)*(1-val_frac))
    data, val_data = data[:val_idx], data[val_idx:]
    n_chars = len(net.chars)
    state = {"counter": 0, "batches": None, "h": None, "val_loss": None}

    def train_step():
        # one batch of train()'s epoch loop
        xy = next(state["batches"], None) if state["batches"] is not None else None
        if xy is None:
            # initialize hidden state
            state["h"] = net.init_hidden(batch_size)
            state["batches"] = get_batches(data, batch_size, seq_length)
            xy = next(state["batches"])
        x, y = xy
        state["counter"] += 1

        # One-hot encode our data and make them Torch tensors
        x = one_hot_encode(x, n_chars)
        inputs, targets = torch.from_numpy(x), torch.from_numpy(y)

        # Creating new variables for the hidden state, otherwise
        # we'd backprop through the entire training history
        h = tuple([each.data for each in state["h"]])

        # zero accumulated gradients
        if bug != "zero_grad_dropped":
            net.zero_grad()

        # get the output from the model
        output, h = net(inputs, h)
        state["h"] = h

        # calculate the loss and perform backprop
        if bug == "targets_time_major":
            loss = criterion(output, targets.t().reshape(batch_size*seq_length).long())
        else:
            loss = criterion(output, targets.view(batch_size*seq_length).long())
        loss.backward()
        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        nn.utils.clip_grad_norm_(net.parameters(), clip)
        opt.step()

        # loss stats
        if state["counter"] % print_every == 0:
            state["val_loss"] = _validate(net, val_data, batch_size, seq_length, criterion, n_chars, bug=bug)
        return loss

    def eval_fn(model, _batch):
        was_training = model.training
        val_loss = _validate(model, val_data, batch_size, seq_length, criterion, n_chars)
        model.train(was_training)
        return val_loss

    x0, y0 = next(get_batches(data, batch_size, seq_length))
    batch = ({"x": torch.from_numpy(one_hot_encode(x0, n_chars)), "hidden": net.init_hidden(batch_size)},
             torch.from_numpy(y0))

    def loss_fn(outputs, targets):
        output, _hidden = outputs
        return criterion(output, targets.view(batch_size*seq_length).long())

    return Program(name="udacitydl_char_rnn", model=net, batch=batch, loss_fn=loss_fn, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic labels/inputs misalignment: the [batch, seq] targets flattened time-major (targets.t()) while the
    # batch_first LSTM's outputs are stacked batch-major by out.view(-1, n_hidden).
    Bug("targets_time_major", functools.partial(_build, bug="targets_time_major"), "learning_ledger", ("TASK",)),
    # classic: net.train() left out after the validation pass, so from the first validation on the net trains in
    # eval mode (no dropout).
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe", (),
        kind="step.eval_mode_not_restored"),  # a whole-model slip: declared by its mechanism (README rule 6)
    # classic: net.zero_grad() left out, the gradients of every batch accumulate.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

# ruff: noqa: PLR0402, UP008
"""Temporal convolutional network (causal dilated convolutions with ``Chomp1d``, weight-normalized, residual
``TemporalBlock``s) on the adding problem, trained by the repository's ``add_test.py`` loop: Adam lr 4e-3, batch 32,
``F.mse_loss`` on the last time step's linear readout, the ``--clip`` branch of the loop kept as written.

Source: https://github.com/locuslab/TCN
Commit: 2f8c2b817050206397458dfd1f5a25ce8a32fe65
Files: TCN/tcn.py, TCN/adding_problem/model.py, TCN/adding_problem/utils.py, TCN/adding_problem/add_test.py
License: MIT (Copyright (c) 2018 CMU Locus Lab; full text in LICENSES/locuslab-TCN.txt)
Domain: sequence modelling (TCN regression on the adding problem)

Kept as written: ``Chomp1d``, ``TemporalBlock`` (two ``weight_norm`` causal dilated convolutions, chomp, ReLU,
dropout, 1x1 downsample residual, ``init_weights``), ``TemporalConvNet`` (dilation ``2 ** i``, padding
``(kernel_size-1) * dilation``), the adding problem's ``TCN`` (readout ``linear(y1[:, :, -1])``), ``data_generator``
(two marked positions, target their sum), add_test.py's defaults (batch 32, dropout 0.0, clip -1, ksize 7, lr 4e-3,
Adam, nhid 30) and its ``train``/``evaluate`` loop bodies (zero_grad, forward, ``F.mse_loss``, backward, the
``if args.clip > 0`` clipping branch, step).

Deviations from the original:
- sizes: seq_len 400 -> 60, levels 8 -> 4 (receptive field 181 >= 60), 50000 training sequences -> 1600 (the
  1000-sequence test set is not generated: ``eval_fn`` evaluates a given batch);
- data: ``data_generator`` draws from a ``numpy.random.RandomState(seed)`` and a seeded ``torch.Generator`` instead
  of the global generators (``Variable`` wrappers dropped: they are no-ops);
- ``.cuda()`` is dropped; ``argparse`` is replaced by a namespace holding the same defaults;
- one ``train_step`` is one iteration of ``train()``'s batch loop (the batch index cycles over the training set);
  printing and the log-interval bookkeeping are dropped; ``eval_fn`` is ``evaluate()`` on a given batch;
- ``torch.nn.utils.weight_norm`` is kept as written (deprecated in recent torch, still the same reparametrization);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.utils import weight_norm

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- TCN/tcn.py ---------------------------------------------------------------------------------------------------


class Chomp1d(nn.Module):
    def __init__(self, chomp_size):
        super(Chomp1d, self).__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, :-self.chomp_size].contiguous()


class TemporalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, stride, dilation, padding, dropout=0.2):
        super(TemporalBlock, self).__init__()
        self.conv1 = weight_norm(nn.Conv1d(n_inputs, n_outputs, kernel_size,
                                           stride=stride, padding=padding, dilation=dilation))
        self.chomp1 = Chomp1d(padding)
        self.relu1 = nn.ReLU()
        self.dropout1 = nn.Dropout(dropout)

        self.conv2 = weight_norm(nn.Conv1d(n_outputs, n_outputs, kernel_size,
                                           stride=stride, padding=padding, dilation=dilation))
        self.chomp2 = Chomp1d(padding)
        self.relu2 = nn.ReLU()
        self.dropout2 = nn.Dropout(dropout)

        self.net = nn.Sequential(self.conv1, self.chomp1, self.relu1, self.dropout1,
                                 self.conv2, self.chomp2, self.relu2, self.dropout2)
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else None
        self.relu = nn.ReLU()
        self.init_weights()

    def init_weights(self):
        self.conv1.weight.data.normal_(0, 0.01)
        self.conv2.weight.data.normal_(0, 0.01)
        if self.downsample is not None:
            self.downsample.weight.data.normal_(0, 0.01)

    def forward(self, x):
        out = self.net(x)
        res = x if self.downsample is None else self.downsample(x)
        return self.relu(out + res)


class TemporalConvNet(nn.Module):
    def __init__(self, num_inputs, num_channels, kernel_size=2, dropout=0.2):
        super(TemporalConvNet, self).__init__()
        layers = []
        num_levels = len(num_channels)
        for i in range(num_levels):
            dilation_size = 2 ** i
            in_channels = num_inputs if i == 0 else num_channels[i-1]
            out_channels = num_channels[i]
            layers += [TemporalBlock(in_channels, out_channels, kernel_size, stride=1, dilation=dilation_size,
                                     padding=(kernel_size-1) * dilation_size, dropout=dropout)]

        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


# ---- TCN/adding_problem/model.py ----------------------------------------------------------------------------------


class TCN(nn.Module):
    def __init__(self, input_size, output_size, num_channels, kernel_size, dropout, bug=None):
        super(TCN, self).__init__()
        self.tcn = TemporalConvNet(input_size, num_channels, kernel_size=kernel_size, dropout=dropout)
        self.linear = nn.Linear(num_channels[-1], output_size)
        self.init_weights()
        self.bug = bug

    def init_weights(self):
        self.linear.weight.data.normal_(0, 0.01)

    def forward(self, x):
        y1 = self.tcn(x)
        if self.bug == "readout_at_first_step":
            return self.linear(y1[:, :, 0])
        return self.linear(y1[:, :, -1])


# ---- TCN/adding_problem/utils.py ----------------------------------------------------------------------------------


def data_generator(N, seq_length, rng, gen):
    """
    Args:
        seq_length: Length of the adding problem data
        N: # of data in the set
    """
    X_num = torch.rand([N, 1, seq_length], generator=gen)
    X_mask = torch.zeros([N, 1, seq_length])
    Y = torch.zeros([N, 1])
    for i in range(N):
        positions = rng.choice(seq_length, size=2, replace=False)
        X_mask[i, 0, positions[0]] = 1
        X_mask[i, 0, positions[1]] = 1
        Y[i,0] = X_num[i, 0, positions[0]] + X_num[i, 0, positions[1]]
    X = torch.cat((X_num, X_mask), dim=1)
    return X, Y


# ---- TCN/adding_problem/add_test.py -------------------------------------------------------------------------------

ARGS = types.SimpleNamespace(batch_size=32, dropout=0.0, clip=-1, ksize=7, levels=4, seq_len=60, lr=4e-3,
                             optim="Adam", nhid=30)


def _build(seed, bug=None):
    args = ARGS
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    gen = torch.Generator().manual_seed(seed)

    input_channels = 2
    n_classes = 1
    batch_size = args.batch_size
    seq_length = args.seq_len

    X_train, Y_train = data_generator(1600, seq_length, rng, gen)

    # Note: We use a very simple setting here (assuming all levels have the same # of channels.
    channel_sizes = [args.nhid]*args.levels
    kernel_size = args.ksize
    dropout = args.dropout
    model = TCN(input_channels, n_classes, channel_sizes, kernel_size=kernel_size, dropout=dropout, bug=bug)

    lr = args.lr
    optimizer = getattr(optim, args.optim)(model.parameters(), lr=lr)

    def mse(output, y):
        if bug == "output_squeezed":
            # [B] against [B, 1]: the loss broadcasts to every (prediction, target) pair
            return F.mse_loss(output.squeeze(), y)
        return F.mse_loss(output, y)

    state = {"i": 0}

    def train_step():
        model.train()
        i = state["i"]
        state["i"] = (i + batch_size) % X_train.size(0)
        if i + batch_size > X_train.size(0):
            x, y = X_train[i:], Y_train[i:]
        else:
            x, y = X_train[i:(i+batch_size)], Y_train[i:(i+batch_size)]
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        output = model(x)
        loss = mse(output, y)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        x, y = batch
        model.eval()
        with torch.no_grad():
            output = model(x)
            test_loss = F.mse_loss(output, y)
            return test_loss.item()

    def task_probe(x):
        # the adding problem's rule: the sum of the two values whose marker channel is 1
        return (x[:, 0] * x[:, 1]).sum(-1, keepdim=True)

    return Program(name="tcn_adding", model=model, batch=(X_train[:batch_size], Y_train[:batch_size]),
                   loss_fn=mse, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   task_probe=task_probe)


build = functools.partial(_build, bug=None)

BUGS = [
    # optimizer.zero_grad() missing from the loop: gradients accumulate over every step. The repository's own bug in
    # the copy-memory loop (https://github.com/locuslab/TCN/pull/7, "added missing zero_grad to copytest training");
    # here in the adding problem's identical loop.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", ("tcn.network.0.conv1",)),
    # the [B, 1] output squeezed to [B] against [B, 1] targets: mse_loss broadcasts to a [B, B] matrix and the model
    # learns the batch mean (classic shape slip).
    Bug("output_squeezed", functools.partial(_build, bug="output_squeezed"), "learning_ledger", ("OBJECTIVE",)),
    # the readout takes the first time step instead of the last: with causal convolutions it sees one input step and
    # never the marked values (classic indexing slip).
    Bug("readout_at_first_step", functools.partial(_build, bug="readout_at_first_step"), "learning_ledger",
        ("DEPENDENCY",)),
]

# ruff: noqa: UP008, F841, PLR0402, UP004, B020, PLR1704
"""LSTNet (convolution + GRU + skip-GRU + highway autoregression) for multivariate forecasting, from the authors'
PyTorch code.

Source: https://github.com/laiguokun/LSTNet, commit 093c4dced7b7f7405be0620d65bb288b6d7ab4f0,
files ``models/LSTNet.py``, ``main.py``, ``utils.py``, ``Optim.py``, ``ele.sh``.
License: MIT (Copyright (c) 2019 Guokun Lai, Yiming Yang, Shinjae Yoo; full text in LICENSES/laiguokun-LSTNet.txt).
Domain: time series forecasting.

Kept as written: ``Model`` (Conv2d over (kernel, m), GRU1 over the conv time axis, skip-GRU over the last
``pt * skip`` steps folded into ``batch * skip`` sequences, ``linear1``, highway linear over the last
``highway_window`` steps per series, optional output function), ``Data_utility`` (normalize=2: each series
divided by its max |value|; the 0.6/0.2 train/valid split; ``_batchify`` windows ending ``horizon`` steps before the
target; ``get_batches``), ``Optim`` (Adam with the global-norm shrinkage before ``step``), the ``train`` loop body
(``model.zero_grad()``, ``criterion(output * scale, Y * scale)`` with ``L1Loss(size_average=False)``,
``backward``, ``optim.step()``), ``evaluate`` (RSE over the validation split).

Deviations from the original:
- data: ``Data_utility`` reads an array built from ``seed`` instead of ``np.loadtxt`` of electricity.txt: 4 positive
  series (daily-like sines with their own period, phase and amplitude plus small noise), 360 steps. A forecast is
  learnable from the window.
- sizes: window 24, CNN_kernel 6, hidCNN 16, hidRNN 16, skip 6, hidSkip 4, highway_window 6, horizon 3, batch 32,
  lr 0.003 (the ele.sh command's other flags: ``--output_fun Linear``, L1 loss, clip 10, dropout 0.2).
- ``self.pt`` is cast to ``int`` (the original's ``(P - Ck)/skip`` is a float under Python 3 and ``view`` rejects
  it); ``.data[0]`` on 0-d losses is written ``.item()``; ``Variable`` wrappers dropped (no-ops); no CUDA.
- ``train_step`` is one batch of ``train``'s loop (an epoch's shuffled batches are drawn in turn); ``eval_fn`` is
  ``evaluate`` on the validation split returning its RSE; ``train_step`` returns the batch's summed loss divided by
  ``batch * m`` (``train``'s ``total_loss / n_samples`` bookkeeping, per batch). ``evaluate``'s correlation and the saving are dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


class Args:
    cuda = False
    window = 24
    hidCNN = 16
    hidRNN = 16
    hidSkip = 4
    CNN_kernel = 6
    skip = 6
    highway_window = 6
    dropout = 0.2
    output_fun = 'Linear'
    optim = 'adam'
    lr = 0.003
    clip = 10.
    horizon = 3
    batch_size = 32
    normalize = 2
    L1Loss = True


class Model(nn.Module):
    def __init__(self, args, data, bug=None):
        super(Model, self).__init__()
        self.use_cuda = args.cuda
        self.P = args.window;
        self.m = data.m
        self.hidR = args.hidRNN;
        self.hidC = args.hidCNN;
        self.hidS = args.hidSkip;
        self.Ck = args.CNN_kernel;
        self.skip = args.skip;
        self.pt = int((self.P - self.Ck)/self.skip)
        self.hw = args.highway_window
        self.bug = bug
        self.conv1 = nn.Conv2d(1, self.hidC, kernel_size = (self.Ck, self.m));
        self.GRU1 = nn.GRU(self.hidC, self.hidR);
        self.dropout = nn.Dropout(p = args.dropout);
        if (self.skip > 0):
            self.GRUskip = nn.GRU(self.hidC, self.hidS);
            self.linear1 = nn.Linear(self.hidR + self.skip * self.hidS, self.m);
        else:
            self.linear1 = nn.Linear(self.hidR, self.m);
        if (self.hw > 0):
            self.highway = nn.Linear(self.hw, 1);
        self.output = None;
        if (args.output_fun == 'sigmoid'):
            self.output = F.sigmoid;
        if (args.output_fun == 'tanh'):
            self.output = F.tanh;

    def forward(self, x):
        batch_size = x.size(0);

        #CNN
        c = x.view(-1, 1, self.P, self.m);
        c = F.relu(self.conv1(c));
        c = self.dropout(c);
        c = torch.squeeze(c, 3);

        # RNN
        r = c.permute(2, 0, 1).contiguous();
        _, r = self.GRU1(r);
        r = self.dropout(torch.squeeze(r,0));


        #skip-rnn

        if (self.skip > 0):
            s = c[:,:, int(-self.pt * self.skip):].contiguous();
            s = s.view(batch_size, self.hidC, self.pt, self.skip);
            s = s.permute(2,0,3,1).contiguous();
            s = s.view(self.pt, batch_size * self.skip, self.hidC);
            _, s = self.GRUskip(s);
            s = s.view(batch_size, self.skip * self.hidS);
            s = self.dropout(s);
            r = torch.cat((r,s),1);

        res = self.linear1(r);

        #highway
        if (self.hw > 0):
            z = x[:, -self.hw:, :];
            if self.bug == "highway_viewed_not_permuted":
                z = z.contiguous().view(-1, self.hw);
            else:
                z = z.permute(0,2,1).contiguous().view(-1, self.hw);
            z = self.highway(z);
            z = z.view(-1,self.m);
            res = res + z;

        if (self.output):
            res = self.output(res);
        return res;


def normal_std(x):
    return x.std() * np.sqrt((len(x) - 1.)/(len(x)))


class Data_utility(object):
    # train and valid is the ratio of training set and validation set. test = 1 - train - valid
    def __init__(self, rawdat, train, valid, cuda, horizon, window, normalize = 2, bug=None):
        self.cuda = cuda;
        self.P = window;
        self.h = horizon
        self.bug = bug
        self.rawdat = rawdat
        self.dat = np.zeros(self.rawdat.shape);
        self.n, self.m = self.dat.shape;
        self.normalize = 2
        self.scale = np.ones(self.m);
        self._normalized(normalize);
        self._split(int(train * self.n), int((train+valid) * self.n), self.n);

        self.scale = torch.from_numpy(self.scale).float();
        tmp = self.test[1] * self.scale.expand(self.test[1].size(0), self.m);

        self.rse = normal_std(tmp);
        self.rae = torch.mean(torch.abs(tmp - torch.mean(tmp)));

    def _normalized(self, normalize):
        #normalized by the maximum value of entire matrix.

        if (normalize == 0):
            self.dat = self.rawdat

        if (normalize == 1):
            self.dat = self.rawdat / np.max(self.rawdat);

        #normlized by the maximum value of each row(sensor).
        if (normalize == 2):
            for i in range(self.m):
                self.scale[i] = np.max(np.abs(self.rawdat[:,i]));
                self.dat[:,i] = self.rawdat[:,i] / np.max(np.abs(self.rawdat[:,i]));


    def _split(self, train, valid, test):

        train_set = range(self.P+self.h-1, train);
        valid_set = range(train, valid);
        test_set = range(valid, self.n);
        self.train = self._batchify(train_set, self.h);
        self.valid = self._batchify(valid_set, self.h);
        self.test = self._batchify(test_set, self.h);


    def _batchify(self, idx_set, horizon):

        n = len(idx_set);
        X = torch.zeros((n,self.P,self.m));
        Y = torch.zeros((n,self.m));

        for i in range(n):
            end = idx_set[i] - self.h + 1;
            start = end - self.P;
            X[i,:,:] = torch.from_numpy(self.dat[start:end, :]);
            if self.bug == "target_inside_window":  # classic window slip: the target is the window's last row
                Y[i,:] = torch.from_numpy(self.dat[end - 1, :]);
            else:
                Y[i,:] = torch.from_numpy(self.dat[idx_set[i], :]);

        return [X, Y];

    def get_batches(self, inputs, targets, batch_size, shuffle=True):
        length = len(inputs)
        if shuffle:
            index = torch.randperm(length)
        else:
            index = torch.LongTensor(range(length))
        start_idx = 0
        while (start_idx < length):
            end_idx = min(length, start_idx + batch_size)
            excerpt = index[start_idx:end_idx]
            X = inputs[excerpt]; Y = targets[excerpt];
            yield X, Y;
            start_idx += batch_size


class Optim(object):

    def _makeOptimizer(self):
        if self.method == 'sgd':
            self.optimizer = optim.SGD(self.params, lr=self.lr)
        elif self.method == 'adagrad':
            self.optimizer = optim.Adagrad(self.params, lr=self.lr)
        elif self.method == 'adadelta':
            self.optimizer = optim.Adadelta(self.params, lr=self.lr)
        elif self.method == 'adam':
            self.optimizer = optim.Adam(self.params, lr=self.lr)
        else:
            raise RuntimeError("Invalid optim method: " + self.method)

    def __init__(self, params, method, lr, max_grad_norm, lr_decay=1, start_decay_at=None):
        self.params = list(params)  # careful: params may be a generator
        self.last_ppl = None
        self.lr = lr
        self.max_grad_norm = max_grad_norm
        self.method = method
        self.lr_decay = lr_decay
        self.start_decay_at = start_decay_at
        self.start_decay = False

        self._makeOptimizer()

    def step(self):
        # Compute gradients norm.
        grad_norm = 0
        for param in self.params:
            grad_norm += math.pow(param.grad.data.norm(), 2)

        grad_norm = math.sqrt(grad_norm)
        if grad_norm > 0:
            shrinkage = self.max_grad_norm / grad_norm
        else:
            shrinkage = 1.

        for param in self.params:
            if shrinkage < 1:
                param.grad.data.mul_(shrinkage)

        self.optimizer.step()
        return grad_norm


def evaluate(data, X, Y, model, evaluateL2, evaluateL1, batch_size):
    model.eval();
    total_loss = 0;
    total_loss_l1 = 0;
    n_samples = 0;
    predict = None;
    test = None;

    for X, Y in data.get_batches(X, Y, batch_size, False):
        output = model(X);
        if predict is None:
            predict = output;
            test = Y;
        else:
            predict = torch.cat((predict,output));
            test = torch.cat((test, Y));

        scale = data.scale.expand(output.size(0), data.m)
        total_loss += evaluateL2(output * scale, Y * scale).item()
        total_loss_l1 += evaluateL1(output * scale, Y * scale).item()
        n_samples += (output.size(0) * data.m);
    rse = math.sqrt(total_loss / n_samples)/data.rse
    return float(rse)


def make_series(seed, n=360, m=4):
    """Synthetic stand-in for electricity.txt: positive periodic loads with a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None]
    period = rng.choice([8.0, 12.0, 16.0, 24.0], size=m)
    phase = rng.uniform(0, 2 * np.pi, size=m)
    amp = rng.uniform(20.0, 100.0, size=m)
    return amp * (1.5 + np.sin(2 * np.pi * t / period + phase)) + rng.normal(0, 1.0, size=(n, m)) * amp * 0.03


def _build(seed, bug=None):
    args = Args()
    torch.manual_seed(seed)
    Data = Data_utility(make_series(seed), 0.6, 0.2, args.cuda, args.horizon, args.window, args.normalize, bug=bug);
    model = Model(args, Data, bug=bug)

    if args.L1Loss:
        criterion = nn.L1Loss(size_average=False);
    else:
        criterion = nn.MSELoss(size_average=False);
    evaluateL2 = nn.MSELoss(size_average=False);
    evaluateL1 = nn.L1Loss(size_average=False)

    optim_ = Optim(
        model.parameters(), args.optim, args.lr, args.clip,
    )

    state = {"it": None}

    def next_batch():
        while True:
            if state["it"] is None:
                state["it"] = Data.get_batches(Data.train[0], Data.train[1], args.batch_size, True)
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None

    def train_step():
        model.train();
        X, Y = next_batch()
        if bug != "zero_grad_dropped":
            model.zero_grad();
        output = model(X);
        scale = Data.scale.expand(output.size(0), Data.m)
        loss = criterion(output * scale, Y * scale);
        loss.backward();
        grad_norm = optim_.step();
        return loss.detach() / (output.size(0) * Data.m)

    def loss_fn(output, Y):
        scale = Data.scale.expand(output.size(0), Data.m)
        return criterion(output * scale, Y * scale)

    def eval_fn(model, batch):
        return evaluate(Data, Data.valid[0], Data.valid[1], model, evaluateL2, evaluateL1, args.batch_size)

    batch = (Data.train[0][:args.batch_size], Data.train[1][:args.batch_size])
    return Program(name="lstnet_electricity", model=model, batch=batch, loss_fn=loss_fn, optimizer=optim_.optimizer,
                   train_step=train_step, eval_fn=eval_fn, task="regression")


build = functools.partial(_build, bug=None)

BUGS = [
    # classic window slip in _batchify: the target row is the window's own last row, not `horizon` steps ahead.
    Bug("target_inside_window", functools.partial(_build, bug="target_inside_window"), "learning_ledger", ("TASK",)),
    # classic layout slip: the highway's [B, hw, m] slice viewed as (-1, hw) without moving the series axis first,
    # so each highway input mixes series and time steps.
    Bug("highway_viewed_not_permuted", functools.partial(_build, bug="highway_viewed_not_permuted"), "tensor_trace",
        ("highway",)),
    # classic: model.zero_grad() left out of the loop body, gradients accumulate over steps.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

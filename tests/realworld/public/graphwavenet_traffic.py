# ruff: noqa: UP008, UP039, UP004, UP034, E722, PLR0402
"""Graph WaveNet for multi-step traffic forecasting (gated dilated temporal convolutions, diffusion graph
convolution over two transition matrices plus a learned adaptive adjacency, masked MAE on de-scaled outputs),
from the authors' code.

Source: https://github.com/nnzhan/Graph-WaveNet, Commit: 6b162e80c59a1d494809252eca055cff93dc66b1,
Files: ``model.py``, ``engine.py``, ``train.py``, ``util.py``, ``generate_training_data.py``, ``README.md``
(the command ``python train.py --gcn_bool --adjtype doubletransition --addaptadj --randomadj``).
License: MIT (Copyright (c) 2019 Zonghan Wu; full text in LICENSES/nnzhan-Graph-WaveNet.txt).
Domain: time series, spatio-temporal forecasting (12 steps in, 12 steps out, per sensor).

Kept as written: ``nconv`` / ``linear`` / ``gcn`` / ``gwnet`` (start conv, 4 blocks x 2 layers of tanh-filter *
sigmoid-gate dilated convolutions, skip convolutions, diffusion gcn of order 2 over the supports and the adaptive
``softmax(relu(nodevec1 @ nodevec2))``, residual, BatchNorm, end convolutions), ``trainer`` (Adam with weight decay,
``util.masked_mae`` with null value 0.0 on ``scaler.inverse_transform(output)``, the left pad of the input by one
step, ``clip_grad_norm_`` at 5 before the step), ``StandardScaler`` fitted on the training inputs' first channel,
``asym_adj`` for the ``doubletransition`` supports, ``DataLoader`` (padding with the last sample, shuffle each
epoch), and train.py's defaults (seq_length 12, in_dim 2, dropout 0.3, lr 0.001, weight decay 0.0001).

Deviations from the original:
- the METR-LA files are replaced by synthetic sensor data made from ``seed``: 8 sensors on a ring road (the
  adjacency a Gaussian kernel of ring distance, as ``adj_mx.pkl`` holds), 600 five-minute readings per sensor of a
  daily-periodic speed (period shortened to 48 steps) with a per-sensor phase, smoothed over the neighbours, plus
  noise; ``generate_training_data.py``'s windows (x offsets -11..0, y offsets 1..12, time-in-day channel) are
  built in memory, split 70/10/20.
- sizes for 2 CPU cores: num_nodes 8, nhid 8 (skip 64, end 128 channels), batch size 8.
- ``gate_convs`` / ``residual_convs`` / ``skip_convs`` are ``nn.Conv2d`` with the original arguments: the original's
  ``nn.Conv1d`` with a ``(1, k)`` kernel (same weight shape) worked on 4-d input in old torch only and raises in
  current torch (the fix of https://github.com/GestaltCogTeam/STEP/pull/55 for the copied model).
- cpu only (``device`` is cpu); ``np.random`` in ``DataLoader.shuffle`` is a ``np.random.RandomState(seed)``
  instance and ``torch.manual_seed(seed)`` is called; the ``from model import *`` / ``util`` modules are inlined.
- ``train_step`` is one iteration of train.py's inner loop (next batch, ``transpose(1, 3)``,
  ``engine.train(trainx, trainy[:,0,:,:])``), shuffling and restarting the iterator at an epoch's end, and returns
  the training loss (``metrics[0]``); ``eval_fn`` is the validation loop's ``engine.eval`` on the validation set.
  Printing, timing, checkpoint saving and the test pass are dropped; 100 epochs are not run.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# ---- model.py ----

class nconv(nn.Module):
    def __init__(self):
        super(nconv,self).__init__()

    def forward(self,x, A):
        x = torch.einsum('ncvl,vw->ncwl',(x,A))
        return x.contiguous()

class linear(nn.Module):
    def __init__(self,c_in,c_out):
        super(linear,self).__init__()
        self.mlp = torch.nn.Conv2d(c_in, c_out, kernel_size=(1, 1), padding=(0,0), stride=(1,1), bias=True)

    def forward(self,x):
        return self.mlp(x)

class gcn(nn.Module):
    def __init__(self,c_in,c_out,dropout,support_len=3,order=2):
        super(gcn,self).__init__()
        self.nconv = nconv()
        c_in = (order*support_len+1)*c_in
        self.mlp = linear(c_in,c_out)
        self.dropout = dropout
        self.order = order

    def forward(self,x,support):
        out = [x]
        for a in support:
            x1 = self.nconv(x,a)
            out.append(x1)
            for k in range(2, self.order + 1):
                x2 = self.nconv(x1,a)
                out.append(x2)
                x1 = x2

        h = torch.cat(out,dim=1)
        h = self.mlp(h)
        h = F.dropout(h, self.dropout, training=self.training)
        return h


class gwnet(nn.Module):
    def __init__(self, device, num_nodes, dropout=0.3, supports=None, gcn_bool=True, addaptadj=True, aptinit=None, in_dim=2,out_dim=12,residual_channels=32,dilation_channels=32,skip_channels=256,end_channels=512,kernel_size=2,blocks=4,layers=2):
        super(gwnet, self).__init__()
        self.dropout = dropout
        self.blocks = blocks
        self.layers = layers
        self.gcn_bool = gcn_bool
        self.addaptadj = addaptadj

        self.filter_convs = nn.ModuleList()
        self.gate_convs = nn.ModuleList()
        self.residual_convs = nn.ModuleList()
        self.skip_convs = nn.ModuleList()
        self.bn = nn.ModuleList()
        self.gconv = nn.ModuleList()

        self.start_conv = nn.Conv2d(in_channels=in_dim,
                                    out_channels=residual_channels,
                                    kernel_size=(1,1))
        self.supports = supports

        receptive_field = 1

        self.supports_len = 0
        if supports is not None:
            self.supports_len += len(supports)

        if gcn_bool and addaptadj:
            if aptinit is None:
                if supports is None:
                    self.supports = []
                self.nodevec1 = nn.Parameter(torch.randn(num_nodes, 10).to(device), requires_grad=True).to(device)
                self.nodevec2 = nn.Parameter(torch.randn(10, num_nodes).to(device), requires_grad=True).to(device)
                self.supports_len +=1
            else:
                if supports is None:
                    self.supports = []
                m, p, n = torch.svd(aptinit)
                initemb1 = torch.mm(m[:, :10], torch.diag(p[:10] ** 0.5))
                initemb2 = torch.mm(torch.diag(p[:10] ** 0.5), n[:, :10].t())
                self.nodevec1 = nn.Parameter(initemb1, requires_grad=True).to(device)
                self.nodevec2 = nn.Parameter(initemb2, requires_grad=True).to(device)
                self.supports_len += 1




        for b in range(blocks):
            additional_scope = kernel_size - 1
            new_dilation = 1
            for i in range(layers):
                # dilated convolutions
                self.filter_convs.append(nn.Conv2d(in_channels=residual_channels,
                                                   out_channels=dilation_channels,
                                                   kernel_size=(1,kernel_size),dilation=new_dilation))

                self.gate_convs.append(nn.Conv2d(in_channels=residual_channels,
                                                 out_channels=dilation_channels,
                                                 kernel_size=(1, kernel_size), dilation=new_dilation))

                # 1x1 convolution for residual connection
                self.residual_convs.append(nn.Conv2d(in_channels=dilation_channels,
                                                     out_channels=residual_channels,
                                                     kernel_size=(1, 1)))

                # 1x1 convolution for skip connection
                self.skip_convs.append(nn.Conv2d(in_channels=dilation_channels,
                                                 out_channels=skip_channels,
                                                 kernel_size=(1, 1)))
                self.bn.append(nn.BatchNorm2d(residual_channels))
                new_dilation *=2
                receptive_field += additional_scope
                additional_scope *= 2
                if self.gcn_bool:
                    self.gconv.append(gcn(dilation_channels,residual_channels,dropout,support_len=self.supports_len))



        self.end_conv_1 = nn.Conv2d(in_channels=skip_channels,
                                  out_channels=end_channels,
                                  kernel_size=(1,1),
                                  bias=True)

        self.end_conv_2 = nn.Conv2d(in_channels=end_channels,
                                    out_channels=out_dim,
                                    kernel_size=(1,1),
                                    bias=True)

        self.receptive_field = receptive_field



    def forward(self, input):
        in_len = input.size(3)
        if in_len<self.receptive_field:
            x = nn.functional.pad(input,(self.receptive_field-in_len,0,0,0))
        else:
            x = input
        x = self.start_conv(x)
        skip = 0

        # calculate the current adaptive adj matrix once per iteration
        new_supports = None
        if self.gcn_bool and self.addaptadj and self.supports is not None:
            adp = F.softmax(F.relu(torch.mm(self.nodevec1, self.nodevec2)), dim=1)
            new_supports = self.supports + [adp]

        # WaveNet layers
        for i in range(self.blocks * self.layers):

            #            |----------------------------------------|     *residual*
            #            |                                        |
            #            |    |-- conv -- tanh --|                |
            # -> dilate -|----|                  * ----|-- 1x1 -- + -->	*input*
            #                 |-- conv -- sigm --|     |
            #                                         1x1
            #                                          |
            # ---------------------------------------> + ------------->	*skip*

            residual = x
            # dilated convolution
            filter = self.filter_convs[i](residual)
            filter = torch.tanh(filter)
            gate = self.gate_convs[i](residual)
            gate = torch.sigmoid(gate)
            x = filter * gate

            # parametrized skip connection

            s = x
            s = self.skip_convs[i](s)
            try:
                skip = skip[:, :, :,  -s.size(3):]
            except:
                skip = 0
            skip = s + skip


            if self.gcn_bool and self.supports is not None:
                if self.addaptadj:
                    x = self.gconv[i](x, new_supports)
                else:
                    x = self.gconv[i](x,self.supports)
            else:
                x = self.residual_convs[i](x)

            x = x + residual[:, :, :, -x.size(3):]


            x = self.bn[i](x)

        x = F.relu(skip)
        x = F.relu(self.end_conv_1(x))
        x = self.end_conv_2(x)
        return x


# ---- util.py ----

class DataLoader(object):
    def __init__(self, xs, ys, batch_size, pad_with_last_sample=True, rng=None):
        self.batch_size = batch_size
        self.current_ind = 0
        if pad_with_last_sample:
            num_padding = (batch_size - (len(xs) % batch_size)) % batch_size
            x_padding = np.repeat(xs[-1:], num_padding, axis=0)
            y_padding = np.repeat(ys[-1:], num_padding, axis=0)
            xs = np.concatenate([xs, x_padding], axis=0)
            ys = np.concatenate([ys, y_padding], axis=0)
        self.size = len(xs)
        self.num_batch = int(self.size // self.batch_size)
        self.xs = xs
        self.ys = ys
        self.np_random = rng

    def shuffle(self):
        permutation = self.np_random.permutation(self.size)
        xs, ys = self.xs[permutation], self.ys[permutation]
        self.xs = xs
        self.ys = ys

    def get_iterator(self):
        self.current_ind = 0

        def _wrapper():
            while self.current_ind < self.num_batch:
                start_ind = self.batch_size * self.current_ind
                end_ind = min(self.size, self.batch_size * (self.current_ind + 1))
                x_i = self.xs[start_ind: end_ind, ...]
                y_i = self.ys[start_ind: end_ind, ...]
                yield (x_i, y_i)
                self.current_ind += 1

        return _wrapper()

class StandardScaler():
    """
    Standard the input
    """

    def __init__(self, mean, std):
        self.mean = mean
        self.std = std

    def transform(self, data):
        return (data - self.mean) / self.std

    def inverse_transform(self, data):
        return (data * self.std) + self.mean


def asym_adj(adj):
    adj = sp.coo_matrix(adj)
    rowsum = np.array(adj.sum(1)).flatten()
    d_inv = np.power(rowsum, -1).flatten()
    d_inv[np.isinf(d_inv)] = 0.
    d_mat= sp.diags(d_inv)
    return d_mat.dot(adj).astype(np.float32).todense()


def masked_mse(preds, labels, null_val=np.nan):
    if np.isnan(null_val):
        mask = ~torch.isnan(labels)
    else:
        mask = (labels!=null_val)
    mask = mask.float()
    mask /= torch.mean((mask))
    mask = torch.where(torch.isnan(mask), torch.zeros_like(mask), mask)
    loss = (preds-labels)**2
    loss = loss * mask
    loss = torch.where(torch.isnan(loss), torch.zeros_like(loss), loss)
    return torch.mean(loss)

def masked_rmse(preds, labels, null_val=np.nan):
    return torch.sqrt(masked_mse(preds=preds, labels=labels, null_val=null_val))


def masked_mae(preds, labels, null_val=np.nan):
    if np.isnan(null_val):
        mask = ~torch.isnan(labels)
    else:
        mask = (labels!=null_val)
    mask = mask.float()
    mask /=  torch.mean((mask))
    mask = torch.where(torch.isnan(mask), torch.zeros_like(mask), mask)
    loss = torch.abs(preds-labels)
    loss = loss * mask
    loss = torch.where(torch.isnan(loss), torch.zeros_like(loss), loss)
    return torch.mean(loss)


def masked_mape(preds, labels, null_val=np.nan):
    if np.isnan(null_val):
        mask = ~torch.isnan(labels)
    else:
        mask = (labels!=null_val)
    mask = mask.float()
    mask /=  torch.mean((mask))
    mask = torch.where(torch.isnan(mask), torch.zeros_like(mask), mask)
    loss = torch.abs(preds-labels)/labels
    loss = loss * mask
    loss = torch.where(torch.isnan(loss), torch.zeros_like(loss), loss)
    return torch.mean(loss)


# ---- engine.py ----

class trainer():
    def __init__(self, scaler, in_dim, seq_length, num_nodes, nhid , dropout, lrate, wdecay, device, supports, gcn_bool, addaptadj, aptinit, bug=None):
        self.model = gwnet(device, num_nodes, dropout, supports=supports, gcn_bool=gcn_bool, addaptadj=addaptadj, aptinit=aptinit, in_dim=in_dim, out_dim=seq_length, residual_channels=nhid, dilation_channels=nhid, skip_channels=nhid * 8, end_channels=nhid * 16)
        self.model.to(device)
        self.optimizer = optim.Adam(self.model.parameters(), lr=lrate, weight_decay=wdecay)
        self.loss = masked_mae
        self.scaler = scaler
        self.clip = 5
        self.bug = bug

    def train(self, input, real_val):
        self.model.train()
        self.optimizer.zero_grad()
        input = nn.functional.pad(input,(1,0,0,0))
        output = self.model(input)
        output = output.transpose(1,3)
        #output = [batch_size,12,num_nodes,1]
        real = torch.unsqueeze(real_val,dim=1)
        predict = self.scaler.inverse_transform(output)

        loss = self.loss(predict, real, 0.0)
        loss.backward()
        if self.bug == "clip_after_step":
            self.optimizer.step()
            if self.clip is not None:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        else:
            if self.clip is not None:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            self.optimizer.step()
        mape = masked_mape(predict,real,0.0).item()
        rmse = masked_rmse(predict,real,0.0).item()
        return loss.item(),mape,rmse

    def eval(self, input, real_val):
        self.model.eval()
        input = nn.functional.pad(input,(1,0,0,0))
        output = self.model(input)
        output = output.transpose(1,3)
        #output = [batch_size,12,num_nodes,1]
        real = torch.unsqueeze(real_val,dim=1)
        predict = self.scaler.inverse_transform(output)
        loss = self.loss(predict, real, 0.0)
        mape = masked_mape(predict,real,0.0).item()
        rmse = masked_rmse(predict,real,0.0).item()
        return loss.item(),mape,rmse


# ---- the synthetic sensor data (stands for METR-LA, generate_training_data.py's windows) ----

class args:
    """train.py's defaults with ``--gcn_bool --adjtype doubletransition --addaptadj --randomadj``; sizes shrunk."""
    device = "cpu"
    gcn_bool = True
    aptonly = False
    addaptadj = True
    randomadj = True
    seq_length = 12
    nhid = 8
    in_dim = 2
    num_nodes = 8
    batch_size = 8
    learning_rate = 0.001
    dropout = 0.3
    weight_decay = 0.0001


N_TIMES, PERIOD = 600, 48


def synthetic_traffic(seed):
    rng = np.random.RandomState(seed)
    n = args.num_nodes
    ring = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    ring = np.minimum(ring, n - ring)
    adj_mx = np.exp(-(ring ** 2) / 2.0).astype(np.float32)
    t = np.arange(N_TIMES)
    phase = rng.uniform(0, 2 * np.pi, size=n)
    speed = 55 + 12 * np.sin(2 * np.pi * t[:, None] / PERIOD + phase[None, :])
    speed = speed @ (adj_mx / adj_mx.sum(0, keepdims=True))
    speed = speed + rng.normal(0, 1.0, size=speed.shape)
    time_in_day = np.tile(((t % PERIOD) / PERIOD)[:, None], [1, n])
    data = np.stack([speed, time_in_day], axis=-1).astype(np.float32)   # [T, N, 2]
    x_offsets = np.arange(-(args.seq_length - 1), 1, 1)
    y_offsets = np.arange(1, args.seq_length + 1, 1)
    x, y = [], []
    for s in range(abs(min(x_offsets)), N_TIMES - abs(max(y_offsets))):
        x.append(data[s + x_offsets, ...])
        y.append(data[s + y_offsets, ...])
    x, y = np.stack(x), np.stack(y)
    num_test, num_train = round(len(x) * 0.2), round(len(x) * 0.7)
    num_val = len(x) - num_test - num_train
    splits = {"train": slice(0, num_train), "val": slice(num_train, num_train + num_val),
              "test": slice(num_train + num_val, None)}
    return adj_mx, {k: (x[v], y[v]) for k, v in splits.items()}


def load_dataset(windows, batch_size, valid_batch_size, test_batch_size, rng):
    data = {}
    for category in ['train', 'val', 'test']:
        data['x_' + category] = windows[category][0].copy()
        data['y_' + category] = windows[category][1].copy()
    scaler = StandardScaler(mean=data['x_train'][..., 0].mean(), std=data['x_train'][..., 0].std())
    # Data format
    for category in ['train', 'val', 'test']:
        data['x_' + category][..., 0] = scaler.transform(data['x_' + category][..., 0])
    data['train_loader'] = DataLoader(data['x_train'], data['y_train'], batch_size, rng=rng)
    data['val_loader'] = DataLoader(data['x_val'], data['y_val'], valid_batch_size, rng=rng)
    data['test_loader'] = DataLoader(data['x_test'], data['y_test'], test_batch_size, rng=rng)
    data['scaler'] = scaler
    return data


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    device = torch.device(args.device)
    adj_raw, windows = synthetic_traffic(seed)
    adj_mx = [asym_adj(adj_raw), asym_adj(np.transpose(adj_raw))]
    dataloader = load_dataset(windows, args.batch_size, args.batch_size, args.batch_size, rng)
    scaler = dataloader['scaler']
    supports = [torch.tensor(i).to(device) for i in adj_mx]

    if args.randomadj:
        adjinit = None
    else:
        adjinit = supports[0]

    if args.aptonly:
        supports = None

    engine = trainer(scaler, args.in_dim, args.seq_length, args.num_nodes, args.nhid, args.dropout,
                     args.learning_rate, args.weight_decay, device, supports, args.gcn_bool, args.addaptadj,
                     adjinit, bug=bug)

    def target_of(trainy):
        if bug == "target_time_in_day_channel":
            return trainy[:,1,:,:]
        return trainy[:,0,:,:]

    state = {"it": None}

    def next_batch():
        while True:
            if state["it"] is None:
                dataloader['train_loader'].shuffle()
                state["it"] = dataloader['train_loader'].get_iterator()
            try:
                return next(state["it"])
            except StopIteration:
                state["it"] = None

    def train_step():
        x, y = next_batch()
        trainx = torch.Tensor(x).to(device)
        trainx= trainx.transpose(1, 3)
        trainy = torch.Tensor(y).to(device)
        trainy = trainy.transpose(1, 3)
        metrics = engine.train(trainx, target_of(trainy))
        return metrics[0]

    def eval_fn(model, batch):
        valid_loss = []
        with torch.no_grad():
            for iter, (x, y) in enumerate(dataloader['val_loader'].get_iterator()):
                testx = torch.Tensor(x).to(device)
                testx = testx.transpose(1, 3)
                testy = torch.Tensor(y).to(device)
                testy = testy.transpose(1, 3)
                metrics = engine.eval(testx, testy[:,0,:,:])
                valid_loss.append(metrics[0])
        return float(np.mean(valid_loss))

    x0, y0 = next(DataLoader(dataloader['x_train'], dataloader['y_train'], args.batch_size).get_iterator())
    bx = nn.functional.pad(torch.Tensor(x0).transpose(1, 3), (1, 0, 0, 0))
    by = target_of(torch.Tensor(y0).transpose(1, 3))

    def loss_fn(output, real_val):
        predict = scaler.inverse_transform(output.transpose(1, 3))
        return masked_mae(predict, torch.unsqueeze(real_val, dim=1), 0.0)

    return Program(name="graphwavenet_traffic", model=engine.model, batch=(bx, by), loss_fn=loss_fn,
                   optimizer=engine.optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the target is sliced from the time-in-day channel (``trainy[:,1,:,:]``) instead of the speed channel
    # (``trainy[:,0,:,:]``): the model learns to forecast the clock (classic channel-index slip).
    Bug("target_time_in_day_channel", functools.partial(_build, bug="target_time_in_day_channel"),
        "learning_ledger", ("TASK",)),
    # ``clip_grad_norm_`` runs after ``optimizer.step()``: the update uses the unclipped gradients (classic).
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]

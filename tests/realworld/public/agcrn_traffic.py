# ruff: noqa: PLR0402, UP008, UP034
"""AGCRN (adaptive graph convolutional recurrent network) for traffic forecasting, from LeiBAI/AGCRN.

Source: https://github.com/LeiBAI/AGCRN
Commit: 7fbbf2aeb099242098a3cf482b55cd45d7295c28
Files: ``model/AGCN.py``, ``model/AGCRNCell.py``, ``model/AGCRN.py``, ``model/Run.py``, ``model/BasicTrainer.py``,
``model/PEMSD4_AGCRN.conf``, ``lib/dataloader.py``, ``lib/add_window.py``, ``lib/normalization.py``,
``lib/metrics.py``, ``lib/TrainInits.py``
License: MIT (Copyright (c) 2024 LeiBAI; full text in LICENSES/LeiBAI-AGCRN.txt)
Domain: GNN, spatio-temporal (graph learned from node embeddings, Chebyshev-style supports, node-adaptive weights
inside GRU cells, multi-step traffic-flow forecasting)

Kept as written: ``AVWGCN`` (supports ``softmax(relu(E E^T))``, the identity and Chebyshev stack, weights and bias
from the node embeddings through ``weights_pool`` / ``bias_pool``, the einsums), ``AGCRNCell`` (gate and update
graph convolutions, GRU-style state), ``AVWDCRNN`` (stacked cells over time), ``AGCRN`` (learned
``node_embeddings``, last hidden state through the ``end_conv`` predictor to ``horizon`` steps), ``Run.py``'s
init (xavier_uniform for matrices, uniform for vectors) and its optimizer (Adam lr 0.003, eps 1e-8), the PEMSD4
configuration (lag 12, horizon 12, embed_dim 10, rnn_units 64, num_layers 2, cheb_order 2, loss ``mae``, std
normalizer over the whole table, val/test ratio 0.2, real_value True: the label is inverse-transformed and the
model predicts real values, no clipping, no lr decay), ``Add_Window_Horizon`` (``single=False``), ``data_loader``
(shuffled, drop_last), ``split_data_by_ratio``, ``StandardScaler`` and ``Trainer.train_epoch``'s loop body and
``val_epoch``.

Deviations from the original:
- the PEMSD4 table (307 sensors, 16992 five-minute steps) is not here: the data is a synthetic flow table made from
  ``seed`` with 20 sensors and 1200 steps (a daily cycle of 288 steps with a per-sensor phase and level, plus noise
  that diffuses between ring neighbours), shape ``[T, N, 1]`` like ``load_st_dataset``'s output.
- ``batch_size`` 64 -> 32 (2 CPU cores).
- ``DEVICE`` is the CPU: ``output.cuda()`` in the loss calls is ``output``; ``data_loader`` builds CPU tensors.
- ``train_epoch`` is not run an epoch at a time: ``train_step`` is one batch of its loop (the loader's epoch
  restarting when it runs out, ``model.train()`` at an epoch's start), returning the batch's loss; logging,
  checkpoints, early stopping and the test pass are dropped; the loader draws with a ``torch.Generator`` seeded
  from ``seed``.
- ``args`` is a plain namespace holding the configuration's values.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

_BUG = {"name": None}


# ----------------------------------------------------------------------------------------------- model/AGCN.py
class AVWGCN(nn.Module):
    def __init__(self, dim_in, dim_out, cheb_k, embed_dim):
        super(AVWGCN, self).__init__()
        self.cheb_k = cheb_k
        self.weights_pool = nn.Parameter(torch.FloatTensor(embed_dim, cheb_k, dim_in, dim_out))
        self.bias_pool = nn.Parameter(torch.FloatTensor(embed_dim, dim_out))
        self.bug = _BUG["name"]

    def forward(self, x, node_embeddings):
        #x shaped[B, N, C], node_embeddings shaped [N, D] -> supports shaped [N, N]
        #output shape [B, N, C]
        node_num = node_embeddings.shape[0]
        supports = F.softmax(F.relu(torch.mm(node_embeddings, node_embeddings.transpose(0, 1))), dim=1)
        support_set = [torch.eye(node_num).to(supports.device), supports]
        #default cheb_k = 3
        for k in range(2, self.cheb_k):
            support_set.append(torch.matmul(2 * supports, support_set[-1]) - support_set[-2])
        supports = torch.stack(support_set, dim=0)
        weights = torch.einsum('nd,dkio->nkio', node_embeddings, self.weights_pool)  #N, cheb_k, dim_in, dim_out
        bias = torch.matmul(node_embeddings, self.bias_pool)                       #N, dim_out
        x_g = torch.einsum("knm,bmc->bknc", supports, x)      #B, cheb_k, N, dim_in
        if self.bug == "supports_reshaped_not_permuted":
            x_g = x_g.reshape(x_g.shape[0], x_g.shape[2], x_g.shape[1], x_g.shape[3])
        else:
            x_g = x_g.permute(0, 2, 1, 3)  # B, N, cheb_k, dim_in
        x_gconv = torch.einsum('bnki,nkio->bno', x_g, weights) + bias     #b, N, dim_out
        return x_gconv


# ----------------------------------------------------------------------------------------------- model/AGCRNCell.py
class AGCRNCell(nn.Module):
    def __init__(self, node_num, dim_in, dim_out, cheb_k, embed_dim):
        super(AGCRNCell, self).__init__()
        self.node_num = node_num
        self.hidden_dim = dim_out
        self.gate = AVWGCN(dim_in+self.hidden_dim, 2*dim_out, cheb_k, embed_dim)
        self.update = AVWGCN(dim_in+self.hidden_dim, dim_out, cheb_k, embed_dim)

    def forward(self, x, state, node_embeddings):
        #x: B, num_nodes, input_dim
        #state: B, num_nodes, hidden_dim
        state = state.to(x.device)
        input_and_state = torch.cat((x, state), dim=-1)
        z_r = torch.sigmoid(self.gate(input_and_state, node_embeddings))
        z, r = torch.split(z_r, self.hidden_dim, dim=-1)
        candidate = torch.cat((x, z*state), dim=-1)
        hc = torch.tanh(self.update(candidate, node_embeddings))
        h = r*state + (1-r)*hc
        return h

    def init_hidden_state(self, batch_size):
        return torch.zeros(batch_size, self.node_num, self.hidden_dim)


# ----------------------------------------------------------------------------------------------- model/AGCRN.py
class AVWDCRNN(nn.Module):
    def __init__(self, node_num, dim_in, dim_out, cheb_k, embed_dim, num_layers=1):
        super(AVWDCRNN, self).__init__()
        assert num_layers >= 1, 'At least one DCRNN layer in the Encoder.'
        self.node_num = node_num
        self.input_dim = dim_in
        self.num_layers = num_layers
        self.dcrnn_cells = nn.ModuleList()
        self.dcrnn_cells.append(AGCRNCell(node_num, dim_in, dim_out, cheb_k, embed_dim))
        for _ in range(1, num_layers):
            self.dcrnn_cells.append(AGCRNCell(node_num, dim_out, dim_out, cheb_k, embed_dim))

    def forward(self, x, init_state, node_embeddings):
        #shape of x: (B, T, N, D)
        #shape of init_state: (num_layers, B, N, hidden_dim)
        assert x.shape[2] == self.node_num and x.shape[3] == self.input_dim
        seq_length = x.shape[1]
        current_inputs = x
        output_hidden = []
        for i in range(self.num_layers):
            state = init_state[i]
            inner_states = []
            for t in range(seq_length):
                state = self.dcrnn_cells[i](current_inputs[:, t, :, :], state, node_embeddings)
                inner_states.append(state)
            output_hidden.append(state)
            current_inputs = torch.stack(inner_states, dim=1)
        return current_inputs, output_hidden

    def init_hidden(self, batch_size):
        init_states = []
        for i in range(self.num_layers):
            init_states.append(self.dcrnn_cells[i].init_hidden_state(batch_size))
        return torch.stack(init_states, dim=0)      #(num_layers, B, N, hidden_dim)


class AGCRN(nn.Module):
    def __init__(self, args):
        super(AGCRN, self).__init__()
        self.num_node = args.num_nodes
        self.input_dim = args.input_dim
        self.hidden_dim = args.rnn_units
        self.output_dim = args.output_dim
        self.horizon = args.horizon
        self.num_layers = args.num_layers

        self.default_graph = args.default_graph
        self.node_embeddings = nn.Parameter(torch.randn(self.num_node, args.embed_dim), requires_grad=True)

        self.encoder = AVWDCRNN(args.num_nodes, args.input_dim, args.rnn_units, args.cheb_k,
                                args.embed_dim, args.num_layers)

        #predictor
        self.end_conv = nn.Conv2d(1, args.horizon * self.output_dim, kernel_size=(1, self.hidden_dim), bias=True)

    def forward(self, source, targets, teacher_forcing_ratio=0.5):
        #source: B, T_1, N, D
        #target: B, T_2, N, D
        init_state = self.encoder.init_hidden(source.shape[0])
        output, _ = self.encoder(source, init_state, self.node_embeddings)      #B, T, N, hidden
        output = output[:, -1:, :, :]                                   #B, 1, N, hidden

        #CNN based predictor
        output = self.end_conv((output))                         #B, T*C, N, 1
        output = output.squeeze(-1).reshape(-1, self.horizon, self.output_dim, self.num_node)
        output = output.permute(0, 1, 3, 2)                             #B, T, N, C

        return output


# ----------------------------------------------------------------------------------------------- lib/
class StandardScaler:
    """
    Standard the input
    """

    def __init__(self, mean, std):
        self.mean = mean
        self.std = std

    def transform(self, data):
        return (data - self.mean) / self.std

    def inverse_transform(self, data):
        if type(data) == torch.Tensor and type(self.mean) == np.ndarray:
            self.std = torch.from_numpy(self.std).to(data.device).type(data.dtype)
            self.mean = torch.from_numpy(self.mean).to(data.device).type(data.dtype)
        return (data * self.std) + self.mean


def normalize_dataset(data, normalizer, column_wise=False):
    if normalizer == 'std':
        if column_wise:
            mean = data.mean(axis=0, keepdims=True)
            std = data.std(axis=0, keepdims=True)
        else:
            mean = data.mean()
            std = data.std()
        scaler = StandardScaler(mean, std)
        data = scaler.transform(data)
    else:
        raise ValueError
    return data, scaler


def split_data_by_ratio(data, val_ratio, test_ratio):
    data_len = data.shape[0]
    test_data = data[-int(data_len*test_ratio):]
    val_data = data[-int(data_len*(test_ratio+val_ratio)):-int(data_len*test_ratio)]
    train_data = data[:-int(data_len*(test_ratio+val_ratio))]
    return train_data, val_data, test_data


def Add_Window_Horizon(data, window=3, horizon=1, single=False):
    '''
    :param data: shape [B, ...]
    :param window:
    :param horizon:
    :return: X is [B, W, ...], Y is [B, H, ...]
    '''
    length = len(data)
    end_index = length - horizon - window + 1
    X = []      #windows
    Y = []      #horizon
    index = 0
    if single:
        while index < end_index:
            X.append(data[index:index+window])
            Y.append(data[index+window+horizon-1:index+window+horizon])
            index = index + 1
    else:
        while index < end_index:
            X.append(data[index:index+window])
            if _BUG["name"] == "horizon_overlaps_window":
                Y.append(data[index+window-1:index+window-1+horizon])
            else:
                Y.append(data[index+window:index+window+horizon])
            index = index + 1
    X = np.array(X)
    Y = np.array(Y)
    return X, Y


def data_loader(X, Y, batch_size, shuffle=True, drop_last=True, generator=None):
    TensorFloat = torch.FloatTensor
    X, Y = TensorFloat(X), TensorFloat(Y)
    data = torch.utils.data.TensorDataset(X, Y)
    dataloader = torch.utils.data.DataLoader(data, batch_size=batch_size,
                                             shuffle=shuffle, drop_last=drop_last, generator=generator)
    return dataloader


def MAE_torch(pred, true, mask_value=None):
    if mask_value != None:
        mask = torch.gt(true, mask_value)
        pred = torch.masked_select(pred, mask)
        true = torch.masked_select(true, mask)
    return torch.mean(torch.abs(true-pred))


def synthetic_flow(seed, steps=1200, nodes=20):
    """(port) a PEMS-like flow table [T, N, 1]: daily cycle, per-sensor phase and level, ring-diffused noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)[:, None]
    phase = rng.uniform(0, 2 * np.pi, size=(1, nodes))
    level = rng.uniform(150, 300, size=(1, nodes))
    noise = np.zeros((steps, nodes))
    for i in range(1, steps):
        prev = noise[i - 1]
        noise[i] = 0.6 * prev + 0.2 * (np.roll(prev, 1) + np.roll(prev, -1)) * 0.5 + rng.normal(0, 10, nodes)
    flow = level + 0.5 * level * np.sin(2 * np.pi * t / 288 + phase) + noise
    return np.maximum(flow, 0.0)[:, :, None].astype(np.float32)


def _args():
    return types.SimpleNamespace(
        dataset="PEMSD4", num_nodes=20, lag=12, horizon=12, val_ratio=0.2, test_ratio=0.2, tod=False,
        normalizer="std", column_wise=False, default_graph=True,
        input_dim=1, output_dim=1, embed_dim=10, rnn_units=64, num_layers=2, cheb_k=2,
        loss_func="mae", seed=10, batch_size=32, epochs=100, lr_init=0.003, lr_decay=False, lr_decay_rate=0.3,
        lr_decay_step="5,20,40,70", early_stop=True, early_stop_patience=15, grad_norm=False, max_grad_norm=5,
        teacher_forcing=False, real_value=True, mae_thresh=None, mape_thresh=0.)


def _build(seed, bug=None):
    _BUG["name"] = bug
    try:
        return _build_inner(seed, bug)
    finally:
        _BUG["name"] = None


def _build_inner(seed, bug):
    args = _args()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

    #init model
    model = AGCRN(args)  # Network = AGCRN in Run.py
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
        else:
            nn.init.uniform_(p)

    #load dataset (get_dataloader with single=False)
    data = synthetic_flow(seed, nodes=args.num_nodes)
    data, scaler = normalize_dataset(data, args.normalizer, args.column_wise)
    data_train, data_val, _data_test = split_data_by_ratio(data, args.val_ratio, args.test_ratio)
    x_tra, y_tra = Add_Window_Horizon(data_train, args.lag, args.horizon, False)
    x_val, y_val = Add_Window_Horizon(data_val, args.lag, args.horizon, False)
    g = torch.Generator().manual_seed(seed)
    train_loader = data_loader(x_tra, y_tra, args.batch_size, shuffle=True, drop_last=True, generator=g)
    val_loader = data_loader(x_val, y_val, args.batch_size, shuffle=False, drop_last=True)

    loss = torch.nn.L1Loss()
    optimizer = torch.optim.Adam(params=model.parameters(), lr=args.lr_init, eps=1.0e-8,
                                 weight_decay=0, amsgrad=False)

    state = {"it": None}

    def train_step():
        # one batch of Trainer.train_epoch
        if state["it"] is None:
            model.train()
            state["it"] = iter(train_loader)
        try:
            data, target = next(state["it"])
        except StopIteration:
            model.train()
            state["it"] = iter(train_loader)
            data, target = next(state["it"])
        data = data[..., :args.input_dim]
        label = target[..., :args.output_dim]  # (..., 1)
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()

        teacher_forcing_ratio = 1.
        #data and target shape: B, T, N, F; output shape: B, T, N, F
        output = model(data, target, teacher_forcing_ratio=teacher_forcing_ratio)
        if args.real_value:
            label = scaler.inverse_transform(label)
        loss_v = loss(output, label)
        loss_v.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()

        # add max grad clipping
        if args.grad_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        return loss_v.item()

    def val_epoch(model, _batch=None):
        model.eval()
        total_val_loss = 0

        with torch.no_grad():
            for batch_idx, (data, target) in enumerate(val_loader):
                data = data[..., :args.input_dim]
                label = target[..., :args.output_dim]
                output = model(data, target, teacher_forcing_ratio=0.)
                if args.real_value:
                    label = scaler.inverse_transform(label)
                loss_v = loss(output, label)
                if not torch.isnan(loss_v):
                    total_val_loss += loss_v.item()
        val_loss = total_val_loss / len(val_loader)
        return val_loss

    # the Program's batch: the first training batch's inputs and the label the loss compares with
    xb, yb = torch.FloatTensor(x_tra[:args.batch_size]), torch.FloatTensor(y_tra[:args.batch_size])
    batch = ((xb[..., :args.input_dim], yb), scaler.inverse_transform(yb[..., :args.output_dim]))

    return Program(name="agcrn_traffic", model=model, batch=batch, loss_fn=loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=val_epoch)


build = functools.partial(_build, bug=None)

BUGS = [
    # x_g reshaped [B, k, N, C] -> [B, N, k, C] instead of permuted: each node's supports mix other nodes' features
    # (classic view-for-permute slip).
    Bug("supports_reshaped_not_permuted", functools.partial(_build, bug="supports_reshaped_not_permuted"),
        "tensor_trace", ("encoder.dcrnn_cells.0.gate",)),
    # the horizon starts at the window's last step: the first target is an input (classic off-by-one in
    # Add_Window_Horizon).
    Bug("horizon_overlaps_window", functools.partial(_build, bug="horizon_overlaps_window"), "learning_ledger",
        ("TASK",)),
    # optimizer.zero_grad() moved after loss.backward(): every step applies a zero gradient (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

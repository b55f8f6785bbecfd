# ruff: noqa: F841, PLR0402, RUF059, UP008
"""TranAD (Tuli et al., VLDB 2022): transformer-based anomaly detection for multivariate time series, from
imperial-qore/TranAD: windows of the last 10 observations, a transformer encoder over the window concatenated with a
focus score, two decoders (phase 1 with a zero focus score, phase 2 with the squared phase-1 error as focus score)
reconstructing the window's last observation through a sigmoid head, MSE weighted 1/n vs 1 - 1/n by epoch, AdamW +
StepLR.

Source: https://github.com/imperial-qore/TranAD
Commit: 7ffb98d0c18189cc3d9ab732b4cb0278200a0af0
Files: ``src/models.py`` (``TranAD``), ``src/dlutils.py`` (``PositionalEncoding``, ``TransformerEncoderLayer``,
``TransformerDecoderLayer``), ``main.py`` (``convert_to_windows``, ``load_model``, ``backprop``'s TranAD branch, the
training phase), ``src/constants.py`` (the MBA learning rate), ``preprocess.py`` (``normalize3``, the MBA branch).
License: BSD-3-Clause (Copyright (c) 2022, Shreshth Tuli; full text in LICENSES/imperial-qore-TranAD.txt)
Domain: time series, anomaly detection (multivariate reconstruction, transformer)

Kept as written: ``TranAD`` (``n_window`` 10, ``batch`` 128, d_model ``2 * feats`` with ``nhead=feats``,
``dim_feedforward`` 16, dropout 0.1, one encoder and two decoder layers, ``fcn`` Linear + Sigmoid, the two-phase
``forward``), the dlutils layers (post-residual attention and feed-forward, ``nn.LeakyReLU(True)``, no LayerNorm),
``PositionalEncoding`` (sin + cos summed), ``convert_to_windows`` (the first window padded with the first row),
``load_model``'s ``.double()``, ``AdamW(lr=model.lr, weight_decay=1e-5)`` and ``StepLR(optimizer, 5, 0.9)`` stepped
per epoch, ``backprop``'s TranAD training body (a ``DataLoader`` of the windows without shuffling, ``window =
d.permute(1, 0, 2)``, ``elem = window[-1]``, ``(1 / n) * l(z[0], elem) + (1 - 1/n) * l(z[1], elem)`` with ``n = epoch
+ 1``, zero_grad, ``backward(retain_graph=True)``, step), ``normalize3``'s min-max scaling fitted on the training
split, the MBA learning rate 0.001.

Deviations from the original:
- the MIT-BIH Supraventricular Arrhythmia data (``data/MBA/*.xlsx``, 2 ECG channels) is replaced by a synthetic
  two-channel ECG-like series made from ``seed`` (a heartbeat pulse train with a jittered period, the second channel
  a delayed, rescaled copy, plus noise), 1280 training rows and 320 test rows with a few injected anomalies (flat or
  spiked beats); ``normalize3`` scales both as written.
- main.py's five-epoch loop is not run as a whole: ``train_step`` is one batch of ``backprop``'s training loop (the
  epoch counter, and ``scheduler.step()``, advance when the windows are used up) and returns the batch loss. The
  test phase's ``backprop(..., training=False)`` (the second decoder's per-feature MSE on the test windows) is the
  Program's ``eval_fn``, returning the mean reconstruction error on normal and on anomalous rows. POT thresholding,
  plotting, tqdm, checkpoints (``load_model``'s
  checkpoint branch) and the other models are dropped.
- torch >= 2 passes ``is_causal`` / ``tgt_is_causal`` / ``memory_is_causal`` to the layers of
  ``nn.TransformerEncoder`` / ``nn.TransformerDecoder``: the dlutils layers' ``forward`` accept (and ignore) them.
- ``torch.manual_seed(seed)`` replaces models.py's ``torch.manual_seed(1)``; ``args.model`` / ``args.dataset`` are
  fixed to TranAD / MBA; tabs are written as four spaces; the device is the CPU.
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
from torch.nn import TransformerDecoder, TransformerEncoder
from torch.utils.data import DataLoader, TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

lr = 0.001  # src/constants.py, lr_d['MBA']
SELF_CHECK_STEPS = 60  # (port) six epochs of 10 batches: the loss falls per epoch, batches differ within one
N_TRAIN, N_TEST, FEATS = 1280, 320, 2  # (port) synthetic series


class args:  # (port) the command line
    model = 'TranAD'
    dataset = 'MBA'


# ---- src/dlutils.py
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)

        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model).float() * (-math.log(10000.0) / d_model))
        pe += torch.sin(position * div_term)
        pe += torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer('pe', pe)

    def forward(self, x, pos=0):
        x = x + self.pe[pos:pos+x.size(0), :]
        return self.dropout(x)


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=16, dropout=0):
        super(TransformerEncoderLayer, self).__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

        self.activation = nn.LeakyReLU(True)

    def forward(self, src,src_mask=None, src_key_padding_mask=None, is_causal=False):
        src2 = self.self_attn(src, src, src)[0]
        src = src + self.dropout1(src2)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
        src = src + self.dropout2(src2)
        return src


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=16, dropout=0):
        super(TransformerDecoderLayer, self).__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

        self.activation = nn.LeakyReLU(True)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal=False, memory_is_causal=False):
        tgt2 = self.self_attn(tgt, tgt, tgt)[0]
        tgt = tgt + self.dropout1(tgt2)
        tgt2 = self.multihead_attn(tgt, memory, memory)[0]
        tgt = tgt + self.dropout2(tgt2)
        tgt2 = self.linear2(self.dropout(self.activation(self.linear1(tgt))))
        tgt = tgt + self.dropout3(tgt2)
        return tgt


# ---- src/models.py
class TranAD(nn.Module):
    def __init__(self, feats):
        super(TranAD, self).__init__()
        self.name = 'TranAD'
        self.lr = lr
        self.batch = 128
        self.n_feats = feats
        self.n_window = 10
        self.n = self.n_feats * self.n_window
        self.pos_encoder = PositionalEncoding(2 * feats, 0.1, self.n_window)
        encoder_layers = TransformerEncoderLayer(d_model=2 * feats, nhead=feats, dim_feedforward=16, dropout=0.1)
        self.transformer_encoder = TransformerEncoder(encoder_layers, 1)
        decoder_layers1 = TransformerDecoderLayer(d_model=2 * feats, nhead=feats, dim_feedforward=16, dropout=0.1)
        self.transformer_decoder1 = TransformerDecoder(decoder_layers1, 1)
        decoder_layers2 = TransformerDecoderLayer(d_model=2 * feats, nhead=feats, dim_feedforward=16, dropout=0.1)
        self.transformer_decoder2 = TransformerDecoder(decoder_layers2, 1)
        self.fcn = nn.Sequential(nn.Linear(2 * feats, feats), nn.Sigmoid())

    def encode(self, src, c, tgt):
        src = torch.cat((src, c), dim=2)
        src = src * math.sqrt(self.n_feats)
        src = self.pos_encoder(src)
        memory = self.transformer_encoder(src)
        tgt = tgt.repeat(1, 1, 2)
        return tgt, memory

    def forward(self, src, tgt):
        # Phase 1 - Without anomaly scores
        c = torch.zeros_like(src)
        x1 = self.fcn(self.transformer_decoder1(*self.encode(src, c, tgt)))
        # Phase 2 - With anomaly scores
        c = (x1 - src) ** 2
        x2 = self.fcn(self.transformer_decoder2(*self.encode(src, c, tgt)))
        return x1, x2


# ---- preprocess.py
def normalize3(a, min_a = None, max_a = None):
    if min_a is None: min_a, max_a = np.min(a, axis = 0), np.max(a, axis = 0)
    return (a - min_a) / (max_a - min_a + 0.0001), min_a, max_a


def synthetic_mba(seed):
    """(port) two ECG-like channels: a pulse train with a jittered period, the second a delayed rescaled copy."""
    rng = np.random.default_rng(seed)
    n = N_TRAIN + N_TEST
    t = np.arange(n, dtype=np.float64)
    beats = np.cumsum(rng.uniform(22, 28, size=n // 20))
    ch1 = np.zeros(n)
    for b in beats:
        ch1 += 1.5 * np.exp(-0.5 * ((t - b) / 1.2) ** 2) - 0.3 * np.exp(-0.5 * ((t - b - 6) / 3.0) ** 2)
    ch2 = 0.7 * np.roll(ch1, 3) + 0.2 * np.sin(2 * np.pi * t / 200)
    x = np.stack([ch1, ch2], axis=1) + 0.03 * rng.normal(size=(n, FEATS))
    train, test = x[:N_TRAIN], x[N_TRAIN:].copy()
    labels = np.zeros_like(test)
    for start in rng.choice(np.arange(20, N_TEST - 30), size=3, replace=False):
        test[start:start + 10] = test[start:start + 10] * 0.1 + rng.uniform(-1, 2)
        labels[start:start + 10, :] = 1
    train, min_a, max_a = normalize3(train)
    test, _, _ = normalize3(test, min_a, max_a)
    return train, test, labels


# ---- main.py
def convert_to_windows(data, model):
    windows = []; w_size = model.n_window
    for i, g in enumerate(data):
        if i >= w_size: w = data[i-w_size:i]
        else: w = torch.cat([data[0].repeat(w_size-i, 1), data[0:i]])
        windows.append(w if 'TranAD' in args.model or 'Attention' in args.model else w.view(-1))
    return torch.stack(windows)


def load_model(modelname, dims):
    model = TranAD(dims).double()
    optimizer = torch.optim.AdamW(model.parameters() , lr=model.lr, weight_decay=1e-5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 5, 0.9)
    epoch = -1; accuracy_list = []
    return model, optimizer, scheduler, epoch, accuracy_list


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train, test, labels = synthetic_mba(seed)
    model, optimizer, scheduler, epoch, accuracy_list = load_model(args.model, labels.shape[1])

    ## Prepare data
    trainD, testD = torch.from_numpy(train), torch.from_numpy(test)
    trainO, testO = trainD, testD
    trainD, testD = convert_to_windows(trainD, model), convert_to_windows(testD, model)

    feats = trainO.shape[1]
    l = nn.MSELoss(reduction = 'none')
    state = {"e": epoch + 1, "it": None}

    def windows_of(d, local_bs):
        if bug == "window_viewed_not_permuted":
            return d.view(d.shape[1], local_bs, feats)
        return d.permute(1, 0, 2)

    def last_of(window, local_bs):
        if bug == "elem_from_window_start":
            return window[0, :, :].view(1, local_bs, feats)
        return window[-1, :, :].view(1, local_bs, feats)

    def train_step():
        """One batch of backprop's TranAD training loop (training=True)."""
        if state["it"] is not None:
            d = next(state["it"], None)
            if d is None:  # the epoch's end
                scheduler.step()
                state["e"] += 1
                state["it"] = None
        if state["it"] is None:
            data_x = torch.DoubleTensor(trainD); dataset = TensorDataset(data_x, data_x)
            bs = model.batch
            dataloader = DataLoader(dataset, batch_size = bs)
            state["it"] = iter(dataloader)
            d = next(state["it"])
        d = d[0]
        n = state["e"] + 1
        local_bs = d.shape[0]
        window = windows_of(d, local_bs)
        elem = last_of(window, local_bs)
        z = model(window, elem)
        l1 = l(z, elem) if not isinstance(z, tuple) else (1 / n) * l(z[0], elem) + (1 - 1/n) * l(z[1], elem)
        if isinstance(z, tuple): z = z[1]
        loss = torch.mean(l1)
        if bug == "zero_grad_after_backward":
            loss.backward(retain_graph=True)
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward(retain_graph=True)
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        """The test phase: backprop(training=False)'s per-feature error of the second decoder on the test windows."""
        model.eval()
        with torch.no_grad():
            data_x = torch.DoubleTensor(testD)
            bs = len(data_x)
            window = windows_of(data_x, bs)
            elem = last_of(window, bs)
            z = model(window, elem)
            if isinstance(z, tuple): z = z[1]
            loss = l(z, elem)[0].numpy()
        model.train()
        anomalous = labels.sum(axis=1) >= 1
        return float(loss[~anomalous].mean()), float(loss[anomalous].mean())

    def loss_fn(z, elem):
        n = state["e"] + 1
        return torch.mean((1 / n) * l(z[0], elem) + (1 - 1/n) * l(z[1], elem))

    d0 = trainD[:model.batch].double()
    window0 = windows_of(d0, d0.shape[0])
    elem0 = last_of(window0, d0.shape[0])
    return Program(name="tranad_mba", model=model, batch=((window0, elem0), elem0), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
    # backprop's (batch, window, feats) -> (window, batch, feats) conversion written as a view: observations of
    # different windows are interleaved along the time axis the encoder attends over (classic view-for-permute slip).
    Bug("window_viewed_not_permuted", functools.partial(_build, bug="window_viewed_not_permuted"), "tensor_trace",
        ("pos_encoder",)),
    # the reconstructed element taken from the window's start instead of its end: the model scores the observation
    # ten steps back, not the newest one (classic index slip).
    Bug("elem_from_window_start", functools.partial(_build, bug="elem_from_window_start"), "learning_ledger",
        ("TASK",)),
    # optimizer.zero_grad() between backward and step: every step applies a zero gradient (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

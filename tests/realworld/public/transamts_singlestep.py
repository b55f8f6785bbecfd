# ruff: noqa: PLR0402, UP008, UP018
"""Transformer encoder for one-step time-series forecasting (TransAm), from oliverguhr/transformer-time-series-prediction.

Source: https://github.com/oliverguhr/transformer-time-series-prediction
Commit: 4e120f3f9b67482dd9a8ca88b49671881120d20f
Files: ``transformer-singlestep.py``
License: MIT (Copyright 2020 Oliver Guhr; full text in LICENSES/oliverguhr-transformer-time-series-prediction.txt)
Domain: time series, forecasting (transformer encoder, causal mask, sequence-to-sequence one step ahead)

Kept as written: ``PositionalEncoding`` (sin/cos table, ``[max_len, 1, d_model]`` buffer repeated over the batch),
``TransAm`` (``Linear(1, 250)`` input embedding, one ``nn.TransformerEncoderLayer`` with 10 heads and dropout 0.1,
float square subsequent mask, ``Linear(250, 1)`` decoder with its init), ``create_inout_sequences`` (windows of
100 inputs and the same window shifted by one as targets), the toy data of ``get_data`` (``sin(t) + sin(0.05 t) +
sin(0.12 t) * noise``, scaled to [-1, 1], 80 % train), ``train``'s loop body (zero_grad, forward, ``nn.MSELoss``,
backward, ``clip_grad_norm_(0.7)``, step; ``model.train()`` at an epoch's start), AdamW lr 0.005, StepLR(1, 0.95)
stepped per epoch, ``evaluate``.

Deviations from the original:
- ``get_batch`` lays a batch out as ``[window, batch, 1]`` with a transpose (``.T.unsqueeze(-1)``), the fix given in
  the repository's issue #29 (https://github.com/oliverguhr/transformer-time-series-prediction/issues/29, open):
  the original ``.view((input_window, batch_len, 1))`` of a ``[batch, window]`` stack interleaves the windows and
  the time steps. The original line is kept as the bug variant ``batch_viewed_not_transposed``.
- the toy series is shorter: ``np.arange(0, 100, 0.1)`` instead of ``np.arange(0, 400, 0.1)`` (700 training
  windows, 101 validation windows), for 2 CPU cores; its noise comes from ``np.random.default_rng(seed)``
  (the original seeds the global numpy and torch generators with 0: torch is seeded with ``seed``).
- sklearn is not here: ``MinMaxScaler(feature_range=(-1, 1))`` is written out in numpy (the same formula).
- ``device`` is the CPU; printing, plotting, ``plot_and_loss`` and ``predict_future`` are dropped.
- ``train`` is not run an epoch at a time: ``train_step`` is one batch of its loop (in order, an epoch's end steps
  the scheduler and the next batch starts the next epoch with ``model.train()``), returning the batch's loss.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the lines above run.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

input_window = 100 # number of input steps
output_window = 1 # number of prediction steps, in this model its fixed to one
block_len = input_window + output_window # for one input-output pair
batch_size = 10
train_size = 0.8
device = torch.device("cpu")


class PositionalEncoding(nn.Module):

    def __init__(self, d_model, max_len=5000):
        super(PositionalEncoding, self).__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = 1 / (10000 ** ((2 * np.arange(d_model)) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term[0::2])
        pe[:, 1::2] = torch.cos(position * div_term[1::2])

        pe = pe.unsqueeze(0).transpose(0, 1) # [5000, 1, d_model],so need seq-len <= 5000
        self.register_buffer('pe', pe)

    def forward(self, x):
        return x + self.pe[:x.size(0), :].repeat(1,x.shape[1],1)


class TransAm(nn.Module):
    def __init__(self,feature_size=250,num_layers=1,dropout=0.1,bug=None):
        super(TransAm, self).__init__()
        self.model_type = 'Transformer'
        self.input_embedding  = nn.Linear(1,feature_size)
        self.src_mask = None
        self.bug = bug

        self.pos_encoder = PositionalEncoding(feature_size)
        self.encoder_layer = nn.TransformerEncoderLayer(d_model=feature_size, nhead=10, dropout=dropout)
        self.transformer_encoder = nn.TransformerEncoder(self.encoder_layer, num_layers=num_layers)
        self.decoder = nn.Linear(feature_size,1)
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        self.decoder.bias.data.zero_()
        self.decoder.weight.data.uniform_(-initrange, initrange)

    def forward(self,src):
        # src with shape (input_window, batch_len, 1)
        if self.src_mask is None or self.src_mask.size(0) != len(src):
            device = src.device
            mask = self._generate_square_subsequent_mask(len(src)).to(device)
            self.src_mask = mask

        src = self.input_embedding(src) # linear transformation before positional embedding
        src = self.pos_encoder(src)
        if self.bug == "src_mask_dropped":
            output = self.transformer_encoder(src)
        else:
            output = self.transformer_encoder(src,self.src_mask)#, self.src_mask)
        output = self.decoder(output)
        return output

    def _generate_square_subsequent_mask(self, sz):
        mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)
        mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
        return mask


def create_inout_sequences(input_data, input_window ,output_window):
    inout_seq = []
    L = len(input_data)
    block_num =  L - block_len + 1
    # total of [N - block_len + 1] blocks
    # where block_len = input_window + output_window

    for i in range( block_num ):
        train_seq = input_data[i : i + input_window]
        train_label = input_data[i + output_window : i + input_window + output_window]
        inout_seq.append((train_seq ,train_label))

    return torch.FloatTensor(np.array(inout_seq))


def min_max_scale(x, feature_range=(-1, 1)):
    """(port) sklearn's MinMaxScaler.fit_transform on one column, written out."""
    lo, hi = feature_range
    x_std = (x - x.min(axis=0)) / (x.max(axis=0) - x.min(axis=0))
    return x_std * (hi - lo) + lo


def get_data(rng):
    # construct a littel toy dataset
    time        = np.arange(0, 100, 0.1)  # (port) np.arange(0, 400, 0.1)
    amplitude   = np.sin(time) + np.sin(time * 0.05) + \
                  np.sin(time * 0.12) * rng.normal(-0.2, 0.2, len(time))

    # looks like normalizing input values curtial for the model
    amplitude = min_max_scale(amplitude.reshape(-1, 1)).reshape(-1)

    sampels = int(len(time) * train_size) # use a parameter to control training size
    train_data = amplitude[:sampels]
    test_data = amplitude[sampels:]

    train_sequence = create_inout_sequences( train_data,input_window ,output_window)
    test_data = create_inout_sequences(test_data,input_window,output_window)
    # shape with (block , sql_len , 2 )
    return train_sequence.to(device),test_data.to(device)


def get_batch(input_data, i , batch_size, bug=None):
    batch_len = min(batch_size, len(input_data) - i)
    data = input_data[ i:i + batch_len ]
    if bug == "batch_viewed_not_transposed":
        input = torch.stack([item[0] for item in data]).view((input_window,batch_len,1))
        target = torch.stack([item[1] for item in data]).view((input_window,batch_len,1))
    else:
        # (port) the fix of issue #29
        input = torch.stack([item[0] for item in data]).T.unsqueeze(-1)
        # ( seq_len, batch, 1 ) , 1 is feature size
        target = torch.stack([item[1] for item in data]).T.unsqueeze(-1)
    return input, target


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    train_data, val_data = get_data(rng)
    model = TransAm(bug=bug).to(device)

    criterion = nn.MSELoss()
    lr = 0.005
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.95)

    starts = list(range(0, len(train_data), batch_size))
    state = {"k": 0}

    def train_step():
        # one batch of train(train_data); the epoch loop around it
        k = state["k"] % len(starts)
        if k == 0:
            model.train() # Turn on the train mode \o/
        i = starts[k]
        data, targets = get_batch(train_data, i , batch_size, bug)
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output, targets)
        loss.backward()
        if bug == "clip_after_step":
            optimizer.step()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.7)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.7)
            optimizer.step()
        state["k"] += 1
        if state["k"] % len(starts) == 0:
            scheduler.step()
        return loss.item()

    def evaluate(eval_model, data_source):
        eval_model.eval() # Turn on the evaluation mode
        total_loss = 0.
        eval_batch_size = 1000
        with torch.no_grad():
            for i in range(0, len(data_source), eval_batch_size):
                data, targets = get_batch(data_source, i,eval_batch_size, bug)
                output = eval_model(data)
                total_loss += len(data[0]) * criterion(output, targets).cpu().item()
        return total_loss / len(data_source)

    batch = get_batch(train_data, 0, batch_size, bug)

    return Program(name="transamts_singlestep", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=lambda m, _b: evaluate(m, val_data), batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
    # https://github.com/oliverguhr/transformer-time-series-prediction/issues/29: the original get_batch views a
    # [batch, window] stack as [window, batch, 1]; each "sequence" the model reads (and its target) interleaves
    # steps of different windows.
    Bug("batch_viewed_not_transposed", functools.partial(_build, bug="batch_viewed_not_transposed"),
        "learning_ledger", ("TASK",)),
    # the causal mask is not passed to the encoder (the commented-out argument of the original line): position t
    # attends to t+1, which is its own target (classic causal leak).
    Bug("src_mask_dropped", functools.partial(_build, bug="src_mask_dropped"), "learning_ledger", ("DEPENDENCY",)),
    # clip_grad_norm_ after optimizer.step(): the clipping never reaches the update (classic).
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]

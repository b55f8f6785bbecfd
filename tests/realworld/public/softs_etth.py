# ruff: noqa: UP008, PLR0402, RUF059
"""SOFTS (Han et al., NeurIPS 2024): efficient multivariate forecasting with series-core fusion. Each variate's
lookback window (and each time-feature series) is embedded as one token; STAR (STar Aggregate-Redistribute) blocks
pool a global core over the variates (stochastic pooling by a softmax over channels while training, the
softmax-weighted mean at evaluation), fuse it back into every token by an MLP, and a linear head maps each token to
the horizon; instance normalization and de-normalization from the Non-stationary Transformer; MSE, Adam, a cosine
learning rate set per epoch.

Source: https://github.com/Secilia-Cxy/SOFTS
Commit: f5d35fd7c3e716b6383ce6d3cc42c131e32c3c44
Files (the data pipeline in the helper ``_softs.py``): ``models/SOFTS.py`` (``STAR``, ``Model``), ``layers/Embed.py`` (``DataEmbedding_inverted``),
``layers/Transformer_EncDec.py`` (``EncoderLayer``, ``Encoder``), ``exp/exp_long_term_forecasting.py`` (``train``,
``vali``, ``_select_optimizer``, ``_select_criterion``), ``data_provider/data_loader.py`` (``Dataset_ETT_hour``),
``data_provider/data_factory.py``, ``utils/timefeatures.py`` (``time_features`` for ``freq='h'``),
``utils/tools.py`` (``adjust_learning_rate``), ``run.py`` defaults, ``scripts/long_term_forecast/ETT_script/
SOFTS_ETTh1.sh`` (the 96 -> 96 run)
License: MIT (Copyright (c) 2024 Xu-Yang Chen; full text in LICENSES/Secilia-Cxy-SOFTS.txt)
Domain: time series, multivariate long-term forecasting (variates as tokens, STAR core pooling, MSE)

Kept as written: the model classes, ``Dataset_ETT_hour`` (the ETTh borders 12/4/4 months, the scaler fitted on the
training rows, ``timeenc=1`` time features HourOfDay, DayOfWeek, DayOfMonth, DayOfYear as tokens), the training
loop body (``zero_grad(set_to_none=True)``, the decoder input built and unused by the model, ``f_dim = 0`` for
``--features M``, the output and target sliced to ``pred_len``, MSE, backward, step), ``vali`` (the
sample-weighted mean of the batch losses under ``eval``/``no_grad``), Adam, ``lradj cosine`` over 20 epochs, the
script's ``e_layers 1``, lr 0.0003, dropout 0.0, gelu, ``use_norm``, batch size 32.

Deviations from the original:
- ETTh1.csv is not here: its 7 value columns are ``make_ett_like``'s synthetic hourly series (a daily and a weekly
  sinusoid, a trend and noise per channel, from ``seed``; shared with the other ETTh ports in ``_etth.py``) with the
  CSV's hourly ``date`` column from 2016-07-01 00:00; the frame is built in memory instead of ``pd.read_csv``;
  sklearn's ``StandardScaler`` is written out in numpy (population std);
- sizes for 2 CPU cores: seq_len 96 -> 48, label_len 48 -> 24, pred_len 96 -> 24, d_model = d_core = d_ff 256 -> 32;
  the loaders run in the main process (``num_workers`` 0); CUDA and AMP are dropped;
- ``train``'s epoch loop is unrolled: one ``train_step`` is one batch (``model.train()`` and a new loader pass when
  an epoch starts, ``adjust_learning_rate`` when it ends); it returns ``loss.item()``; ``eval_fn`` is ``vali`` on the
  first 256 of the validation split's 2857 windows (minus the loss: higher is better); printing, early stopping,
  checkpoints and ``test`` are dropped;
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
from torch import optim
from torch.utils.data import DataLoader, Subset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _softs import Dataset_ETT_hour, _frame, adjust_learning_rate


# layers/Embed.py
class DataEmbedding_inverted(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.1):
        super(DataEmbedding_inverted, self).__init__()
        self.value_embedding = nn.Linear(c_in, d_model)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = x.permute(0, 2, 1)
        if x_mark is None:
            x = self.value_embedding(x)
        else:
            x = self.value_embedding(torch.cat([x, x_mark.permute(0, 2, 1)], 1))
        return self.dropout(x)


# layers/Transformer_EncDec.py
class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff=None, dropout=0.1, activation="relu", **kwargs):
        super(EncoderLayer, self).__init__()
        d_ff = d_ff or 4 * d_model
        self.attention = attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x, attn_mask=None, tau=None, delta=None, **kwargs):
        new_x, attn = self.attention(
            x, x, x,
            attn_mask=attn_mask,
            tau=tau, delta=delta,
            **kwargs
        )
        x = x + self.dropout(new_x)

        y = x = self.norm1(x)
        y = self.dropout(self.activation(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))

        return self.norm2(x + y), attn


class Encoder(nn.Module):
    def __init__(self, attn_layers, conv_layers=None, norm_layer=None):
        super(Encoder, self).__init__()
        self.attn_layers = nn.ModuleList(attn_layers)
        self.conv_layers = nn.ModuleList(conv_layers) if conv_layers is not None else None
        self.norm = norm_layer

    def forward(self, x, attn_mask=None, tau=None, delta=None, **kwargs):
        attns = []
        if self.conv_layers is not None:
            for i, (attn_layer, conv_layer) in enumerate(zip(self.attn_layers, self.conv_layers)):
                delta = delta if i == 0 else None
                x, attn = attn_layer(x, attn_mask=attn_mask, tau=tau, delta=delta)
                x = conv_layer(x)
                attns.append(attn)
            x, attn = self.attn_layers[-1](x, tau=tau, delta=None)
            attns.append(attn)
        else:
            for attn_layer in self.attn_layers:
                x, attn = attn_layer(x, attn_mask=attn_mask, tau=tau, delta=delta, **kwargs)
                attns.append(attn)

        if self.norm is not None:
            x = self.norm(x)

        return x, attns


# models/SOFTS.py
class STAR(nn.Module):
    def __init__(self, d_series, d_core):
        super(STAR, self).__init__()
        self.gen1 = nn.Linear(d_series, d_series)
        self.gen2 = nn.Linear(d_series, d_core)
        self.gen3 = nn.Linear(d_series + d_core, d_series)
        self.gen4 = nn.Linear(d_series, d_series)

    def forward(self, input, *args, **kwargs):
        batch_size, channels, d_series = input.shape

        # set FFN
        combined_mean = F.gelu(self.gen1(input))
        combined_mean = self.gen2(combined_mean)

        # stochastic pooling
        if self.training:
            ratio = F.softmax(combined_mean, dim=1)
            ratio = ratio.permute(0, 2, 1)
            ratio = ratio.reshape(-1, channels)
            indices = torch.multinomial(ratio, 1)
            indices = indices.view(batch_size, -1, 1).permute(0, 2, 1)
            combined_mean = torch.gather(combined_mean, 1, indices)
            combined_mean = combined_mean.repeat(1, channels, 1)
        else:
            weight = F.softmax(combined_mean, dim=1)
            combined_mean = torch.sum(combined_mean * weight, dim=1, keepdim=True).repeat(1, channels, 1)

        # mlp fusion
        combined_mean_cat = torch.cat([input, combined_mean], -1)
        combined_mean_cat = F.gelu(self.gen3(combined_mean_cat))
        combined_mean_cat = self.gen4(combined_mean_cat)
        output = combined_mean_cat

        return output, None


class Model(nn.Module):

    def __init__(self, configs):
        super(Model, self).__init__()
        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.bug = configs.bug
        self.enc_embedding = DataEmbedding_inverted(configs.seq_len, configs.d_model, configs.dropout)
        self.use_norm = configs.use_norm
        self.encoder = Encoder(
            [
                EncoderLayer(
                    STAR(configs.d_model, configs.d_core),
                    configs.d_model,
                    configs.d_ff,
                    dropout=configs.dropout,
                    activation=configs.activation,
                ) for l in range(configs.e_layers)
            ],
        )
        self.projection = nn.Linear(configs.d_model, configs.pred_len, bias=True)

    def forecast(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        # Normalization from Non-stationary Transformer
        if self.use_norm:
            means = x_enc.mean(1, keepdim=True).detach()
            x_enc = x_enc - means
            stdev = torch.sqrt(torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
            x_enc /= stdev

        _, _, N = x_enc.shape
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        enc_out, attns = self.encoder(enc_out, attn_mask=None)
        dec_out = self.projection(enc_out).permute(0, 2, 1)[:, :, :N]
        if self.bug == "time_tokens_kept":
            dec_out = self.projection(enc_out).permute(0, 2, 1)[:, :, -N:]

        # De-Normalization from Non-stationary Transformer
        if self.use_norm:
            dec_out = dec_out * (stdev[:, 0, :].unsqueeze(1).repeat(1, self.pred_len, 1))
            dec_out = dec_out + (means[:, 0, :].unsqueeze(1).repeat(1, self.pred_len, 1))
        return dec_out

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec, mask=None):
        dec_out = self.forecast(x_enc, x_mark_enc, x_dec, x_mark_dec)
        return dec_out[:, -self.pred_len:, :]  # [B, L, D]


def _args(bug):
    """run.py defaults + SOFTS_ETTh1.sh (96 -> 96), sizes as listed in the docstring."""
    return types.SimpleNamespace(features='M', target='OT', freq='h', seq_len=48, label_len=24, pred_len=24,
                                 e_layers=1, enc_in=7, d_model=32, d_core=32, d_ff=32, dropout=0.0,
                                 activation='gelu', use_norm=True, output_attention=False, embed='timeF',
                                 learning_rate=0.0003, lradj='cosine', train_epochs=20, batch_size=32, bug=bug)


def _run_batch(model, criterion, args, batch_x, batch_y, batch_x_mark, batch_y_mark):
    """The loop body's forward and loss (exp_long_term_forecasting.train and vali)."""
    batch_x = batch_x.float()
    batch_y = batch_y.float()
    batch_x_mark = batch_x_mark.float()
    batch_y_mark = batch_y_mark.float()
    dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
    dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float()
    outputs = model(batch_x, batch_x_mark, dec_inp, batch_y_mark)
    f_dim = -1 if args.features == 'MS' else 0
    outputs = outputs[:, -args.pred_len:, f_dim:]
    batch_y = batch_y[:, -args.pred_len:, f_dim:]
    return criterion(outputs, batch_y)


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    args = _args(bug)
    df_raw = _frame(seed)
    timeenc = 0 if args.embed != 'timeF' else 1
    size = [args.seq_len, args.label_len, args.pred_len]
    train_data = Dataset_ETT_hour(df_raw, 'train', size, args.features, args.target, timeenc=timeenc, bug=bug)
    vali_data = Dataset_ETT_hour(df_raw, 'val', size, args.features, args.target, timeenc=timeenc, bug=bug)
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True, drop_last=False)
    vali_loader = DataLoader(Subset(vali_data, range(256)), batch_size=args.batch_size, shuffle=True, drop_last=False)
    model = Model(args).float()
    model_optim = optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()
    st = {"it": None, "epoch": 0}

    run_batch = functools.partial(_run_batch, model, criterion, args)

    def train_step():
        if st["it"] is None:  # an epoch starts
            model.train()
            st["it"] = iter(train_loader)
        batch = next(st["it"], None)
        if batch is None:  # the epoch ends
            st["epoch"] += 1
            adjust_learning_rate(model_optim, st["epoch"], args)
            st["it"] = iter(train_loader)
            batch = next(st["it"])
        if bug != "zero_grad_dropped":
            model_optim.zero_grad(set_to_none=True)
        loss = run_batch(*batch)
        loss.backward()
        model_optim.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        # vali(vali_data, vali_loader, criterion): the sample-weighted mean of the batch losses
        was = model.training
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for batch in vali_loader:
                total += run_batch(*batch).item() * batch[0].size(0)
                count += batch[0].size(0)
        model.train(was)
        return -total / count

    bx, by, bxm, bym = next(iter(DataLoader(vali_data, batch_size=args.batch_size)))
    dec_inp = torch.cat([by[:, :args.label_len, :], torch.zeros_like(by[:, -args.pred_len:, :])], dim=1).float()
    batch = ((bx.float(), bxm.float(), dec_inp, bym.float()), by[:, -args.pred_len:, :].float())
    return Program(name="softs_etth", model=model, batch=batch, loss_fn=criterion, optimizer=model_optim,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic slice slip: the projection's tokens are cut with [:, :, -N:] instead of [:, :, :N], so the outputs
    # paired with the 7 variates' targets come from 3 variates and the 4 time-feature tokens.
    Bug("time_tokens_kept", functools.partial(_build, bug="time_tokens_kept"), "learning_ledger", ("TASK",)),
    # classic window-indexing slip: the input window is shifted by pred_len, so it ends where the targets end and
    # the model reads the values it must forecast.
    # where and kind re-declared in review (2026-12-07): an input window holding the values to forecast is what
    # TASK's task.target_in_input confirms (the targets are copies of input positions the model reads)
    Bug("input_window_includes_targets", functools.partial(_build, bug="input_window_includes_targets"),
        "learning_ledger", ("TASK",), kind="task.target_in_input"),
    # classic: model_optim.zero_grad() left out: every step applies the sum of all past gradients.
    # Every parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

# ruff: noqa: PLR0402, RUF059, SIM118, UP008
"""Autoformer long-horizon forecasting on ETTh1-shaped data: series decomposition (moving-average trend, seasonal
residual) inside every block, Auto-Correlation (FFT period discovery, top-k time-delay aggregation) in place of
self-attention, an encoder over the input window and a decoder started from the last ``label_len`` steps' seasonal
and trend parts with zeros / the window mean for the horizon, value (circular conv) + time-feature embeddings,
MSE on the ``pred_len`` horizon, Adam with the per-epoch halving ``type1`` schedule, shuffled windows.

Source: https://github.com/thuml/Autoformer
Commit: 51c7d416ae120b805fd5beef2f4ccf7de496a6ff
Files: ``models/Autoformer.py``, ``layers/AutoCorrelation.py``, ``layers/Autoformer_EncDec.py``, ``layers/Embed.py``,
``exp/exp_main.py`` (``_predict``, ``train``, ``vali``), ``data_provider/data_loader.py`` (``Dataset_ETT_hour``),
``data_provider/data_factory.py``, ``utils/tools.py`` (``adjust_learning_rate``), ``utils/timefeatures.py`` (the
hourly features), ``run.py`` (defaults), ``scripts/ETT_script/Autoformer_ETTh1.sh`` (the command).
License: MIT (Copyright (c) 2021 THUML @ Tsinghua University; full text in LICENSES/thuml-Autoformer.txt)
Domain: time series, long-horizon multivariate forecasting (Autoformer)

Kept as written: the model classes (``Model``, ``AutoCorrelation`` with ``time_delay_agg_training`` /
``time_delay_agg_inference``, ``AutoCorrelationLayer``, ``EncoderLayer``, ``Encoder``, ``DecoderLayer``,
``Decoder``, ``my_Layernorm``, ``moving_avg``, ``series_decomp``, ``TokenEmbedding``, ``TimeFeatureEmbedding``,
``DataEmbedding_wo_pos``), ``Dataset_ETT_hour`` (the ETTh borders 12/4/4 months, scaler fitted on the training
months, ``timeenc`` 1 features, the ``seq_x`` / ``seq_y`` windows), the loader settings (train: shuffle,
drop_last), ``_predict`` (zeros for the horizon after the first ``label_len`` steps of ``batch_y``, outputs and
targets cut to ``pred_len``), the loop body (``zero_grad``, predict, ``nn.MSELoss``, backward, step),
``adjust_learning_rate`` type1, and the command's settings (features M, e_layers 2, d_layers 1, factor 3, enc_in /
dec_in / c_out 7, embed timeF, freq h, activation gelu, dropout 0.05, learning_rate 1e-4, batch_size 32 -> see
below).

Deviations from the original:
- data: ETTh1.csv is replaced by a synthetic hourly table made from ``seed`` with the same shape (a ``date`` column
  from 2016-07-01 00:00 and 7 load/temperature-like columns, the last named ``OT``; 20 months = 14400 rows so the
  hard-coded borders hold): each column is a daily and a weekly sinusoid with its own phase and amplitude plus a slow
  drift and Gaussian noise, so the horizon is predictable from the window. It is written to an in-memory csv and read
  by ``pd.read_csv`` as written (``data_path`` is that buffer, not a file name).
- scikit-learn is not available: ``StandardScaler`` is written out (fit: column mean and population std;
  transform; inverse_transform). ``utils/timefeatures.py``'s hourly features (HourOfDay, DayOfWeek, DayOfMonth,
  DayOfYear, each scaled to [-0.5, 0.5]) are written out in ``time_features``.
- sizes for 2 CPU cores: seq_len 96 -> 48, label_len 48 -> 24, pred_len 24 -> 12, d_model 512 -> 16, n_heads 8 -> 2,
  d_ff 2048 -> 32, moving_avg 25 -> 13, batch_size 32 -> 16; ``num_workers`` 0.
- ``train_step`` is one iteration of ``train``'s inner loop; when the training loader is exhausted an epoch ends
  (``adjust_learning_rate`` and a fresh shuffled pass). Validation, early stopping, checkpoints and printing are left
  to ``eval_fn``, which is ``vali``'s body on one given batch. ``use_amp`` (GPU) and multi-GPU are dropped; device
  is the CPU; ``torch.manual_seed(seed)`` / a seeded loader generator replace the unseeded shuffle.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import io
import math
import pathlib
import sys

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


class Configs:
    """(port) run.py's arguments as set by scripts/ETT_script/Autoformer_ETTh1.sh (sizes shrunk, see docstring)."""
    model = 'Autoformer'
    data = 'ETTh1'
    features = 'M'
    target = 'OT'
    freq = 'h'
    seq_len = 48
    label_len = 24
    pred_len = 12
    enc_in = 7
    dec_in = 7
    c_out = 7
    d_model = 16
    n_heads = 2
    e_layers = 2
    d_layers = 1
    d_ff = 32
    moving_avg = 13
    factor = 3
    dropout = 0.05
    embed = 'timeF'
    activation = 'gelu'
    output_attention = False
    batch_size = 16
    learning_rate = 0.0001
    lradj = 'type1'
    use_amp = False


# ---- layers/Embed.py (the classes Autoformer uses) ----------------------------------------------------------------

class TokenEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super(TokenEmbedding, self).__init__()
        padding = 1
        self.tokenConv = nn.Conv1d(in_channels=c_in, out_channels=d_model,
                                   kernel_size=3, padding=padding, padding_mode='circular', bias=False)
        for m in self.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight, mode='fan_in', nonlinearity='leaky_relu')

    def forward(self, x):
        x = self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)
        return x


class TimeFeatureEmbedding(nn.Module):
    def __init__(self, d_model, embed_type='timeF', freq='h'):
        super(TimeFeatureEmbedding, self).__init__()

        freq_map = {'h': 4, 't': 5, 's': 6, 'm': 1, 'a': 1, 'w': 2, 'd': 3, 'b': 3}
        d_inp = freq_map[freq]
        self.embed = nn.Linear(d_inp, d_model, bias=False)

    def forward(self, x):
        return self.embed(x)


class DataEmbedding_wo_pos(nn.Module):
    def __init__(self, c_in, d_model, embed_type='fixed', freq='h', dropout=0.1):
        super(DataEmbedding_wo_pos, self).__init__()

        self.value_embedding = TokenEmbedding(c_in=c_in, d_model=d_model)
        self.temporal_embedding = TimeFeatureEmbedding(d_model=d_model, embed_type=embed_type, freq=freq)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = self.value_embedding(x) + self.temporal_embedding(x_mark)
        return self.dropout(x)


# ---- layers/AutoCorrelation.py -----------------------------------------------------------------------------------

class AutoCorrelation(nn.Module):
    def __init__(self, mask_flag=True, factor=1, scale=None, attention_dropout=0.1, output_attention=False, bug=None):
        super(AutoCorrelation, self).__init__()
        self.factor = factor
        self.scale = scale
        self.mask_flag = mask_flag
        self.output_attention = output_attention
        self.dropout = nn.Dropout(attention_dropout)
        self.bug = bug

    def time_delay_agg_training(self, values, corr):
        head = values.shape[1]
        channel = values.shape[2]
        length = values.shape[3]
        # find top k
        top_k = int(self.factor * math.log(length))
        mean_value = torch.mean(torch.mean(corr, dim=1), dim=1)
        index = torch.topk(torch.mean(mean_value, dim=0), top_k, dim=-1)[1]
        weights = torch.stack([mean_value[:, index[i]] for i in range(top_k)], dim=-1)
        # update corr
        tmp_corr = torch.softmax(weights, dim=-1)
        # aggregation
        tmp_values = values
        delays_agg = torch.zeros_like(values).float()
        for i in range(top_k):
            pattern = torch.roll(tmp_values, -int(index[i]), -1)
            delays_agg = delays_agg + pattern * \
                         (tmp_corr[:, i].unsqueeze(1).unsqueeze(1).unsqueeze(1).repeat(1, head, channel, length))
        return delays_agg

    def time_delay_agg_inference(self, values, corr):
        batch = values.shape[0]
        head = values.shape[1]
        channel = values.shape[2]
        length = values.shape[3]
        # index init
        init_index = torch.arange(length).unsqueeze(0).unsqueeze(0).unsqueeze(0)\
            .repeat(batch, head, channel, 1).to(values.device)
        # find top k
        top_k = int(self.factor * math.log(length))
        mean_value = torch.mean(torch.mean(corr, dim=1), dim=1)
        weights, delay = torch.topk(mean_value, top_k, dim=-1)
        # update corr
        tmp_corr = torch.softmax(weights, dim=-1)
        # aggregation
        tmp_values = values.repeat(1, 1, 1, 2)
        delays_agg = torch.zeros_like(values).float()
        for i in range(top_k):
            tmp_delay = init_index + delay[:, i].unsqueeze(1).unsqueeze(1).unsqueeze(1).repeat(1, head, channel, length)
            pattern = torch.gather(tmp_values, dim=-1, index=tmp_delay)
            delays_agg = delays_agg + pattern * \
                         (tmp_corr[:, i].unsqueeze(1).unsqueeze(1).unsqueeze(1).repeat(1, head, channel, length))
        return delays_agg

    def forward(self, queries, keys, values, attn_mask):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        if L > S:
            zeros = torch.zeros_like(queries[:, :(L - S), :]).float()
            values = torch.cat([values, zeros], dim=1)
            keys = torch.cat([keys, zeros], dim=1)
        else:
            values = values[:, :L, :, :]
            keys = keys[:, :L, :, :]

        # period-based dependencies
        q_fft = torch.fft.rfft(queries.permute(0, 2, 3, 1).contiguous(), dim=-1)
        k_fft = torch.fft.rfft(keys.permute(0, 2, 3, 1).contiguous(), dim=-1)
        res = q_fft * torch.conj(k_fft)
        corr = torch.fft.irfft(res, n=L, dim=-1)

        # time delay agg
        if self.training:
            V = self.time_delay_agg_training(values.permute(0, 2, 3, 1).contiguous(), corr)
        else:
            V = self.time_delay_agg_inference(values.permute(0, 2, 3, 1).contiguous(), corr)
        if self.bug == "delays_reshaped_not_permuted":
            V = V.reshape(B, L, H, -1)
        else:
            V = V.permute(0, 3, 1, 2)

        if self.output_attention:
            return (V.contiguous(), corr.permute(0, 3, 1, 2))
        else:
            return (V.contiguous(), None)


class AutoCorrelationLayer(nn.Module):
    def __init__(self, correlation, d_model, n_heads, d_keys=None,
                 d_values=None):
        super(AutoCorrelationLayer, self).__init__()

        d_keys = d_keys or (d_model // n_heads)
        d_values = d_values or (d_model // n_heads)

        self.inner_correlation = correlation
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_values * n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values, attn_mask):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads

        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)

        out, attn = self.inner_correlation(
            queries,
            keys,
            values,
            attn_mask
        )
        out = out.view(B, L, -1)

        return self.out_projection(out), attn


# ---- layers/Autoformer_EncDec.py ---------------------------------------------------------------------------------

class my_Layernorm(nn.Module):
    def __init__(self, channels):
        super(my_Layernorm, self).__init__()
        self.layernorm = nn.LayerNorm(channels)

    def forward(self, x):
        x_hat = self.layernorm(x)
        bias = torch.mean(x_hat, dim=1).unsqueeze(1).repeat(1, x.shape[1], 1)
        return x_hat - bias


class moving_avg(nn.Module):
    def __init__(self, kernel_size, stride):
        super(moving_avg, self).__init__()
        self.kernel_size = kernel_size
        self.avg = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=0)

    def forward(self, x):
        # padding on the both ends of time series
        front = x[:, 0:1, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        end = x[:, -1:, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        x = torch.cat([front, x, end], dim=1)
        x = self.avg(x.permute(0, 2, 1))
        x = x.permute(0, 2, 1)
        return x


class series_decomp(nn.Module):
    def __init__(self, kernel_size):
        super(series_decomp, self).__init__()
        self.moving_avg = moving_avg(kernel_size, stride=1)

    def forward(self, x):
        moving_mean = self.moving_avg(x)
        res = x - moving_mean
        return res, moving_mean


class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff=None, moving_avg=25, dropout=0.1, activation="relu"):
        super(EncoderLayer, self).__init__()
        d_ff = d_ff or 4 * d_model
        self.attention = attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1, bias=False)
        self.decomp1 = series_decomp(moving_avg)
        self.decomp2 = series_decomp(moving_avg)
        self.dropout = nn.Dropout(dropout)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x, attn_mask=None):
        new_x, attn = self.attention(
            x, x, x,
            attn_mask=attn_mask
        )
        x = x + self.dropout(new_x)
        x, _ = self.decomp1(x)
        y = x
        y = self.dropout(self.activation(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        res, _ = self.decomp2(x + y)
        return res, attn


class Encoder(nn.Module):
    def __init__(self, attn_layers, conv_layers=None, norm_layer=None):
        super(Encoder, self).__init__()
        self.attn_layers = nn.ModuleList(attn_layers)
        self.conv_layers = nn.ModuleList(conv_layers) if conv_layers is not None else None
        self.norm = norm_layer

    def forward(self, x, attn_mask=None):
        attns = []
        if self.conv_layers is not None:
            for attn_layer, conv_layer in zip(self.attn_layers, self.conv_layers):
                x, attn = attn_layer(x, attn_mask=attn_mask)
                x = conv_layer(x)
                attns.append(attn)
            x, attn = self.attn_layers[-1](x)
            attns.append(attn)
        else:
            for attn_layer in self.attn_layers:
                x, attn = attn_layer(x, attn_mask=attn_mask)
                attns.append(attn)

        if self.norm is not None:
            x = self.norm(x)

        return x, attns


class DecoderLayer(nn.Module):
    def __init__(self, self_attention, cross_attention, d_model, c_out, d_ff=None,
                 moving_avg=25, dropout=0.1, activation="relu"):
        super(DecoderLayer, self).__init__()
        d_ff = d_ff or 4 * d_model
        self.self_attention = self_attention
        self.cross_attention = cross_attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1, bias=False)
        self.decomp1 = series_decomp(moving_avg)
        self.decomp2 = series_decomp(moving_avg)
        self.decomp3 = series_decomp(moving_avg)
        self.dropout = nn.Dropout(dropout)
        self.projection = nn.Conv1d(in_channels=d_model, out_channels=c_out, kernel_size=3, stride=1, padding=1,
                                    padding_mode='circular', bias=False)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x, cross, x_mask=None, cross_mask=None):
        x = x + self.dropout(self.self_attention(
            x, x, x,
            attn_mask=x_mask
        )[0])
        x, trend1 = self.decomp1(x)
        x = x + self.dropout(self.cross_attention(
            x, cross, cross,
            attn_mask=cross_mask
        )[0])
        x, trend2 = self.decomp2(x)
        y = x
        y = self.dropout(self.activation(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        x, trend3 = self.decomp3(x + y)

        residual_trend = trend1 + trend2 + trend3
        residual_trend = self.projection(residual_trend.permute(0, 2, 1)).transpose(1, 2)
        return x, residual_trend


class Decoder(nn.Module):
    def __init__(self, layers, norm_layer=None, projection=None):
        super(Decoder, self).__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm_layer
        self.projection = projection

    def forward(self, x, cross, x_mask=None, cross_mask=None, trend=None):
        for layer in self.layers:
            x, residual_trend = layer(x, cross, x_mask=x_mask, cross_mask=cross_mask)
            trend = trend + residual_trend

        if self.norm is not None:
            x = self.norm(x)

        if self.projection is not None:
            x = self.projection(x)
        return x, trend


# ---- models/Autoformer.py ----------------------------------------------------------------------------------------

class Model(nn.Module):
    """
    Autoformer is the first method to achieve the series-wise connection,
    with inherent O(LlogL) complexity
    """
    def __init__(self, configs, bug=None):
        super(Model, self).__init__()
        self.seq_len = configs.seq_len
        self.label_len = configs.label_len
        self.pred_len = configs.pred_len
        self.output_attention = configs.output_attention

        # Decomp
        kernel_size = configs.moving_avg
        self.decomp = series_decomp(kernel_size)

        # Embedding
        self.enc_embedding = DataEmbedding_wo_pos(configs.enc_in, configs.d_model, configs.embed, configs.freq,
                                                  configs.dropout)
        self.dec_embedding = DataEmbedding_wo_pos(configs.dec_in, configs.d_model, configs.embed, configs.freq,
                                                  configs.dropout)

        # Encoder
        self.encoder = Encoder(
            [
                EncoderLayer(
                    AutoCorrelationLayer(
                        AutoCorrelation(False, configs.factor, attention_dropout=configs.dropout,
                                        output_attention=configs.output_attention, bug=bug),
                        configs.d_model, configs.n_heads),
                    configs.d_model,
                    configs.d_ff,
                    moving_avg=configs.moving_avg,
                    dropout=configs.dropout,
                    activation=configs.activation
                ) for l in range(configs.e_layers)
            ],
            norm_layer=my_Layernorm(configs.d_model)
        )
        # Decoder
        self.decoder = Decoder(
            [
                DecoderLayer(
                    AutoCorrelationLayer(
                        AutoCorrelation(True, configs.factor, attention_dropout=configs.dropout,
                                        output_attention=False, bug=bug),
                        configs.d_model, configs.n_heads),
                    AutoCorrelationLayer(
                        AutoCorrelation(False, configs.factor, attention_dropout=configs.dropout,
                                        output_attention=False, bug=bug),
                        configs.d_model, configs.n_heads),
                    configs.d_model,
                    configs.c_out,
                    configs.d_ff,
                    moving_avg=configs.moving_avg,
                    dropout=configs.dropout,
                    activation=configs.activation,
                )
                for l in range(configs.d_layers)
            ],
            norm_layer=my_Layernorm(configs.d_model),
            projection=nn.Linear(configs.d_model, configs.c_out, bias=True)
        )

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec,
                enc_self_mask=None, dec_self_mask=None, dec_enc_mask=None):
        # decomp init
        mean = torch.mean(x_enc, dim=1).unsqueeze(1).repeat(1, self.pred_len, 1)
        zeros = torch.zeros([x_dec.shape[0], self.pred_len, x_dec.shape[2]], device=x_enc.device)
        seasonal_init, trend_init = self.decomp(x_enc)
        # decoder input
        trend_init = torch.cat([trend_init[:, -self.label_len:, :], mean], dim=1)
        seasonal_init = torch.cat([seasonal_init[:, -self.label_len:, :], zeros], dim=1)
        # enc
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        enc_out, attns = self.encoder(enc_out, attn_mask=enc_self_mask)
        # dec
        dec_out = self.dec_embedding(seasonal_init, x_mark_dec)
        seasonal_part, trend_part = self.decoder(dec_out, enc_out, x_mask=dec_self_mask, cross_mask=dec_enc_mask,
                                                 trend=trend_init)
        # final
        dec_out = trend_part + seasonal_part

        if self.output_attention:
            return dec_out[:, -self.pred_len:, :], attns
        else:
            return dec_out[:, -self.pred_len:, :]  # [B, L, D]


# ---- data_provider/data_loader.py (Dataset_ETT_hour), utils/timefeatures.py -------------------------------------

class StandardScaler:
    """(port) sklearn.preprocessing.StandardScaler written out (population std, as sklearn)."""

    def fit(self, data):
        self.mean_ = data.mean(0)
        self.scale_ = data.std(0)
        return self

    def transform(self, data):
        return (data - self.mean_) / self.scale_

    def inverse_transform(self, data):
        return data * self.scale_ + self.mean_


def time_features(dates, freq='h'):
    """(port) utils/timefeatures.py for freq 'h': HourOfDay, DayOfWeek, DayOfMonth, DayOfYear in [-0.5, 0.5]."""
    return np.vstack([dates.hour / 23.0 - 0.5, dates.dayofweek / 6.0 - 0.5, (dates.day - 1) / 30.0 - 0.5,
                      (dates.dayofyear - 1) / 365.0 - 0.5])


class Dataset_ETT_hour(Dataset):
    def __init__(self, root_path, flag='train', size=None,
                 features='S', data_path='ETTh1.csv',
                 target='OT', scale=True, timeenc=0, freq='h'):
        # size [seq_len, label_len, pred_len]
        # info
        if size == None:
            self.seq_len = 24 * 4 * 4
            self.label_len = 24 * 4
            self.pred_len = 24 * 4
        else:
            self.seq_len = size[0]
            self.label_len = size[1]
            self.pred_len = size[2]
        # init
        assert flag in ['train', 'test', 'val']
        type_map = {'train': 0, 'val': 1, 'test': 2}
        self.set_type = type_map[flag]

        self.features = features
        self.target = target
        self.scale = scale
        self.timeenc = timeenc
        self.freq = freq

        self.root_path = root_path
        self.data_path = data_path
        self.__read_data__()

    def __read_data__(self):
        self.scaler = StandardScaler()
        df_raw = pd.read_csv(io.StringIO(self.data_path))

        border1s = [0, 12 * 30 * 24 - self.seq_len, 12 * 30 * 24 + 4 * 30 * 24 - self.seq_len]
        border2s = [12 * 30 * 24, 12 * 30 * 24 + 4 * 30 * 24, 12 * 30 * 24 + 8 * 30 * 24]
        border1 = border1s[self.set_type]
        border2 = border2s[self.set_type]

        if self.features == 'M' or self.features == 'MS':
            cols_data = df_raw.columns[1:]
            df_data = df_raw[cols_data]
        elif self.features == 'S':
            df_data = df_raw[[self.target]]

        if self.scale:
            train_data = df_data[border1s[0]:border2s[0]]
            self.scaler.fit(train_data.values)
            data = self.scaler.transform(df_data.values)
        else:
            data = df_data.values

        df_stamp = df_raw[['date']][border1:border2]
        df_stamp['date'] = pd.to_datetime(df_stamp.date)
        data_stamp = time_features(pd.to_datetime(df_stamp['date'].values), freq=self.freq)
        data_stamp = data_stamp.transpose(1, 0)

        self.data_x = data[border1:border2]
        self.data_y = data[border1:border2]
        self.data_stamp = data_stamp

    def __getitem__(self, index):
        s_begin = index
        s_end = s_begin + self.seq_len
        r_begin = s_end - self.label_len
        r_end = r_begin + self.label_len + self.pred_len

        seq_x = self.data_x[s_begin:s_end]
        seq_y = self.data_y[r_begin:r_end]
        seq_x_mark = self.data_stamp[s_begin:s_end]
        seq_y_mark = self.data_stamp[r_begin:r_end]

        return seq_x, seq_y, seq_x_mark, seq_y_mark

    def __len__(self):
        return len(self.data_x) - self.seq_len - self.pred_len + 1


def make_ett_csv(seed, rows=20 * 30 * 24):
    """(port) an ETTh1-shaped hourly table: daily + weekly cycles per column, slow drift, noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    dates = pd.date_range("2016-07-01 00:00:00", periods=rows, freq="h")
    cols = {"date": dates.strftime("%Y-%m-%d %H:%M:%S")}
    for j, name in enumerate(["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]):
        a_d, a_w = rng.uniform(1, 3), rng.uniform(0.5, 1.5)
        p_d, p_w = rng.uniform(0, 2 * np.pi, 2)
        drift = rng.uniform(-1, 1) * np.sin(2 * np.pi * t / rows)
        cols[name] = (a_d * np.sin(2 * np.pi * t / 24 + p_d) + a_w * np.sin(2 * np.pi * t / 168 + p_w) + drift
                      + 0.2 * rng.standard_normal(rows) + 5 * j)
    return pd.DataFrame(cols).to_csv(index=False, float_format="%.3f")


# ---- exp/exp_main.py, utils/tools.py -----------------------------------------------------------------------------

def adjust_learning_rate(optimizer, epoch, args):
    if args.lradj == 'type1':
        lr_adjust = {epoch: args.learning_rate * (0.5 ** ((epoch - 1) // 1))}
    elif args.lradj == 'type2':
        lr_adjust = {
            2: 5e-5, 4: 1e-5, 6: 5e-6, 8: 1e-6,
            10: 5e-7, 15: 1e-7, 20: 5e-8
        }
    if epoch in lr_adjust.keys():
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = Configs()
    device = torch.device('cpu')
    csv = make_ett_csv(seed)

    def data_provider(args, flag):
        timeenc = 0 if args.embed != 'timeF' else 1
        shuffle_flag = flag == 'train'
        drop_last = flag == 'train'
        data_set = Dataset_ETT_hour(root_path=None, data_path=csv, flag=flag,
                                    size=[args.seq_len, args.label_len, args.pred_len],
                                    features=args.features, target=args.target, timeenc=timeenc, freq=args.freq)
        data_loader = DataLoader(data_set, batch_size=args.batch_size, shuffle=shuffle_flag, num_workers=0,
                                 drop_last=drop_last, generator=torch.Generator().manual_seed(seed))
        return data_set, data_loader

    train_data, train_loader = data_provider(args, flag='train')
    model = Model(args, bug=bug).float()
    model_optim = optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()

    def _predict(batch_x, batch_y, batch_x_mark, batch_y_mark):
        # decoder input
        dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
        dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float().to(device)
        outputs = model(batch_x, batch_x_mark, dec_inp, batch_y_mark)
        if args.output_attention:
            outputs = outputs[0]

        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, -args.pred_len:, f_dim:]
        if bug == "targets_from_window_start":
            batch_y = batch_y[:, :args.pred_len, f_dim:].to(device)
        else:
            batch_y = batch_y[:, -args.pred_len:, f_dim:].to(device)
        return outputs, batch_y

    state = {"epoch": 0, "it": iter(train_loader)}
    model.train()

    def train_step():
        try:
            batch_x, batch_y, batch_x_mark, batch_y_mark = next(state["it"])
        except StopIteration:
            state["epoch"] += 1
            adjust_learning_rate(model_optim, state["epoch"] + 1, args)
            model.train()
            state["it"] = iter(train_loader)
            batch_x, batch_y, batch_x_mark, batch_y_mark = next(state["it"])
        if bug != "zero_grad_dropped":
            model_optim.zero_grad()
        batch_x = batch_x.float().to(device)

        batch_y = batch_y.float().to(device)
        batch_x_mark = batch_x_mark.float().to(device)
        batch_y_mark = batch_y_mark.float().to(device)

        outputs, batch_y = _predict(batch_x, batch_y, batch_x_mark, batch_y_mark)

        loss = criterion(outputs, batch_y)
        loss.backward()
        model_optim.step()
        return loss.detach()

    # the user's batch: the first training windows, as the model takes them
    bx, by, bxm, bym = next(iter(DataLoader(train_data, batch_size=args.batch_size)))
    bx, by, bxm, bym = bx.float(), by.float(), bxm.float(), bym.float()
    dec_inp = torch.cat([by[:, :args.label_len, :], torch.zeros_like(by[:, -args.pred_len:, :])], dim=1)
    f_dim = -1 if args.features == 'MS' else 0
    if bug == "targets_from_window_start":
        target = by[:, :args.pred_len, f_dim:]
    else:
        target = by[:, -args.pred_len:, f_dim:]
    batch = ((bx, bxm, dec_inp, bym), target)

    def loss_fn(outputs, targets):
        return criterion(outputs[:, -args.pred_len:, f_dim:], targets)

    def eval_fn(model, batch):
        """vali's body on one batch."""
        model.eval()
        with torch.no_grad():
            (x, xm, dinp, ym), y = batch
            outputs = model(x, xm, dinp, ym)
            loss = criterion(outputs[:, -args.pred_len:, f_dim:].detach().cpu(), y.detach().cpu())
        model.train()
        return float(loss)

    return Program(name="autoformer_etth", model=model, batch=batch, loss_fn=loss_fn, optimizer=model_optim,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the targets cut from the start of ``batch_y`` (``[:, :pred_len]``) instead of its end (classic index slip):
    # ``batch_y`` begins ``label_len`` steps inside the input window, so the model is fitted to reproduce steps it
    # was given rather than the horizon.
    Bug("targets_from_window_start", functools.partial(_build, bug="targets_from_window_start"), "learning_ledger",
        ("TASK",)),
    # the time-delay aggregation's ``[B, H, E, L]`` result reshaped to ``[B, L, H, E]`` instead of permuted (classic
    # view-for-permute slip): every Auto-Correlation block mixes time steps and channels.
    Bug("delays_reshaped_not_permuted", functools.partial(_build, bug="delays_reshaped_not_permuted"),
        "tensor_trace", ("encoder.attn_layers.0.attention",)),
    # ``model_optim.zero_grad()`` left out (classic): every step applies the sum of all past gradients.
    # Every parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

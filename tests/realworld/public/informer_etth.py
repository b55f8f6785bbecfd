"""Informer (ProbSparse self-attention, self-attention distilling with ``ConvLayer``s, a generative decoder fed a
start token of ``label_len`` known values followed by zeros, mixed decoder self-attention) trained by
``Exp_Informer.train``: Adam lr 1e-4, ``nn.MSELoss`` on the last ``pred_len`` steps, validation and test losses at
the end of each epoch, learning rate halved every epoch (``lradj`` type1). Multivariate forecasting (features M).

Source: https://github.com/zhouhaoyi/Informer2020
Commit: 29f2a739226a509202a092b464163da81fa74960
Files: main_informer.py (the defaults), scripts/ETTh1.sh (the run), exp/exp_informer.py, models/model.py,
models/attn.py, models/encoder.py, models/decoder.py, models/embed.py, utils/masking.py, utils/tools.py,
utils/timefeatures.py, data/data_loader.py (Dataset_Custom)
License: Apache-2.0 (full text in LICENSES/zhouhaoyi-Informer2020.txt)
Domain: time series (long-sequence forecasting, ProbSparse attention)

Kept as written: ``Informer`` (encoder of ``EncoderLayer``s with ``ProbAttention``, ``ConvLayer`` distilling between
them, decoder ``DecoderLayer`` with ProbSparse masked self-attention (``mix=True``) and full cross-attention,
``projection``), ``FullAttention``, ``ProbAttention`` (``_prob_QK`` sampling, ``_get_initial_context``,
``_update_context``), ``AttentionLayer``, ``TriangularCausalMask``, ``ProbMask``, ``DataEmbedding`` (circular-padded
``TokenEmbedding``, ``PositionalEmbedding``, ``TimeFeatureEmbedding`` for ``embed='timeF'``); ``StandardScaler``
and ``adjust_learning_rate``; ``Dataset_Custom``'s borders (70/10/20 split, the scaler fit on the training part)
and ``__getitem__`` (``r_begin = s_end - label_len``); the hourly time features (HourOfDay, DayOfWeek, DayOfMonth,
DayOfYear in [-0.5, 0.5]); ``Exp_Informer`` (``_get_data``'s loaders, ``_select_optimizer``,
``_select_criterion``, ``vali``, ``train``'s loop body, ``_process_one_batch`` with ``padding=0``); main_informer.py's
defaults (e_layers 2, d_layers 1, dropout 0.05, attn prob, embed timeF, activation gelu, distil, mix, batch_size 32,
learning_rate 1e-4, lradj type1) and the first ETTh1 M run of scripts/ETTh1.sh (seq_len 48, label_len 48,
pred_len 24, factor 3).

Deviations from the original:
- sizes: d_model 512 -> 32, n_heads 8 -> 4, d_ff 2048 -> 64;
- data: the ETTh1 csv is replaced by a synthetic hourly multivariate series made from ``seed`` (7 channels: daily
  and weekly sinusoids with random phases and amplitudes, a slow trend and noise; the last channel, the target
  "OT", a mix of the others), 1000 hourly time stamps from 2016-07-01; the dataset reads it from memory instead of
  ``pd.read_csv``; ``time_features`` is the ``timeenc=1`` path for ``freq='h'`` written out with the four feature
  classes it selects (pandas' ``day_of_week`` / ``day_of_year`` for the deprecated ``dayofweek`` / ``dayofyear``);
- the device is the CPU (``use_gpu`` false); ``use_amp``, multi-GPU and ``inverse`` are off, as in the defaults;
- ``EarlyStopping`` (it saves checkpoints to disk) and the final reload of the best checkpoint are dropped; the
  validation and test losses are still computed at the end of each epoch and the learning rate adjusted;
- one ``train_step`` is one iteration of ``train``'s batch loop; printing and timing are dropped; ``eval_fn`` is
  ``vali``'s loss on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: B008, C408, F841, FURB136, PLR0402, RUF059, SIM118, UP004, UP008, UP039
# (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types
from math import sqrt

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- utils/masking.py ---------------------------------------------------------------------------------------------

class TriangularCausalMask():
    def __init__(self, B, L, device="cpu"):
        mask_shape = [B, 1, L, L]
        with torch.no_grad():
            self._mask = torch.triu(torch.ones(mask_shape, dtype=torch.bool), diagonal=1).to(device)

    @property
    def mask(self):
        return self._mask


class ProbMask():
    def __init__(self, B, H, L, index, scores, device="cpu"):
        _mask = torch.ones(L, scores.shape[-1], dtype=torch.bool).to(device).triu(1)
        _mask_ex = _mask[None, None, :].expand(B, H, L, scores.shape[-1])
        indicator = _mask_ex[torch.arange(B)[:, None, None],
                             torch.arange(H)[None, :, None],
                             index, :].to(device)
        self._mask = indicator.view(scores.shape).to(device)

    @property
    def mask(self):
        return self._mask


# ---- models/attn.py -----------------------------------------------------------------------------------------------

class FullAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.1, output_attention=False):
        super(FullAttention, self).__init__()
        self.scale = scale
        self.mask_flag = mask_flag
        self.output_attention = output_attention
        self.dropout = nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values, attn_mask):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        scale = self.scale or 1./sqrt(E)

        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if self.mask_flag:
            if attn_mask is None:
                attn_mask = TriangularCausalMask(B, L, device=queries.device)

            scores.masked_fill_(attn_mask.mask, -np.inf)

        A = self.dropout(torch.softmax(scale * scores, dim=-1))
        V = torch.einsum("bhls,bshd->blhd", A, values)

        if self.output_attention:
            return (V.contiguous(), A)
        else:
            return (V.contiguous(), None)


class ProbAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.1, output_attention=False, bug=None):
        super(ProbAttention, self).__init__()
        self.factor = factor
        self.scale = scale
        self.mask_flag = mask_flag
        self.output_attention = output_attention
        self.dropout = nn.Dropout(attention_dropout)
        self.bug = bug

    def _prob_QK(self, Q, K, sample_k, n_top): # n_top: c*ln(L_q)
        # Q [B, H, L, D]
        B, H, L_K, E = K.shape
        _, _, L_Q, _ = Q.shape

        # calculate the sampled Q_K
        K_expand = K.unsqueeze(-3).expand(B, H, L_Q, L_K, E)
        index_sample = torch.randint(L_K, (L_Q, sample_k)) # real U = U_part(factor*ln(L_k))*L_q
        K_sample = K_expand[:, :, torch.arange(L_Q).unsqueeze(1), index_sample, :]
        Q_K_sample = torch.matmul(Q.unsqueeze(-2), K_sample.transpose(-2, -1)).squeeze(-2)

        # find the Top_k query with sparisty measurement
        M = Q_K_sample.max(-1)[0] - torch.div(Q_K_sample.sum(-1), L_K)
        M_top = M.topk(n_top, sorted=False)[1]

        # use the reduced Q to calculate Q_K
        Q_reduce = Q[torch.arange(B)[:, None, None],
                     torch.arange(H)[None, :, None],
                     M_top, :] # factor*ln(L_q)
        Q_K = torch.matmul(Q_reduce, K.transpose(-2, -1)) # factor*ln(L_q)*L_k

        return Q_K, M_top

    def _get_initial_context(self, V, L_Q):
        B, H, L_V, D = V.shape
        if not self.mask_flag:
            # V_sum = V.sum(dim=-2)
            V_sum = V.mean(dim=-2)
            contex = V_sum.unsqueeze(-2).expand(B, H, L_Q, V_sum.shape[-1]).clone()
        else: # use mask
            assert(L_Q == L_V) # requires that L_Q == L_V, i.e. for self-attention only
            contex = V.cumsum(dim=-2)
        return contex

    def _update_context(self, context_in, V, scores, index, L_Q, attn_mask):
        B, H, L_V, D = V.shape

        if self.mask_flag:
            attn_mask = ProbMask(B, H, L_Q, index, scores, device=V.device)
            scores.masked_fill_(attn_mask.mask, -np.inf)

        attn = torch.softmax(scores, dim=-1) # nn.Softmax(dim=-1)(scores)

        context_in[torch.arange(B)[:, None, None],
                   torch.arange(H)[None, :, None],
                   index, :] = torch.matmul(attn, V).type_as(context_in)
        if self.output_attention:
            attns = (torch.ones([B, H, L_V, L_V])/L_V).type_as(attn).to(attn.device)
            attns[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :] = attn
            return (context_in, attns)
        else:
            return (context_in, None)

    def forward(self, queries, keys, values, attn_mask):
        B, L_Q, H, D = queries.shape
        _, L_K, _, _ = keys.shape

        queries = queries.transpose(2,1)
        keys = keys.transpose(2,1)
        values = values.transpose(2,1)

        U_part = self.factor * np.ceil(np.log(L_K)).astype('int').item() # c*ln(L_k)
        u = self.factor * np.ceil(np.log(L_Q)).astype('int').item() # c*ln(L_q)

        U_part = U_part if U_part<L_K else L_K
        u = u if u<L_Q else L_Q

        scores_top, index = self._prob_QK(queries, keys, sample_k=U_part, n_top=u)

        # add scale factor
        scale = self.scale or 1./sqrt(D)
        if scale is not None:
            scores_top = scores_top * scale
        # get the context
        context = self._get_initial_context(values, L_Q)
        # update the context with selected top_k queries
        context, attn = self._update_context(context, values, scores_top, index, L_Q, attn_mask)

        if self.bug == "prob_context_not_transposed":
            # the context returned as [B, H, L, D]: AttentionLayer's view(B, L, -1) then mixes heads and positions
            return context.contiguous(), attn
        return context.transpose(2,1).contiguous(), attn


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads,
                 d_keys=None, d_values=None, mix=False):
        super(AttentionLayer, self).__init__()

        d_keys = d_keys or (d_model//n_heads)
        d_values = d_values or (d_model//n_heads)

        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_values * n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)
        self.n_heads = n_heads
        self.mix = mix

    def forward(self, queries, keys, values, attn_mask):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads

        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)

        out, attn = self.inner_attention(
            queries,
            keys,
            values,
            attn_mask
        )
        if self.mix:
            out = out.transpose(2,1).contiguous()
        out = out.view(B, L, -1)

        return self.out_projection(out), attn


# ---- models/embed.py ----------------------------------------------------------------------------------------------

class PositionalEmbedding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super(PositionalEmbedding, self).__init__()
        # Compute the positional encodings once in log space.
        pe = torch.zeros(max_len, d_model).float()
        pe.require_grad = False

        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()

        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)

        pe = pe.unsqueeze(0)
        self.register_buffer('pe', pe)

    def forward(self, x):
        return self.pe[:, :x.size(1)]


class TokenEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super(TokenEmbedding, self).__init__()
        padding = 1 if torch.__version__>='1.5.0' else 2
        self.tokenConv = nn.Conv1d(in_channels=c_in, out_channels=d_model,
                                    kernel_size=3, padding=padding, padding_mode='circular')
        for m in self.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight,mode='fan_in',nonlinearity='leaky_relu')

    def forward(self, x):
        x = self.tokenConv(x.permute(0, 2, 1)).transpose(1,2)
        return x


class TimeFeatureEmbedding(nn.Module):
    def __init__(self, d_model, embed_type='timeF', freq='h'):
        super(TimeFeatureEmbedding, self).__init__()

        freq_map = {'h':4, 't':5, 's':6, 'm':1, 'a':1, 'w':2, 'd':3, 'b':3}
        d_inp = freq_map[freq]
        self.embed = nn.Linear(d_inp, d_model)

    def forward(self, x):
        return self.embed(x)


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, embed_type='fixed', freq='h', dropout=0.1):
        super(DataEmbedding, self).__init__()

        self.value_embedding = TokenEmbedding(c_in=c_in, d_model=d_model)
        self.position_embedding = PositionalEmbedding(d_model=d_model)
        self.temporal_embedding = TimeFeatureEmbedding(d_model=d_model, embed_type=embed_type, freq=freq)  # embed_type 'timeF'

        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = self.value_embedding(x) + self.position_embedding(x) + self.temporal_embedding(x_mark)

        return self.dropout(x)


# ---- models/encoder.py --------------------------------------------------------------------------------------------

class ConvLayer(nn.Module):
    def __init__(self, c_in):
        super(ConvLayer, self).__init__()
        padding = 1 if torch.__version__>='1.5.0' else 2
        self.downConv = nn.Conv1d(in_channels=c_in,
                                  out_channels=c_in,
                                  kernel_size=3,
                                  padding=padding,
                                  padding_mode='circular')
        self.norm = nn.BatchNorm1d(c_in)
        self.activation = nn.ELU()
        self.maxPool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        x = self.downConv(x.permute(0, 2, 1))
        x = self.norm(x)
        x = self.activation(x)
        x = self.maxPool(x)
        x = x.transpose(1,2)
        return x


class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff=None, dropout=0.1, activation="relu"):
        super(EncoderLayer, self).__init__()
        d_ff = d_ff or 4*d_model
        self.attention = attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x, attn_mask=None):
        # x [B, L, D]
        new_x, attn = self.attention(
            x, x, x,
            attn_mask = attn_mask
        )
        x = x + self.dropout(new_x)

        y = x = self.norm1(x)
        y = self.dropout(self.activation(self.conv1(y.transpose(-1,1))))
        y = self.dropout(self.conv2(y).transpose(-1,1))

        return self.norm2(x+y), attn


class Encoder(nn.Module):
    def __init__(self, attn_layers, conv_layers=None, norm_layer=None):
        super(Encoder, self).__init__()
        self.attn_layers = nn.ModuleList(attn_layers)
        self.conv_layers = nn.ModuleList(conv_layers) if conv_layers is not None else None
        self.norm = norm_layer

    def forward(self, x, attn_mask=None):
        # x [B, L, D]
        attns = []
        if self.conv_layers is not None:
            for attn_layer, conv_layer in zip(self.attn_layers, self.conv_layers):
                x, attn = attn_layer(x, attn_mask=attn_mask)
                x = conv_layer(x)
                attns.append(attn)
            x, attn = self.attn_layers[-1](x, attn_mask=attn_mask)
            attns.append(attn)
        else:
            for attn_layer in self.attn_layers:
                x, attn = attn_layer(x, attn_mask=attn_mask)
                attns.append(attn)

        if self.norm is not None:
            x = self.norm(x)

        return x, attns


# ---- models/decoder.py --------------------------------------------------------------------------------------------

class DecoderLayer(nn.Module):
    def __init__(self, self_attention, cross_attention, d_model, d_ff=None,
                 dropout=0.1, activation="relu"):
        super(DecoderLayer, self).__init__()
        d_ff = d_ff or 4*d_model
        self.self_attention = self_attention
        self.cross_attention = cross_attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x, cross, x_mask=None, cross_mask=None):
        x = x + self.dropout(self.self_attention(
            x, x, x,
            attn_mask=x_mask
        )[0])
        x = self.norm1(x)

        x = x + self.dropout(self.cross_attention(
            x, cross, cross,
            attn_mask=cross_mask
        )[0])

        y = x = self.norm2(x)
        y = self.dropout(self.activation(self.conv1(y.transpose(-1,1))))
        y = self.dropout(self.conv2(y).transpose(-1,1))

        return self.norm3(x+y)


class Decoder(nn.Module):
    def __init__(self, layers, norm_layer=None):
        super(Decoder, self).__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm_layer

    def forward(self, x, cross, x_mask=None, cross_mask=None):
        for layer in self.layers:
            x = layer(x, cross, x_mask=x_mask, cross_mask=cross_mask)

        if self.norm is not None:
            x = self.norm(x)

        return x


# ---- models/model.py ----------------------------------------------------------------------------------------------

class Informer(nn.Module):
    def __init__(self, enc_in, dec_in, c_out, seq_len, label_len, out_len,
                factor=5, d_model=512, n_heads=8, e_layers=3, d_layers=2, d_ff=512,
                dropout=0.0, attn='prob', embed='fixed', freq='h', activation='gelu',
                output_attention = False, distil=True, mix=True,
                device=torch.device('cuda:0'), bug=None):
        super(Informer, self).__init__()
        self.pred_len = out_len
        self.attn = attn
        self.output_attention = output_attention

        # Encoding
        self.enc_embedding = DataEmbedding(enc_in, d_model, embed, freq, dropout)
        self.dec_embedding = DataEmbedding(dec_in, d_model, embed, freq, dropout)
        # Attention
        Attn = functools.partial(ProbAttention, bug=bug) if attn=='prob' else FullAttention
        # Encoder
        self.encoder = Encoder(
            [
                EncoderLayer(
                    AttentionLayer(Attn(False, factor, attention_dropout=dropout, output_attention=output_attention),
                                d_model, n_heads, mix=False),
                    d_model,
                    d_ff,
                    dropout=dropout,
                    activation=activation
                ) for l in range(e_layers)
            ],
            [
                ConvLayer(
                    d_model
                ) for l in range(e_layers-1)
            ] if distil else None,
            norm_layer=torch.nn.LayerNorm(d_model)
        )
        # Decoder
        self.decoder = Decoder(
            [
                DecoderLayer(
                    AttentionLayer(Attn(True, factor, attention_dropout=dropout, output_attention=False),
                                d_model, n_heads, mix=mix),
                    AttentionLayer(FullAttention(False, factor, attention_dropout=dropout, output_attention=False),
                                d_model, n_heads, mix=False),
                    d_model,
                    d_ff,
                    dropout=dropout,
                    activation=activation,
                )
                for l in range(d_layers)
            ],
            norm_layer=torch.nn.LayerNorm(d_model)
        )
        self.projection = nn.Linear(d_model, c_out, bias=True)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec,
                enc_self_mask=None, dec_self_mask=None, dec_enc_mask=None):
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        enc_out, attns = self.encoder(enc_out, attn_mask=enc_self_mask)

        dec_out = self.dec_embedding(x_dec, x_mark_dec)
        dec_out = self.decoder(dec_out, enc_out, x_mask=dec_self_mask, cross_mask=dec_enc_mask)
        dec_out = self.projection(dec_out)

        if self.output_attention:
            return dec_out[:,-self.pred_len:,:], attns
        else:
            return dec_out[:,-self.pred_len:,:] # [B, L, D]


# ---- utils/tools.py, utils/timefeatures.py ------------------------------------------------------------------------

def adjust_learning_rate(optimizer, epoch, args):
    # lr = args.learning_rate * (0.2 ** (epoch // 2))
    if args.lradj=='type1':
        lr_adjust = {epoch: args.learning_rate * (0.5 ** ((epoch-1) // 1))}
    elif args.lradj=='type2':
        lr_adjust = {
            2: 5e-5, 4: 1e-5, 6: 5e-6, 8: 1e-6,
            10: 5e-7, 15: 1e-7, 20: 5e-8
        }
    if epoch in lr_adjust.keys():
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


class StandardScaler():
    def __init__(self):
        self.mean = 0.
        self.std = 1.

    def fit(self, data):
        self.mean = data.mean(0)
        self.std = data.std(0)

    def transform(self, data):
        mean = torch.from_numpy(self.mean).type_as(data).to(data.device) if torch.is_tensor(data) else self.mean
        std = torch.from_numpy(self.std).type_as(data).to(data.device) if torch.is_tensor(data) else self.std
        return (data - mean) / std


def time_features(dates, timeenc=1, freq='h'):
    """timeenc=1, freq='h': [HourOfDay, DayOfWeek, DayOfMonth, DayOfYear], each in [-0.5, 0.5]."""
    dates = pd.to_datetime(dates.date.values)
    feats = [dates.hour / 23.0 - 0.5,  # HourOfDay
             dates.day_of_week / 6.0 - 0.5,  # DayOfWeek (index.dayofweek)
             (dates.day - 1) / 30.0 - 0.5,  # DayOfMonth
             (dates.day_of_year - 1) / 365.0 - 0.5]  # DayOfYear (index.dayofyear)
    return np.vstack(feats).transpose(1,0)


# ---- data/data_loader.py: Dataset_Custom -------------------------------------------------------------------------

def make_series(seed, n=1000, channels=7):
    """(port) the synthetic ETTh1 stand-in: a DataFrame ['date', 6 features, 'OT']."""
    rng = np.random.RandomState(seed)
    t = np.arange(n)
    cols = {}
    for c in range(channels - 1):
        a1, a2 = rng.uniform(0.5, 2.0, 2)
        p1, p2 = rng.uniform(0, 2 * np.pi, 2)
        cols[f"f{c}"] = (a1 * np.sin(2 * np.pi * t / 24 + p1) + a2 * np.sin(2 * np.pi * t / 168 + p2)
                         + 0.001 * rng.randn() * t + 0.1 * rng.randn(n))
    w = rng.uniform(-1, 1, channels - 1)
    cols["OT"] = sum(w[c] * cols[f"f{c}"] for c in range(channels - 1)) + 0.1 * rng.randn(n)
    df = pd.DataFrame(cols)
    df.insert(0, "date", pd.date_range("2016-07-01", periods=n, freq="h").astype(str))
    return df


class Dataset_Custom(Dataset):
    def __init__(self, df_raw, flag='train', size=None,
                 features='S', target='OT', scale=True, inverse=False, timeenc=0, freq='h', cols=None):
        # size [seq_len, label_len, pred_len]
        # info
        if size == None:
            self.seq_len = 24*4*4
            self.label_len = 24*4
            self.pred_len = 24*4
        else:
            self.seq_len = size[0]
            self.label_len = size[1]
            self.pred_len = size[2]
        # init
        assert flag in ['train', 'test', 'val']
        type_map = {'train':0, 'val':1, 'test':2}
        self.set_type = type_map[flag]

        self.features = features
        self.target = target
        self.scale = scale
        self.inverse = inverse
        self.timeenc = timeenc
        self.freq = freq
        self.cols=cols
        self.__read_data__(df_raw)

    def __read_data__(self, df_raw):
        self.scaler = StandardScaler()
        '''
        df_raw.columns: ['date', ...(other features), target feature]
        '''
        cols = list(df_raw.columns); cols.remove(self.target); cols.remove('date')
        df_raw = df_raw[['date']+cols+[self.target]]

        num_train = int(len(df_raw)*0.7)
        num_test = int(len(df_raw)*0.2)
        num_vali = len(df_raw) - num_train - num_test
        border1s = [0, num_train-self.seq_len, len(df_raw)-num_test-self.seq_len]
        border2s = [num_train, num_train+num_vali, len(df_raw)]
        border1 = border1s[self.set_type]
        border2 = border2s[self.set_type]

        if self.features=='M' or self.features=='MS':
            cols_data = df_raw.columns[1:]
            df_data = df_raw[cols_data]
        elif self.features=='S':
            df_data = df_raw[[self.target]]

        if self.scale:
            train_data = df_data[border1s[0]:border2s[0]]
            self.scaler.fit(train_data.values)
            data = self.scaler.transform(df_data.values)
        else:
            data = df_data.values

        df_stamp = df_raw[['date']][border1:border2]
        df_stamp['date'] = pd.to_datetime(df_stamp.date)
        data_stamp = time_features(df_stamp, timeenc=self.timeenc, freq=self.freq)

        self.data_x = data[border1:border2]
        if self.inverse:
            self.data_y = df_data.values[border1:border2]
        else:
            self.data_y = data[border1:border2]
        self.data_stamp = data_stamp

    def __getitem__(self, index):
        s_begin = index
        s_end = s_begin + self.seq_len
        r_begin = s_end - self.label_len
        r_end = r_begin + self.label_len + self.pred_len

        seq_x = self.data_x[s_begin:s_end]
        if self.inverse:
            seq_y = np.concatenate([self.data_x[r_begin:r_begin+self.label_len], self.data_y[r_begin+self.label_len:r_end]], 0)
        else:
            seq_y = self.data_y[r_begin:r_end]
        seq_x_mark = self.data_stamp[s_begin:s_end]
        seq_y_mark = self.data_stamp[r_begin:r_end]

        return seq_x, seq_y, seq_x_mark, seq_y_mark

    def __len__(self):
        return len(self.data_x) - self.seq_len- self.pred_len + 1


# ---- exp/exp_informer.py ------------------------------------------------------------------------------------------

ARGS = dict(model='informer', data='custom', features='M', target='OT', freq='h', seq_len=48, label_len=48,
            pred_len=24, enc_in=7, dec_in=7, c_out=7, d_model=32, n_heads=4, e_layers=2, d_layers=1, d_ff=64,
            factor=3, padding=0, distil=True, dropout=0.05, attn='prob', embed='timeF', activation='gelu',
            output_attention=False, mix=True, num_workers=0, train_epochs=6, batch_size=32, patience=3,
            learning_rate=0.0001, lradj='type1', use_amp=False, inverse=False, use_gpu=False, cols=None)


class Exp_Informer(object):
    def __init__(self, args, df_raw, seed, bug=None):
        self.args = args
        self.df_raw = df_raw
        self.seed = seed
        self.bug = bug
        self.device = torch.device('cpu')
        self.model = self._build_model().to(self.device)

    def _build_model(self):
        e_layers = self.args.e_layers
        model = Informer(
            self.args.enc_in,
            self.args.dec_in,
            self.args.c_out,
            self.args.seq_len,
            self.args.label_len,
            self.args.pred_len,
            self.args.factor,
            self.args.d_model,
            self.args.n_heads,
            e_layers, # self.args.e_layers,
            self.args.d_layers,
            self.args.d_ff,
            self.args.dropout,
            self.args.attn,
            self.args.embed,
            self.args.freq,
            self.args.activation,
            self.args.output_attention,
            self.args.distil,
            self.args.mix,
            self.device,
            bug=self.bug,
        ).float()
        return model

    def _get_data(self, flag):
        args = self.args

        Data = Dataset_Custom
        timeenc = 0 if args.embed!='timeF' else 1

        if flag == 'test':
            shuffle_flag = False; drop_last = True; batch_size = args.batch_size; freq=args.freq
        else:
            shuffle_flag = True; drop_last = True; batch_size = args.batch_size; freq=args.freq
        data_set = Data(
            self.df_raw,
            flag=flag,
            size=[args.seq_len, args.label_len, args.pred_len],
            features=args.features,
            target=args.target,
            inverse=args.inverse,
            timeenc=timeenc,
            freq=freq,
            cols=args.cols
        )
        data_loader = DataLoader(
            data_set,
            batch_size=batch_size,
            shuffle=shuffle_flag,
            num_workers=args.num_workers,
            drop_last=drop_last,
            generator=torch.Generator().manual_seed(self.seed))

        return data_set, data_loader

    def _select_optimizer(self):
        model_optim = optim.Adam(self.model.parameters(), lr=self.args.learning_rate)
        return model_optim

    def _select_criterion(self):
        criterion =  nn.MSELoss()
        return criterion

    def vali(self, vali_data, vali_loader, criterion):
        self.model.eval()
        total_loss = []
        for i, (batch_x,batch_y,batch_x_mark,batch_y_mark) in enumerate(vali_loader):
            pred, true = self._process_one_batch(
                vali_data, batch_x, batch_y, batch_x_mark, batch_y_mark)
            loss = criterion(pred.detach().cpu(), true.detach().cpu())
            total_loss.append(loss)
        total_loss = np.average(total_loss)
        self.model.train()
        return total_loss

    def decoder_input(self, batch_y):
        # (port) _process_one_batch's decoder input lines, shared with the Program's batch
        batch_y = batch_y.float()
        if self.bug == "dec_inp_future_not_zeroed":
            # the whole target window fed to the decoder: its last pred_len steps are the values to predict
            return batch_y.float().to(self.device)
        if self.args.padding==0:
            dec_inp = torch.zeros([batch_y.shape[0], self.args.pred_len, batch_y.shape[-1]]).float()
        elif self.args.padding==1:
            dec_inp = torch.ones([batch_y.shape[0], self.args.pred_len, batch_y.shape[-1]]).float()
        dec_inp = torch.cat([batch_y[:,:self.args.label_len,:], dec_inp], dim=1).float().to(self.device)
        return dec_inp

    def _process_one_batch(self, dataset_object, batch_x, batch_y, batch_x_mark, batch_y_mark):
        batch_x = batch_x.float().to(self.device)
        batch_y = batch_y.float()

        batch_x_mark = batch_x_mark.float().to(self.device)
        batch_y_mark = batch_y_mark.float().to(self.device)

        # decoder input
        dec_inp = self.decoder_input(batch_y)
        # encoder - decoder
        if self.args.output_attention:
            outputs = self.model(batch_x, batch_x_mark, dec_inp, batch_y_mark)[0]
        else:
            outputs = self.model(batch_x, batch_x_mark, dec_inp, batch_y_mark)
        f_dim = -1 if self.args.features=='MS' else 0
        batch_y = batch_y[:,-self.args.pred_len:,f_dim:].to(self.device)

        return outputs, batch_y


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    args = types.SimpleNamespace(**ARGS)
    exp = Exp_Informer(args, make_series(seed), seed, bug=bug)

    # Exp_Informer.train, before the epoch loop
    train_data, train_loader = exp._get_data(flag = 'train')
    vali_data, vali_loader = exp._get_data(flag = 'val')
    test_data, test_loader = exp._get_data(flag = 'test')
    model_optim = exp._select_optimizer()
    criterion =  exp._select_criterion()

    state = {"it": None, "epoch": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch
                vali_loss = exp.vali(vali_data, vali_loader, criterion)
                test_loss = exp.vali(test_data, test_loader, criterion)
                adjust_learning_rate(model_optim, state["epoch"]+1, args)
                state["epoch"] += 1
            exp.model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        (batch_x,batch_y,batch_x_mark,batch_y_mark) = next_batch()
        if bug != "zero_grad_after_backward":
            model_optim.zero_grad()
        pred, true = exp._process_one_batch(
            train_data, batch_x, batch_y, batch_x_mark, batch_y_mark)
        loss = criterion(pred, true)
        loss.backward()
        if bug == "zero_grad_after_backward":
            model_optim.zero_grad()
        model_optim.step()
        return loss.detach()

    def eval_fn(model, batch):
        inputs, true = batch
        model.eval()
        with torch.no_grad():
            pred = model(**inputs)
        model.train()
        return float(criterion(pred.detach().cpu(), true.detach().cpu()))

    batch_x, batch_y, batch_x_mark, batch_y_mark = next(iter(DataLoader(train_data, batch_size=args.batch_size)))
    inputs = {"x_enc": batch_x.float(), "x_mark_enc": batch_x_mark.float(), "x_dec": exp.decoder_input(batch_y),
              "x_mark_dec": batch_y_mark.float()}
    batch = (inputs, batch_y.float()[:, -args.pred_len:, 0:])

    return Program(name="informer_etth", model=exp.model, batch=batch, loss_fn=criterion, optimizer=model_optim,
                   train_step=train_step, eval_fn=eval_fn, task="regression", loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # ProbAttention returns its context as [B, H, L, D]; AttentionLayer's ``out.view(B, L, -1)`` then merges heads
    # and positions (the repository's own bug, https://github.com/zhouhaoyi/Informer2020/issues/100, fixed by the
    # transpose; the decoder's ``mix`` attention transposes back, so the encoder's layers are the ones hit).
    Bug("prob_context_not_transposed", functools.partial(_build, bug="prob_context_not_transposed"), "tensor_trace",
        ("encoder.attn_layers.0.attention",)),
    # the decoder input built from the whole target window instead of the start token and zeros: the values to
    # forecast are fed to the model (classic target leak).
    Bug("dec_inp_future_not_zeroed", functools.partial(_build, bug="dec_inp_future_not_zeroed"), "learning_ledger",
        ("TASK",)),
    # ``model_optim.zero_grad()`` moved between ``backward`` and ``step``: every step applies a zero gradient
    # (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe",
        ("enc_embedding.value_embedding.tokenConv.weight",)),
]

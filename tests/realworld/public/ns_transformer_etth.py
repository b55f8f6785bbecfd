"""Non-stationary Transformer (series stationarization: each input window normalised by its own mean and standard
deviation and the forecast de-normalised; De-stationary Attention: the pre-softmax scores rescaled by a learned
positive ``tau`` and shifted by a learned ``delta``, both predicted from the raw window's statistics by ``Projector``
MLPs; a vanilla encoder-decoder Transformer with a start-token decoder) trained by ``Exp_Main.train``: Adam lr 1e-4,
``nn.MSELoss`` on the last ``pred_len`` steps, validation and test losses at the end of each epoch, the learning
rate halved every epoch (``lradj`` type1). Multivariate forecasting (features M) on ETTh2, the first run of the
repository's ``scripts/ETT_script/ns_Transformer.sh``.

Source: https://github.com/thuml/Nonstationary_Transformers
Commit: c4ec40675d11d50b3d9923657f408d0db6f90f56
Files: ns_models/ns_Transformer.py, ns_layers/SelfAttention_Family.py (DSAttention, AttentionLayer),
ns_layers/Transformer_EncDec.py (Encoder, EncoderLayer, Decoder, DecoderLayer), layers/Embed.py (DataEmbedding and
its pieces), utils/masking.py (TriangularCausalMask), exp/exp_main.py, data_provider/data_factory.py,
data_provider/data_loader.py (Dataset_ETT_hour), utils/tools.py (adjust_learning_rate), utils/timefeatures.py,
run.py (the defaults), scripts/ETT_script/ns_Transformer.sh (the run)
License: MIT (Copyright (c) 2022 THUML @ Tsinghua University; full text in
LICENSES/thuml-Nonstationary_Transformers.txt)
Domain: time series (multivariate long-term forecasting, non-stationary Transformer)

Kept as written: ``Model`` (normalisation, ``x_dec_new`` built from the normalised input, ``tau_learner`` /
``delta_learner``, de-normalisation), ``Projector``, ``DSAttention``, ``AttentionLayer``, ``Encoder``,
``EncoderLayer``, ``Decoder``, ``DecoderLayer`` (delta only in the encoder self-attention and the cross-attention),
``DataEmbedding`` (circular token convolution, sinusoidal positions, time features), ``TriangularCausalMask``;
``Dataset_ETT_hour``, ``data_provider``'s loaders (shuffled, drop_last; batch size 1 for test), ``_select_optimizer``,
``_select_criterion``, ``vali``, ``train``'s loop body (``zero_grad`` first, ``dec_inp`` from the label window and
zeros, ``f_dim``, MSE on the last ``pred_len`` steps, backward, step) and ``adjust_learning_rate``; run.py's
defaults (dropout 0.05, factor 1, embed timeF, activation gelu, lradj type1, batch_size 32, learning_rate 1e-4) and
the script's first run (seq_len 96, label_len 48, pred_len 96, e_layers 2, d_layers 1, enc_in/dec_in/c_out 7,
p_hidden_dims 256 256, p_hidden_layers 2).

Deviations from the original:
- sizes: seq_len 96 -> 48, label_len 48 -> 24, pred_len 96 -> 24, d_model 512 -> 32, n_heads 8 -> 4,
  d_ff 2048 -> 64, p_hidden_dims [256, 256] -> [32, 32]; learning_rate 1e-4 -> 1e-3 so that the 30 steps of the
  self-check show the loss falling (the original trains up to 10 epochs of 8,000 windows);
- data: the ETTh2 csv is replaced by a synthetic hourly series made from ``seed`` with the file's layout (a date
  column and 7 channels, the last "OT"; 20 months of hours, so the borders are the original ones): daily and weekly
  sinusoids with random phases and amplitudes, a slow trend and noise, "OT" a mix of the others; the dataset reads
  the DataFrame from memory instead of ``pd.read_csv``;
- sklearn is not available: ``StandardScaler`` is written out (fit: column mean and population std; transform);
  ``time_features`` is the ``freq='h'`` path of utils/timefeatures.py written out (HourOfDay, DayOfWeek, DayOfMonth,
  DayOfYear in [-0.5, 0.5]);
- only the classes the model builds are copied (no ``DSProbAttention``, ``ConvLayer``, ``FixedEmbedding`` /
  ``TemporalEmbedding``); the AMP path (``use_amp`` off) and ``output_attention`` (off) stay as written; the device
  is the CPU; ``num_workers`` 10 -> 0;
- ``EarlyStopping`` (it saves checkpoints to disk) and the final reload of the best checkpoint are dropped; the
  validation and test losses are still computed at the end of each epoch and the learning rate adjusted; the
  validation and test sets are limited to their first 64 windows (size for 2 CPU cores);
- one ``train_step`` is one iteration of ``train``'s batch loop; printing and timing are dropped; ``eval_fn`` is
  ``vali``'s loss on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, F841, PLR0402, RUF059, SIM118, UP008, UP039
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
from torch.utils.data import DataLoader, Dataset, Subset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# run.py defaults, with the ETTh2 script's values (sizes reduced, see the docstring)
ARGS = dict(
    data='ETTh2', features='M', target='OT', freq='h',
    seq_len=48, label_len=24, pred_len=24,
    enc_in=7, dec_in=7, c_out=7, d_model=32, n_heads=4, e_layers=2, d_layers=1, d_ff=64,
    moving_avg=25, factor=1, distil=True, dropout=0.05, embed='timeF', activation='gelu', output_attention=False,
    num_workers=0, train_epochs=10, batch_size=32, patience=3, learning_rate=0.001, loss='mse', lradj='type1',
    use_amp=False, use_gpu=False, p_hidden_dims=[32, 32], p_hidden_layers=2,
)
EVAL_WINDOWS = 64


# ---- utils/masking.py -------------------------------------------------------------------------------------------

class TriangularCausalMask():
    def __init__(self, B, L, device="cpu"):
        mask_shape = [B, 1, L, L]
        with torch.no_grad():
            self._mask = torch.triu(torch.ones(mask_shape, dtype=torch.bool), diagonal=1).to(device)

    @property
    def mask(self):
        return self._mask


# ---- layers/Embed.py --------------------------------------------------------------------------------------------

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
        padding = 1 if torch.__version__ >= '1.5.0' else 2
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


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, embed_type='fixed', freq='h', dropout=0.1):
        super(DataEmbedding, self).__init__()

        self.value_embedding = TokenEmbedding(c_in=c_in, d_model=d_model)
        self.position_embedding = PositionalEmbedding(d_model=d_model)
        assert embed_type == 'timeF'  # (port) TemporalEmbedding (embed 'fixed'/'learned') is not copied
        self.temporal_embedding = TimeFeatureEmbedding(
            d_model=d_model, embed_type=embed_type, freq=freq)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = self.value_embedding(x) + self.temporal_embedding(x_mark) + self.position_embedding(x)
        return self.dropout(x)


# ---- ns_layers/SelfAttention_Family.py --------------------------------------------------------------------------

class DSAttention(nn.Module):
    '''De-stationary Attention'''
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.1, output_attention=False):
        super(DSAttention, self).__init__()
        self.scale = scale
        self.mask_flag = mask_flag
        self.output_attention = output_attention
        self.dropout = nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values, attn_mask, tau=None, delta=None):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        scale = self.scale or 1. / sqrt(E)

        tau = 1.0 if tau is None else tau.unsqueeze(1).unsqueeze(1)  # B x 1 x 1 x 1
        delta = 0.0 if delta is None else delta.unsqueeze(1).unsqueeze(1)  # B x 1 x 1 x S
        
        # De-stationary Attention, rescaling pre-softmax score with learned de-stationary factors
        scores = torch.einsum("blhe,bshe->bhls", queries, keys) * tau + delta

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


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads, d_keys=None,
                 d_values=None):
        super(AttentionLayer, self).__init__()

        d_keys = d_keys or (d_model // n_heads)
        d_values = d_values or (d_model // n_heads)

        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_values * n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values, attn_mask, tau=None, delta=None):
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
            attn_mask,
            tau, delta
        )
        out = out.view(B, L, -1)

        return self.out_projection(out), attn


# ---- ns_layers/Transformer_EncDec.py ---------------------------------------------------------------------------

class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff=None, dropout=0.1, activation="relu"):
        super(EncoderLayer, self).__init__()
        d_ff = d_ff or 4 * d_model
        self.attention = attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x, attn_mask=None, tau=None, delta=None):
        new_x, attn = self.attention(
            x, x, x,
            attn_mask=attn_mask,
            tau=tau, delta=delta
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

    def forward(self, x, attn_mask=None, tau=None, delta=None):
        # x [B, L, D]
        attns = []
        if self.conv_layers is not None:
            # The reason why we only import delta for the first attn_block of Encoder
            # is to integrate Informer into our framework, where row size of attention of Informer is changing each layer
            # and inconsistent to the sequence length of the initial input,
            # then no way to add delta to every row, so we make delta=0.0 (See our Appendix E.2)
            # 
            for i, (attn_layer, conv_layer) in enumerate(zip(self.attn_layers, self.conv_layers)):
                delta = delta if i==0 else None
                x, attn = attn_layer(x, attn_mask=attn_mask, tau=tau, delta=delta)
                x = conv_layer(x)
                attns.append(attn)
            x, attn = self.attn_layers[-1](x, tau=tau, delta=None)
            attns.append(attn)
        else:
            for attn_layer in self.attn_layers:
                x, attn = attn_layer(x, attn_mask=attn_mask, tau=tau, delta=delta)
                attns.append(attn)

        if self.norm is not None:
            x = self.norm(x)

        return x, attns


class DecoderLayer(nn.Module):
    def __init__(self, self_attention, cross_attention, d_model, d_ff=None,
                 dropout=0.1, activation="relu"):
        super(DecoderLayer, self).__init__()
        d_ff = d_ff or 4 * d_model
        self.self_attention = self_attention
        self.cross_attention = cross_attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x, cross, x_mask=None, cross_mask=None, tau=None, delta=None):
        # Note that delta only used for Self-Attention(x_enc with x_enc) 
        # and Cross-Attention(x_enc with x_dec), 
        # but not suitable for Self-Attention(x_dec with x_dec)
        
        x = x + self.dropout(self.self_attention(
            x, x, x,
            attn_mask=x_mask,
            tau=tau, delta=None
        )[0])  
        x = self.norm1(x)

        x = x + self.dropout(self.cross_attention(
            x, cross, cross,
            attn_mask=cross_mask,
            tau=tau, delta=delta
        )[0])

        y = x = self.norm2(x)
        y = self.dropout(self.activation(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))

        return self.norm3(x + y)


class Decoder(nn.Module):
    def __init__(self, layers, norm_layer=None, projection=None):
        super(Decoder, self).__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm_layer
        self.projection = projection

    def forward(self, x, cross, x_mask=None, cross_mask=None, tau=None, delta=None):
        for layer in self.layers:
            x = layer(x, cross, x_mask=x_mask, cross_mask=cross_mask, tau=tau, delta=delta)

        if self.norm is not None:
            x = self.norm(x)

        if self.projection is not None:
            x = self.projection(x)
        return x


# ---- ns_models/ns_Transformer.py --------------------------------------------------------------------------------

class Projector(nn.Module):
    '''
    MLP to learn the De-stationary factors
    '''
    def __init__(self, enc_in, seq_len, hidden_dims, hidden_layers, output_dim, kernel_size=3):
        super(Projector, self).__init__()

        padding = 1 if torch.__version__ >= '1.5.0' else 2
        self.series_conv = nn.Conv1d(in_channels=seq_len, out_channels=1, kernel_size=kernel_size, padding=padding, padding_mode='circular', bias=False)

        layers = [nn.Linear(2 * enc_in, hidden_dims[0]), nn.ReLU()]
        for i in range(hidden_layers-1):
            layers += [nn.Linear(hidden_dims[i], hidden_dims[i+1]), nn.ReLU()]
        
        layers += [nn.Linear(hidden_dims[-1], output_dim, bias=False)]
        self.backbone = nn.Sequential(*layers)

    def forward(self, x, stats):
        # x:     B x S x E
        # stats: B x 1 x E
        # y:     B x O
        batch_size = x.shape[0]
        x = self.series_conv(x)          # B x 1 x E
        x = torch.cat([x, stats], dim=1) # B x 2 x E
        x = x.view(batch_size, -1) # B x 2E
        y = self.backbone(x)       # B x O

        return y

class Model(nn.Module):
    """
    Non-stationary Transformer
    """
    def __init__(self, configs):
        super(Model, self).__init__()
        self.pred_len = configs.pred_len
        self.seq_len = configs.seq_len
        self.label_len = configs.label_len
        self.output_attention = configs.output_attention

        # Embedding
        self.enc_embedding = DataEmbedding(configs.enc_in, configs.d_model, configs.embed, configs.freq,
                                           configs.dropout)
        self.dec_embedding = DataEmbedding(configs.dec_in, configs.d_model, configs.embed, configs.freq,
                                           configs.dropout)
        # Encoder
        self.encoder = Encoder(
            [
                EncoderLayer(
                    AttentionLayer(
                        DSAttention(False, configs.factor, attention_dropout=configs.dropout,
                                      output_attention=configs.output_attention), configs.d_model, configs.n_heads),
                    configs.d_model,
                    configs.d_ff,
                    dropout=configs.dropout,
                    activation=configs.activation
                ) for l in range(configs.e_layers)
            ],
            norm_layer=torch.nn.LayerNorm(configs.d_model)
        )
        # Decoder
        self.decoder = Decoder(
            [
                DecoderLayer(
                    AttentionLayer(
                        DSAttention(True, configs.factor, attention_dropout=configs.dropout, output_attention=False),
                        configs.d_model, configs.n_heads),
                    AttentionLayer(
                        DSAttention(False, configs.factor, attention_dropout=configs.dropout, output_attention=False),
                        configs.d_model, configs.n_heads),
                    configs.d_model,
                    configs.d_ff,
                    dropout=configs.dropout,
                    activation=configs.activation,
                )
                for l in range(configs.d_layers)
            ],
            norm_layer=torch.nn.LayerNorm(configs.d_model),
            projection=nn.Linear(configs.d_model, configs.c_out, bias=True)
        )

        self.tau_learner   = Projector(enc_in=configs.enc_in, seq_len=configs.seq_len, hidden_dims=configs.p_hidden_dims, hidden_layers=configs.p_hidden_layers, output_dim=1)
        self.delta_learner = Projector(enc_in=configs.enc_in, seq_len=configs.seq_len, hidden_dims=configs.p_hidden_dims, hidden_layers=configs.p_hidden_layers, output_dim=configs.seq_len)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec,
                enc_self_mask=None, dec_self_mask=None, dec_enc_mask=None):

        x_raw = x_enc.clone().detach()

        # Normalization
        mean_enc = x_enc.mean(1, keepdim=True).detach() # B x 1 x E
        x_enc = x_enc - mean_enc
        std_enc = torch.sqrt(torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5).detach() # B x 1 x E
        x_enc = x_enc / std_enc
        x_dec_new = torch.cat([x_enc[:, -self.label_len: , :], torch.zeros_like(x_dec[:, -self.pred_len:, :])], dim=1).to(x_enc.device).clone()

        tau = self.tau_learner(x_raw, std_enc).exp()     # B x S x E, B x 1 x E -> B x 1, positive scalar    
        delta = self.delta_learner(x_raw, mean_enc)      # B x S x E, B x 1 x E -> B x S

        # Model Inference
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        enc_out, attns = self.encoder(enc_out, attn_mask=enc_self_mask, tau=tau, delta=delta)

        dec_out = self.dec_embedding(x_dec_new, x_mark_dec)
        dec_out = self.decoder(dec_out, enc_out, x_mask=dec_self_mask, cross_mask=dec_enc_mask, tau=tau, delta=delta)

        # De-normalization
        dec_out = dec_out * std_enc + mean_enc

        if self.output_attention:
            return dec_out[:, -self.pred_len:, :], attns
        else:
            return dec_out[:, -self.pred_len:, :]  # [B, L, D]


# ---- utils/tools.py, utils/timefeatures.py --------------------------------------------------------------------

def adjust_learning_rate(optimizer, epoch, args):
    # lr = args.learning_rate * (0.2 ** (epoch // 2))
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


def time_features(dates, freq='h'):
    """(port) utils/timefeatures.py for freq='h': [HourOfDay, DayOfWeek, DayOfMonth, DayOfYear] in [-0.5, 0.5]."""
    return np.vstack([dates.hour / 23.0 - 0.5,
                      dates.day_of_week / 6.0 - 0.5,
                      (dates.day - 1) / 30.0 - 0.5,
                      (dates.day_of_year - 1) / 365.0 - 0.5])


class StandardScaler:
    """(port) sklearn.preprocessing.StandardScaler: column mean and population standard deviation."""

    def fit(self, X):
        self.mean_ = X.mean(0)
        self.scale_ = X.std(0)
        return self

    def transform(self, X):
        return (X - self.mean_) / self.scale_


# ---- data_provider/data_loader.py: Dataset_ETT_hour -----------------------------------------------------------

def make_ett(seed, n=20 * 30 * 24, channels=7):
    """(port) the synthetic ETTh1 stand-in: a DataFrame ['date', 6 load channels, 'OT']."""
    rng = np.random.RandomState(seed)
    t = np.arange(n)
    cols = {}
    for c in range(channels - 1):
        a1, a2 = rng.uniform(0.5, 2.0, 2)
        p1, p2 = rng.uniform(0, 2 * np.pi, 2)
        cols[f"f{c}"] = (a1 * np.sin(2 * np.pi * t / 24 + p1) + a2 * np.sin(2 * np.pi * t / 168 + p2)
                         + 0.0002 * rng.randn() * t + 0.1 * rng.randn(n))
    w = rng.uniform(-1, 1, channels - 1)
    cols["OT"] = sum(w[c] * cols[f"f{c}"] for c in range(channels - 1)) + 0.1 * rng.randn(n)
    df = pd.DataFrame(cols)
    df.insert(0, "date", pd.date_range("2016-07-01", periods=n, freq="h").astype(str))
    return df


class Dataset_ETT_hour(Dataset):
    def __init__(self, df_raw, flag='train', size=None,
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

        self.df_raw = df_raw
        self.__read_data__()

    def __read_data__(self):
        self.scaler = StandardScaler()
        df_raw = self.df_raw.copy()  # (port) pd.read_csv(os.path.join(self.root_path, self.data_path))

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
        if self.timeenc == 0:
            raise NotImplementedError("(port) embed='timeF' gives timeenc=1")
        elif self.timeenc == 1:
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

    def inverse_transform(self, data):
        return data * self.scaler.scale_ + self.scaler.mean_


# ---- data_provider/data_factory.py ----------------------------------------------------------------------------

def data_provider(args, flag, df_raw):
    Data = Dataset_ETT_hour
    timeenc = 0 if args.embed != 'timeF' else 1

    if flag == 'test':
        shuffle_flag = False
        drop_last = True
        batch_size = 1  # bsz=1 for evaluation
        freq = args.freq
    else:
        shuffle_flag = True
        drop_last = True
        batch_size = args.batch_size  # bsz for train and valid
        freq = args.freq

    data_set = Data(
        df_raw,
        flag=flag,
        size=[args.seq_len, args.label_len, args.pred_len],
        features=args.features,
        target=args.target,
        timeenc=timeenc,
        freq=freq,
    )
    if flag != 'train':  # (port) the first EVAL_WINDOWS windows only
        data_set = Subset(data_set, range(EVAL_WINDOWS))
    data_loader = DataLoader(
        data_set,
        batch_size=batch_size,
        shuffle=shuffle_flag,
        num_workers=args.num_workers,
        drop_last=drop_last)
    return data_set, data_loader


# ---- exp/exp_main.py --------------------------------------------------------------------------------------------

class Exp_Main:
    def __init__(self, args, df_raw, bug=None):
        self.args = args
        self.df_raw = df_raw
        self.bug = bug
        self.device = torch.device('cpu')
        self.model = self._build_model().to(self.device)

    def _build_model(self):
        model = Model(self.args).float()
        return model

    def _get_data(self, flag):
        data_set, data_loader = data_provider(self.args, flag, self.df_raw)
        return data_set, data_loader

    def _select_optimizer(self):
        model_optim = optim.Adam(self.model.parameters(), lr=self.args.learning_rate)
        return model_optim

    def _select_criterion(self):
        criterion = nn.MSELoss()
        return criterion

    def target(self, batch_y):
        f_dim = -1 if self.args.features == 'MS' else 0
        if self.bug == "target_from_label_window":
            # the first pred_len steps of batch_y (the label window, already in the input) instead of the last
            return batch_y[:, :self.args.pred_len, f_dim:].to(self.device)
        return batch_y[:, -self.args.pred_len:, f_dim:].to(self.device)

    def vali(self, vali_data, vali_loader, criterion):
        total_loss = []
        self.model.eval()
        with torch.no_grad():
            for i, (batch_x, batch_y, batch_x_mark, batch_y_mark) in enumerate(vali_loader):
                batch_x = batch_x.float().to(self.device)
                batch_y = batch_y.float()

                batch_x_mark = batch_x_mark.float().to(self.device)
                batch_y_mark = batch_y_mark.float().to(self.device)

                # decoder input
                dec_inp = torch.zeros_like(batch_y[:, -self.args.pred_len:, :]).float()
                dec_inp = torch.cat([batch_y[:, :self.args.label_len, :], dec_inp], dim=1).float().to(self.device)
                # encoder - decoder
                if self.args.output_attention:
                    outputs = self.model(batch_x, batch_x_mark, dec_inp, batch_y_mark)[0]
                else:
                    outputs = self.model(batch_x, batch_x_mark, dec_inp, batch_y_mark)
                f_dim = -1 if self.args.features == 'MS' else 0
                outputs = outputs[:, -self.args.pred_len:, f_dim:]
                batch_y = self.target(batch_y)

                pred = outputs.detach().cpu()
                true = batch_y.detach().cpu()

                loss = criterion(pred, true)

                total_loss.append(loss)
        total_loss = np.average(total_loss)
        self.model.train()
        return total_loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    args = types.SimpleNamespace(**ARGS)
    exp = Exp_Main(args, make_ett(seed), bug=bug)

    # Exp_Main.train, before the epoch loop
    train_data, train_loader = exp._get_data(flag='train')
    vali_data, vali_loader = exp._get_data(flag='val')
    test_data, test_loader = exp._get_data(flag='test')
    model_optim = exp._select_optimizer()
    criterion = exp._select_criterion()

    state = {"it": None, "epoch": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch
                vali_loss = exp.vali(vali_data, vali_loader, criterion)
                test_loss = exp.vali(test_data, test_loader, criterion)
                adjust_learning_rate(model_optim, state["epoch"] + 1, args)
                state["epoch"] += 1
            exp.model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        batch_x, batch_y, batch_x_mark, batch_y_mark = next_batch()
        if bug != "zero_grad_after_backward":
            model_optim.zero_grad()
        batch_x = batch_x.float().to(exp.device)

        batch_y = batch_y.float().to(exp.device)
        batch_x_mark = batch_x_mark.float().to(exp.device)
        batch_y_mark = batch_y_mark.float().to(exp.device)

        # decoder input
        dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
        dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float().to(exp.device)

        # encoder - decoder
        if args.output_attention:
            outputs = exp.model(batch_x, batch_x_mark, dec_inp, batch_y_mark)[0]
        else:
            outputs = exp.model(batch_x, batch_x_mark, dec_inp, batch_y_mark)

        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, -args.pred_len:, f_dim:]
        batch_y = exp.target(batch_y)
        loss = criterion(outputs, batch_y)

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
    batch_y = batch_y.float()
    dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
    dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float()
    inputs = {"x_enc": batch_x.float(), "x_mark_enc": batch_x_mark.float(), "x_dec": dec_inp,
              "x_mark_dec": batch_y_mark.float()}
    batch = (inputs, exp.target(batch_y))

    return Program(name="ns_transformer_etth", model=exp.model, batch=batch, loss_fn=criterion,
                   optimizer=model_optim, train_step=train_step, eval_fn=eval_fn, task="regression",
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the target sliced from the front of batch_y, the label window that overlaps the input, instead of the last
    # pred_len steps (classic window-indexing slip).
    Bug("target_from_label_window", functools.partial(_build, bug="target_from_label_window"), "learning_ledger",
        ("TASK",)),
    # model_optim.zero_grad() moved between backward() and step() (classic): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

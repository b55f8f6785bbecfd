# ruff: noqa: UP008, UP039, UP004, RUF059, PLR0402
"""Anomaly Transformer (association discrepancy, minimax training) on a PSM-shaped multivariate series, from
thuml/Anomaly-Transformer.

Source: https://github.com/thuml/Anomaly-Transformer
Commit: b0ee470c8012bff857fb600462aec6209c4a18d9
Files: ``model/AnomalyTransformer.py``, ``model/attn.py``, ``model/embed.py``, ``solver.py`` (``my_kl_loss``,
``Solver.build_model``, ``Solver.train``), ``data_factory/data_loader.py`` (``PSMSegLoader``,
``get_loader_segment``), ``main.py``, ``scripts/PSM.sh``
License: MIT (Copyright (c) 2022 THUML @ Tsinghua University; full text in LICENSES/thuml-Anomaly-Transformer.txt)
Domain: time series, unsupervised anomaly detection (reconstruction with Anomaly-Attention: series association
from softmax attention, learnable Gaussian prior association from sigma, symmetric-KL association discrepancy,
minimax: ``(rec - k*series_loss).backward(retain_graph=True)`` then ``(rec + k*prior_loss).backward()``, one Adam step).

Kept as written: ``AnomalyTransformer`` (circular-padded conv token embedding + sinusoidal positions, encoder
layers of ``AttentionLayer(AnomalyAttention)`` + conv feed-forward, final LayerNorm, linear projection), the prior
``1/(sqrt(2 pi) sigma) exp(-d^2 / 2 sigma^2)`` with ``sigma = 3 ** (sigmoid(5 s) + 1e-5) - 1``, ``my_kl_loss``, the
train loop body (``zero_grad``, forward, the two discrepancies with their detaches, ``MSELoss`` reconstruction,
``loss1``/``loss2``, the two backward calls and the step), Adam with lr 1e-4, ``k`` 3, e_layers 3, dropout 0.0,
the PSM loader's windows (stride 1, shuffled), the scaler fit on the training part.

Deviations from the original:
- sizes: win_size 100 -> 16, input_c/output_c 25 -> 5, d_model 512 -> 32, n_heads 8 -> 4, d_ff 512 -> 32, batch
  size 256 -> 16, a training series of 400 steps.
- data: the PSM csv files are replaced by a synthetic 5-channel series made from ``seed`` (mixed sinusoids of
  different periods plus noise); ``StandardScaler`` (scikit-learn is not installed here) is written out as the
  training part's mean and standard deviation in numpy. The DataLoader shuffles with a generator seeded by ``seed``.
- the ``.cuda()`` calls (the distances table, the prior) stay on the CPU.
- ``train_step`` is one pass of the inner loop body of ``Solver.train`` on the next loader batch; it returns
  ``loss1 + loss2`` (the sum whose gradient the two backward calls accumulate; the original logs ``loss1``).
  Printing, timing, validation, early stopping, checkpoints and the per-epoch lr halving are left out (no epoch
  ends within a check).
- the declared ``loss_fn`` computes the same ``loss1 + loss2`` from the model's outputs and the input window.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from math import sqrt

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# ----- model/embed.py -----

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
    def __init__(self, c_in, d_model, bug=None):
        super(TokenEmbedding, self).__init__()
        padding = 1 if torch.__version__ >= '1.5.0' else 2
        self.tokenConv = nn.Conv1d(in_channels=c_in, out_channels=d_model,
                                   kernel_size=3, padding=padding, padding_mode='circular', bias=False)
        for m in self.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight, mode='fan_in', nonlinearity='leaky_relu')
        self.bug = bug

    def forward(self, x):
        if self.bug == "token_embedding_viewed_not_permuted":
            x = self.tokenConv(x.reshape(x.shape[0], x.shape[2], x.shape[1])).transpose(1, 2)
            return x
        x = self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)
        return x


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.0, bug=None):
        super(DataEmbedding, self).__init__()

        self.value_embedding = TokenEmbedding(c_in=c_in, d_model=d_model, bug=bug)
        self.position_embedding = PositionalEmbedding(d_model=d_model)

        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x):
        x = self.value_embedding(x) + self.position_embedding(x)
        return self.dropout(x)

# ----- model/attn.py -----

class TriangularCausalMask():
    def __init__(self, B, L, device="cpu"):
        mask_shape = [B, 1, L, L]
        with torch.no_grad():
            self._mask = torch.triu(torch.ones(mask_shape, dtype=torch.bool), diagonal=1).to(device)

    @property
    def mask(self):
        return self._mask


class AnomalyAttention(nn.Module):
    def __init__(self, win_size, mask_flag=True, scale=None, attention_dropout=0.0, output_attention=False):
        super(AnomalyAttention, self).__init__()
        self.scale = scale
        self.mask_flag = mask_flag
        self.output_attention = output_attention
        self.dropout = nn.Dropout(attention_dropout)
        window_size = win_size
        self.distances = torch.zeros((window_size, window_size))
        for i in range(window_size):
            for j in range(window_size):
                self.distances[i][j] = abs(i - j)

    def forward(self, queries, keys, values, sigma, attn_mask):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        scale = self.scale or 1. / sqrt(E)

        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if self.mask_flag:
            if attn_mask is None:
                attn_mask = TriangularCausalMask(B, L, device=queries.device)
            scores.masked_fill_(attn_mask.mask, -np.inf)
        attn = scale * scores

        sigma = sigma.transpose(1, 2)  # B L H ->  B H L
        window_size = attn.shape[-1]
        sigma = torch.sigmoid(sigma * 5) + 1e-5
        sigma = torch.pow(3, sigma) - 1
        sigma = sigma.unsqueeze(-1).repeat(1, 1, 1, window_size)  # B H L L
        prior = self.distances.unsqueeze(0).unsqueeze(0).repeat(sigma.shape[0], sigma.shape[1], 1, 1)
        prior = 1.0 / (math.sqrt(2 * math.pi) * sigma) * torch.exp(-prior ** 2 / 2 / (sigma ** 2))

        series = self.dropout(torch.softmax(attn, dim=-1))
        V = torch.einsum("bhls,bshd->blhd", series, values)

        if self.output_attention:
            return (V.contiguous(), series, prior, sigma)
        else:
            return (V.contiguous(), None)


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads, d_keys=None,
                 d_values=None):
        super(AttentionLayer, self).__init__()

        d_keys = d_keys or (d_model // n_heads)
        d_values = d_values or (d_model // n_heads)
        self.norm = nn.LayerNorm(d_model)
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model,
                                          d_keys * n_heads)
        self.key_projection = nn.Linear(d_model,
                                        d_keys * n_heads)
        self.value_projection = nn.Linear(d_model,
                                          d_values * n_heads)
        self.sigma_projection = nn.Linear(d_model,
                                          n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)

        self.n_heads = n_heads

    def forward(self, queries, keys, values, attn_mask):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads
        x = queries
        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)
        sigma = self.sigma_projection(x).view(B, L, H)

        out, series, prior, sigma = self.inner_attention(
            queries,
            keys,
            values,
            sigma,
            attn_mask
        )
        out = out.view(B, L, -1)

        return self.out_projection(out), series, prior, sigma

# ----- model/AnomalyTransformer.py -----

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

    def forward(self, x, attn_mask=None):
        new_x, attn, mask, sigma = self.attention(
            x, x, x,
            attn_mask=attn_mask
        )
        x = x + self.dropout(new_x)
        y = x = self.norm1(x)
        y = self.dropout(self.activation(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))

        return self.norm2(x + y), attn, mask, sigma


class Encoder(nn.Module):
    def __init__(self, attn_layers, norm_layer=None):
        super(Encoder, self).__init__()
        self.attn_layers = nn.ModuleList(attn_layers)
        self.norm = norm_layer

    def forward(self, x, attn_mask=None):
        # x [B, L, D]
        series_list = []
        prior_list = []
        sigma_list = []
        for attn_layer in self.attn_layers:
            x, series, prior, sigma = attn_layer(x, attn_mask=attn_mask)
            series_list.append(series)
            prior_list.append(prior)
            sigma_list.append(sigma)

        if self.norm is not None:
            x = self.norm(x)

        return x, series_list, prior_list, sigma_list


class AnomalyTransformer(nn.Module):
    def __init__(self, win_size, enc_in, c_out, d_model=512, n_heads=8, e_layers=3, d_ff=512,
                 dropout=0.0, activation='gelu', output_attention=True, bug=None):
        super(AnomalyTransformer, self).__init__()
        self.output_attention = output_attention

        # Encoding
        self.embedding = DataEmbedding(enc_in, d_model, dropout, bug=bug)

        # Encoder
        self.encoder = Encoder(
            [
                EncoderLayer(
                    AttentionLayer(
                        AnomalyAttention(win_size, False, attention_dropout=dropout, output_attention=output_attention),
                        d_model, n_heads),
                    d_model,
                    d_ff,
                    dropout=dropout,
                    activation=activation
                ) for l in range(e_layers)
            ],
            norm_layer=torch.nn.LayerNorm(d_model)
        )

        self.projection = nn.Linear(d_model, c_out, bias=True)

    def forward(self, x):
        enc_out = self.embedding(x)
        enc_out, series, prior, sigmas = self.encoder(enc_out)
        enc_out = self.projection(enc_out)

        if self.output_attention:
            return enc_out, series, prior, sigmas
        else:
            return enc_out  # [B, L, D]

# ----- solver.py -----

def my_kl_loss(p, q):
    res = p * (torch.log(p + 0.0001) - torch.log(q + 0.0001))
    return torch.mean(torch.sum(res, dim=-1), dim=1)

# ----- data_factory/data_loader.py (PSMSegLoader, train mode) -----

class PSMSegLoader(object):
    def __init__(self, data, win_size, step, mode="train"):
        self.mode = mode
        self.step = step
        self.win_size = win_size
        data = np.nan_to_num(data)
        # StandardScaler().fit(data).transform(data), written out
        data = (data - data.mean(0)) / data.std(0)
        self.train = data
        self.test_labels = np.zeros((data.shape[0], 1))

    def __len__(self):
        return (self.train.shape[0] - self.win_size) // self.step + 1

    def __getitem__(self, index):
        index = index * self.step
        return np.float32(self.train[index:index + self.win_size]), np.float32(self.test_labels[0:self.win_size])


def synthetic_psm(seed, length=400, channels=5):
    rng = np.random.default_rng(seed)
    t = np.arange(length)[:, None]
    periods = rng.uniform(6, 24, size=(1, 3))
    phases = rng.uniform(0, 2 * np.pi, size=(1, 3))
    base = np.sin(2 * np.pi * t / periods + phases)
    mix = rng.normal(size=(3, channels))
    return base @ mix + 0.1 * rng.normal(size=(length, channels))

# ----- main.py / scripts/PSM.sh configuration, sized down -----

lr = 1e-4
k = 3
win_size = 16
input_c = output_c = 5
batch_size = 16


def association_losses(series, prior, win_size=win_size):
    """The train loop's association-discrepancy lines, copied, for the declared ``loss_fn``."""
    # calculate Association discrepancy
    series_loss = 0.0
    prior_loss = 0.0
    for u in range(len(prior)):
        series_loss += (torch.mean(my_kl_loss(series[u], (
                prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(1, 1, 1,
                                                                                       win_size)).detach())) + torch.mean(
            my_kl_loss((prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(1, 1, 1,
                                                                                               win_size)).detach(),
                       series[u])))
        prior_loss += (torch.mean(my_kl_loss(
            (prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(1, 1, 1,
                                                                                    win_size)),
            series[u].detach())) + torch.mean(
            my_kl_loss(series[u].detach(), (
                    prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(1, 1, 1,
                                                                                           win_size)))))
    series_loss = series_loss / len(prior)
    prior_loss = prior_loss / len(prior)
    return series_loss, prior_loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    dataset = PSMSegLoader(synthetic_psm(seed), win_size, 1, mode='train')
    train_loader = DataLoader(dataset=dataset, batch_size=batch_size, shuffle=True, num_workers=0,
                              generator=torch.Generator().manual_seed(seed))

    model = AnomalyTransformer(win_size=win_size, enc_in=input_c, c_out=output_c, d_model=32, n_heads=4, e_layers=3,
                               d_ff=32, bug=bug)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    criterion = nn.MSELoss()
    model.train()

    def batches():
        while True:
            yield from train_loader

    it = batches()

    def train_step():
        input_data, labels = next(it)

        optimizer.zero_grad()
        input = input_data.float()

        output, series, prior, _ = model(input)

        # calculate Association discrepancy
        series_loss = 0.0
        prior_loss = 0.0
        for u in range(len(prior)):
            series_loss += (torch.mean(my_kl_loss(series[u], (
                    prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(1, 1, 1,
                                                                                           win_size)).detach())) + torch.mean(
                my_kl_loss((prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(1, 1, 1,
                                                                                                   win_size)).detach(),
                           series[u])))
            prior_loss += (torch.mean(my_kl_loss(
                (prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(1, 1, 1,
                                                                                        win_size)),
                series[u].detach())) + torch.mean(
                my_kl_loss(series[u].detach(), (
                        prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(1, 1, 1,
                                                                                               win_size)))))
        series_loss = series_loss / len(prior)
        prior_loss = prior_loss / len(prior)

        rec_loss = criterion(output, input)

        if bug == "minimax_signs_swapped":
            loss1 = rec_loss + k * series_loss
            loss2 = rec_loss - k * prior_loss
        else:
            loss1 = rec_loss - k * series_loss
            loss2 = rec_loss + k * prior_loss

        # Minimax strategy
        loss1.backward(retain_graph=True)
        loss2.backward()
        optimizer.step()
        return (loss1 + loss2).detach()

    def loss_fn(outputs, target):
        output, series, prior, _ = outputs
        series_loss, prior_loss = association_losses(series, prior)
        rec_loss = criterion(output, target)
        if bug == "minimax_signs_swapped":
            return (rec_loss + k * series_loss) + (rec_loss - k * prior_loss)
        return (rec_loss - k * series_loss) + (rec_loss + k * prior_loss)

    x0, _ = next(iter(DataLoader(dataset=dataset, batch_size=batch_size, shuffle=True,
                                 generator=torch.Generator().manual_seed(seed + 1))))
    return Program(name="anomalytransformer_psm", model=model, batch=(x0, x0), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the two phases' signs exchanged: the series association is pulled toward the prior and the prior pushed away
    # from it, the minimax run backwards (the sign convention questioned in
    # https://github.com/thuml/Anomaly-Transformer/issues/75).
    Bug("minimax_signs_swapped", functools.partial(_build, bug="minimax_signs_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic view-for-permute slip: the [B, L, C] window is reshaped to [B, C, L] instead of permuted before the
    # token convolution, mixing time steps and channels.
    Bug("token_embedding_viewed_not_permuted", functools.partial(_build, bug="token_embedding_viewed_not_permuted"),
        "tensor_trace", ("embedding.value_embedding",)),
]

"""iTransformer (the inverted Transformer: each variate's whole look-back window is embedded as one token by
``DataEmbedding_inverted``, full self-attention runs across variates, a linear ``projector`` maps each token to its
``pred_len`` future values; series normalised per window and de-normalised as in the Non-stationary Transformer)
trained by ``Exp_Long_Term_Forecast.train``: Adam lr 1e-4, ``nn.MSELoss`` on the last ``pred_len`` steps, the time
stamps fed as extra tokens, validation and test losses at the end of each epoch, the learning rate halved every epoch
(``lradj`` type1). Multivariate forecasting (features M) on ETTh1.

Source: https://github.com/thuml/iTransformer
Commit: c2426e68ca13f74aaec08045c5c724d8ad328124
Files: model/iTransformer.py, layers/Transformer_EncDec.py (Encoder, EncoderLayer), layers/SelfAttention_Family.py
(FullAttention, AttentionLayer), layers/Embed.py (DataEmbedding_inverted), experiments/exp_long_term_forecasting.py,
experiments/exp_basic.py, data_provider/data_factory.py, data_provider/data_loader.py (Dataset_ETT_hour),
utils/tools.py (adjust_learning_rate), utils/timefeatures.py, run.py (the defaults),
scripts/multivariate_forecasting/ETT/iTransformer_ETTh1.sh (the run)
License: MIT (Copyright (c) 2022 THUML @ Tsinghua University; full text in LICENSES/thuml-iTransformer.txt)
Domain: time series (multivariate long-term forecasting, variates as tokens)

Kept as written: ``Model`` (``use_norm`` normalisation and de-normalisation, ``forecast``, the covariate filter
``[:, :, :N]``), ``Encoder``, ``EncoderLayer`` (1x1 convolutions as the feed-forward), ``AttentionLayer``,
``FullAttention`` (``mask_flag=False``), ``DataEmbedding_inverted``; ``Dataset_ETT_hour`` (its borders: 12 months
train, 4 validation, 4 test; the scaler fit on the training part; ``__getitem__`` with ``r_begin = s_end -
label_len``), ``data_provider``'s loaders (shuffled, drop_last for train and validation; batch size 1 for test);
``_select_optimizer``, ``_select_criterion``, ``vali``, ``train``'s loop body (``zero_grad`` first, the decoder input
built though iTransformer ignores it, ``f_dim``, MSE, backward, step) and ``adjust_learning_rate``; run.py's defaults
(dropout 0.1, factor 1, embed timeF, activation gelu, use_norm, lradj type1, batch_size 32, learning_rate 1e-4) and
the first ETTh1 run of the script (seq_len 96, pred_len 96, e_layers 2, enc_in 7, d_model 256, d_ff 256).

Deviations from the original:
- sizes: seq_len 96 -> 48, label_len 48 -> 24, pred_len 96 -> 24, d_model 256 -> 32, d_ff 256 -> 32, n_heads 8 -> 4;
- data: the ETTh1 csv is replaced by a synthetic hourly series made from ``seed`` with the file's layout (a date
  column and 7 channels, the last "OT"; 20 months of hours, so the borders are the original ones): daily and weekly
  sinusoids with random phases and amplitudes, a slow trend and noise, "OT" a mix of the others; the dataset reads
  the DataFrame from memory instead of ``pd.read_csv``;
- sklearn is not available: ``StandardScaler`` is written out (fit: column mean and population std; transform);
  ``time_features`` is the ``freq='h'`` path of utils/timefeatures.py written out (HourOfDay, DayOfWeek, DayOfMonth,
  DayOfYear in [-0.5, 0.5]; pandas' ``day_of_week`` / ``day_of_year`` for ``dayofweek`` / ``dayofyear``);
- the device is the CPU (``use_gpu`` false); ``use_amp``, multi-GPU, ``output_attention`` and ``inverse`` are off,
  as in the defaults; ``num_workers`` 10 -> 0;
- ``EarlyStopping`` (it saves checkpoints to disk) and the final reload of the best checkpoint are dropped; the
  validation and test losses are still computed at the end of each epoch and the learning rate adjusted; the
  validation and test sets are limited to their first 64 windows (size for 2 CPU cores);
- one ``train_step`` is one iteration of ``train``'s batch loop; printing and timing are dropped; ``eval_fn`` is
  ``vali``'s loss on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, F841, PLR0402, RUF059, SIM118, UP008
# (the original's code style is kept as written)

from __future__ import annotations

import functools
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

# run.py defaults, with the ETTh1 script's values (sizes reduced, see the docstring)
ARGS = dict(
    data='ETTh1', features='M', target='OT', freq='h',
    seq_len=48, label_len=24, pred_len=24,
    enc_in=7, dec_in=7, c_out=7, d_model=32, n_heads=4, e_layers=2, d_layers=1, d_ff=32,
    factor=1, dropout=0.1, embed='timeF', activation='gelu', output_attention=False,
    num_workers=0, train_epochs=10, batch_size=32, patience=3, learning_rate=0.0001, loss='MSE', lradj='type1',
    use_amp=False, use_gpu=False, class_strategy='projection', use_norm=True,
)
EVAL_WINDOWS = 64


# ---- layers/SelfAttention_Family.py ---------------------------------------------------------------------------

class FullAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.1, output_attention=False):
        super(FullAttention, self).__init__()
        self.scale = scale
        self.mask_flag = mask_flag
        self.output_attention = output_attention
        self.dropout = nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values, attn_mask, tau=None, delta=None):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        scale = self.scale or 1. / sqrt(E)

        scores = torch.einsum("blhe,bshe->bhls", queries, keys)

        if self.mask_flag:
            raise NotImplementedError("(port) iTransformer builds FullAttention with mask_flag=False")

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
            tau=tau,
            delta=delta
        )
        out = out.view(B, L, -1)

        return self.out_projection(out), attn


# ---- layers/Transformer_EncDec.py -----------------------------------------------------------------------------

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
            for i, (attn_layer, conv_layer) in enumerate(zip(self.attn_layers, self.conv_layers)):
                delta = delta if i == 0 else None
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


# ---- layers/Embed.py ----------------------------------------------------------------------------------------------

class DataEmbedding_inverted(nn.Module):
    def __init__(self, c_in, d_model, embed_type='fixed', freq='h', dropout=0.1, bug=None):
        super(DataEmbedding_inverted, self).__init__()
        self.value_embedding = nn.Linear(c_in, d_model)
        self.dropout = nn.Dropout(p=dropout)
        self.bug = bug

    def forward(self, x, x_mark):
        if self.bug == "embedding_reshaped_not_permuted":
            # [B, L, N] -> [B, N, L] by reshape: each "variate token" is a run of interleaved values of all variates
            x = x.reshape(x.shape[0], x.shape[2], x.shape[1])
        else:
            x = x.permute(0, 2, 1)
        # x: [Batch Variate Time]
        if x_mark is None:
            x = self.value_embedding(x)
        else:
            # the potential to take covariates (e.g. timestamps) as tokens
            x = self.value_embedding(torch.cat([x, x_mark.permute(0, 2, 1)], 1))
        # x: [Batch Variate d_model]
        return self.dropout(x)


# ---- model/iTransformer.py ------------------------------------------------------------------------------------

class Model(nn.Module):
    """
    Paper link: https://arxiv.org/abs/2310.06625
    """

    def __init__(self, configs, bug=None):
        super(Model, self).__init__()
        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.output_attention = configs.output_attention
        self.use_norm = configs.use_norm
        # Embedding
        self.enc_embedding = DataEmbedding_inverted(configs.seq_len, configs.d_model, configs.embed, configs.freq,
                                                    configs.dropout, bug=bug)
        self.class_strategy = configs.class_strategy
        # Encoder-only architecture
        self.encoder = Encoder(
            [
                EncoderLayer(
                    AttentionLayer(
                        FullAttention(False, configs.factor, attention_dropout=configs.dropout,
                                      output_attention=configs.output_attention), configs.d_model, configs.n_heads),
                    configs.d_model,
                    configs.d_ff,
                    dropout=configs.dropout,
                    activation=configs.activation
                ) for l in range(configs.e_layers)
            ],
            norm_layer=torch.nn.LayerNorm(configs.d_model)
        )
        self.projector = nn.Linear(configs.d_model, configs.pred_len, bias=True)

    def forecast(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        if self.use_norm:
            # Normalization from Non-stationary Transformer
            means = x_enc.mean(1, keepdim=True).detach()
            x_enc = x_enc - means
            stdev = torch.sqrt(torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
            x_enc /= stdev

        _, _, N = x_enc.shape # B L N
        # B: batch_size;    E: d_model;
        # L: seq_len;       S: pred_len;
        # N: number of variate (tokens), can also includes covariates

        # Embedding
        # B L N -> B N E                (B L N -> B L E in the vanilla Transformer)
        enc_out = self.enc_embedding(x_enc, x_mark_enc) # covariates (e.g timestamp) can be also embedded as tokens

        # B N E -> B N E                (B L E -> B L E in the vanilla Transformer)
        # the dimensions of embedded time series has been inverted, and then processed by native attn, layernorm and ffn modules
        enc_out, attns = self.encoder(enc_out, attn_mask=None)

        # B N E -> B N S -> B S N
        dec_out = self.projector(enc_out).permute(0, 2, 1)[:, :, :N] # filter the covariates

        if self.use_norm:
            # De-Normalization from Non-stationary Transformer
            dec_out = dec_out * (stdev[:, 0, :].unsqueeze(1).repeat(1, self.pred_len, 1))
            dec_out = dec_out + (means[:, 0, :].unsqueeze(1).repeat(1, self.pred_len, 1))

        return dec_out, attns


    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec, mask=None):
        dec_out, attns = self.forecast(x_enc, x_mark_enc, x_dec, x_mark_dec)

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


# ---- experiments/exp_long_term_forecasting.py -----------------------------------------------------------------

class Exp_Long_Term_Forecast:
    def __init__(self, args, df_raw, bug=None):
        self.args = args
        self.df_raw = df_raw
        self.bug = bug
        self.device = torch.device('cpu')
        self.model = self._build_model().to(self.device)

    def _build_model(self):
        model = Model(self.args, bug=self.bug).float()
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

    def decoder_input(self, batch_y):
        # decoder input
        dec_inp = torch.zeros_like(batch_y[:, -self.args.pred_len:, :]).float()
        dec_inp = torch.cat([batch_y[:, :self.args.label_len, :], dec_inp], dim=1).float().to(self.device)
        return dec_inp

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
                batch_y = batch_y.float().to(self.device)
                if 'PEMS' in self.args.data or 'Solar' in self.args.data:
                    batch_x_mark = None
                    batch_y_mark = None
                else:
                    batch_x_mark = batch_x_mark.float().to(self.device)
                    batch_y_mark = batch_y_mark.float().to(self.device)

                # decoder input
                dec_inp = self.decoder_input(batch_y)
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
    exp = Exp_Long_Term_Forecast(args, make_ett(seed), bug=bug)

    # Exp_Long_Term_Forecast.train, before the epoch loop
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
        model_optim.zero_grad()
        batch_x = batch_x.float().to(exp.device)
        batch_y = batch_y.float().to(exp.device)
        batch_x_mark = batch_x_mark.float().to(exp.device)
        batch_y_mark = batch_y_mark.float().to(exp.device)

        # decoder input
        dec_inp = exp.decoder_input(batch_y)

        # encoder - decoder
        outputs = exp.model(batch_x, batch_x_mark, dec_inp, batch_y_mark)

        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, -args.pred_len:, f_dim:]
        batch_y = exp.target(batch_y)
        loss = criterion(outputs, batch_y)

        loss.backward()
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
    inputs = {"x_enc": batch_x.float(), "x_mark_enc": batch_x_mark.float(), "x_dec": exp.decoder_input(batch_y),
              "x_mark_dec": batch_y_mark.float()}
    batch = (inputs, exp.target(batch_y))

    return Program(name="itransformer_forecast", model=exp.model, batch=batch, loss_fn=criterion,
                   optimizer=model_optim, train_step=train_step, eval_fn=eval_fn, task="regression",
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the inverted embedding turns [B, L, N] into [B, N, L] with a reshape instead of the permute: every variate
    # token is a block of interleaved values of all the variates (classic layout slip).
    Bug("embedding_reshaped_not_permuted", functools.partial(_build, bug="embedding_reshaped_not_permuted"),
        "tensor_trace", ("enc_embedding",)),
    # the target sliced from the front of batch_y, the label window that overlaps the input, instead of the last
    # pred_len steps (classic window-indexing slip).
    Bug("target_from_label_window", functools.partial(_build, bug="target_from_label_window"), "learning_ledger",
        ("TASK",)),
]

"""FreTS (frequency-domain MLPs for time series forecasting) trained by aikunyi/FreTS's ``run_longExp.py`` and
``exp/exp_main.py`` (the LTSF-Linear experiment loop): each value is embedded by a learned vector, an FFT along time
(and, with ``channel_independence == '1'``, along channels) feeds a complex-valued MLP with ReLU and soft-shrinkage,
the inverse FFT plus the embedding residual goes through a two-layer head to ``pred_len`` steps; MSE on the last
``pred_len`` steps of the target window, Adam, ``adjust_learning_rate`` ('type1': halved every epoch) and
``EarlyStopping`` on the validation loss computed under ``eval()`` and ``no_grad`` after each epoch.

Source: https://github.com/aikunyi/FreTS
Commit: 6de28ab19f83955087e2690cdfbb29b065ab0b9c
Files: models/FreTS.py, exp/exp_main.py, run_longExp.py, data_provider/data_factory.py,
  data_provider/data_loader.py (Dataset_Custom_), utils/tools.py, utils/timefeatures.py
License: Apache-2.0 (Copyright 2022 DLinear Authors, as the repository's LICENSE states)
Domain: time-series forecasting (multivariate, frequency-domain MLP)

Deviations from the original:
- sizes: the model's hard-coded embed_size 128 -> 16 and hidden_size 256 -> 32; seq_len 96 -> 48, label_len
  48 -> 24, pred_len 96 -> 24, enc_in 7 kept; batch_size 8 kept; learning_rate 1e-4 -> 1e-3 (30 steps instead of
  10 epochs of ETTm1); ``channel_independence`` is the argparse default 0 (an int, so ``== '1'`` is False and only
  the temporal learner runs, as in the script), and ``'bijd,dd->bijd'`` uses the diagonal of each weight, as written;
- data: ETTm1.csv is replaced by a synthetic 7-channel hourly series made from ``seed`` (a daily and a weekly cycle
  per channel with random phases and amplitudes, a slow trend, channels mixed by a random matrix, noise), 1000
  rows; ``Dataset_Custom_`` is kept (70/20/10 borders, a MinMax scaler fitted on the train part, windows of
  seq_len / label_len + pred_len); pandas and sklearn are not here: the frame is a numpy array, ``MinMaxScaler`` is
  written out, and ``time_features(freq='h')`` (HourOfDay, DayOfWeek, DayOfMonth, DayOfYear in [-0.5, 0.5]) is
  computed from the row index;
- no CUDA, AMP or DataParallel; one ``train_step`` is one iteration of ``train()``'s inner loop, and an epoch's end
  runs ``vali`` on the validation and test sets, ``EarlyStopping`` (its checkpoint kept in memory, its stop not
  acted on) and ``adjust_learning_rate``; the printing, timing and the test phase are left out; ``eval_fn`` is
  ``vali``'s MSE on a given batch.
"""
# ruff: noqa: UP008, PLR0402, C408

from __future__ import annotations

import copy
import functools
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_ROWS, ENC_IN = 1000, 7
ARGS = dict(model='FreLinear', features='M', seq_len=48, label_len=24, pred_len=24, enc_in=ENC_IN,
            channel_independence=0, batch_size=8, learning_rate=1e-3, lradj='type1', patience=3, train_epochs=10,
            train_only=False)


# ---- models/FreTS.py ----------------------------------------------------------------------------------------------

class Model(nn.Module):
    def __init__(self, configs, bug=None):
        super(Model, self).__init__()
        self.bug = bug
        self.embed_size = 16 #embed_size
        self.hidden_size = 32 #hidden_size
        self.pre_length = configs.pred_len
        self.feature_size = configs.enc_in #channels
        self.seq_length = configs.seq_len
        self.channel_independence = configs.channel_independence
        self.sparsity_threshold = 0.01
        self.scale = 0.02
        self.embeddings = nn.Parameter(torch.randn(1, self.embed_size))
        self.r1 = nn.Parameter(self.scale * torch.randn(self.embed_size, self.embed_size))
        self.i1 = nn.Parameter(self.scale * torch.randn(self.embed_size, self.embed_size))
        self.rb1 = nn.Parameter(self.scale * torch.randn(self.embed_size))
        self.ib1 = nn.Parameter(self.scale * torch.randn(self.embed_size))
        self.r2 = nn.Parameter(self.scale * torch.randn(self.embed_size, self.embed_size))
        self.i2 = nn.Parameter(self.scale * torch.randn(self.embed_size, self.embed_size))
        self.rb2 = nn.Parameter(self.scale * torch.randn(self.embed_size))
        self.ib2 = nn.Parameter(self.scale * torch.randn(self.embed_size))

        self.fc = nn.Sequential(
            nn.Linear(self.seq_length * self.embed_size, self.hidden_size),
            nn.LeakyReLU(),
            nn.Linear(self.hidden_size, self.pre_length)
        )

    # dimension extension
    def tokenEmb(self, x):
        # x: [Batch, Input length, Channel]
        x = x.permute(0, 2, 1)
        x = x.unsqueeze(3)
        # N*T*1 x 1*D = N*T*D
        y = self.embeddings
        return x * y

    # frequency temporal learner
    def MLP_temporal(self, x, B, N, L):
        # [B, N, T, D]
        x = torch.fft.rfft(x, dim=2, norm='ortho') # FFT on L dimension
        y = self.FreMLP(B, N, L, x, self.r2, self.i2, self.rb2, self.ib2)
        x = torch.fft.irfft(y, n=self.seq_length, dim=2, norm="ortho")
        return x

    # frequency channel learner
    def MLP_channel(self, x, B, N, L):
        # [B, N, T, D]
        x = x.permute(0, 2, 1, 3)
        # [B, T, N, D]
        x = torch.fft.rfft(x, dim=2, norm='ortho') # FFT on N dimension
        y = self.FreMLP(B, L, N, x, self.r1, self.i1, self.rb1, self.ib1)
        x = torch.fft.irfft(y, n=self.feature_size, dim=2, norm="ortho")
        x = x.permute(0, 2, 1, 3)
        # [B, N, T, D]
        return x

    # frequency-domain MLPs
    # dimension: FFT along the dimension, r: the real part of weights, i: the imaginary part of weights
    # rb: the real part of bias, ib: the imaginary part of bias
    def FreMLP(self, B, nd, dimension, x, r, i, rb, ib):
        o1_real = torch.zeros([B, nd, dimension // 2 + 1, self.embed_size],
                              device=x.device)
        o1_imag = torch.zeros([B, nd, dimension // 2 + 1, self.embed_size],
                              device=x.device)

        o1_real = F.relu(
            torch.einsum('bijd,dd->bijd', x.real, r) - \
            torch.einsum('bijd,dd->bijd', x.imag, i) + \
            rb
        )

        o1_imag = F.relu(
            torch.einsum('bijd,dd->bijd', x.imag, r) + \
            torch.einsum('bijd,dd->bijd', x.real, i) + \
            ib
        )

        y = torch.stack([o1_real, o1_imag], dim=-1)
        y = F.softshrink(y, lambd=self.sparsity_threshold)
        y = torch.view_as_complex(y)
        return y

    def forward(self, x):
        # x: [Batch, Input length, Channel]
        B, T, N = x.shape
        # embedding x: [B, N, T, D]
        x = self.tokenEmb(x)
        bias = x
        # [B, N, T, D]
        if self.channel_independence == '1':
            x = self.MLP_channel(x, B, N, T)
        # [B, N, T, D]
        x = self.MLP_temporal(x, B, N, T)
        x = x + bias
        if self.bug == "head_output_reshaped_not_permuted":
            return self.fc(x.reshape(B, N, -1)).reshape(B, self.pre_length, N)  # [B, N, P] read as [B, P, N]
        x = self.fc(x.reshape(B, N, -1)).permute(0, 2, 1)
        return x


# ---- data_provider/data_loader.py (Dataset_Custom_) on a synthetic frame -----------------------------------------

class MinMaxScaler:
    """sklearn's MinMaxScaler(feature_range=(0, 1)), fit and transform."""

    def __init__(self, feature_range=(0, 1)):
        self.feature_range = feature_range

    def fit(self, X):
        self.min_, self.max_ = X.min(0), X.max(0)
        return self

    def transform(self, X):
        lo, hi = self.feature_range
        return (X - self.min_) / np.where(self.max_ > self.min_, self.max_ - self.min_, 1.0) * (hi - lo) + lo


def time_features_h(hours):
    """utils/timefeatures.py ``time_features(dates, freq='h')`` for hourly rows from 2016-07-01 00:00 (a Friday)."""
    day = hours // 24
    return np.stack([(hours % 24) / 23.0 - 0.5, ((day + 4) % 7) / 6.0 - 0.5, (day % 30) / 30.0 - 0.5,
                     (day % 365) / 364.0 - 0.5], 0)


def make_frame(seed):
    g = np.random.RandomState(seed)
    t = np.arange(N_ROWS, dtype=np.float64)
    daily = np.sin(2 * np.pi * t[:, None] / 24 + g.uniform(0, 2 * np.pi, ENC_IN)) * g.uniform(0.5, 2, ENC_IN)
    weekly = np.sin(2 * np.pi * t[:, None] / 168 + g.uniform(0, 2 * np.pi, ENC_IN)) * g.uniform(0.2, 1, ENC_IN)
    trend = t[:, None] / N_ROWS * g.uniform(-1, 1, ENC_IN)
    mix = np.eye(ENC_IN) + 0.3 * g.randn(ENC_IN, ENC_IN)
    return (daily + weekly + trend) @ mix.T + 0.1 * g.randn(N_ROWS, ENC_IN)


class Dataset_Custom_(Dataset):
    def __init__(self, frame, flag='train', size=None, features='S', scale=True, train_only=False):
        self.seq_len = size[0]
        self.label_len = size[1]
        self.pred_len = size[2]
        # init
        assert flag in ['train', 'test', 'val']
        type_map = {'train': 0, 'val': 1, 'test': 2}
        self.set_type = type_map[flag]
        self.features = features
        self.scale = scale
        self.train_only = train_only
        self.__read_data__(frame)

    def __read_data__(self, df_data):
        num_train = int(len(df_data) * (0.7 if not self.train_only else 1))
        num_test = int(len(df_data) * 0.1)
        num_vali = len(df_data) - num_train - num_test
        border1s = [0, num_train - self.seq_len, len(df_data) - num_test - self.seq_len]
        border2s = [num_train, num_train + num_vali, len(df_data)]
        border1 = border1s[self.set_type]
        border2 = border2s[self.set_type]

        ## min max scaler
        mms = MinMaxScaler(feature_range=(0, 1))
        if self.scale:
            train_data = df_data[border1s[0]:border2s[0]]
            mms.fit(train_data)
            data = mms.transform(df_data)
        else:
            data = df_data

        data_stamp = time_features_h(np.arange(border1, border2)).transpose(1, 0)

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


def data_provider(args, flag, frame):
    shuffle_flag, drop_last = (False, True) if flag == 'test' else (True, True)
    data_set = Dataset_Custom_(frame, flag=flag, size=[args.seq_len, args.label_len, args.pred_len],
                               features=args.features, train_only=args.train_only)
    data_loader = DataLoader(data_set, batch_size=args.batch_size, shuffle=shuffle_flag, num_workers=0,
                             drop_last=drop_last)
    return data_set, data_loader


# ---- utils/tools.py -----------------------------------------------------------------------------------------------

def adjust_learning_rate(optimizer, epoch, args):
    if args.lradj == 'type1':
        lr_adjust = {epoch: args.learning_rate * (0.5 ** ((epoch - 1) // 1))}
    if epoch in lr_adjust.keys():  # noqa: SIM118
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


class EarlyStopping:
    def __init__(self, patience=7, verbose=False, delta=0):
        self.patience = patience
        self.verbose = verbose
        self.counter = 0
        self.best_score = None
        self.early_stop = False
        self.val_loss_min = np.inf
        self.delta = delta

    def __call__(self, val_loss, model, path):
        score = -val_loss
        if self.best_score is None:
            self.best_score = score
            self.save_checkpoint(val_loss, model, path)
        elif score < self.best_score + self.delta:
            self.counter += 1
            if self.counter >= self.patience:
                self.early_stop = True
        else:
            self.best_score = score
            self.save_checkpoint(val_loss, model, path)
            self.counter = 0

    def save_checkpoint(self, val_loss, model, path):
        self.checkpoint = copy.deepcopy(model.state_dict())  # torch.save(..., path + '/checkpoint.pth')
        self.val_loss_min = val_loss


# ---- exp/exp_main.py ----------------------------------------------------------------------------------------------

def _make_exp(args, model, frame, bug):
    _train_data, train_loader = data_provider(args, "train", frame)
    vali_data, vali_loader = data_provider(args, 'val', frame)
    test_data, test_loader = data_provider(args, 'test', frame)
    early_stopping = EarlyStopping(patience=args.patience, verbose=True)
    model_optim = optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()

    def vali(vali_data, vali_loader, criterion):
        total_loss = []
        model.eval()
        with torch.no_grad():
            for batch_x, batch_y, _batch_x_mark, _batch_y_mark in vali_loader:
                batch_x = batch_x.float()
                batch_y = batch_y.float()
                outputs = model(batch_x)
                f_dim = -1 if args.features == 'MS' else 0
                outputs = outputs[:, -args.pred_len:, f_dim:]
                batch_y = batch_y[:, -args.pred_len:, f_dim:]
                loss = criterion(outputs.detach().cpu(), batch_y.detach().cpu())
                total_loss.append(loss)
        total_loss = np.average(total_loss)
        model.train()
        return total_loss

    state = {"epoch": 0, "it": None, "train_loss": []}

    def train_step():
        """One iteration of `for i, (batch_x, batch_y, ...) in enumerate(train_loader)`; an epoch's end validates."""
        if state["it"] is None:
            model.train()
            state["it"], state["i"], state["train_loss"] = iter(train_loader), 0, []
        batch_x, batch_y, _batch_x_mark, _batch_y_mark = next(state["it"])
        state["i"] += 1
        if bug != "zero_grad_after_backward":
            model_optim.zero_grad()
        batch_x = batch_x.float()
        batch_y = batch_y.float()
        outputs = model(batch_x)  # 'Linear' in args.model
        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, -args.pred_len:, f_dim:]
        if bug == "targets_from_label_window":
            batch_y = batch_y[:, :args.pred_len, f_dim:]  # the label_len steps the input already holds, first
        else:
            batch_y = batch_y[:, -args.pred_len:, f_dim:]
        loss = criterion(outputs, batch_y)
        state["train_loss"].append(loss.item())
        loss.backward()
        if bug == "zero_grad_after_backward":
            model_optim.zero_grad()
        model_optim.step()
        if state["i"] == len(train_loader):
            state["it"], state["epoch"] = None, state["epoch"] + 1
            vali_loss = vali(vali_data, vali_loader, criterion)
            vali(test_data, test_loader, criterion)
            early_stopping(vali_loss, model, None)
            adjust_learning_rate(model_optim, state["epoch"] + 1, args)
        return loss.detach()

    return train_loader, model_optim, criterion, train_step


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    args = SimpleNamespace(**ARGS)
    model = Model(args, bug=bug).float()
    frame = make_frame(seed)
    train_loader, model_optim, criterion, train_step = _make_exp(args, model, frame, bug)

    x, y, _, _ = next(iter(DataLoader(train_loader.dataset, batch_size=args.batch_size, shuffle=False)))
    batch = (x.float(), y[:, -args.pred_len:, :].float())

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            value = float(criterion(model(batch[0])[:, -args.pred_len:, :], batch[1]))
        model.train()
        return value

    return Program(name="frets_forecast", model=model, batch=batch, loss_fn=criterion, optimizer=model_optim,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the target sliced from the front of the label window (`[:, :pred_len]`): with label_len == pred_len the model is
    # trained to return the last steps of its own input instead of the future.
    Bug("targets_from_label_window", functools.partial(_build, bug="targets_from_label_window"), "learning_ledger",
        ("TASK",)),
    # the head's [B, N, pred_len] output reshaped to [B, pred_len, N] instead of permuted: channels and steps mixed.
    Bug("head_output_reshaped_not_permuted", functools.partial(_build, bug="head_output_reshaped_not_permuted"),
        "tensor_trace", ("fc",)),
    # model_optim.zero_grad() moved between backward() and step(): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

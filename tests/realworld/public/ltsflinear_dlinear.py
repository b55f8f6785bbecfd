"""DLinear long-term forecaster of cure-lab/LTSF-Linear: a moving-average series decomposition (kernel 25) into
trend and seasonal parts, one ``nn.Linear(seq_len, pred_len)`` for each part shared by all channels, trained by
``Exp_Main.train`` (MSE on the last ``pred_len`` steps of the label window, Adam, ``adjust_learning_rate`` 'type1'
halving the lr after every epoch) with the ETTh1 script's settings (``--features M --enc_in 7 --batch_size 32
--learning_rate 0.005``).

Source: https://github.com/cure-lab/LTSF-Linear
Commit: 0c113668a3b88c4c4ee586b8c5ec3e539c4de5a6
Files: models/DLinear.py, exp/exp_main.py (train, vali), data_provider/data_loader.py (Dataset_Custom),
       data_provider/data_factory.py, utils/tools.py (adjust_learning_rate), scripts/EXP-LongForecasting/Linear/etth1.sh
License: Apache-2.0 (Copyright 2022 DLinear Authors)
Domain: time-series forecasting

Deviations from the original:
- sizes: seq_len 336 -> 96, pred_len 96 -> 24, label_len 48 -> 12 (moving-average kernel 25, 7 channels, batch 32,
  lr 0.005 unchanged);
- data: the ETTh1 CSV is replaced by a synthetic 7-channel hourly series made from ``seed`` (a daily and a weekly
  sinusoid per channel with its own phase and amplitude, a slow trend, noise), split 70/10/20 and standardized with
  the training part's mean and std as ``Dataset_Custom`` does (sklearn's StandardScaler written out in numpy);
  DLinear does not read the time features, so ``seq_x_mark``/``seq_y_mark`` are zeros instead of ``time_features``;
- the DataLoader has no worker processes (num_workers 10 -> 0); no GPU, AMP, early stopping or checkpoints;
- one ``train_step`` is one batch of ``Exp_Main.train``; ``adjust_learning_rate(epoch + 1)`` runs when an epoch of
  the training loader ends; ``eval_fn`` is ``Exp_Main.vali`` on one batch (``model.eval()``, ``no_grad``, MSE), and
  restores ``model.train()`` as ``vali`` does.
"""
# ruff: noqa: PLR0402, SIM118, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- models/DLinear.py ---------------------------------------------------------------------------------------

class moving_avg(nn.Module):
    """
    Moving average block to highlight the trend of time series
    """
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
    """
    Series decomposition block
    """
    def __init__(self, kernel_size):
        super(series_decomp, self).__init__()
        self.moving_avg = moving_avg(kernel_size, stride=1)

    def forward(self, x):
        moving_mean = self.moving_avg(x)
        res = x - moving_mean
        return res, moving_mean


class Model(nn.Module):
    """
    Decomposition-Linear
    """
    def __init__(self, configs):
        super(Model, self).__init__()
        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len

        # Decompsition Kernel Size
        kernel_size = 25
        self.decompsition = series_decomp(kernel_size)
        self.individual = configs.individual
        self.channels = configs.enc_in

        if self.individual:
            self.Linear_Seasonal = nn.ModuleList()
            self.Linear_Trend = nn.ModuleList()

            for i in range(self.channels):
                self.Linear_Seasonal.append(nn.Linear(self.seq_len,self.pred_len))
                self.Linear_Trend.append(nn.Linear(self.seq_len,self.pred_len))
        else:
            self.Linear_Seasonal = nn.Linear(self.seq_len,self.pred_len)
            self.Linear_Trend = nn.Linear(self.seq_len,self.pred_len)

    def forward(self, x):
        # x: [Batch, Input length, Channel]
        seasonal_init, trend_init = self.decompsition(x)
        seasonal_init, trend_init = seasonal_init.permute(0,2,1), trend_init.permute(0,2,1)
        if self.individual:
            seasonal_output = torch.zeros([seasonal_init.size(0),seasonal_init.size(1),self.pred_len],dtype=seasonal_init.dtype).to(seasonal_init.device)
            trend_output = torch.zeros([trend_init.size(0),trend_init.size(1),self.pred_len],dtype=trend_init.dtype).to(trend_init.device)
            for i in range(self.channels):
                seasonal_output[:,i,:] = self.Linear_Seasonal[i](seasonal_init[:,i,:])
                trend_output[:,i,:] = self.Linear_Trend[i](trend_init[:,i,:])
        else:
            seasonal_output = self.Linear_Seasonal(seasonal_init)
            trend_output = self.Linear_Trend(trend_init)

        x = seasonal_output + trend_output
        return x.permute(0,2,1) # to [Batch, Output length, Channel]


# ---- data_provider/data_loader.py (Dataset_Custom on an in-memory series) ------------------------------------

def make_series(seed, n=1000, channels=7):
    g = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64)
    phase = g.uniform(0, 2 * np.pi, (2, channels))
    amp = g.uniform(0.5, 2.0, (2, channels))
    slope = g.uniform(-2.0, 2.0, channels) / n
    series = (amp[0] * np.sin(2 * np.pi * t[:, None] / 24 + phase[0])
              + amp[1] * np.sin(2 * np.pi * t[:, None] / 168 + phase[1])
              + slope * t[:, None] + 0.1 * g.standard_normal((n, channels)))
    return series


class Dataset_Custom(Dataset):
    def __init__(self, series, flag='train', size=None, scale=True):
        self.seq_len, self.label_len, self.pred_len = size
        assert flag in ['train', 'test', 'val']
        type_map = {'train': 0, 'val': 1, 'test': 2}
        self.set_type = type_map[flag]
        self.scale = scale
        self.__read_data__(series)

    def __read_data__(self, df_data):
        num_train = int(len(df_data) * 0.7)
        num_test = int(len(df_data) * 0.2)
        num_vali = len(df_data) - num_train - num_test
        border1s = [0, num_train - self.seq_len, len(df_data) - num_test - self.seq_len]
        border2s = [num_train, num_train + num_vali, len(df_data)]
        border1 = border1s[self.set_type]
        border2 = border2s[self.set_type]

        if self.scale:
            train_data = df_data[border1s[0]:border2s[0]]
            mean, std = train_data.mean(0), train_data.std(0)  # StandardScaler().fit(train_data.values)
            data = (df_data - mean) / std
        else:
            data = df_data

        self.data_x = data[border1:border2]
        self.data_y = data[border1:border2]
        self.data_stamp = np.zeros((border2 - border1, 4))

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


# ---- utils/tools.py ------------------------------------------------------------------------------------------

def adjust_learning_rate(optimizer, epoch, args):
    # lr = args.learning_rate * (0.2 ** (epoch // 2))
    if args.lradj == 'type1':
        lr_adjust = {epoch: args.learning_rate * (0.5 ** ((epoch - 1) // 1))}
    if epoch in lr_adjust.keys():
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


# ---- exp/exp_main.py -----------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = SimpleNamespace(model='DLinear', features='M', seq_len=96, label_len=12, pred_len=24, enc_in=7,
                           individual=False, batch_size=32, learning_rate=0.005, lradj='type1')
    series = make_series(seed)
    size = [args.seq_len, args.label_len, args.pred_len]
    train_data = Dataset_Custom(series, flag='train', size=size)
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True, num_workers=0, drop_last=True,
                              generator=torch.Generator().manual_seed(seed))

    model = Model(args).float()
    model_optim = optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()
    f_dim = -1 if args.features == 'MS' else 0

    def target_window(batch_y):
        if bug == "target_window_from_start":
            # the first pred_len steps of the label window: label_len of them are the end of the input itself
            return batch_y[:, :args.pred_len, f_dim:]
        return batch_y[:, -args.pred_len:, f_dim:]

    state = {"it": None, "epoch": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of `for epoch in range(train_epochs)`'s body
                adjust_learning_rate(model_optim, state["epoch"] + 1, args)
                state["epoch"] += 1
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        batch_x, batch_y, batch_x_mark, batch_y_mark = next_batch()
        if bug != "no_zero_grad":
            model_optim.zero_grad()
        batch_x = batch_x.float()

        batch_y = batch_y.float()
        batch_x_mark = batch_x_mark.float()
        batch_y_mark = batch_y_mark.float()

        # decoder input
        dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
        dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float()

        outputs = model(batch_x)
        outputs = outputs[:, -args.pred_len:, f_dim:]
        batch_y = target_window(batch_y)
        loss = criterion(outputs, batch_y)

        loss.backward()
        model_optim.step()
        return loss.detach()

    def vali(model, batch):
        batch_x, batch_y = batch
        model.eval()
        with torch.no_grad():
            outputs = model(batch_x.float())
            outputs = outputs[:, -args.pred_len:, f_dim:]
            loss = criterion(outputs.detach(), batch_y.float())
        model.train()
        return float(loss)

    first_x, first_y, _, _ = next(iter(DataLoader(train_data, batch_size=args.batch_size)))
    batch = (first_x.float(), target_window(first_y.float()))
    return Program(name="ltsflinear_dlinear", model=model, batch=batch,
                   loss_fn=lambda outputs, targets: criterion(outputs[:, -args.pred_len:, f_dim:], targets),
                   optimizer=model_optim, train_step=train_step, eval_fn=vali, task="regression",
                   loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # the target sliced from the start of the label window instead of its end: half of what the model must
    # "forecast" is the last label_len steps of its own input.
    Bug("target_window_from_start", functools.partial(_build, bug="target_window_from_start"), "learning_ledger",
        ("TASK",)),
    # model_optim.zero_grad() dropped: every step adds this batch's gradient to all the previous ones.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", ("Linear_Seasonal.weight",)),
]

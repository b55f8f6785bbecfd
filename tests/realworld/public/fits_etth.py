"""FITS (Frequency Interpolation Time Series forecasting) on ETTh1, from VEWOXIC/FITS: reversible instance
normalization, an rFFT of the look-back window, a low-pass filter at ``cut_freq`` (from ``base_T`` and ``H_order``),
one complex-valued ``nn.Linear`` that interpolates the kept spectrum to the length of look-back + horizon, zero
padding, inverse rFFT with energy compensation and the normalization reversed; MSE on the horizon (``train_mode 1``:
``exp.train(setting, ft=True)``), Adam with the ``type3`` 0.95 decay per epoch.

Source: https://github.com/VEWOXIC/FITS
Commit: d040bb015b6299da26d879b90dd19c80fb72c160
Files: models/FITS.py, exp/exp_main_F.py, run_longExp_F.py, utils/tools.py (adjust_learning_rate),
utils/timefeatures.py, data_provider/ (data_factory, Dataset_ETT_hour), scripts/FITS/etth1.sh
License: Apache-2.0 (full text in LICENSES/VEWOXIC-FITS.txt)
Domain: time series, multivariate long-term forecasting (a 10k-parameter complex linear model in the frequency
domain)

Kept as written: ``Model`` (``individual`` False: one complex ``freq_upsampler`` shared by the channels; RIN, the LPF,
the upsampling, the zero padding, ``irfft``, ``* length_ratio``, the reverse RIN, the two outputs),
``Exp_Main.train``'s loop body with ``ft=True`` (zero_grad, ``batch_y[:, -pred_len:]``, ``batch_xy``, the unused
decoder input, ``outputs, low = self.model(batch_x)``, ``f_dim``, the horizon slices, ``MSELoss``, backward,
step), ``vali``, Adam, ``adjust_learning_rate`` (``lradj`` type3) after every epoch, ``cut_freq = int(seq_len //
base_T + 1) * H_order + 10``, the batch size doubled when no augmentation is on, ``Dataset_ETT_hour`` with
``collect_all_data`` (the 12/4/4-month borders, the scaler fitted on the training part, timeenc 1 features).

Deviations from the original:
- ETTh1.csv is not here: a synthetic hourly table with the same columns (``date``, HUFL ... OT: 7 channels) made
  from ``seed``: daily and weekly cycles of per-channel amplitude and phase, a slow trend and noise, with OT a mix of
  the loads; the borders are scaled down from months to days (``30 * 24`` hours per "month" -> ``3 * 24``).
  ``StandardScaler`` (sklearn, not installed) is a mean/std written out; the time features are HourOfDay,
  DayOfWeek, DayOfMonth, DayOfYear as ``utils/timefeatures.py`` computes them for ``freq='h'``.
- sizes for 2 CPU cores: ``seq_len`` 720 -> 96, ``pred_len`` 96 -> 24, ``H_order`` 2 (the run.py default; the
  script sweeps 2..6), ``batch_size`` 64 (doubled to 128) -> 16 (doubled to 32); learning rate 0.0005 (the script's)
  kept.
- augmentation (off in the script), the thop profile, prints, early stopping and checkpoints are dropped; the
  device is the CPU; no DataLoader workers; ``train_mode`` 1 (``ft=True``) of the script's ``m in 2 1``.
- ``train`` is not run an epoch at a time: ``train_step`` is one batch of its loop (at the end of an epoch,
  ``adjust_learning_rate`` and a new shuffled epoch), returning the loss; ``eval_fn`` is ``vali`` on the validation
  split.
- the Program's batch is the first ``batch_size`` training windows as ``(batch_x, horizon)``; its ``loss_fn`` takes
  the model's output pair and scores the horizon as the loop does.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, RUF059

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch import optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

device = torch.device("cpu")


# models/FITS.py
class Model(nn.Module):

    # FITS: Frequency Interpolation Time Series Forecasting

    def __init__(self, configs):
        super(Model, self).__init__()
        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.individual = configs.individual
        self.channels = configs.enc_in

        self.dominance_freq = configs.cut_freq  # 720/24
        self.length_ratio = (self.seq_len + self.pred_len) / self.seq_len

        if self.individual:
            self.freq_upsampler = nn.ModuleList()
            for i in range(self.channels):
                self.freq_upsampler.append(nn.Linear(self.dominance_freq,
                                                     int(self.dominance_freq * self.length_ratio)).to(torch.cfloat))

        else:
            self.freq_upsampler = nn.Linear(self.dominance_freq,
                                            int(self.dominance_freq * self.length_ratio)).to(torch.cfloat)

    def forward(self, x):
        # RIN
        x_mean = torch.mean(x, dim=1, keepdim=True)
        x = x - x_mean
        x_var = torch.var(x, dim=1, keepdim=True) + 1e-5
        x = x / torch.sqrt(x_var)

        low_specx = torch.fft.rfft(x, dim=1)
        low_specx[:, self.dominance_freq:] = 0  # LPF
        low_specx = low_specx[:, 0:self.dominance_freq, :]  # LPF
        if self.individual:
            low_specxy_ = torch.zeros([low_specx.size(0), int(self.dominance_freq * self.length_ratio),
                                       low_specx.size(2)], dtype=low_specx.dtype).to(low_specx.device)
            for i in range(self.channels):
                low_specxy_[:, :, i] = self.freq_upsampler[i](low_specx[:, :, i].permute(0, 1)).permute(0, 1)
        else:
            low_specxy_ = self.freq_upsampler(low_specx.permute(0, 2, 1)).permute(0, 2, 1)
        low_specxy = torch.zeros([low_specxy_.size(0), int((self.seq_len + self.pred_len) / 2 + 1),
                                  low_specxy_.size(2)], dtype=low_specxy_.dtype).to(low_specxy_.device)
        low_specxy[:, 0:low_specxy_.size(1), :] = low_specxy_  # zero padding
        low_xy = torch.fft.irfft(low_specxy, dim=1)
        low_xy = low_xy * self.length_ratio  # energy compemsation for the length change
        xy = (low_xy) * torch.sqrt(x_var) + x_mean
        return xy, low_xy * torch.sqrt(x_var)


class _Dot(dict):
    __getattr__ = dict.get


# utils/tools.py
def adjust_learning_rate(optimizer, epoch, args):
    if args.lradj == 'type1':
        lr_adjust = {epoch: args.learning_rate * (0.5 ** ((epoch - 1) // 1))}
    elif args.lradj == 'type3':
        lr_adjust = {epoch: args.learning_rate * (0.95 ** ((epoch - 1) // 1))}
    if epoch in lr_adjust:
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


HOURS_PER_MONTH = 3 * 24  # (port) 30 * 24


def synthetic_etth1(rng):
    """(port) an ETTh1-shaped table: date, HUFL, HULL, MUFL, MULL, LUFL, LULL, OT."""
    n = 20 * HOURS_PER_MONTH
    t = np.arange(n)
    cols = {}
    loads = []
    for name in ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL"]:
        a_day, a_week = rng.uniform(0.5, 2.0), rng.uniform(0.2, 1.0)
        ph_d, ph_w = rng.uniform(0, 2 * np.pi, size=2)
        v = (a_day * np.sin(2 * np.pi * t / 24 + ph_d) + a_week * np.sin(2 * np.pi * t / 168 + ph_w)
             + rng.uniform(-1, 1) * t / n + rng.normal(0, 0.2, size=n))
        cols[name] = v
        loads.append(v)
    w = rng.normal(0, 0.5, size=6)
    cols["OT"] = np.tensordot(w, np.stack(loads), axes=1) + rng.normal(0, 0.2, size=n)
    df = pd.DataFrame(cols)
    df.insert(0, "date", pd.date_range("2016-07-01", periods=n, freq="h").astype(str))
    return df


def time_features_h(dates):
    """utils/timefeatures.py for freq 'h': HourOfDay, DayOfWeek, DayOfMonth, DayOfYear in [-0.5, 0.5]."""
    return np.vstack([dates.hour / 23.0 - 0.5, dates.dayofweek / 6.0 - 0.5, (dates.day - 1) / 30.0 - 0.5,
                      (dates.dayofyear - 1) / 365.0 - 0.5])


# data_provider/data_loader.py
class Dataset_ETT_hour(Dataset):
    def __init__(self, config, df_raw, flag='train', size=None,
                 features='S', target='OT', scale=True, timeenc=0, freq='h'):
        # size [seq_len, label_len, pred_len]
        self.args = config
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
        self.collect_all_data()

    def __read_data__(self):
        df_raw = self.df_raw
        M = HOURS_PER_MONTH
        border1s = [0, 12 * M - self.seq_len, 12 * M + 4 * M - self.seq_len]
        border2s = [12 * M, 12 * M + 4 * M, 12 * M + 8 * M]
        border1 = border1s[self.set_type]
        border2 = border2s[self.set_type]

        if self.features == 'M' or self.features == 'MS':
            cols_data = df_raw.columns[1:]
            df_data = df_raw[cols_data]
        elif self.features == 'S':
            df_data = df_raw[[self.target]]

        if self.scale:
            train_data = df_data[border1s[0]:border2s[0]]
            mean, std = train_data.values.mean(0), train_data.values.std(0)  # (port) StandardScaler
            data = (df_data.values - mean) / std
        else:
            data = df_data.values

        df_stamp = df_raw[['date']][border1:border2]
        data_stamp = time_features_h(pd.DatetimeIndex(pd.to_datetime(df_stamp['date'].values)))
        data_stamp = data_stamp.transpose(1, 0)

        self.data_x = data[border1:border2]
        self.data_y = data[border1:border2]
        self.data_stamp = data_stamp

    def collect_all_data(self):
        self.x_data = []
        self.y_data = []
        self.x_time = []
        self.y_time = []
        data_len = len(self.data_x) - self.seq_len - self.pred_len + 1
        mask_data_len = int((1 - self.args.data_size) * data_len) if self.args.data_size < 1 else 0
        for i in range(len(self.data_x) - self.seq_len - self.pred_len + 1):
            if (self.set_type == 0 and i >= mask_data_len) or self.set_type != 0:
                s_begin = i
                s_end = s_begin + self.seq_len
                r_begin = s_end - self.label_len
                r_end = r_begin + self.label_len + self.pred_len
                self.x_data.append(self.data_x[s_begin:s_end])
                self.y_data.append(self.data_y[r_begin:r_end])
                self.x_time.append(self.data_stamp[s_begin:s_end])
                self.y_time.append(self.data_stamp[r_begin:r_end])

    def __getitem__(self, index):
        seq_x = self.x_data[index]
        seq_y = self.y_data[index]
        return seq_x, seq_y, self.x_time[index], self.y_time[index]

    def __len__(self):
        return len(self.x_data)


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = _Dot(model='FITS', features='M', target='OT', freq='h', embed='timeF',
                seq_len=96, label_len=48, pred_len=24,  # (port) 720, 48, 96
                individual=False, enc_in=7, train_epochs=50, batch_size=16,  # (port) 64
                learning_rate=0.0005, lradj='type3', cut_freq=0, base_T=24, H_order=2, data_size=1,
                in_batch_augmentation=False, in_dataset_augmentation=False, aug_method='f_mix')
    if args.cut_freq == 0:
        args.cut_freq = int(args.seq_len // args.base_T + 1) * args.H_order + 10
    if (not args.in_batch_augmentation) and (not args.in_dataset_augmentation):
        args.batch_size = args.batch_size * 2
    df_raw = synthetic_etth1(rng)

    def data_provider(flag):
        timeenc = 0 if args.embed != 'timeF' else 1
        shuffle_flag = flag == 'train'
        data_set = Dataset_ETT_hour(args, df_raw, flag=flag, size=[args.seq_len, args.label_len, args.pred_len],
                                    features=args.features, target=args.target, timeenc=timeenc, freq=args.freq)
        data_loader = DataLoader(data_set, batch_size=args.batch_size, shuffle=shuffle_flag, num_workers=0,
                                 drop_last=flag == 'train', generator=torch.Generator().manual_seed(seed))
        return data_set, data_loader

    train_data, train_loader = data_provider('train')
    _vali_data, vali_loader = data_provider('val')

    model = Model(args).float()
    model_optim = optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()
    ft = True  # train_mode 1
    st = {"it": iter(train_loader), "epoch": 0}

    def next_batch():
        try:
            return next(st["it"])
        except StopIteration:
            st["epoch"] += 1
            adjust_learning_rate(model_optim, st["epoch"], args)
            st["it"] = iter(train_loader)
            return next(st["it"])

    def train_step():
        batch_x, batch_y, batch_x_mark, batch_y_mark = next_batch()
        model.train()
        if bug != "zero_grad_dropped":
            model_optim.zero_grad()

        batch_x = batch_x.float().to(device)
        if bug == "target_window_from_start":
            batch_y = batch_y.float().to(device)[:, :args.pred_len, :]
        else:
            batch_y = batch_y.float().to(device)[:, -args.pred_len:, :]
        batch_x_mark = batch_x_mark.float().to(device)
        batch_y_mark = batch_y_mark.float().to(device)
        batch_xy = torch.cat([batch_x, batch_y], dim=1)

        dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
        dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float().to(device)

        outputs, low = model(batch_x)

        f_dim = -1 if args.features == 'MS' else 0
        if ft:
            outputs = outputs[:, -args.pred_len:, f_dim:]
            batch_y = batch_y[:, -args.pred_len:, f_dim:].to(device)
            loss = criterion(outputs, batch_y)
        else:
            outputs = outputs[:, :, f_dim:]
            loss = criterion(outputs, batch_xy)

        loss.backward()
        model_optim.step()
        return loss.item()

    def vali(model, _batch=None):
        total_loss = []
        model.eval()
        with torch.no_grad():
            for batch_x, batch_y, _batch_x_mark, _batch_y_mark in vali_loader:
                batch_x = batch_x.float().to(device)
                batch_y = batch_y.float().to(device)[:, -args.pred_len:, :]
                outputs, low = model(batch_x)
                f_dim = -1 if args.features == 'MS' else 0
                outputs = outputs[:, -args.pred_len:, f_dim:]
                batch_y = batch_y[:, -args.pred_len:, f_dim:]

                pred = outputs.detach().cpu()
                true = batch_y.detach().cpu()

                loss = criterion(pred, true)

                total_loss.append(loss)
        total_loss = np.average(total_loss)
        model.train()
        return float(total_loss)

    def loss_fn(output, target):
        outputs, _low = output
        return criterion(outputs[:, -args.pred_len:, 0:], target)

    items = [train_data[i] for i in range(args.batch_size)]
    bx = torch.tensor(np.stack([it[0] for it in items])).float()
    by = torch.tensor(np.stack([it[1] for it in items])).float()[:, -args.pred_len:, :]
    return Program(name="fits_etth", model=model, batch=(bx, by), loss_fn=loss_fn, optimizer=model_optim,
                   train_step=train_step, eval_fn=vali)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the horizon taken from the start of batch_y (its label_len known steps, inside the look-back window)
    # instead of its last pred_len steps.
    Bug("target_window_from_start", functools.partial(_build, bug="target_window_from_start"), "learning_ledger",
        ("TASK",)),
    # classic: model_optim.zero_grad() left out of the loop body; every parameter is touched alike (README rule 6).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

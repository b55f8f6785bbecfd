# ruff: noqa: SIM118
"""SOFTS's ETTh data pipeline, moved out of ``softs_etth.py`` to keep the port readable, and shared by
``moderntcn_etth.py``: ``Dataset_ETT_hour`` and ``timefeatures.py`` are identical in luodhhh/ModernTCN (commit
56a9a2c018385cd5acef015378cae7f084d1b11c, ``ModernTCN-Long-term-forecasting/``; MIT, LICENSES/luodhhh-ModernTCN.txt)
but for the unused ``seasonal_patterns`` argument. The ``bug`` switch of ``Dataset_ETT_hour.__getitem__`` selects
one of the ports' variants.

Source: https://github.com/Secilia-Cxy/SOFTS
Commit: f5d35fd7c3e716b6383ce6d3cc42c131e32c3c44
Files: ``data_provider/data_loader.py`` (``Dataset_ETT_hour``), ``utils/timefeatures.py``, ``utils/tools.py``
(``adjust_learning_rate``)
License: MIT (Copyright (c) 2024 Xu-Yang Chen; full text in LICENSES/Secilia-Cxy-SOFTS.txt); ``utils/timefeatures.py``
carries GluonTS's Apache-2.0 header there (Copyright 2018 Amazon.com, Inc. or its affiliates)

Copied as written but for the deviations listed in ``softs_etth.py``: the CSV is an in-memory frame (``_frame``),
sklearn's StandardScaler is written out in numpy, ``time_features`` keeps the hourly entry, ``adjust_learning_rate``
keeps its ``type1`` and ``cosine`` branches and drops the print.
"""

from __future__ import annotations

import math
import pathlib
import sys

import numpy as np
import pandas as pd
from pandas.tseries import offsets
from pandas.tseries.frequencies import to_offset
from torch.utils.data import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _etth import make_ett_like


# utils/timefeatures.py (the features of freq='h'; the other frequencies' entries dropped)
class HourOfDay:
    def __call__(self, index: pd.DatetimeIndex) -> np.ndarray:
        return index.hour / 23.0 - 0.5


class DayOfWeek:
    def __call__(self, index: pd.DatetimeIndex) -> np.ndarray:
        return index.dayofweek / 6.0 - 0.5


class DayOfMonth:
    def __call__(self, index: pd.DatetimeIndex) -> np.ndarray:
        return (index.day - 1) / 30.0 - 0.5


class DayOfYear:
    def __call__(self, index: pd.DatetimeIndex) -> np.ndarray:
        return (index.dayofyear - 1) / 365.0 - 0.5


def time_features_from_frequency_str(freq_str):
    features_by_offsets = {offsets.Hour: [HourOfDay, DayOfWeek, DayOfMonth, DayOfYear]}
    offset = to_offset(freq_str)
    for offset_type, feature_classes in features_by_offsets.items():
        if isinstance(offset, offset_type):
            return [cls() for cls in feature_classes]
    raise RuntimeError(f"Unsupported frequency {freq_str}")


def time_features(dates, freq='h'):
    return np.vstack([feat(dates) for feat in time_features_from_frequency_str(freq)])


class StandardScaler:
    """(port) sklearn.preprocessing.StandardScaler's fit/transform in numpy (population std)."""

    def fit(self, x):
        self.mean_, self.scale_ = x.mean(0), x.std(0)

    def transform(self, x):
        return (x - self.mean_) / self.scale_


# data_provider/data_loader.py (the CSV given as an in-memory frame)
class Dataset_ETT_hour(Dataset):
    def __init__(self, df_raw, flag='train', size=None, features='S', target='OT', scale=True, timeenc=0,
                 freq='h', bug=None):
        self.seq_len, self.label_len, self.pred_len = size[0], size[1], size[2]
        assert flag in ['train', 'test', 'val']
        type_map = {'train': 0, 'val': 1, 'test': 2}
        self.set_type = type_map[flag]
        self.features = features
        self.target = target
        self.scale = scale
        self.timeenc = timeenc
        self.freq = freq
        self.bug = bug
        self.__read_data__(df_raw)

    def __read_data__(self, df_raw):
        self.scaler = StandardScaler()
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
        assert self.timeenc == 1  # (port) the timeF embedding of run.py's default
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
        if self.bug == "input_window_includes_targets":
            s_begin, s_end = s_begin + self.pred_len, s_end + self.pred_len
        seq_x = self.data_x[s_begin:s_end]
        seq_y = self.data_y[r_begin:r_end]
        seq_x_mark = self.data_stamp[s_begin:s_end]
        seq_y_mark = self.data_stamp[r_begin:r_end]
        return seq_x, seq_y, seq_x_mark, seq_y_mark

    def __len__(self):
        return len(self.data_x) - self.seq_len - self.pred_len + 1


# utils/tools.py
def adjust_learning_rate(optimizer, epoch, args):
    if args.lradj == 'type1':
        lr_adjust = {epoch: args.learning_rate * (0.5 ** ((epoch - 1) // 1))}
    elif args.lradj == "cosine":
        lr_adjust = {epoch: args.learning_rate / 2 * (1 + math.cos(epoch / args.train_epochs * math.pi))}
    if epoch in lr_adjust.keys():
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


def _frame(seed):
    """(port) ETTh1.csv as a frame: the hourly date column and 7 synthetic value columns."""
    values = make_ett_like(seed)
    df = pd.DataFrame(values, columns=["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"])
    df.insert(0, "date", pd.date_range("2016-07-01 00:00:00", periods=len(values), freq="h").astype(str))
    return df



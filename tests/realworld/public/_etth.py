"""The ETTh1 data pipeline of lss-1138's forecasters, shared by the ports that run it: ``segrnn_etth`` and
``sparsetsf_etth`` (the same ``Dataset_ETT_hour`` and ``adjust_learning_rate`` in both repositories), and
``cyclenet_etth`` (CycleNet keeps that ``adjust_learning_rate`` and extends the dataset with a cycle index, in its
own file); with the synthetic series all three train on.

Source: https://github.com/lss-1138/SegRNN (commit 8e869ecfdf1daab3a0ba14d1d620796c1a5d2c4f) and
        https://github.com/lss-1138/SparseTSF (commit b8c2740eecc84d8095ffce49ba5acafe68e53bb8), identical there;
        ``adjust_learning_rate`` also in https://github.com/ACAT-SCUT/CycleNet (commit
        af6e06ccf8389f8fadb524cbf5c89ef0349dc30f)
Files: data_provider/data_loader.py (Dataset_ETT_hour), utils/tools.py (adjust_learning_rate)
License: Apache-2.0 (full texts in LICENSES/lss-1138-SegRNN.txt, LICENSES/lss-1138-SparseTSF.txt,
         LICENSES/ACAT-SCUT-CycleNet.txt)

Deviations from the original (as each port's header says): the ETTh1 CSV is ``make_ett_like``'s synthetic 7-channel
hourly series (not upstream code), ``Dataset_ETT_hour`` reads its values (no pandas) and its time features are zeros
(none of the three models reads them); sklearn's StandardScaler is written out in numpy (population std).
"""
# ruff: noqa: UP032, SIM118

from __future__ import annotations

import numpy as np
from torch.utils.data import Dataset

# ---- data_provider/data_loader.py --------------------------------------------------------------------------------

def make_ett_like(seed, n=17420, channels=7):
    """(port) ETTh1.csv's 7 value columns: per channel a daily and a weekly sinusoid, a slow trend, noise."""
    g = np.random.default_rng(seed)
    t = np.arange(n)
    amp = g.uniform(0.5, 2.0, (2, channels))
    phase = g.uniform(0, 2 * np.pi, (2, channels))
    slope = g.uniform(-2.0, 2.0, channels) / n
    level = g.uniform(-3.0, 3.0, channels)
    return (level + amp[0] * np.sin(2 * np.pi * t[:, None] / 24 + phase[0])
            + amp[1] * np.sin(2 * np.pi * t[:, None] / 168 + phase[1])
            + slope * t[:, None] + 0.1 * g.standard_normal((n, channels)))


class StandardScaler:
    """(port) sklearn.preprocessing.StandardScaler's fit/transform (population std)."""

    def fit(self, values):
        self.mean_, self.scale_ = values.mean(0), values.std(0)

    def transform(self, values):
        return (values - self.mean_) / self.scale_


class Dataset_ETT_hour(Dataset):
    def __init__(self, df_values, flag='train', size=None,
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
        self.__read_data__(df_values)

    def __read_data__(self, df_data):
        self.scaler = StandardScaler()
        # (port) df_raw = pd.read_csv(...): the value columns (features 'M') of the synthetic series

        border1s = [0, 12 * 30 * 24 - self.seq_len, 12 * 30 * 24 + 4 * 30 * 24 - self.seq_len]
        border2s = [12 * 30 * 24, 12 * 30 * 24 + 4 * 30 * 24, 12 * 30 * 24 + 8 * 30 * 24]
        border1 = border1s[self.set_type]
        border2 = border2s[self.set_type]

        if self.scale:
            train_data = df_data[border1s[0]:border2s[0]]
            self.scaler.fit(train_data)
            data = self.scaler.transform(df_data)
        else:
            data = df_data

        data_stamp = np.zeros((border2 - border1, 4))  # (port) time features: never read by SegRNN or SparseTSF

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


# ---- utils/tools.py ----------------------------------------------------------------------------------------------

def adjust_learning_rate(optimizer, scheduler, epoch, args, printout=True):
    # lr = args.learning_rate * (0.2 ** (epoch // 2))
    if args.lradj == 'type1':
        lr_adjust = {epoch: args.learning_rate * (0.5 ** ((epoch - 1) // 1))}
    elif args.lradj == 'type2':
        lr_adjust = {
            2: 5e-5, 4: 1e-5, 6: 5e-6, 8: 1e-6,
            10: 5e-7, 15: 1e-7, 20: 5e-8
        }
    elif args.lradj == 'type3':
        lr_adjust = {epoch: args.learning_rate if epoch < 3 else args.learning_rate * (0.8 ** ((epoch - 3) // 1))}
    elif args.lradj == 'constant':
        lr_adjust = {epoch: args.learning_rate}
    elif args.lradj == 'TST':
        lr_adjust = {epoch: scheduler.get_last_lr()[0]}

    if epoch in lr_adjust.keys():
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr
        if printout: print('Updating learning rate to {}'.format(lr))

# ruff: noqa: UP008, UP039, SIM118, RUF059, F841
"""SCINet (Liu et al., "SCINet: Time Series Modeling and Forecasting with Sample Convolution and Interaction"),
cure-lab/SCINet, multivariate ETTh1 forecasting: a binary tree of SCI-blocks (even/odd split, interactive
learning with exp-scaled convolutions phi/psi and additive U/P, the sub-series zipped back), a residual over the
input, a 1x1 ``Conv1d`` over time as the projection to the horizon; model in double precision, L1 loss on the
standardized series, Adam, lr x0.95 per epoch.

Source: https://github.com/cure-lab/SCINet
Commit: 02e6b0af2d58243de09aaa1eac3840237b659847
Files: models/SCINet.py, experiments/exp_ETTh.py, data_process/etth_data_loader.py, utils/tools.py,
utils/timefeatures.py, run_ETTh.py, README.md (the ETTh1 I48/O24 command)
License: Apache-2.0 (full text in LICENSES/cure-lab-SCINet.txt)
Domain: time series, multivariate forecasting (ETTh1 shaped: 7 channels, look-back 48, horizon 24)

Kept as written: ``Splitting``, ``Interactor`` (INN variant), ``InteractorLevel``, ``LevelSCINet``,
``SCINet_Tree`` with ``zip_up_the_pants``, ``EncoderTree``, ``SCINet`` (one stack, one decoder layer, no
positional encoding, no RIN: the README command's flags), ``Exp_ETTh``'s ``model.double()``, ``_select_optimizer``,
``_select_criterion("mae")``, ``train``'s loop body (zero_grad, ``_process_one_batch_SCINet``, the L1 loss on the
normalized prediction and target, backward, step), ``valid`` (``model.eval()``, the loss per batch averaged),
``adjust_learning_rate`` (lradj 1), ``Dataset_ETT_hour`` (borders, the scaler fitted on the training part,
``__getitem__``'s ``seq_len`` / ``label_len`` / ``pred_len`` windows), ``StandardScaler`` and the hourly
``time_features`` (timeF).

Deviations from the original:
- data: ``ETTh1.csv`` is replaced by a synthetic hourly frame from ``seed`` (date + HUFL, HULL, MUFL, MULL, LUFL,
  LULL, OT: daily and weekly cycles with per-channel phases, slow drifts, noise, OT a mix of the loads), built as
  the DataFrame ``pd.read_csv`` would return; a "month" of the borders is 2 days instead of 30 (the 12/4/4 split
  kept), so the frame has 960 rows; ``time_features_from_frequency_str`` is cut to its hourly entry;
- sizes: the README's ETTh1 I48/O24 configuration (``seq_len`` 48, ``label_len`` 24, ``pred_len`` 24,
  ``hidden-size`` 4, ``levels`` 3, ``stacks`` 1, ``lr`` 3e-3, ``batch_size`` 8, ``dropout`` 0.5, ``kernel`` 5) is
  already small and is kept;
- ``SCINet``'s branches these flags never reach (the second stack and ``projection2``, the multi-layer decoder's
  ``div_projection`` loop, positional encoding, RIN) and ``SCINet_decompose`` are left out; ``valid`` keeps only
  its ``stacks == 1`` loss;
- CPU: the ``.cuda()`` calls are dropped; tensorboard, early stopping, checkpoints, AMP and the metrics printout
  of ``valid`` are dropped;
- ``train_step`` is one iteration of ``train``'s inner loop (shuffled ``drop_last`` loader from a seeded
  generator; a new epoch restarts it after ``adjust_learning_rate``); ``eval_fn`` is ``valid`` on the validation
  loader (the model is put back in train mode afterwards, as the next epoch's ``self.model.train()`` does);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import numpy as np
import pandas as pd
import torch
from torch import nn, optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

MONTH = 2 * 24  # (port) 30 * 24: the borders' "month" in hours


# models/SCINet.py
class Splitting(nn.Module):
    def __init__(self):
        super(Splitting, self).__init__()

    def even(self, x):
        return x[:, ::2, :]

    def odd(self, x):
        return x[:, 1::2, :]

    def forward(self, x):
        '''Returns the odd and even part'''
        return (self.even(x), self.odd(x))


class Interactor(nn.Module):
    def __init__(self, in_planes, splitting=True,
                 kernel = 5, dropout=0.5, groups = 1, hidden_size = 1, INN = True):
        super(Interactor, self).__init__()
        self.modified = INN
        self.kernel_size = kernel
        self.dilation = 1
        self.dropout = dropout
        self.hidden_size = hidden_size
        self.groups = groups
        if self.kernel_size % 2 == 0:
            pad_l = self.dilation * (self.kernel_size - 2) // 2 + 1 #by default: stride==1
            pad_r = self.dilation * (self.kernel_size) // 2 + 1 #by default: stride==1

        else:
            pad_l = self.dilation * (self.kernel_size - 1) // 2 + 1 # we fix the kernel size of the second layer as 3.
            pad_r = self.dilation * (self.kernel_size - 1) // 2 + 1
        self.splitting = splitting
        self.split = Splitting()

        modules_P = []
        modules_U = []
        modules_psi = []
        modules_phi = []
        prev_size = 1

        size_hidden = self.hidden_size
        modules_P += [
            nn.ReplicationPad1d((pad_l, pad_r)),

            nn.Conv1d(in_planes * prev_size, int(in_planes * size_hidden),
                      kernel_size=self.kernel_size, dilation=self.dilation, stride=1, groups= self.groups),
            nn.LeakyReLU(negative_slope=0.01, inplace=True),

            nn.Dropout(self.dropout),
            nn.Conv1d(int(in_planes * size_hidden), in_planes,
                      kernel_size=3, stride=1, groups= self.groups),
            nn.Tanh()
        ]
        modules_U += [
            nn.ReplicationPad1d((pad_l, pad_r)),
            nn.Conv1d(in_planes * prev_size, int(in_planes * size_hidden),
                      kernel_size=self.kernel_size, dilation=self.dilation, stride=1, groups= self.groups),
            nn.LeakyReLU(negative_slope=0.01, inplace=True),
            nn.Dropout(self.dropout),
            nn.Conv1d(int(in_planes * size_hidden), in_planes,
                      kernel_size=3, stride=1, groups= self.groups),
            nn.Tanh()
        ]

        modules_phi += [
            nn.ReplicationPad1d((pad_l, pad_r)),
            nn.Conv1d(in_planes * prev_size, int(in_planes * size_hidden),
                      kernel_size=self.kernel_size, dilation=self.dilation, stride=1, groups= self.groups),
            nn.LeakyReLU(negative_slope=0.01, inplace=True),
            nn.Dropout(self.dropout),
            nn.Conv1d(int(in_planes * size_hidden), in_planes,
                      kernel_size=3, stride=1, groups= self.groups),
            nn.Tanh()
        ]
        modules_psi += [
            nn.ReplicationPad1d((pad_l, pad_r)),
            nn.Conv1d(in_planes * prev_size, int(in_planes * size_hidden),
                      kernel_size=self.kernel_size, dilation=self.dilation, stride=1, groups= self.groups),
            nn.LeakyReLU(negative_slope=0.01, inplace=True),
            nn.Dropout(self.dropout),
            nn.Conv1d(int(in_planes * size_hidden), in_planes,
                      kernel_size=3, stride=1, groups= self.groups),
            nn.Tanh()
        ]
        self.phi = nn.Sequential(*modules_phi)
        self.psi = nn.Sequential(*modules_psi)
        self.P = nn.Sequential(*modules_P)
        self.U = nn.Sequential(*modules_U)

    def forward(self, x):
        if self.splitting:
            (x_even, x_odd) = self.split(x)
        else:
            (x_even, x_odd) = x

        if self.modified:
            x_even = x_even.permute(0, 2, 1)
            x_odd = x_odd.permute(0, 2, 1)

            d = x_odd.mul(torch.exp(self.phi(x_even)))
            c = x_even.mul(torch.exp(self.psi(x_odd)))

            x_even_update = c + self.U(d)
            x_odd_update = d - self.P(c)

            return (x_even_update, x_odd_update)

        else:
            x_even = x_even.permute(0, 2, 1)
            x_odd = x_odd.permute(0, 2, 1)

            d = x_odd - self.P(x_even)
            c = x_even + self.U(d)

            return (c, d)


class InteractorLevel(nn.Module):
    def __init__(self, in_planes, kernel, dropout, groups , hidden_size, INN):
        super(InteractorLevel, self).__init__()
        self.level = Interactor(in_planes = in_planes, splitting=True,
                 kernel = kernel, dropout=dropout, groups = groups, hidden_size = hidden_size, INN = INN)

    def forward(self, x):
        (x_even_update, x_odd_update) = self.level(x)
        return (x_even_update, x_odd_update)


class LevelSCINet(nn.Module):
    def __init__(self,in_planes, kernel_size, dropout, groups, hidden_size, INN):
        super(LevelSCINet, self).__init__()
        self.interact = InteractorLevel(in_planes= in_planes, kernel = kernel_size, dropout = dropout, groups =groups , hidden_size = hidden_size, INN = INN)

    def forward(self, x):
        (x_even_update, x_odd_update) = self.interact(x)
        return x_even_update.permute(0, 2, 1), x_odd_update.permute(0, 2, 1) #even: B, T, D odd: B, T, D


class SCINet_Tree(nn.Module):
    def __init__(self, in_planes, current_level, kernel_size, dropout, groups, hidden_size, INN):
        super().__init__()
        self.current_level = current_level


        self.workingblock = LevelSCINet(
            in_planes = in_planes,
            kernel_size = kernel_size,
            dropout = dropout,
            groups= groups,
            hidden_size = hidden_size,
            INN = INN)


        if current_level!=0:
            self.SCINet_Tree_odd=SCINet_Tree(in_planes, current_level-1, kernel_size, dropout, groups, hidden_size, INN)
            self.SCINet_Tree_even=SCINet_Tree(in_planes, current_level-1, kernel_size, dropout, groups, hidden_size, INN)

    def zip_up_the_pants(self, even, odd):
        even = even.permute(1, 0, 2)
        odd = odd.permute(1, 0, 2) #L, B, D
        even_len = even.shape[0]
        odd_len = odd.shape[0]
        mlen = min((odd_len, even_len))
        _ = []
        for i in range(mlen):
            _.append(even[i].unsqueeze(0))
            _.append(odd[i].unsqueeze(0))
        if odd_len < even_len:
            _.append(even[-1].unsqueeze(0))
        return torch.cat(_,0).permute(1,0,2) #B, L, D

    def forward(self, x):
        x_even_update, x_odd_update= self.workingblock(x)
        # We recursively reordered these sub-series. You can run the ./utils/recursive_demo.py to emulate this procedure.
        if self.current_level ==0:
            return self.zip_up_the_pants(x_even_update, x_odd_update)
        else:
            return self.zip_up_the_pants(self.SCINet_Tree_even(x_even_update), self.SCINet_Tree_odd(x_odd_update))


class EncoderTree(nn.Module):
    def __init__(self, in_planes,  num_levels, kernel_size, dropout, groups, hidden_size, INN):
        super().__init__()
        self.levels=num_levels
        self.SCINet_Tree = SCINet_Tree(
            in_planes = in_planes,
            current_level = num_levels-1,
            kernel_size = kernel_size,
            dropout =dropout ,
            groups = groups,
            hidden_size = hidden_size,
            INN = INN)

    def forward(self, x):

        x= self.SCINet_Tree(x)

        return x


class SCINet(nn.Module):
    def __init__(self, output_len, input_len, input_dim = 9, hid_size = 1, num_stacks = 1,
                num_levels = 3, num_decoder_layer = 1, concat_len = 0, groups = 1, kernel = 5, dropout = 0.5,
                 single_step_output_One = 0, input_len_seg = 0, positionalE = False, modified = True, RIN=False):
        super(SCINet, self).__init__()

        self.input_dim = input_dim
        self.input_len = input_len
        self.output_len = output_len
        self.hidden_size = hid_size
        self.num_levels = num_levels
        self.groups = groups
        self.modified = modified
        self.kernel_size = kernel
        self.dropout = dropout
        self.single_step_output_One = single_step_output_One
        self.concat_len = concat_len
        self.pe = positionalE
        self.RIN=RIN
        self.num_decoder_layer = num_decoder_layer

        self.blocks1 = EncoderTree(
            in_planes=self.input_dim,
            num_levels = self.num_levels,
            kernel_size = self.kernel_size,
            dropout = self.dropout,
            groups = self.groups,
            hidden_size = self.hidden_size,
            INN =  modified)

        self.stacks = num_stacks

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()
        self.projection1 = nn.Conv1d(self.input_len, self.output_len, kernel_size=1, stride=1, bias=False)
        self.div_projection = nn.ModuleList()
        self.overlap_len = self.input_len//4
        self.div_len = self.input_len//6

        # For positional encoding
        self.pe_hidden_size = input_dim
        if self.pe_hidden_size % 2 == 1:
            self.pe_hidden_size += 1

        num_timescales = self.pe_hidden_size // 2
        max_timescale = 10000.0
        min_timescale = 1.0

        log_timescale_increment = (
                math.log(float(max_timescale) / float(min_timescale)) /
                max(num_timescales - 1, 1))
        temp = torch.arange(num_timescales, dtype=torch.float32)
        inv_timescales = min_timescale * torch.exp(
            torch.arange(num_timescales, dtype=torch.float32) *
            -log_timescale_increment)
        self.register_buffer('inv_timescales', inv_timescales)

    def forward(self, x):
        assert self.input_len % (np.power(2, self.num_levels)) == 0 # evenly divided the input length into two parts. (e.g., 32 -> 16 -> 8 -> 4 for 3 levels)

        # the first stack
        res1 = x
        x = self.blocks1(x)
        x += res1
        if self.num_decoder_layer == 1:
            x = self.projection1(x)

        if self.stacks == 1:
            return x


# utils/tools.py
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

    def inverse_transform(self, data):
        mean = torch.from_numpy(self.mean).type_as(data).to(data.device) if torch.is_tensor(data) else self.mean
        std = torch.from_numpy(self.std).type_as(data).to(data.device) if torch.is_tensor(data) else self.std
        return (data * std) + mean


def adjust_learning_rate(optimizer, epoch, args):
    if args.lradj==1:
        lr_adjust = {epoch: args.lr * (0.95 ** (epoch // 1))}

    if epoch in lr_adjust.keys():
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr
    else:
        for param_group in optimizer.param_groups:
            lr = param_group['lr']
    return lr


# utils/timefeatures.py (the hourly entry)
class HourOfDay:
    def __call__(self, index):
        return index.hour / 23.0 - 0.5


class DayOfWeek:
    def __call__(self, index):
        return index.dayofweek / 6.0 - 0.5


class DayOfMonth:
    def __call__(self, index):
        return (index.day - 1) / 30.0 - 0.5


class DayOfYear:
    def __call__(self, index):
        return (index.dayofyear - 1) / 365.0 - 0.5


def time_features(dates, timeenc=1, freq='h'):
    dates = pd.to_datetime(dates.date.values)
    return np.vstack([feat(dates) for feat in (HourOfDay(), DayOfWeek(), DayOfMonth(), DayOfYear())]).transpose(1,0)


# data_process/etth_data_loader.py
class Dataset_ETT_hour(Dataset):
    def __init__(self, df_raw, flag='train', size=None,
                 features='S', target='OT', scale=True, inverse=False, timeenc=0, freq='h', cols=None):
        # size [seq_len, label_len, pred_len]
        # info
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
        self.df_raw = df_raw  # (port) the frame, not a csv path
        self.__read_data__()

    def __read_data__(self):
        self.scaler = StandardScaler()
        df_raw = self.df_raw

        border1s = [0, 12*MONTH - self.seq_len, 12*MONTH+4*MONTH - self.seq_len]
        border2s = [12*MONTH, 12*MONTH+4*MONTH, 12*MONTH+8*MONTH]
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

        seq_x = self.data_x[s_begin:s_end]  # 0 - 24
        seq_y = self.data_y[r_begin:r_end] # 0 - 48
        seq_x_mark = self.data_stamp[s_begin:s_end]
        seq_y_mark = self.data_stamp[r_begin:r_end]

        return seq_x, seq_y, seq_x_mark, seq_y_mark

    def __len__(self):
        return len(self.data_x) - self.seq_len- self.pred_len + 1

    def inverse_transform(self, data):
        return self.scaler.inverse_transform(data)


# ------------------------------------------------------------------------------------------- (port) data
def synthetic_etth(rng, n=20 * MONTH):
    """An ETTh1-shaped hourly frame: six loads with daily/weekly cycles and drifts, OT a lagged mix of them."""
    t = np.arange(n)
    cols = {}
    for k, name in enumerate(["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL"]):
        daily = rng.uniform(1, 3) * np.sin(2 * np.pi * t / 24 + rng.uniform(0, 2 * np.pi))
        weekly = rng.uniform(0.3, 1) * np.sin(2 * np.pi * t / 168 + rng.uniform(0, 2 * np.pi))
        drift = np.cumsum(rng.normal(0, 0.05, n))
        cols[name] = 5 + k + daily + weekly + drift + rng.normal(0, 0.2, n)
    loads = np.stack(list(cols.values()), 1)
    ot = 20 + np.roll(loads @ rng.uniform(0.2, 0.6, 6), 3) * 0.5 + rng.normal(0, 0.3, n)
    cols["OT"] = ot
    date = pd.date_range("2016-07-01 00:00:00", periods=n, freq="h").strftime("%Y-%m-%d %H:%M:%S")
    return pd.DataFrame({"date": date, **cols})


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    args = types.SimpleNamespace(
        data="ETTh1", features="M", target="OT", freq="h", inverse=False, embed="timeF", seq_len=48, label_len=24,
        pred_len=24, concat_len=0, single_step_output_One=0, num_workers=0, train_epochs=100, batch_size=8,
        lr=3e-3, loss="mae", lradj=1, hidden_size=4, INN=1, kernel=5, dropout=0.5, positionalEcoding=False,
        groups=1, levels=3, stacks=1, num_decoder_layer=1, RIN=False, decompose=False)
    df_raw = synthetic_etth(rng)

    # Exp_ETTh._build_model
    in_dim = 7 if args.features == 'M' else 1
    model = SCINet(
        output_len=args.pred_len,
        input_len=args.seq_len,
        input_dim= in_dim,
        hid_size = args.hidden_size,
        num_stacks=args.stacks,
        num_levels=args.levels,
        num_decoder_layer=args.num_decoder_layer,
        concat_len = args.concat_len,
        groups = args.groups,
        kernel = args.kernel,
        dropout = args.dropout,
        single_step_output_One = args.single_step_output_One,
        positionalE = args.positionalEcoding,
        modified = True,
        RIN=args.RIN).double()

    # Exp_ETTh._get_data
    timeenc = 0 if args.embed!='timeF' else 1

    def get_data(flag):
        shuffle_flag = flag == 'train'
        data_set = Dataset_ETT_hour(df_raw, flag=flag, size=[args.seq_len, args.label_len, args.pred_len],
                                    features=args.features, target=args.target, inverse=args.inverse,
                                    timeenc=timeenc, freq=args.freq)
        data_loader = DataLoader(data_set, batch_size=args.batch_size, shuffle=shuffle_flag,
                                 num_workers=args.num_workers, drop_last=True,
                                 generator=torch.Generator().manual_seed(seed) if shuffle_flag else None)
        return data_set, data_loader

    train_data, train_loader = get_data('train')
    valid_data, valid_loader = get_data('val')

    model_optim = optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.L1Loss()  # _select_criterion("mae")

    def _process_one_batch_SCINet(dataset_object, batch_x, batch_y):
        batch_x = batch_x.double()
        batch_y = batch_y.double()

        outputs = model(batch_x)

        #if self.args.inverse:
        outputs_scaled = dataset_object.inverse_transform(outputs)
        f_dim = -1 if args.features=='MS' else 0
        if bug == "target_window_from_start":
            batch_y = batch_y[:,:args.pred_len,f_dim:]
        else:
            batch_y = batch_y[:,-args.pred_len:,f_dim:]
        batch_y_scaled = dataset_object.inverse_transform(batch_y)

        return outputs, outputs_scaled, 0,0, batch_y, batch_y_scaled

    def valid(valid_data, valid_loader, criterion):
        if bug != "valid_without_eval":
            model.eval()
        total_loss = []
        for i, (batch_x, batch_y, batch_x_mark, batch_y_mark) in enumerate(valid_loader):
            pred, pred_scale, mid, mid_scale, true, true_scale = _process_one_batch_SCINet(
                valid_data, batch_x, batch_y)
            loss = criterion(pred.detach().cpu(), true.detach().cpu())
            total_loss.append(loss)
        total_loss = np.average(total_loss)
        return total_loss

    state = {"it": iter(train_loader), "epoch": 0}
    model.train()

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["epoch"] += 1
            adjust_learning_rate(model_optim, state["epoch"], args)
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        (batch_x,batch_y,batch_x_mark,batch_y_mark) = next_batch()
        if bug != "zero_grad_dropped":
            model_optim.zero_grad()
        pred, pred_scale, mid, mid_scale, true, true_scale = _process_one_batch_SCINet(
            train_data, batch_x, batch_y)
        loss = criterion(pred, true)
        loss.backward()
        model_optim.step()
        return loss.item()

    def eval_fn(_model, _batch=None):
        out = float(valid(valid_data, valid_loader, criterion))
        model.train()
        return out

    bx, by, _, _ = next(iter(DataLoader(train_data, batch_size=args.batch_size)))
    batch = (bx.double(), by.double()[:, -args.pred_len:, 0:])
    return Program(name="scinet_etth", model=model, batch=batch, loss_fn=criterion, optimizer=model_optim,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # batch_y[:, :pred_len] for batch_y[:, -pred_len:] (classic): the target is the label_len start window, which
    # is the end of the look-back input itself, not the horizon.
    Bug("target_window_from_start", functools.partial(_build, bug="target_window_from_start"), "learning_ledger",
        ("TASK",)),
    # valid() without model.eval() (classic): the SCI-blocks' dropout 0.5 stays on during validation.
    Bug("valid_without_eval", functools.partial(_build, bug="valid_without_eval"), "six_claims", ("EVALUATION",)),
    # model_optim.zero_grad() left out (classic): the gradients of every step pile up; a slip of the whole model's
    # step.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

"""CycleNet (Lin et al., 2024) long-term forecaster of ACAT-SCUT/CycleNet with its MLP ETTh1 script: "residual cycle
forecasting" with a learnable recurrent cycle (a ``cycle x channels`` parameter queue, gathered by each window's
phase index ``cycle_index`` modulo the cycle length), instance normalization (RevIN without affine), the cycle of
the input removed, a channel-independent MLP over the look-back window, the cycle of the horizon added back and
the window's statistics restored; MSE on the ``pred_len`` horizon, Adam lr 5e-3, ``adjust_learning_rate`` 'type3'
after every epoch.

Source: https://github.com/ACAT-SCUT/CycleNet
Commit: af6e06ccf8389f8fadb524cbf5c89ef0349dc30f
Files: models/CycleNet.py, exp/exp_main.py (train, vali, _select_optimizer, _select_criterion),
  data_provider/data_loader.py (Dataset_ETT_hour with the cycle index), data_provider/data_factory.py,
  utils/tools.py (adjust_learning_rate, in ``_etth.py``, shared), run.py, scripts/CycleNet/MLP-Input-96/etth1.sh
License: Apache-2.0 (full text in LICENSES/ACAT-SCUT-CycleNet.txt)
Domain: time-series forecasting, multivariate long horizon (learnable periodic cycle + MLP backbone)

Deviations from the original:
- sizes (MLP-Input-96/etth1.sh): pred_len 96 -> 48, batch_size 256 -> 32, d_model 512 -> 64; seq_len 96,
  cycle 24, model_type 'mlp', use_revin 1, enc_in 7, features 'M', label_len 0, loss mse, lradj 'type3' kept;
  learning_rate 5e-3 -> 2e-2 so that the 30 steps of the self-check show the loss falling (the original runs up to
  30 epochs);
- data: the ETTh1 CSV is replaced by a synthetic 7-channel hourly series made from ``seed`` (a daily and a weekly
  sinusoid per channel, a slow trend, noise) with ETTh1's 17420 rows; ``Dataset_ETT_hour``'s borders (12/4/4
  months), scaling on the training months and the cycle index ``(np.arange(len(data)) % cycle)[border1:border2]``
  read at ``s_end`` as written (sklearn's StandardScaler written out in numpy, the population std as sklearn
  uses); CycleNet never reads the time features, so ``data_stamp`` is zeros (pandas' date parsing and
  ``time_features`` are left out);
- no GPU, AMP, early stopping or checkpoint reload; prints left out; DataLoader without workers and shuffled by a
  ``torch.Generator`` seeded from ``seed`` (run.py's ``random_seed`` 2024 -> ``seed``);
- one ``train_step`` is one batch of ``Exp_Main.train`` (the 'Cycle' branch: ``self.model(batch_x, batch_cycle)``);
  when an epoch of the loader ends, ``adjust_learning_rate(model_optim, scheduler, epoch + 1, args)`` runs as at
  the end of the epoch body (the OneCycleLR is built as written and only read by 'TST'); ``eval_fn`` is ``vali``
  on one batch (``model.eval()``, ``no_grad``, MSE) restoring ``model.train()``;
- the Program's batch is ``((batch_x, batch_cycle), batch_y)``, the model's two inputs;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, PLC0208

from __future__ import annotations

import functools
import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
from torch import optim
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _etth import StandardScaler, adjust_learning_rate, make_ett_like

# ---- models/CycleNet.py ------------------------------------------------------------------------------------------

class RecurrentCycle(torch.nn.Module):
    # Thanks for the contribution of wayhoww.
    # The new implementation uses index arithmetic with modulo to directly gather cyclic data in a single operation,
    # while the original implementation manually rolls and repeats the data through looping.
    # It achieves a significant speed improvement (2x ~ 3x acceleration).
    # See https://github.com/ACAT-SCUT/CycleNet/pull/4 for more details.
    def __init__(self, cycle_len, channel_size):
        super(RecurrentCycle, self).__init__()
        self.cycle_len = cycle_len
        self.channel_size = channel_size
        self.data = torch.nn.Parameter(torch.zeros(cycle_len, channel_size), requires_grad=True)

    def forward(self, index, length):
        gather_index = (index.view(-1, 1) + torch.arange(length, device=index.device).view(1, -1)) % self.cycle_len
        return self.data[gather_index]


class Model(nn.Module):
    def __init__(self, configs, bug=None):
        super(Model, self).__init__()

        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.enc_in = configs.enc_in
        self.cycle_len = configs.cycle
        self.model_type = configs.model_type
        self.d_model = configs.d_model
        self.use_revin = configs.use_revin
        self.bug = bug

        self.cycleQueue = RecurrentCycle(cycle_len=self.cycle_len, channel_size=self.enc_in)

        assert self.model_type in ['linear', 'mlp']
        if self.model_type == 'linear':
            self.model = nn.Linear(self.seq_len, self.pred_len)
        elif self.model_type == 'mlp':
            self.model = nn.Sequential(
                nn.Linear(self.seq_len, self.d_model),
                nn.ReLU(),
                nn.Linear(self.d_model, self.pred_len)
            )

    def forward(self, x, cycle_index):
        # x: (batch_size, seq_len, enc_in), cycle_index: (batch_size,)

        # instance norm
        if self.use_revin:
            seq_mean = torch.mean(x, dim=1, keepdim=True)
            seq_var = torch.var(x, dim=1, keepdim=True) + 1e-5
            x = (x - seq_mean) / torch.sqrt(seq_var)

        # remove the cycle of the input data
        x = x - self.cycleQueue(cycle_index, self.seq_len)

        # forecasting with channel independence (parameters-sharing)
        y = self.model(x.permute(0, 2, 1)).permute(0, 2, 1)

        # add back the cycle of the output data
        y = y + self.cycleQueue((cycle_index + self.seq_len) % self.cycle_len, self.pred_len)

        # instance denorm
        if self.use_revin and self.bug != "revin_denorm_dropped":
            y = y * torch.sqrt(seq_var) + seq_mean

        return y


# ---- data_provider/data_loader.py --------------------------------------------------------------------------------

class Dataset_ETT_hour(Dataset):
    def __init__(self, df_values, flag='train', size=None,
                 features='S', data_path='ETTh1.csv',
                 target='OT', scale=True, timeenc=0, freq='h', cycle=None):
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
        self.cycle = cycle

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

        data_stamp = np.zeros((border2 - border1, 4))  # (port) time features: never read by CycleNet

        self.data_x = data[border1:border2]
        self.data_y = data[border1:border2]
        self.data_stamp = data_stamp

        # add cycle
        self.cycle_index = (np.arange(len(data)) % self.cycle)[border1:border2]

    def __getitem__(self, index):
        s_begin = index
        s_end = s_begin + self.seq_len
        r_begin = s_end - self.label_len
        r_end = r_begin + self.label_len + self.pred_len

        seq_x = self.data_x[s_begin:s_end]
        seq_y = self.data_y[r_begin:r_end]
        seq_x_mark = self.data_stamp[s_begin:s_end]
        seq_y_mark = self.data_stamp[r_begin:r_end]

        cycle_index = torch.tensor(self.cycle_index[s_end])

        return seq_x, seq_y, seq_x_mark, seq_y_mark, cycle_index

    def __len__(self):
        return len(self.data_x) - self.seq_len - self.pred_len + 1


# ---- utils/tools.py: adjust_learning_rate, in _etth.py (as in the lss-1138 ports) ------------------------------

# ---- exp/exp_main.py ---------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    args = SimpleNamespace(model='CycleNet', data='ETTh1', features='M', target='OT', freq='h', embed='timeF',
                           seq_len=96, label_len=0, pred_len=48, cycle=24, model_type='mlp', use_revin=1,
                           d_model=64, enc_in=7, train_epochs=30, patience=5, batch_size=32, learning_rate=0.02,
                           loss='mse', lradj='type3', pct_start=0.3, use_amp=False, output_attention=False)

    # data_provider(args, 'train')
    timeenc = 0 if args.embed != 'timeF' else 1
    train_data = Dataset_ETT_hour(make_ett_like(seed), flag='train',
                                  size=[args.seq_len, args.label_len, args.pred_len],
                                  features=args.features, target=args.target, timeenc=timeenc, freq=args.freq,
                                  cycle=args.cycle)
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True, num_workers=0, drop_last=True,
                              generator=torch.Generator().manual_seed(seed))
    model = Model(args, bug=bug).float()

    train_steps = len(train_loader)
    if bug == "cycle_queue_not_optimized":
        model_optim = optim.Adam(model.model.parameters(), lr=args.learning_rate)
    else:
        model_optim = optim.Adam(model.parameters(), lr=args.learning_rate)
    if args.loss == "mae":
        criterion = nn.L1Loss()
    elif args.loss == "mse":
        criterion = nn.MSELoss()
    elif args.loss == "smooth":
        criterion = nn.SmoothL1Loss()
    else:
        criterion = nn.MSELoss()

    scheduler = lr_scheduler.OneCycleLR(optimizer=model_optim,
                                        steps_per_epoch=train_steps,
                                        pct_start=args.pct_start,
                                        epochs=args.train_epochs,
                                        max_lr=args.learning_rate)
    f_dim = -1 if args.features == 'MS' else 0
    state = {"it": None, "epoch": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of `for epoch in range(train_epochs)`'s body
                if args.lradj != 'TST':
                    adjust_learning_rate(model_optim, scheduler, state["epoch"] + 1, args, printout=False)
                state["epoch"] += 1
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        batch_x, batch_y, batch_x_mark, batch_y_mark, batch_cycle = next_batch()
        if bug != "zero_grad_after_backward":
            model_optim.zero_grad()
        batch_x = batch_x.float()

        batch_y = batch_y.float()
        batch_x_mark = batch_x_mark.float()
        batch_y_mark = batch_y_mark.float()
        batch_cycle = batch_cycle.int()

        # decoder input
        dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
        dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float()

        # encoder - decoder
        if any(substr in args.model for substr in {'Cycle'}):
            outputs = model(batch_x, batch_cycle)
        # print(outputs.shape,batch_y.shape)
        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, -args.pred_len:, f_dim:]
        batch_y = batch_y[:, -args.pred_len:, f_dim:]
        loss = criterion(outputs, batch_y)

        loss.backward()
        if bug == "zero_grad_after_backward":
            model_optim.zero_grad()
        model_optim.step()

        if args.lradj == 'TST':
            adjust_learning_rate(model_optim, scheduler, state["epoch"] + 1, args, printout=False)
            scheduler.step()
        return loss.detach()

    def vali(model, batch):
        (batch_x, batch_cycle), batch_y = batch
        total_loss = []
        model.eval()
        with torch.no_grad():
            outputs = model(batch_x.float(), batch_cycle.int())
            outputs = outputs[:, -args.pred_len:, f_dim:]
            pred = outputs.detach().cpu()
            true = batch_y.detach().cpu()
            loss = criterion(pred, true)
            total_loss.append(loss)
        total_loss = np.average(total_loss)
        model.train()
        return float(total_loss)

    first_x, first_y, _, _, first_cycle = next(iter(DataLoader(train_data, batch_size=args.batch_size)))
    batch = ((first_x.float(), first_cycle.int()), first_y.float()[:, -args.pred_len:, f_dim:])
    return Program(name="cyclenet_etth", model=model, batch=batch,
                   loss_fn=lambda outputs, targets: criterion(outputs[:, -args.pred_len:, f_dim:], targets),
                   optimizer=model_optim, train_step=train_step, eval_fn=vali, task="regression",
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the instance denormalization (``y * sqrt(seq_var) + seq_mean``) left out, so the forecast stays in
    # the window-normalized units while the loss compares it with the series in its own scale.
    Bug("revin_denorm_dropped", functools.partial(_build, bug="revin_denorm_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the optimizer built over the backbone only (``model.model.parameters()``): the learnable cycle
    # ``cycleQueue.data`` receives gradients and never moves from its zero initialization.
    Bug("cycle_queue_not_optimized", functools.partial(_build, bug="cycle_queue_not_optimized"), "four_structures",
        ("cycleQueue.data",)),
    # model_optim.zero_grad() moved between loss.backward() and model_optim.step() (classic): every step applies a
    # zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

"""SparseTSF (Lin et al., 2024) long-term forecaster of lss-1138/SparseTSF with its MLP ETTh1 script: each channel's
look-back window has its mean removed, a length-``period_len`` 1-D convolution is added as a residual ("aggregation"),
the window is cut into ``seq_len / period_len`` periods and downsampled so that every phase of the period is its own
short series, one MLP shared over phases and channels maps the ``seg_num_x`` past values of a phase to its
``seg_num_y`` future values ("sparse forecasting"), the phases are upsampled back and the mean added; MSE on the
``pred_len`` horizon, Adam lr 2e-3, ``adjust_learning_rate`` 'type3' after every epoch.

Source: https://github.com/lss-1138/SparseTSF
Commit: b8c2740eecc84d8095ffce49ba5acafe68e53bb8
Files: models/SparseTSF.py, exp/exp_main.py (train, vali, _select_optimizer, _select_criterion),
  data_provider/data_loader.py (Dataset_ETT_hour), data_provider/data_factory.py, utils/tools.py
  (adjust_learning_rate; these two in ``_etth.py``, shared), run_longExp.py, scripts/SparseTSF/mlp/etth1.sh
License: Apache-2.0 (full text in LICENSES/lss-1138-SparseTSF.txt)
Domain: time-series forecasting, multivariate long horizon (period-wise downsampled MLP, channel independent)

Deviations from the original:
- sizes (mlp/etth1.sh): seq_len 720 -> 240, pred_len 96 -> 48, batch_size 256 -> 32, d_model 128 -> 32;
  period_len 24, model_type 'mlp', enc_in 7, features 'M', loss mse, lradj 'type3' and run_longExp.py's default
  label_len 48 kept; learning_rate 2e-3 -> 2e-2 so that the 30 steps of the self-check show the loss falling (the
  original runs up to 30 epochs);
- data: the ETTh1 CSV is replaced by a synthetic 7-channel hourly series made from ``seed`` (a daily and a weekly
  sinusoid per channel, a slow trend, noise) with ETTh1's 17420 rows; ``Dataset_ETT_hour``'s borders (12/4/4
  months) and scaling on the training months as written (sklearn's StandardScaler written out in numpy, the
  population std as sklearn uses); SparseTSF never reads the time features, so ``data_stamp`` is zeros (pandas'
  date parsing and ``time_features`` are left out);
- ``layers.Embed.PositionalEmbedding`` is imported by models/SparseTSF.py but never used: not copied;
- no GPU, AMP, early stopping or checkpoint reload; prints left out; DataLoader without workers and shuffled by a
  ``torch.Generator`` seeded from ``seed`` (run_longExp.py's fixed seeds 2023.. -> ``seed``);
- one ``train_step`` is one batch of ``Exp_Main.train`` (the 'SparseTSF' branch: ``self.model(batch_x)``); when an
  epoch of the loader ends, ``adjust_learning_rate(model_optim, scheduler, epoch + 1, args)`` runs as at the end of
  the epoch body (the OneCycleLR is built as written and only read by 'TST'); ``eval_fn`` is ``vali`` on one batch
  (``model.eval()``, ``no_grad``, MSE) restoring ``model.train()``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

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
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _etth import Dataset_ETT_hour, adjust_learning_rate, make_ett_like

# ---- models/SparseTSF.py -----------------------------------------------------------------------------------------

class Model(nn.Module):
    def __init__(self, configs):
        super(Model, self).__init__()

        # get parameters
        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.enc_in = configs.enc_in
        self.period_len = configs.period_len
        self.d_model = configs.d_model
        self.model_type = configs.model_type
        assert self.model_type in ['linear', 'mlp']

        self.seg_num_x = self.seq_len // self.period_len
        self.seg_num_y = self.pred_len // self.period_len

        self.conv1d = nn.Conv1d(in_channels=1, out_channels=1, kernel_size=1 + 2 * (self.period_len // 2),
                                stride=1, padding=self.period_len // 2, padding_mode="zeros", bias=False)

        if self.model_type == 'linear':
            self.linear = nn.Linear(self.seg_num_x, self.seg_num_y, bias=False)
        elif self.model_type == 'mlp':
            self.mlp = nn.Sequential(
                nn.Linear(self.seg_num_x, self.d_model),
                nn.ReLU(),
                nn.Linear(self.d_model, self.seg_num_y)
            )


    def forward(self, x):
        batch_size = x.shape[0]
        # normalization and permute     b,s,c -> b,c,s
        seq_mean = torch.mean(x, dim=1).unsqueeze(1)
        x = (x - seq_mean).permute(0, 2, 1)

        # 1D convolution aggregation
        x = self.conv1d(x.reshape(-1, 1, self.seq_len)).reshape(-1, self.enc_in, self.seq_len) + x

        # downsampling: b,c,s -> bc,n,w -> bc,w,n
        x = x.reshape(-1, self.seg_num_x, self.period_len).permute(0, 2, 1)

        # sparse forecasting
        if self.model_type == 'linear':
            y = self.linear(x)  # bc,w,m
        elif self.model_type == 'mlp':
            y = self.mlp(x)

        # upsampling: bc,w,m -> bc,m,w -> b,c,s
        y = y.permute(0, 2, 1).reshape(batch_size, self.enc_in, self.pred_len)

        # permute and denorm
        y = y.permute(0, 2, 1) + seq_mean

        return y


# ---- data_provider/data_loader.py, utils/tools.py: in _etth.py (shared with the other lss-1138 ports) -----------

# ---- exp/exp_main.py ---------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    args = SimpleNamespace(model='SparseTSF', data='ETTh1', features='M', target='OT', freq='h', embed='timeF',
                           seq_len=240, label_len=48, pred_len=48, period_len=24, model_type='mlp', d_model=32,
                           enc_in=7, train_epochs=30, patience=5, batch_size=32, learning_rate=0.02, loss='mse',
                           lradj='type3', pct_start=0.3, use_amp=False, output_attention=False)

    # data_provider(args, 'train')
    timeenc = 0 if args.embed != 'timeF' else 1
    train_data = Dataset_ETT_hour(make_ett_like(seed), flag='train',
                                  size=[args.seq_len, args.label_len, args.pred_len],
                                  features=args.features, target=args.target, timeenc=timeenc, freq=args.freq)
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True, num_workers=0, drop_last=True,
                              generator=torch.Generator().manual_seed(seed))
    model = Model(args).float()

    train_steps = len(train_loader)
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
        batch_x, batch_y, batch_x_mark, batch_y_mark = next_batch()
        if bug != "zero_grad_after_backward":
            model_optim.zero_grad()
        batch_x = batch_x.float()

        batch_y = batch_y.float()
        batch_x_mark = batch_x_mark.float()
        batch_y_mark = batch_y_mark.float()

        # decoder input
        dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
        dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float()

        # encoder - decoder
        if any(substr in args.model for substr in {'Linear', 'TST', 'SparseTSF'}):  # noqa: PLC0208
            outputs = model(batch_x)
        # print(outputs.shape,batch_y.shape)
        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, -args.pred_len:, f_dim:]
        if bug == "target_window_from_start":
            batch_y = batch_y[:, :args.pred_len, f_dim:]
        else:
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
        batch_x, batch_y = batch
        total_loss = []
        model.eval()
        with torch.no_grad():
            outputs = model(batch_x.float())
            outputs = outputs[:, -args.pred_len:, f_dim:]
            pred = outputs.detach().cpu()
            true = batch_y.detach().cpu()
            loss = criterion(pred, true)
            total_loss.append(loss)
        total_loss = np.average(total_loss)
        model.train()
        return float(total_loss)

    first_x, first_y, _, _ = next(iter(DataLoader(train_data, batch_size=args.batch_size)))
    batch = (first_x.float(), first_y.float()[:, -args.pred_len:, f_dim:])
    return Program(name="sparsetsf_etth", model=model, batch=batch,
                   loss_fn=lambda outputs, targets: criterion(outputs[:, -args.pred_len:, f_dim:], targets),
                   optimizer=model_optim, train_step=train_step, eval_fn=vali, task="regression",
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the target window sliced from the start of seq_y (batch_y[:, :pred_len]) instead of its end: with
    # run_longExp.py's label_len 48 the model is scored on the 48 hours before the horizon it forecasts.
    Bug("target_window_from_start", functools.partial(_build, bug="target_window_from_start"), "learning_ledger",
        ("TASK",)),
    # model_optim.zero_grad() moved between loss.backward() and model_optim.step() (classic): every step applies a
    # zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

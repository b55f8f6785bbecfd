"""SegRNN (Lin et al., 2023) long-term forecaster of lss-1138/SegRNN with its ETTh1 script: each channel's look-back
window (the last value subtracted) cut into segments of ``seg_len``, each segment embedded (linear + ReLU), a GRU
encoder over the segments, then parallel multi-step decoding ("pmf"): the final hidden state repeated for every
output segment, a learnable positional embedding concatenated with a channel embedding as the GRU input of each,
one GRU step, dropout and a linear layer to the segment's values, the last value added back; MSE on the
``pred_len`` horizon, Adam lr 3e-4, ``adjust_learning_rate`` 'type3' after every epoch.

Source: https://github.com/lss-1138/SegRNN
Commit: 8e869ecfdf1daab3a0ba14d1d620796c1a5d2c4f
Files: models/SegRNN.py, exp/exp_main.py (train, vali, _select_optimizer, _select_criterion),
  data_provider/data_loader.py (Dataset_ETT_hour), data_provider/data_factory.py, utils/tools.py
  (adjust_learning_rate; these two in ``_etth.py``, shared), run_longExp.py, scripts/SegRNN/etth1.sh
License: Apache-2.0 (full text in LICENSES/lss-1138-SegRNN.txt)
Domain: time-series forecasting, multivariate long horizon (segment-wise RNN)

Deviations from the original:
- sizes (etth1.sh): seq_len 720 -> 96, pred_len 96 -> 48, d_model 512 -> 64, batch_size 64 -> 32; seg_len 24,
  enc_in 7, dropout 0.1, rnn_type gru, dec_way pmf, channel_id 1, revin 0, loss mse, lradj 'type3', features 'M',
  label_len 0 kept; learning_rate 3e-4 -> 1e-2 so that the 30 steps of the self-check show the loss falling (the
  original runs up to 30 epochs of ~270 batches);
- data: the ETTh1 CSV is replaced by a synthetic 7-channel hourly series made from ``seed`` (a daily and a weekly
  sinusoid per channel, a slow trend, noise) with ETTh1's 17420 rows; ``Dataset_ETT_hour``'s borders (12/4/4
  months) and scaling on the training months as written (sklearn's StandardScaler written out in numpy, the
  population std as sklearn uses); SegRNN never reads the time features, so ``data_stamp`` is zeros (pandas'
  date parsing and ``time_features`` are left out);
- only ``Model``'s configured paths run (gru, pmf, channel_id, no RevIN); the RevIN layer is not constructed
  (``revin`` 0), so ``layers/RevIN.py`` is not copied; the commented-out concise version is left out;
- no GPU, AMP, early stopping or checkpoint reload; prints left out; DataLoader without workers and shuffled by a
  ``torch.Generator`` seeded from ``seed`` (run_longExp.py's fixed seed 2024 -> ``seed``);
- one ``train_step`` is one batch of ``Exp_Main.train``; when an epoch of the loader ends,
  ``adjust_learning_rate(model_optim, scheduler, epoch + 1, args)`` runs as at the end of the epoch body (the
  OneCycleLR is built as written and only read by 'TST'); ``eval_fn`` is ``vali`` on one batch (``model.eval()``,
  ``no_grad``, MSE) restoring ``model.train()``;
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

# ---- models/SegRNN.py --------------------------------------------------------------------------------------------

class Model(nn.Module):
    def __init__(self, configs, bug=None):
        super(Model, self).__init__()

        # get parameters
        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.enc_in = configs.enc_in
        self.d_model = configs.d_model
        self.dropout = configs.dropout

        self.rnn_type = configs.rnn_type
        self.dec_way = configs.dec_way
        self.seg_len = configs.seg_len
        self.channel_id = configs.channel_id
        self.revin = configs.revin
        self.bug = bug

        assert self.rnn_type in ['rnn', 'gru', 'lstm']
        assert self.dec_way in ['rmf', 'pmf']

        self.seg_num_x = self.seq_len//self.seg_len

        # build model
        self.valueEmbedding = nn.Sequential(
            nn.Linear(self.seg_len, self.d_model),
            nn.ReLU()
        )

        if self.rnn_type == "rnn":
            self.rnn = nn.RNN(input_size=self.d_model, hidden_size=self.d_model, num_layers=1, bias=True,
                              batch_first=True, bidirectional=False)
        elif self.rnn_type == "gru":
            self.rnn = nn.GRU(input_size=self.d_model, hidden_size=self.d_model, num_layers=1, bias=True,
                              batch_first=True, bidirectional=False)
        elif self.rnn_type == "lstm":
            self.rnn = nn.LSTM(input_size=self.d_model, hidden_size=self.d_model, num_layers=1, bias=True,
                              batch_first=True, bidirectional=False)

        if self.dec_way == "rmf":
            self.seg_num_y = self.pred_len // self.seg_len
            self.predict = nn.Sequential(
                nn.Dropout(self.dropout),
                nn.Linear(self.d_model, self.seg_len)
            )
        elif self.dec_way == "pmf":
            self.seg_num_y = self.pred_len // self.seg_len

            if self.channel_id:
                self.pos_emb = nn.Parameter(torch.randn(self.seg_num_y, self.d_model // 2))
                self.channel_emb = nn.Parameter(torch.randn(self.enc_in, self.d_model // 2))
            else:
                self.pos_emb = nn.Parameter(torch.randn(self.seg_num_y, self.d_model))

            self.predict = nn.Sequential(
                nn.Dropout(self.dropout),
                nn.Linear(self.d_model, self.seg_len)
            )
        # (port) revin 0: the RevIN layer is not built

    def forward(self, x):

        # b:batch_size c:channel_size s:seq_len s:seq_len
        # d:d_model w:seg_len n:seg_num_x m:seg_num_y
        batch_size = x.size(0)

        # normalization and permute     b,s,c -> b,c,s
        seq_last = x[:, -1:, :].detach()
        x = (x - seq_last).permute(0, 2, 1) # b,c,s

        # segment and embedding    b,c,s -> bc,n,w -> bc,n,d
        x = self.valueEmbedding(x.reshape(-1, self.seg_num_x, self.seg_len))

        # encoding
        _, hn = self.rnn(x) # bc,n,d  1,bc,d

        # decoding: dec_way "pmf", channel_id 1, gru
        # m,d//2 -> 1,m,d//2 -> c,m,d//2
        # c,d//2 -> c,1,d//2 -> c,m,d//2
        # c,m,d -> cm,1,d -> bcm, 1, d
        pos_emb = torch.cat([
            self.pos_emb.unsqueeze(0).repeat(self.enc_in, 1, 1),
            self.channel_emb.unsqueeze(1).repeat(1, self.seg_num_y, 1)
        ], dim=-1).view(-1, 1, self.d_model).repeat(batch_size,1,1)

        # pos_emb: m,d -> bcm,d ->  bcm,1,d
        # hn, cn: 1,bc,d -> 1,bc,md -> 1,bcm,d
        if self.bug == "hidden_repeated_across_batch":
            # (bug) the repeat along the series axis: position k gets the hidden state of series k mod bc
            _, hy = self.rnn(pos_emb, hn.repeat(1, self.seg_num_y, 1))
        else:
            _, hy = self.rnn(pos_emb, hn.repeat(1, 1, self.seg_num_y).view(1, -1, self.d_model))
        # 1,bcm,d -> 1,bcm,w -> b,c,s
        y = self.predict(hy).view(-1, self.enc_in, self.pred_len)

        # permute and denorm
        y = y.permute(0, 2, 1) + seq_last

        return y


# ---- data_provider/data_loader.py, utils/tools.py: in _etth.py (shared with the other lss-1138 ports) -----------

# ---- exp/exp_main.py ---------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    args = SimpleNamespace(model='SegRNN', data='ETTh1', features='M', target='OT', freq='h', embed='timeF',
                           seq_len=96, label_len=0, pred_len=48, seg_len=24, enc_in=7, d_model=64, dropout=0.1,
                           train_epochs=30, patience=5, rnn_type='gru', dec_way='pmf', channel_id=1, revin=0,
                           batch_size=32, learning_rate=0.01, loss='mse', lradj='type3', pct_start=0.3,
                           use_amp=False, output_attention=False)

    # data_provider(args, 'train')
    timeenc = 0 if args.embed != 'timeF' else 1
    train_data = Dataset_ETT_hour(make_ett_like(seed), flag='train',
                                  size=[args.seq_len, args.label_len, args.pred_len],
                                  features=args.features, target=args.target, timeenc=timeenc, freq=args.freq)
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True, num_workers=0, drop_last=True,
                              generator=torch.Generator().manual_seed(seed))
    model = Model(args, bug=bug).float()

    train_steps = len(train_loader)
    model_optim = optim.Adam(model.parameters(), lr=args.learning_rate)
    if args.loss == "mae":
        criterion = nn.L1Loss()
    elif args.loss == "mse":
        criterion = nn.MSELoss()
    else:
        criterion = nn.L1Loss()

    scheduler = lr_scheduler.OneCycleLR(optimizer = model_optim,
                                        steps_per_epoch = train_steps,
                                        pct_start = args.pct_start,
                                        epochs = args.train_epochs,
                                        max_lr = args.learning_rate)
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

        outputs = model(batch_x)
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
        batch_x, batch_y = batch
        total_loss = []
        if bug != "vali_without_eval":
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
    return Program(name="segrnn_etth", model=model, batch=batch,
                   loss_fn=lambda outputs, targets: criterion(outputs[:, -args.pred_len:, f_dim:], targets),
                   optimizer=model_optim, train_step=train_step, eval_fn=vali, task="regression",
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # pmf decoding with hn.repeat(1, seg_num_y, 1) for hn.repeat(1, 1, seg_num_y).view(1, -1, d_model) (classic
    # repeat-vs-interleave slip): output segment k of series i starts from the hidden state of series k mod (b*c),
    # another window of the batch.
    Bug("hidden_repeated_across_batch", functools.partial(_build, bug="hidden_repeated_across_batch"),
        "learning_ledger", ("DEPENDENCY",)),
    # vali() without model.eval() (classic): the validation loss is computed with dropout on.
    Bug("vali_without_eval", functools.partial(_build, bug="vali_without_eval"), "six_claims", ("EVALUATION",)),
    # model_optim.zero_grad() moved between loss.backward() and model_optim.step() (classic): every step applies a
    # zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

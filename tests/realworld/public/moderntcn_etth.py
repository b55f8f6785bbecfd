# ruff: noqa: RUF059
"""ModernTCN (Luo & Wang, ICLR 2024): a pure convolutional forecaster. RevIN instance normalization, a patchify stem
per variate (a strided ``Conv1d`` on each variate's series), then blocks of a depthwise large-kernel convolution
(51 taps, with a parallel 5-tap branch kept for structural re-parameterization, each followed by BatchNorm) and two
grouped 1x1 convolution FFNs, one mixing features within each variate and one mixing variates within each feature
(through a permute of the variate and feature axes); a flatten-linear head to the horizon, RevIN de-normalization;
MSE, Adam, the ``type3`` learning-rate schedule per epoch.

Source: https://github.com/luodhhh/ModernTCN
Commit: 56a9a2c018385cd5acef015378cae7f084d1b11c
Files (under ``ModernTCN-Long-term-forecasting/``; the model code in the helper ``_moderntcn.py``, the ETTh dataset
in ``_softs.py``, identical there): ``exp/exp_ModernTCN.py`` (``train``, ``vali``, ``_select_optimizer``,
``_select_criterion``), ``models/ModernTCN.py``, ``models/ModernTCN_Layer.py``, ``layers/RevIN.py``,
``data_provider/data_factory.py``, ``data_provider/data_loader.py`` (``Dataset_ETT_hour``), ``utils/timefeatures.py``,
``utils/tools.py`` (``adjust_learning_rate``), ``run.py`` defaults, ``scripts/ETTh1.sh`` (the 336 -> 96 run)
License: MIT (Copyright (c) 2024 luodhhh; full text in LICENSES/luodhhh-ModernTCN.txt)
Domain: time series, multivariate long-term forecasting (patchified depthwise large-kernel TCN, RevIN, MSE)

Kept as written: the model (the script's ``--num_blocks 1 --large_size 51 --small_size 5 --dims 64 64 64 64
--ffn_ratio 1 --patch_size 8 --patch_stride 4 --use_multi_scale False``: one stage is used, and the three
downsampling layers, the time-feature patcher and the multi-scale layers are built, handed to Adam and never used,
as in the repository; ``c_in`` passed to RevIN as the one-element tuple ``Model`` makes of it), ``train``'s loop
body (``zero_grad``, the unused decoder input, ``self.model(batch_x, batch_x_mark)`` for a ``TCN`` model, the
``pred_len`` slices, MSE, backward, step; the ``OneCycleLR`` created before the loop and stepped only for
``lradj == 'TST'``, so that its construction sets the first epoch's lr to ``learning_rate / 25``; ``adjust_learning_rate``
with ``type3`` after each epoch), ``vali`` (the unweighted mean of the batch losses), Adam lr 1e-4, dropout 0.3,
head dropout 0.0, RevIN without affine, the train loader shuffled with ``drop_last=True``.

Deviations from the original:
- ETTh1.csv is not here: the same synthetic ETTh1-shaped frame as ``softs_etth`` (``_softs._frame``: the
  ``_etth.make_ett_like`` series from ``seed`` with the hourly ``date`` column), read by the shared
  ``Dataset_ETT_hour``;
- sizes for 2 CPU cores: seq_len 336 -> 96, label_len 48 -> 24, pred_len 96 -> 24, batch size 512 -> 32; the loaders
  run in the main process; CUDA and AMP are dropped; train_epochs stays 100 (it sets the unused ``OneCycleLR``);
- ``train``'s epoch loop is unrolled: one ``train_step`` is one batch (``model.train()`` and a new loader pass when
  an epoch starts, ``adjust_learning_rate`` when it ends); it returns ``loss.item()``; ``eval_fn`` is ``vali`` on the
  first 256 of the validation split's windows (minus the loss: higher is better); printing, early stopping,
  checkpoints and ``test`` are dropped;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
from torch import nn, optim
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, Subset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _moderntcn import Block, Model
from _softs import Dataset_ETT_hour, _frame


# utils/tools.py (the branches of the lradj values used here)
def adjust_learning_rate(optimizer, scheduler, epoch, args, printout=True):
    if args.lradj == 'type1':
        lr_adjust = {epoch: args.learning_rate * (0.5 ** ((epoch - 1) // 1))}
    elif args.lradj == 'type3':
        lr_adjust = {epoch: args.learning_rate if epoch < 3 else args.learning_rate * (0.9 ** ((epoch - 3) // 1))}
    elif args.lradj == 'TST':
        lr_adjust = {epoch: scheduler.get_last_lr()[0]}
    if epoch in lr_adjust:
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


def _args(bug):
    """run.py defaults + scripts/ETTh1.sh (336 -> 96), sizes as listed in the docstring."""
    return types.SimpleNamespace(
        model='ModernTCN', features='M', target='OT', freq='h', embed='timeF', seq_len=96, label_len=24, pred_len=24,
        enc_in=7, ffn_ratio=1, patch_size=8, patch_stride=4, num_blocks=[1], large_size=[51], small_size=[5],
        dims=[64, 64, 64, 64], dw_dims=[256, 256, 256, 256], head_dropout=0.0, dropout=0.3, train_epochs=100,
        batch_size=32, learning_rate=0.0001, lradj='type3', use_multi_scale=False, small_kernel_merged=False,
        stem_ratio=6, downsample_ratio=2, revin=1, affine=0, subtract_last=0, decomposition=0, kernel_size=25,
        individual=0, pct_start=0.3, bug=bug)


def _run_batch(model, criterion, args, batch_x, batch_y, batch_x_mark, batch_y_mark):
    """The loop body's forward and loss (exp_ModernTCN.train and vali, the non-AMP ``TCN`` branch)."""
    batch_x = batch_x.float()
    batch_y = batch_y.float()
    batch_x_mark = batch_x_mark.float()
    batch_y_mark = batch_y_mark.float()
    dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
    dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float()
    outputs = model(batch_x, batch_x_mark)
    f_dim = -1 if args.features == 'MS' else 0
    outputs = outputs[:, -args.pred_len:, f_dim:]
    batch_y = batch_y[:, -args.pred_len:, f_dim:]
    return criterion(outputs, batch_y)


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    args = _args(bug)
    df_raw = _frame(seed)
    timeenc = 0 if args.embed != 'timeF' else 1
    size = [args.seq_len, args.label_len, args.pred_len]
    train_data = Dataset_ETT_hour(df_raw, 'train', size, args.features, args.target, timeenc=timeenc, bug=bug)
    vali_data = Dataset_ETT_hour(df_raw, 'val', size, args.features, args.target, timeenc=timeenc, bug=bug)
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    vali_loader = DataLoader(Subset(vali_data, range(256)), batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = Model(args).float()
    for m in model.modules():
        if isinstance(m, Block):
            m.bug = bug
    model_optim = optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()
    scheduler = lr_scheduler.OneCycleLR(optimizer=model_optim, steps_per_epoch=len(train_loader),
                                        pct_start=args.pct_start, epochs=args.train_epochs,
                                        max_lr=args.learning_rate)
    run_batch = functools.partial(_run_batch, model, criterion, args)
    st = {"it": None, "epoch": 0}

    def train_step():
        if st["it"] is None:  # an epoch starts
            model.train()
            st["it"] = iter(train_loader)
        batch = next(st["it"], None)
        if batch is None:  # the epoch ends
            st["epoch"] += 1
            if args.lradj != 'TST':
                adjust_learning_rate(model_optim, scheduler, st["epoch"], args)
            st["it"] = iter(train_loader)
            batch = next(st["it"])
        if bug != "zero_grad_dropped":
            model_optim.zero_grad()
        loss = run_batch(*batch)
        loss.backward()
        model_optim.step()
        if args.lradj == 'TST':
            adjust_learning_rate(model_optim, scheduler, st["epoch"] + 1, args, printout=False)
            scheduler.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        # vali(vali_data, vali_loader, criterion): the mean of the batch losses
        was = model.training
        model.eval()
        with torch.no_grad():
            total_loss = [run_batch(*batch).item() for batch in vali_loader]
        model.train(was)
        return -float(np.average(total_loss))

    bx, by, bxm, bym = next(iter(DataLoader(vali_data, batch_size=args.batch_size)))
    batch = ((bx.float(), bxm.float()), by[:, -args.pred_len:, :].float())
    return Program(name="moderntcn_etth", model=model, batch=batch, loss_fn=criterion, optimizer=model_optim,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic reshape slip: the cross-variable FFN's permutes of the variate and feature axes are left out, so the
    # (B, M, D, N) features are reshaped straight to (B, D * M, N) and each of its dmodel groups mixes 7 features of
    # one variate instead of the 7 variates of one feature.
    Bug("ffn2_not_permuted", functools.partial(_build, bug="ffn2_not_permuted"), "tensor_trace",
        ("model.stages.0.blocks.0",)),
    # classic window-indexing slip (in the shared Dataset_ETT_hour): the input window is shifted by pred_len, so it
    # ends where the targets end and the model reads the values it must forecast.
    # where and kind re-declared in review (2026-12-07): an input window holding the values to forecast is what
    # TASK's task.target_in_input confirms (the targets are copies of input positions the model reads)
    Bug("input_window_includes_targets", functools.partial(_build, bug="input_window_includes_targets"),
        "learning_ledger", ("TASK",), kind="task.target_in_input"),
    # classic: model_optim.zero_grad() left out: every step applies the sum of all past gradients.
    # Every parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

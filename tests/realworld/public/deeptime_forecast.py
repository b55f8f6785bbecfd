"""DeepTIMe (deep time-index meta-learning) trained by salesforce/DeepTime's ``experiments/forecast.py``: an
implicit neural representation of the time index (Gaussian Fourier features at eight scales, ReLU + dropout +
LayerNorm layers) is evaluated on the lookback and horizon coordinates of ``linspace(0, 1)``; a differentiable
closed-form ridge regression (``RidgeRegressor``, its regularization ``softplus(_lambda)`` learned) fits the lookback
window's values on the lookback representations, and the fitted weights forecast the horizon; MSE on the horizon,
Adam over three parameter groups (``_lambda`` at its own rate, no-decay, decay) with per-group cosine schedules and a
linear warm-up stepped per epoch, gradient clipping at 10, validation and test MSE under ``eval()`` after every
epoch with a checkpoint on the best validation loss.

Source: https://github.com/salesforce/DeepTime
Commit: fa9900eaf873acda40fe485f81ea41fec88772ea
Files: experiments/forecast.py, models/DeepTIMe.py, models/modules/inr.py, models/modules/regressors.py,
  models/modules/feature_transforms.py, data/datasets.py, utils/losses.py, utils/ops.py, utils/checkpoint.py,
  experiments/configs/ETTm2/96M.gin
License: BSD-3-Clause (Copyright (c) 2022, Salesforce.com, Inc.)
Domain: time-series forecasting (multivariate, time-index model with a closed-form ridge head)

Deviations from the original:
- sizes (the ETTm2/96M config otherwise): layer_size 256 -> 32, n_fourier_feats 4096 -> 64 (still divisible by
  2 x the eight scales, which are kept), inr_layers 5 kept; horizon_len 96 -> 24 with lookback_mult 7 kept
  (lookback 168); batch_size 256 -> 32; epochs 50 kept as the schedule's T_max, warmup_epochs 5, lr 1e-3,
  lambda_lr 1, weight_decay 0, clip 10, patience 7 kept;
- data: ETTm2.csv is replaced by a synthetic 7-channel series made from ``seed`` (daily and weekly cycles with random
  phases and amplitudes, a trend, mixed channels, noise), 460 rows, split by the non-ETT borders of
  ``get_borders`` (70/10/20) so an epoch is four batches; pandas and sklearn are not here: ``StandardScaler`` is
  written out; ``time_features = []`` as configured, so the timestamps have no columns (``datetime_feats`` 0);
- einops' ``rearrange``/``repeat`` are written as ``view``/``expand``; gin and Fire are replaced by the config's
  values in a dict; no CUDA; the checkpoint is a state dict kept in memory (no file, no tensorboard);
- one ``train_step`` is one iteration of ``train()``'s inner loop; an epoch's end steps the scheduler, runs
  ``validate`` on the validation and test loaders and the checkpoint; the final reload and the metrics report are
  left out; ``eval_fn`` is the MSE of a given batch under ``eval()`` and ``no_grad``;
- ``get_scheduler``'s lambdas bind each group's ``lr``/``eta_max`` as default arguments (the original's closures
  read the last group's values; with ``eta_min`` 0 the factors are the same), its unused ``'none'`` branch is left
  out; ``validate``'s metrics-report and save paths are left out (only the loss path runs in ``train``).
"""
# ruff: noqa: F841

from __future__ import annotations

import copy
import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn, optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_ROWS, N_DIMS = 460, 7
CFG = {"lr": 1e-3, "lambda_lr": 1., "weight_decay": 0., "warmup_epochs": 5, "batch_size": 32, "epochs": 50,
       "clip": 10., "patience": 7, "layer_size": 32, "inr_layers": 5, "n_fourier_feats": 64,
       "scales": [0.01, 0.1, 1, 5, 10, 20, 50, 100], "horizon_len": 24, "lookback_mult": 7}


# ---- models/modules/feature_transforms.py, inr.py, regressors.py ------------------------------------------------

class GaussianFourierFeatureTransform(nn.Module):
    def __init__(self, input_dim: int, n_fourier_feats: int, scales: list[int]):
        super().__init__()
        self.input_dim = input_dim
        self.n_fourier_feats = n_fourier_feats
        self.scales = scales

        n_scale_feats = n_fourier_feats // (2 * len(scales))
        assert n_scale_feats * 2 * len(scales) == n_fourier_feats, \
            f"n_fourier_feats: {n_fourier_feats} must be divisible by 2 * len(scales) = {2 * len(scales)}"
        B_size = (input_dim, n_scale_feats)
        B = torch.cat([torch.randn(B_size) * scale for scale in scales], dim=1)
        self.register_buffer('B', B)

    def forward(self, x: Tensor) -> Tensor:
        assert x.dim() >= 2, f"Expected 2 or more dimensional input (got {x.dim()}D input)"
        time, dim = x.shape[-2], x.shape[-1]

        assert dim == self.input_dim, \
            f"Expected input to have {self.input_dim} channels (got {dim} channels)"

        x = torch.einsum('... t n, n d -> ... t d', [x, self.B])
        x = 2 * math.pi * x
        return torch.cat([torch.sin(x), torch.cos(x)], dim=-1)


class INRLayer(nn.Module):
    def __init__(self, input_size: int, output_size: int, dropout: float | None = 0.1):
        super().__init__()
        self.input_size = input_size
        self.output_size = output_size
        self.linear = nn.Linear(input_size, output_size)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(output_size)

    def forward(self, x: Tensor) -> Tensor:
        out = self._layer(x)
        return self.norm(out)

    def _layer(self, x: Tensor) -> Tensor:
        return self.dropout(torch.relu(self.linear(x)))


class INR(nn.Module):
    def __init__(self, in_feats: int, layers: int, layer_size: int, n_fourier_feats: int, scales: float,
                 dropout: float | None = 0.1):
        super().__init__()
        self.features = nn.Linear(in_feats, layer_size) if n_fourier_feats == 0 \
            else GaussianFourierFeatureTransform(in_feats, n_fourier_feats, scales)
        in_size = layer_size if n_fourier_feats == 0 \
            else n_fourier_feats
        layers = [INRLayer(in_size, layer_size, dropout=dropout)] + \
                 [INRLayer(layer_size, layer_size, dropout=dropout) for _ in range(layers - 1)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x)
        return self.layers(x)


class RidgeRegressor(nn.Module):
    def __init__(self, lambda_init: float | None = 0., bug=None):
        super().__init__()
        self._lambda = nn.Parameter(torch.as_tensor(lambda_init, dtype=torch.float))
        self.bug = bug

    def forward(self, reprs: Tensor, x: Tensor, reg_coeff: float | None = None) -> Tensor:
        if reg_coeff is None:
            reg_coeff = self.reg_coeff()
        if self.bug == "ridge_weights_detached":
            with torch.no_grad():  # the closed-form fit treated as a constant, as a solver call often is
                return self.get_weights(reprs, x, reg_coeff)
        w, b = self.get_weights(reprs, x, reg_coeff)
        return w, b

    def get_weights(self, X: Tensor, Y: Tensor, reg_coeff: float) -> Tensor:
        batch_size, n_samples, n_dim = X.shape
        ones = torch.ones(batch_size, n_samples, 1, device=X.device)
        X = torch.concat([X, ones], dim=-1)

        if n_samples >= n_dim:
            # standard
            A = torch.bmm(X.mT, X)
            A.diagonal(dim1=-2, dim2=-1).add_(reg_coeff)
            B = torch.bmm(X.mT, Y)
            weights = torch.linalg.solve(A, B)
        else:
            # Woodbury
            A = torch.bmm(X, X.mT)
            A.diagonal(dim1=-2, dim2=-1).add_(reg_coeff)
            weights = torch.bmm(X.mT, torch.linalg.solve(A, Y))

        return weights[:, :-1], weights[:, -1:]

    def reg_coeff(self) -> Tensor:
        return F.softplus(self._lambda)


# ---- models/DeepTIMe.py -------------------------------------------------------------------------------------------

class DeepTIMe(nn.Module):
    def __init__(self, datetime_feats: int, layer_size: int, inr_layers: int, n_fourier_feats: int, scales: float,
                 bug=None):
        super().__init__()
        self.inr = INR(in_feats=datetime_feats + 1, layers=inr_layers, layer_size=layer_size,
                       n_fourier_feats=n_fourier_feats, scales=scales)
        self.adaptive_weights = RidgeRegressor(bug=bug)

        self.datetime_feats = datetime_feats
        self.inr_layers = inr_layers
        self.layer_size = layer_size
        self.n_fourier_feats = n_fourier_feats
        self.scales = scales

    def forward(self, x: Tensor, x_time: Tensor, y_time: Tensor) -> Tensor:
        tgt_horizon_len = y_time.shape[1]
        batch_size, lookback_len, _ = x.shape
        coords = self.get_coords(lookback_len, tgt_horizon_len).to(x.device)

        if y_time.shape[-1] != 0:
            time = torch.cat([x_time, y_time], dim=1)
            coords = coords.expand(time.shape[0], -1, -1)  # repeat(coords, '1 t 1 -> b t 1', b=...)
            coords = torch.cat([coords, time], dim=-1)
            time_reprs = self.inr(coords)
        else:
            time_reprs = self.inr(coords).expand(batch_size, -1, -1)  # repeat(..., '1 t d -> b t d', b=batch_size)

        lookback_reprs = time_reprs[:, :-tgt_horizon_len]
        horizon_reprs = time_reprs[:, -tgt_horizon_len:]
        w, b = self.adaptive_weights(lookback_reprs, x)
        preds = self.forecast(horizon_reprs, w, b)
        return preds

    def forecast(self, inp: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return torch.einsum('... d o, ... t d -> ... t o', [w, inp]) + b

    def get_coords(self, lookback_len: int, horizon_len: int) -> Tensor:
        coords = torch.linspace(0, 1, lookback_len + horizon_len)
        return coords.view(1, -1, 1)  # rearrange(coords, 't -> 1 t 1')


# ---- data/datasets.py on a synthetic frame ------------------------------------------------------------------------

def make_frame(seed):
    g = np.random.RandomState(seed)
    t = np.arange(N_ROWS, dtype=np.float64)
    daily = np.sin(2 * np.pi * t[:, None] / 24 + g.uniform(0, 2 * np.pi, N_DIMS)) * g.uniform(0.5, 2, N_DIMS)
    weekly = np.sin(2 * np.pi * t[:, None] / 168 + g.uniform(0, 2 * np.pi, N_DIMS)) * g.uniform(0.2, 1, N_DIMS)
    trend = t[:, None] / N_ROWS * g.uniform(-1, 1, N_DIMS)
    mix = np.eye(N_DIMS) + 0.3 * g.randn(N_DIMS, N_DIMS)
    return (daily + weekly + trend) @ mix.T + 0.1 * g.randn(N_ROWS, N_DIMS)


class ForecastDataset(Dataset):
    def __init__(self, frame, flag, horizon_len, lookback_mult, lookback_aux_len=0, bug=None):
        self.flag = flag
        self.lookback_len = int(horizon_len * lookback_mult)
        self.lookback_aux_len = lookback_aux_len
        self.horizon_len = horizon_len
        self.bug = bug
        self.load_data(frame)

    def load_data(self, df_data):
        set_type = {'train': 0, 'val': 1, 'test': 2}[self.flag]
        num_train = int(len(df_data) * 0.7)
        num_test = int(len(df_data) * 0.2)
        num_val = len(df_data) - num_train - num_test
        border1s = [0, num_train - self.lookback_len, len(df_data) - num_test - self.lookback_len]
        border2s = [num_train, num_train + num_val, len(df_data)]
        border1, border2 = border1s[set_type], border2s[set_type]
        train_data = df_data[border1s[0]:border2s[0]]
        mean, std = train_data.mean(0), train_data.std(0)  # sklearn's StandardScaler (population std)
        data = (df_data - mean) / std
        self.n_dims = df_data.shape[1]
        self.data_x = data[border1:border2]
        self.data_y = data[border1:border2]
        self.timestamps = np.zeros((border2 - border1, 0))  # time_features = []
        self.n_time = len(self.data_x)
        self.n_time_samples = self.n_time - self.lookback_len - self.horizon_len + 1

    def __len__(self):
        return self.n_time_samples

    def __getitem__(self, idx):
        x_start = idx
        x_end = x_start + self.lookback_len
        y_start = x_end - self.lookback_aux_len
        if self.bug == "target_from_lookback_start":
            y_start = x_start  # the target window taken from where the lookback begins
        y_end = y_start + self.lookback_aux_len + self.horizon_len

        x = self.data_x[x_start:x_end]
        y = self.data_y[y_start:y_end]
        x_time = self.timestamps[x_start:x_end]
        y_time = self.timestamps[y_start:y_end]
        return x, y, x_time, y_time


# ---- experiments/forecast.py --------------------------------------------------------------------------------------

def get_optimizer(model, lr=1e-3, lambda_lr=1., weight_decay=1e-2):
    group1 = []  # lambda
    group2 = []  # no decay
    group3 = []  # decay
    no_decay_list = ('bias', 'norm',)
    for param_name, param in model.named_parameters():
        if '_lambda' in param_name:
            group1.append(param)
        elif any([mod in param_name for mod in no_decay_list]):  # noqa: C419
            group2.append(param)
        else:
            group3.append(param)
    optimizer = optim.Adam([
        {'params': group1, 'weight_decay': 0, 'lr': lambda_lr, 'scheduler': 'cosine_annealing'},
        {'params': group2, 'weight_decay': 0, 'scheduler': 'cosine_annealing_with_linear_warmup'},
        {'params': group3, 'scheduler': 'cosine_annealing_with_linear_warmup'}
    ], lr=lr, weight_decay=weight_decay)
    return optimizer


def get_scheduler(optimizer, T_max, warmup_epochs, eta_min=0.):
    scheduler_fns = []
    for param_group in optimizer.param_groups:
        scheduler = param_group['scheduler']
        lr = eta_max = param_group['lr']
        if scheduler == 'cosine_annealing':
            def fn(T_cur, lr=lr, eta_max=eta_max):
                return (eta_min + 0.5 * (eta_max - eta_min) * (
                        1.0 + math.cos((T_cur - warmup_epochs) / (T_max - warmup_epochs) * math.pi))) / lr
        else:  # 'cosine_annealing_with_linear_warmup'
            def fn(T_cur, lr=lr, eta_max=eta_max):
                return T_cur / warmup_epochs if T_cur < warmup_epochs else (eta_min + 0.5 * (
                        eta_max - eta_min) * (1.0 + math.cos(
                    (T_cur - warmup_epochs) / (T_max - warmup_epochs) * math.pi))) / lr
        scheduler_fns.append(fn)
    return optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=scheduler_fns)


@torch.no_grad()
def validate(model, loader, loss_fn):
    model.eval()
    total_loss = []
    for data in loader:
        x, y, x_time, y_time = (torch.as_tensor(a, dtype=torch.float32) for a in data)
        if x.shape[0] == 1:
            continue
        forecast = model(x, x_time, y_time)
        total_loss.append(loss_fn(forecast, y, reduction='none'))
    return float(torch.cat(total_loss, dim=0).mean())


def _make_loop(model, loaders, bug):
    train_loader, val_loader, test_loader = loaders
    optimizer = get_optimizer(model, lr=CFG["lr"], lambda_lr=CFG["lambda_lr"], weight_decay=CFG["weight_decay"])
    scheduler = get_scheduler(optimizer=optimizer, T_max=CFG["epochs"], warmup_epochs=CFG["warmup_epochs"])
    training_loss_fn = F.mse_loss
    state = {"epoch": 0, "it": None, "best_loss": float("inf"), "counter": 0, "best": None}

    def train_step():
        """One iteration of `for it, data in enumerate(train_loader)`; an epoch's end validates and checkpoints."""
        if state["it"] is None:
            if bug != "train_mode_not_restored" or state["epoch"] == 0:
                model.train()
            state["it"], state["train_loss"] = iter(train_loader), []
        data = next(state["it"], None)
        if data is None:
            scheduler.step()
            val_loss = validate(model, loader=val_loader, loss_fn=training_loss_fn)
            validate(model, loader=test_loader, loss_fn=training_loss_fn)
            if val_loss <= state["best_loss"]:  # Checkpoint: save on improvement, count towards early stopping
                state["best"], state["best_loss"], state["counter"] = copy.deepcopy(model.state_dict()), val_loss, 0
            else:
                state["counter"] += 1
            state["epoch"], state["it"] = state["epoch"] + 1, None
            return train_step()
        optimizer.zero_grad()

        x, y, x_time, y_time = (torch.as_tensor(a, dtype=torch.float32) for a in data)
        forecast = model(x, x_time, y_time)

        loss = training_loss_fn(forecast, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), CFG["clip"])
        optimizer.step()

        state["train_loss"].append(loss.item())
        return loss.detach()

    return optimizer, train_step


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    frame = make_frame(seed)
    sets = [ForecastDataset(frame, flag, CFG["horizon_len"], CFG["lookback_mult"], bug=bug)
            for flag in ("train", "val", "test")]
    loaders = [DataLoader(sets[0], batch_size=CFG["batch_size"], shuffle=True, drop_last=True)] + \
              [DataLoader(s, batch_size=CFG["batch_size"], shuffle=False, drop_last=False) for s in sets[1:]]
    model = DeepTIMe(datetime_feats=sets[0].timestamps.shape[-1], layer_size=CFG["layer_size"],
                     inr_layers=CFG["inr_layers"], n_fourier_feats=CFG["n_fourier_feats"], scales=CFG["scales"],
                     bug=bug)
    optimizer, train_step = _make_loop(model, loaders, bug)

    x, y, x_time, y_time = (torch.as_tensor(a, dtype=torch.float32)
                            for a in next(iter(DataLoader(sets[0], batch_size=CFG["batch_size"]))))
    batch = ((x, x_time, y_time), y)

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            value = float(F.mse_loss(model(*batch[0]), batch[1]))
        model.train(was)
        return value

    return Program(name="deeptime_forecast", model=model, batch=batch, loss_fn=F.mse_loss, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=loaders[0])


build = functools.partial(_build)

BUGS = [
    # the target window sliced from the start of the lookback (`y_start = x_start`): the model is trained to
    # reproduce the first horizon_len steps it was given instead of the future.
    Bug("target_from_lookback_start", functools.partial(_build, bug="target_from_lookback_start"),
        "learning_ledger", ("TASK",)),
    # the ridge fit run under no_grad: the forecast weights become constants, so the learned regularization
    # `_lambda` gets no gradient and the INR learns only through the horizon representations.
    Bug("ridge_weights_detached", functools.partial(_build, bug="ridge_weights_detached"), "reachability",
        ("adaptive_weights._lambda",)),
    # the epoch's `model.train()` dropped after the first: `validate` leaves the model in eval mode and every later
    # epoch trains with the INR's dropout off.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe", (),
        kind="step.eval_mode_not_restored"),
]

# ruff: noqa: UP032, RUF007, RUF046
"""DDPM on 2D Swiss-roll data from joseph-nagel/diffusion-demo (``scripts/train_ddpm_swissroll.py`` with its
defaults): a Lightning module ``DDPMTab`` whose epsilon model is a stack of ``CondDense`` layers (a linear layer plus
a learnable sinusoidal time embedding added before the LeakyReLU), a cosine beta schedule over 500 steps, the
training loss ``MSE(eps_model(sqrt(abar_t) x0 + sqrt(1 - abar_t) eps, t), eps)`` with ``t`` drawn uniformly, Adam(1e-3)
with the repository's constant LambdaLR schedule stepped per epoch.

Source: https://github.com/joseph-nagel/diffusion-demo
Commit: 7aee61e896a9fb03b5d9f1bea0c68fef68746ee6
Files: ``scripts/train_ddpm_swissroll.py`` (arguments, ``main``), ``src/diffusion/ddpm/base.py`` (``DDPM``),
``src/diffusion/ddpm/ddpmtab.py`` (``DDPMTab``), ``src/diffusion/ddpm/noise_schedule.py``,
``src/diffusion/ddpm/lr_schedule.py``, ``src/diffusion/models/dense.py`` (``CondDenseModel``),
``src/diffusion/layers/`` (``dense.py``, ``embed.py``, ``utils.py``), ``src/diffusion/data/swissroll.py``
License: MIT (Copyright 2023-2026 Joseph Nagel; full text in LICENSES/joseph-nagel-diffusion-demo.txt)
Domain: generative, diffusion (DDPM epsilon objective on 2D data, cosine schedule, time-conditioned MLP, Lightning)

Kept as written: ``DDPM.__init__`` (criterion, the schedule buffers), ``_idx2cont_time``, ``forward``, ``diffuse``,
``loss``, ``_get_batch`` (unconditional branch), ``training_step``, ``configure_optimizers`` (constant schedule,
epoch interval); ``DDPMTab``; ``make_beta_schedule`` (cosine branch); ``make_lr_schedule`` and
``_constant_lr_with_warmup``; ``CondDenseModel``, ``CondDense``, ``SinusoidalEncoding``,
``LearnableSinusoidalEncoding``, ``make_dense``, ``make_activation``; the script's defaults (noise 0.5, scaling 0.15,
val size 0.2, batch 32 with drop_last, num_steps 500, cosine_s 0.008, lr 1e-3, leaky_relu, max_epochs 1000).

Deviations from the original:
- scikit-learn is not here: ``make_swiss_roll`` (and ``train_test_split``) are written out in torch with sklearn's
  formulas (t = 1.5 pi (1 + 2 u), x = t cos t, y = 21 v, z = t sin t, Gaussian noise), seeded from ``seed``;
  num_samples 3000 -> 1000;
- sizes for 2 CPU cores: mid_features [128, 128, 128] -> [32, 32, 32], embed_dim 128 -> 16;
- the module subclasses ``pytorch_lightning.LightningModule`` (``lightning.pytorch`` is not installed); the class
  conditioning (``ClassEmbedding``), sampling (``denoise_*``, ``generate``) and the other schedule modes are left
  out; ``train_step`` is one batch of Lightning's automatic optimization (``_lightning_loop.automatic_step``, a
  barebones ``Trainer`` attached for ``max_epochs``; ``self.log`` is a no-op there), the LambdaLR stepped at each
  epoch's end; the logger, checkpoints, validation and SWA (which starts at 70% of 1000 epochs) are left out;
- some of the upstream comments are left out (module length); the ``bug`` switches select the variants in ``BUGS``;
  with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import warnings
from functools import partial

import pytorch_lightning as pl
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _lightning_loop import automatic_step


# src/diffusion/layers/utils.py
def make_dense(in_features, out_features, bias=True, activation=None):
    linear = nn.Linear(in_features, out_features, bias=bias)
    activation = make_activation(activation)
    layers = [linear, activation]
    dense_block = nn.Sequential(*layers)
    return dense_block


def make_activation(mode):
    if mode is None or mode == "none":
        activation = nn.Identity()
    elif mode == "leaky_relu":
        activation = nn.LeakyReLU()
    else:
        raise ValueError("Unknown activation function: {}".format(mode))
    return activation


# src/diffusion/layers/embed.py
class SinusoidalEncoding(nn.Module):
    def __init__(self, embed_dim):
        super().__init__()
        embed_dim = abs(embed_dim)
        if embed_dim < 2:
            raise ValueError("At least two embedding dimensions required")
        elif embed_dim % 2 != 0:
            raise ValueError("Dimensionality has to be an even number")
        self.embed_dim = embed_dim
        omega = self._make_frequencies()
        self.register_buffer("omega", omega)
    def _make_frequencies(self):
        i = torch.arange(self.embed_dim // 2).view(1, -1)
        omega = 1 / (10000 ** (2 * i / self.embed_dim))
        return omega
    def forward(self, t):
        # ensure (batch_size>=1, 1)-shaped tensor
        if t.numel() == 1:
            t = t.view(1, 1)
        elif t.ndim != 2 or t.shape[1] != 1:
            raise ValueError("Invalid shape encountered: {}".format(t.shape))
        device = t.device
        batch_size = t.shape[0]
        emb = torch.zeros(batch_size, self.embed_dim, device=device)
        emb[:, 0::2] = torch.sin(self.omega * t)
        emb[:, 1::2] = torch.cos(self.omega * t)
        return emb


class LearnableSinusoidalEncoding(nn.Sequential):
    def __init__(self, num_features, activation="leaky_relu"):
        if len(num_features) < 2:
            raise ValueError("Number of features needs at least two entries")
        num_dense_layers = len(num_features) - 1
        embed_dim = num_features[0]
        sinusoidal_encoding = SinusoidalEncoding(embed_dim=embed_dim)
        dense_list = []
        for idx, (in_features, out_features) in enumerate(zip(num_features[:-1], num_features[1:])):
            is_not_last = idx < num_dense_layers - 1
            dense = make_dense(
                in_features,
                out_features,
                activation=activation if is_not_last else None,  # set activation for all layers except the last
            )
            dense_list.append(dense)
        super().__init__(sinusoidal_encoding, *dense_list)


# src/diffusion/layers/dense.py
class CondDense(nn.Module):
    def __init__(self, in_features, out_features, activation="leaky_relu", embed_dim=None):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.activation = make_activation(activation)
        if embed_dim is not None:
            self.emb = LearnableSinusoidalEncoding(
                [embed_dim, out_features, out_features],  # stack two learnable dense layers after the encoding
                activation=activation,
            )
        else:
            self.emb = None
    def forward(self, x, t=None):
        out = self.linear(x)
        if t is not None and self.emb is not None:
            emb = self.emb(t)
            out = out + emb
        elif t is not None and self.emb is None:
            raise TypeError("No temporal embedding")
        elif t is None and self.emb is not None:
            raise TypeError("No time passed")
        if self.activation is not None:
            out = self.activation(out)
        return out


# src/diffusion/models/dense.py
class CondDenseModel(nn.Module):
    def __init__(self, num_features, activation="leaky_relu", embed_dim=None):
        super().__init__()
        if len(num_features) < 2:
            raise ValueError("Number of features needs at least two entries")
        num_layers = len(num_features) - 1
        dense_list = []
        for idx, (in_features, out_features) in enumerate(zip(num_features[:-1], num_features[1:])):
            is_not_last = idx < num_layers - 1
            dense = CondDense(
                in_features,
                out_features,
                activation=activation if is_not_last else None,  # set activation for all layers except the last
                embed_dim=embed_dim,  # set time embedding for all layers
            )
            dense_list.append(dense)
        self.dense_layers = nn.ModuleList(dense_list)
    def forward(self, x, t, cids=None):
        if cids is not None:
            raise NotImplementedError("Class conditioning is not implemented")
        for dense in self.dense_layers:
            x = dense(x, t)
        return x


# src/diffusion/ddpm/noise_schedule.py (cosine branch)
def make_beta_schedule(num_steps, mode="cosine", beta_range=(1e-04, 0.02), cosine_s=0.008,
                       sigmoid_range=(-5.0, 5.0)):
    if mode == "cosine":
        cosine_s = abs(cosine_s)
        ts = torch.arange(num_steps + 1)
        alphas_bar = torch.cos((ts / num_steps + cosine_s) / (1 + cosine_s) * torch.pi / 2) ** 2
        alphas_bar = alphas_bar / alphas_bar.max()
        betas = 1 - alphas_bar[1:] / alphas_bar[:-1]
        betas = torch.clip(betas, 0.0001, 0.9999)
    else:
        raise ValueError("Unknown noise schedule type: {}".format(mode))
    return betas


# src/diffusion/ddpm/lr_schedule.py
def make_lr_schedule(optimizer, mode="constant", num_total=None, num_warmup=None, last_epoch=-1):
    num_warmup = max(0, num_warmup) if num_warmup is not None else 0
    num_total = max(0, num_total) if num_total is not None else 0
    if mode == "constant":
        lr_lambda = partial(_constant_lr_with_warmup, num_warmup=num_warmup)
    else:
        raise ValueError(f"Unknown LR schedule type: {mode}")
    lr_scheduler = LambdaLR(optimizer, lr_lambda, last_epoch=last_epoch)
    return lr_scheduler


def _constant_lr_with_warmup(current, num_warmup=0):
    current = max(0, current)
    num_warmup = max(0, num_warmup)
    if current < num_warmup:
        return current / max(1, num_warmup)
    else:
        return 1.0


# src/diffusion/ddpm/base.py
class DDPM(pl.LightningModule):
    def __init__(self, eps_model, betas, criterion="mse", lr=1e-04, lr_schedule="constant", lr_interval="epoch",
                 lr_warmup=0, bug=None):
        super().__init__()
        self.bug = bug
        self.set_model(eps_model)
        if criterion == "mse":
            self.criterion = nn.MSELoss(reduction="mean")
        else:
            raise ValueError("Criterion could not be determined")
        self.lr = abs(lr)
        self.lr_schedule = lr_schedule
        self.lr_interval = lr_interval
        self.lr_warmup = abs(int(lr_warmup))
        betas = torch.as_tensor(betas).view(-1)  # note that betas[0] corresponds to t = 1.0
        if betas.min() <= 0 or betas.max() >= 1:
            raise ValueError("Invalid beta values encountered")
        alphas = 1.0 - betas
        alphas_bar = torch.cumprod(alphas, dim=0)
        betas_tilde = (1 - alphas_bar[:-1]) / (1 - alphas_bar[1:]) * betas[1:]
        betas_tilde = nn.functional.pad(betas_tilde, pad=(1, 0), value=0.0)  # ensure betas_tilde[0] = 0.0
        self.register_buffer("betas", betas)
        self.register_buffer("alphas", alphas)
        self.register_buffer("alphas_bar", alphas_bar)
        self.register_buffer("betas_tilde", betas_tilde)
    def set_model(self, eps_model):
        self.eps_model = eps_model
        self.class_cond = False  # (port) no ClassEmbedding in the port
    @property
    def num_steps(self):
        return len(self.betas)
    @staticmethod
    def _idx2cont_time(tidx, dtype=None):
        t = tidx + 1  # note that tidx = 0 corresponds to t = 1.0
        t = t.float() if dtype is None else t.to(dtype)
        return t
    def forward(self, x, t, cids=None):
        return self.eps_model(x, t, cids=cids)
    def diffuse(self, x0, tids, return_eps=False):
        alpha_bar = self.alphas_bar[tids]
        eps = torch.randn_like(x0)
        missing_shape = [1] * (eps.ndim - alpha_bar.ndim)
        alpha_bar = alpha_bar.view(*alpha_bar.shape, *missing_shape)
        if self.bug == "noise_coefficients_not_sqrt":
            x_noisy = alpha_bar * x0 + (1 - alpha_bar) * eps
        else:
            x_noisy = alpha_bar.sqrt() * x0 + (1 - alpha_bar).sqrt() * eps
        if return_eps:
            return x_noisy, eps
        else:
            return x_noisy
    def loss(self, x, cids=None):
        tids = torch.randint(0, self.num_steps, size=(x.shape[0], 1), device=x.device)
        ts = self._idx2cont_time(tids, dtype=x.dtype)
        x_noisy, eps = self.diffuse(x, tids, return_eps=True)
        if self.bug == "times_shuffled":
            ts = ts[torch.randperm(len(ts))]
        # predict eps based on noisy x and t
        eps_pred = self.eps_model(x if self.bug == "clean_x_into_model" else x_noisy, ts, cids=cids)
        loss = self.criterion(eps_pred, eps)
        return loss
    def _get_batch(self, batch):
        if isinstance(batch, torch.Tensor):
            x_batch = batch
        elif isinstance(batch, (tuple, list)):
            x_batch = batch[0]
        else:
            raise TypeError("Invalid batch type encountered: {}".format(type(batch)))
        return x_batch
    def training_step(self, batch, batch_idx):
        batch = self._get_batch(batch)
        if isinstance(batch, torch.Tensor):
            loss = self.loss(batch)
        else:
            loss = self.loss(batch[0], cids=batch[1])
        self.log("train_loss", loss.item())  # Lightning logs batch-wise scalars during training per default
        return loss
    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.lr)
        # return optimizer only (if no LR schedule has been set)
        if self.lr_schedule is None:
            return optimizer
        # create LR schedule (if a schedule has been set)
        else:
            # get total number of training time units
            if self.lr_interval == "epoch":
                num_total = self.trainer.max_epochs
            elif self.lr_interval == "step":
                num_total = self.trainer.estimated_stepping_batches
            else:
                raise ValueError(f"Unknown LR interval: {self.lr_interval}")
            lr_scheduler = make_lr_schedule(optimizer=optimizer, mode=self.lr_schedule, num_total=num_total,
                                            num_warmup=self.lr_warmup, last_epoch=-1)
            lr_config = {
                "scheduler": lr_scheduler,  # set LR scheduler
                "interval": self.lr_interval,  # set time unit (step or epoch)
                "frequency": 1,  # set update frequency
            }
            return [optimizer], [lr_config]


# src/diffusion/ddpm/ddpmtab.py
class DDPMTab(DDPM):
    def __init__(self, in_features=2, mid_features=(128, 128, 128), activation="leaky_relu", embed_dim=128,
                 num_steps=500, schedule="cosine", beta_range=(1e-04, 0.02), cosine_s=0.008,
                 sigmoid_range=(-5.0, 5.0), criterion="mse", lr=1e-04, lr_schedule="constant", lr_interval="epoch",
                 lr_warmup=0, bug=None):
        num_features = (in_features, *mid_features, in_features)
        eps_model = CondDenseModel(num_features=num_features, activation=activation, embed_dim=embed_dim)
        betas = make_beta_schedule(num_steps, mode=schedule, beta_range=beta_range, cosine_s=cosine_s,
                                   sigmoid_range=sigmoid_range)
        super().__init__(eps_model=eps_model, betas=betas, criterion=criterion, lr=lr, lr_schedule=lr_schedule,
                         lr_interval=lr_interval, lr_warmup=lr_warmup, bug=bug)


def make_swiss_roll_2d(num_samples, noise_level=0.5, scaling=0.15, gen=None, test_size=None):
    """(port) sklearn's make_swiss_roll in torch, restricted to 2D and scaled; a random split for test_size."""
    t = 1.5 * math.pi * (1 + 2 * torch.rand(num_samples, generator=gen))
    y = 21 * torch.rand(num_samples, generator=gen)
    x = torch.stack([t * torch.cos(t), y, t * torch.sin(t)], 1)
    x = x + abs(noise_level) * torch.randn(num_samples, 3, generator=gen)
    x = x[:, [0, 2]]
    x = scaling * x
    perm = torch.randperm(num_samples, generator=gen)
    n_test = int(math.ceil(test_size * num_samples))
    return x[perm[n_test:]], x[perm[:n_test]]


def _build(seed, bug=None):
    # set random seeds
    pl.seed_everything(seed, verbose=False)
    gen = torch.Generator().manual_seed(seed)
    # create datasets
    x_train, x_val = make_swiss_roll_2d(num_samples=1000, noise_level=0.5, scaling=0.15, gen=gen, test_size=0.2)
    train_set = torch.utils.data.TensorDataset(x_train)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=32, drop_last=True, shuffle=True,
                                               generator=torch.Generator().manual_seed(seed))
    # initialize model
    ddpm = DDPMTab(in_features=2, mid_features=[32, 32, 32], activation="leaky_relu", embed_dim=16, num_steps=500,
                   schedule="cosine", beta_range=[1e-04, 0.02], cosine_s=0.008, sigmoid_range=[-5.0, 5.0],
                   criterion="mse", lr=1e-03, lr_schedule="constant", lr_interval="epoch", lr_warmup=0, bug=bug)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=1000)
    trainer.strategy.connect(ddpm)
    ddpm.trainer = trainer
    [optimizer], [lr_config] = ddpm.configure_optimizers()
    train_step = automatic_step(ddpm, optimizer, train_loader, epoch_end=lr_config["scheduler"].step)
    def eval_fn(model, _batch=None):
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            return float(ddpm.loss(x_val))  # the DDPM loss of the (declared) epsilon model on the val. points

    # the Program's batch: noisy training points, their times and noise drawn as ``loss`` draws them
    x0 = x_train[:32]
    tids = torch.randint(0, ddpm.num_steps, size=(32, 1), generator=gen)
    eps = torch.randn(32, 2, generator=gen)
    abar = ddpm.alphas_bar[tids]
    x_noisy = abar.sqrt() * x0 + (1 - abar).sqrt() * eps
    return Program(name="diffusiondemo_swissroll", model=ddpm.eps_model,
                   batch=((x_noisy, ddpm._idx2cont_time(tids)), eps),
                   loss_fn=lambda eps_pred, eps: ddpm.criterion(eps_pred, eps), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic schedule slip: the forward process mixes x0 and eps with abar_t and 1 - abar_t instead of their
    # square roots, so the noisy inputs do not follow the schedule the targets assume.
    Bug("noise_coefficients_not_sqrt", functools.partial(_build, bug="noise_coefficients_not_sqrt"),
        "learning_ledger", ("TASK",)),
    # classic: the clean points fed to the epsilon model instead of the noised ones; the noise it must predict
    # is then independent of its input.
    Bug("clean_x_into_model", functools.partial(_build, bug="clean_x_into_model"), "learning_ledger", ("TASK",)),
    # classic misalignment: the times shuffled across the batch after the noising, so each point is conditioned on
    # another point's noise level.
    Bug("times_shuffled", functools.partial(_build, bug="times_shuffled"), "learning_ledger", ("DEPENDENCY",)),
]

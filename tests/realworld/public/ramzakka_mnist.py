# ruff: noqa: RUF059, PLR0402
"""Recurrent Attention Model (RAM, Mnih et al. 2014), kevinzakka's recurrent-visual-attention: a glimpse network
(retina patches around a location + a location embedding), a ReLU core RNN, a Gaussian location policy on the
detached hidden state (fixed std, sampled location detached), a baseline regressor on the detached hidden state and
a log-softmax classifier after the last glimpse. The hybrid loss is NLL + MSE(baseline, reward) + 0.01 * REINFORCE
(reward = correct classification, advantage against the detached baseline), Adam with ReduceLROnPlateau on the
validation accuracy.

Source: https://github.com/kevinzakka/recurrent-visual-attention
Commit: a38ac8958ebf1c61a10c4d5320f1e31d3d0b73dd
Files: ``model.py`` (``RecurrentAttention``), ``modules.py`` (``Retina``, ``GlimpseNetwork``, ``CoreNetwork``,
``ActionNetwork``, ``LocationNetwork``, ``BaselineNetwork``), ``trainer.py`` (``Trainer.__init__``, ``reset``,
``train``, ``train_one_epoch``, ``validate``), ``config.py`` (defaults), ``data_loader.py``, ``main.py``
License: MIT (Copyright (c) 2020 Kevin Zakka; full text in LICENSES/kevinzakka-recurrent-visual-attention.txt)
Domain: vision, image classification with hard attention (recurrent glimpses, REINFORCE with a learned baseline)

Kept as written: every module of ``modules.py`` and ``model.py`` (the retina's zero padding, patch loop and
``avg_pool2d`` resize; ``h_t.detach()`` into the locator and the baseline; ``rsample`` then ``detach`` of ``l_t``;
``clamp`` to [-1, 1]), ``Trainer.reset`` (zero hidden state, uniform location, both ``requires_grad``), the loop
body of ``train_one_epoch`` (zero_grad, ``num_glimpses - 1`` glimpses then the last one, stacked baselines and
log-probabilities, reward, ``nll_loss`` + ``mse_loss`` + ``0.01 *`` the REINFORCE term, backward, step), ``validate``
(no_grad, M Monte Carlo copies averaged), Adam at ``init_lr`` 3e-4 with ``ReduceLROnPlateau(optimizer, "min",
patience=lr_patience)`` stepped on ``-valid_acc`` after each epoch, and config defaults (patch 8, one patch per
glimpse, scale 1, 6 glimpses, std 0.05, M 1, valid split 0.1).

Deviations from the original:
- MNIST is not here (no torchvision, no download): ``datasets.MNIST`` is replaced by 640 synthetic 1x28x28 images
  made from ``seed``: ten random class templates (smoothed noise, normalized) plus per-image Gaussian noise; the
  label is the template's class, so any 8x8 glimpse carries the class. ``get_train_valid_loader``'s split (10% for
  validation, indices shuffled with ``random_seed``) and ``SubsetRandomSampler`` loaders are kept on a
  ``TensorDataset``; the normalize transform is dropped (the templates are already standardized);
- sizes for 2 CPU cores: ``hidden_size`` 256 -> 64, ``loc_hidden`` and ``glimpse_hidden`` 128 -> 32, ``batch_size``
  128 -> 32;
- CPU only (``use_gpu`` False): the device logic is kept, ``num_workers``/``pin_memory`` dropped;
- ``train_one_epoch``'s loop body is one ``train_step`` (its tqdm bar, meters, glimpse pickles and tensorboard
  logging dropped); the epoch loop of ``train`` is unrolled: at the end of an epoch ``validate`` runs and
  ``scheduler.step(-valid_acc)`` as in ``train`` (checkpoints and early stopping dropped); ``eval_fn`` is
  ``validate``'s accuracy on the validation split; ``self.num_train``/``num_valid`` read the samplers' ``indices``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.utils.data.sampler import SubsetRandomSampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_IMAGES = 640  # (port) synthetic MNIST stand-in


# modules.py
class Retina:
    def __init__(self, g, k, s):
        self.g = g
        self.k = k
        self.s = s

    def foveate(self, x, l):
        phi = []
        size = self.g
        for i in range(self.k):
            phi.append(self.extract_patch(x, l, size))
            size = int(self.s * size)
        for i in range(1, len(phi)):
            k = phi[i].shape[-1] // self.g
            phi[i] = F.avg_pool2d(phi[i], k)
        phi = torch.cat(phi, 1)
        phi = phi.view(phi.shape[0], -1)
        return phi

    def extract_patch(self, x, l, size):
        B, C, H, W = x.shape
        start = self.denormalize(H, l)
        end = start + size
        x = F.pad(x, (size // 2, size // 2, size // 2, size // 2))
        patch = []
        for i in range(B):
            patch.append(x[i, :, start[i, 1] : end[i, 1], start[i, 0] : end[i, 0]])
        return torch.stack(patch)

    def denormalize(self, T, coords):
        return (0.5 * ((coords + 1.0) * T)).long()


class GlimpseNetwork(nn.Module):
    def __init__(self, h_g, h_l, g, k, s, c):
        super().__init__()
        self.retina = Retina(g, k, s)
        D_in = k * g * g * c
        self.fc1 = nn.Linear(D_in, h_g)
        D_in = 2
        self.fc2 = nn.Linear(D_in, h_l)
        self.fc3 = nn.Linear(h_g, h_g + h_l)
        self.fc4 = nn.Linear(h_l, h_g + h_l)

    def forward(self, x, l_t_prev):
        phi = self.retina.foveate(x, l_t_prev)
        l_t_prev = l_t_prev.view(l_t_prev.size(0), -1)
        phi_out = F.relu(self.fc1(phi))
        l_out = F.relu(self.fc2(l_t_prev))
        what = self.fc3(phi_out)
        where = self.fc4(l_out)
        g_t = F.relu(what + where)
        return g_t


class CoreNetwork(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(input_size, hidden_size)
        self.h2h = nn.Linear(hidden_size, hidden_size)

    def forward(self, g_t, h_t_prev):
        h1 = self.i2h(g_t)
        h2 = self.h2h(h_t_prev)
        h_t = F.relu(h1 + h2)
        return h_t


class ActionNetwork(nn.Module):
    def __init__(self, input_size, output_size, bug=None):
        super().__init__()
        self.bug = bug
        self.fc = nn.Linear(input_size, output_size)

    def forward(self, h_t):
        a_t = F.log_softmax(self.fc(h_t), dim=0 if self.bug == "log_softmax_over_batch" else 1)
        return a_t


class LocationNetwork(nn.Module):
    def __init__(self, input_size, output_size, std, bug=None):
        super().__init__()
        self.bug = bug
        self.std = std
        hid_size = input_size // 2
        self.fc = nn.Linear(input_size, hid_size)
        self.fc_lt = nn.Linear(hid_size, output_size)

    def forward(self, h_t):
        feat = F.relu(self.fc(h_t.detach()))
        mu = torch.tanh(self.fc_lt(feat))
        l_t = torch.distributions.Normal(mu, self.std).rsample()
        if self.bug != "sampled_location_not_detached":
            l_t = l_t.detach()
        log_pi = Normal(mu, self.std).log_prob(l_t)
        log_pi = torch.sum(log_pi, dim=1)
        l_t = torch.clamp(l_t, -1, 1)
        return log_pi, l_t


class BaselineNetwork(nn.Module):
    def __init__(self, input_size, output_size):
        super().__init__()
        self.fc = nn.Linear(input_size, output_size)

    def forward(self, h_t):
        b_t = self.fc(h_t.detach())
        return b_t


# model.py
class RecurrentAttention(nn.Module):
    def __init__(self, g, k, s, c, h_g, h_l, std, hidden_size, num_classes, bug=None):
        super().__init__()
        self.std = std
        self.sensor = GlimpseNetwork(h_g, h_l, g, k, s, c)
        self.rnn = CoreNetwork(hidden_size, hidden_size)
        self.locator = LocationNetwork(hidden_size, 2, std, bug=bug)
        self.classifier = ActionNetwork(hidden_size, num_classes, bug=bug)
        self.baseliner = BaselineNetwork(hidden_size, 1)

    def forward(self, x, l_t_prev, h_t_prev, last=False):
        g_t = self.sensor(x, l_t_prev)
        h_t = self.rnn(g_t, h_t_prev)
        log_pi, l_t = self.locator(h_t)
        b_t = self.baseliner(h_t).squeeze()
        if last:
            log_probas = self.classifier(h_t)
            return h_t, l_t, b_t, log_probas, log_pi
        return h_t, l_t, b_t, log_pi


# data_loader.py (the MNIST download replaced by the synthetic images)
def _synthetic_mnist(seed):
    """(port) Ten smoothed random templates, one per class, plus per-image noise; 1x28x28 float images."""
    g = torch.Generator().manual_seed(seed)
    templates = F.avg_pool2d(torch.randn(10, 1, 32, 32, generator=g), 5, stride=1)
    templates = (templates - templates.mean()) / templates.std()
    y = torch.randint(0, 10, (N_IMAGES,), generator=g)
    x = templates[y] + 0.5 * torch.randn(N_IMAGES, 1, 28, 28, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def get_train_valid_loader(dataset, batch_size, random_seed, valid_size=0.1, shuffle=True):
    error_msg = "[!] valid_size should be in the range [0, 1]."
    assert (valid_size >= 0) and (valid_size <= 1), error_msg
    num_train = len(dataset)
    indices = list(range(num_train))
    split = int(np.floor(valid_size * num_train))
    if shuffle:
        np.random.seed(random_seed)
        np.random.shuffle(indices)
    train_idx, valid_idx = indices[split:], indices[:split]
    train_sampler = SubsetRandomSampler(train_idx)
    valid_sampler = SubsetRandomSampler(valid_idx)
    train_loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=train_sampler)
    valid_loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=valid_sampler)
    return (train_loader, valid_loader)


# trainer.py
class Trainer:
    def __init__(self, config, data_loader, bug=None):
        self.config = config
        self.bug = bug
        self.device = torch.device("cpu")  # (port) use_gpu False
        self.patch_size = config.patch_size
        self.glimpse_scale = config.glimpse_scale
        self.num_patches = config.num_patches
        self.loc_hidden = config.loc_hidden
        self.glimpse_hidden = config.glimpse_hidden
        self.num_glimpses = config.num_glimpses
        self.hidden_size = config.hidden_size
        self.std = config.std
        self.M = config.M
        self.train_loader = data_loader[0]
        self.valid_loader = data_loader[1]
        self.num_train = len(self.train_loader.sampler.indices)
        self.num_valid = len(self.valid_loader.sampler.indices)
        self.num_classes = 10
        self.num_channels = 1
        self.lr = config.init_lr
        self.lr_patience = config.lr_patience
        self.model = RecurrentAttention(self.patch_size, self.num_patches, self.glimpse_scale, self.num_channels,
                                        self.loc_hidden, self.glimpse_hidden, self.std, self.hidden_size,
                                        self.num_classes, bug=bug)
        self.model.to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.config.init_lr)
        self.scheduler = ReduceLROnPlateau(self.optimizer, "min", patience=self.lr_patience)

    def reset(self):
        h_t = torch.zeros(self.batch_size, self.hidden_size, dtype=torch.float, device=self.device,
                          requires_grad=True)
        l_t = torch.FloatTensor(self.batch_size, 2).uniform_(-1, 1).to(self.device)
        l_t.requires_grad = True
        return h_t, l_t

    def glimpses(self, x):
        """(port) The glimpse loop shared by ``train_one_epoch`` and ``validate`` (as written in both)."""
        h_t, l_t = self.reset()
        log_pi = []
        baselines = []
        for t in range(self.num_glimpses - 1):
            h_t, l_t, b_t, p = self.model(x, l_t, h_t)
            baselines.append(b_t)
            log_pi.append(p)
        h_t, l_t, b_t, log_probas, p = self.model(x, l_t, h_t, last=True)
        log_pi.append(p)
        baselines.append(b_t)
        baselines = torch.stack(baselines).transpose(1, 0)
        log_pi = torch.stack(log_pi).transpose(1, 0)
        return log_probas, baselines, log_pi

    def train_one_batch(self, x, y):
        """(port) The loop body of ``train_one_epoch``."""
        self.optimizer.zero_grad()
        x, y = x.to(self.device), y.to(self.device)
        self.batch_size = x.shape[0]
        log_probas, baselines, log_pi = self.glimpses(x)
        predicted = torch.max(log_probas, 1)[1]
        R = (predicted.detach() == y).float()
        R = R.unsqueeze(1).repeat(1, self.num_glimpses)
        loss_action = F.nll_loss(log_probas, y)
        loss_baseline = F.mse_loss(baselines, R)
        if self.bug == "baseline_not_detached_in_advantage":
            adjusted_reward = R - baselines
        else:
            adjusted_reward = R - baselines.detach()
        loss_reinforce = torch.sum(-log_pi * adjusted_reward, dim=1)
        loss_reinforce = torch.mean(loss_reinforce, dim=0)
        loss = loss_action + loss_baseline + loss_reinforce * 0.01
        loss.backward()
        self.optimizer.step()
        return loss.item()

    @torch.no_grad()
    def validate(self, epoch):
        correct, seen = 0.0, 0
        for i, (x, y) in enumerate(self.valid_loader):
            x, y = x.to(self.device), y.to(self.device)
            x = x.repeat(self.M, 1, 1, 1)
            self.batch_size = x.shape[0]
            log_probas, baselines, log_pi = self.glimpses(x)
            log_probas = log_probas.view(self.M, -1, log_probas.shape[-1])
            log_probas = torch.mean(log_probas, dim=0)
            predicted = torch.max(log_probas, 1)[1]
            correct += float((predicted == y).float().sum())
            seen += len(y)
        return 100 * correct / seen  # (port) the accuracy meter's average; the loss meter is dropped


def _build(seed, bug=None):
    config = types.SimpleNamespace(
        patch_size=8, glimpse_scale=1, num_patches=1, loc_hidden=32, glimpse_hidden=32, num_glimpses=6,
        hidden_size=64, std=0.05, M=1, valid_size=0.1, batch_size=32, shuffle=True, init_lr=3e-4,
        lr_patience=20, random_seed=seed)  # config.py defaults, sizes as listed in the docstring
    torch.manual_seed(config.random_seed)
    dataset = _synthetic_mnist(seed)
    dloader = get_train_valid_loader(dataset, config.batch_size, config.random_seed, config.valid_size,
                                     config.shuffle)
    trainer = Trainer(config, dloader, bug=bug)
    st = {"it": None, "epoch": 0}

    def train_step():
        if st["it"] is None:  # an epoch starts (train_one_epoch)
            trainer.model.train()
            st["it"] = iter(trainer.train_loader)
        x, y = next(st["it"], (None, None))
        if x is None:  # the epoch ends: validate and step the plateau scheduler (train)
            valid_acc = trainer.validate(st["epoch"])
            trainer.scheduler.step(-valid_acc)
            st["epoch"] += 1
            trainer.model.train()
            st["it"] = iter(trainer.train_loader)
            x, y = next(st["it"])
        return trainer.train_one_batch(x, y)

    def eval_fn(model, _batch=None):
        return trainer.validate(st["epoch"])
    x0, y0 = next(iter(trainer.train_loader))
    return Program(name="ramzakka_mnist", model=trainer.model, batch=(x0, y0), loss_fn=F.nll_loss,
                   optimizer=trainer.optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=trainer.train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("sampled_location_not_detached", functools.partial(_build, bug="sampled_location_not_detached"),
        "learning_ledger", ("OBJECTIVE",)),
    Bug("baseline_not_detached_in_advantage", functools.partial(_build, bug="baseline_not_detached_in_advantage"),
        "learning_ledger", ("OBJECTIVE",)),
    Bug("log_softmax_over_batch", functools.partial(_build, bug="log_softmax_over_batch"), "learning_ledger",
        ("OBJECTIVE",)),
]

"""RealNVP on 8x8 digits from Jakub Tomczak's "Deep Generative Modeling" companion code: eight affine coupling
layers on flattened 64-dimensional images (scale nets with a tanh output, translation nets, a flip between
couplings), a standard Gaussian prior, uniform dequantization, the NLL returned by the model's ``forward``, Adamax
1e-3, early stopping on the validation NLL.

Source: https://github.com/jmtomczak/intro_dgm
Commit: 28bbc85bb9430515f9beef8a282c8bc503174725
Files: ``flows/realnvp_example.ipynb``
License: MIT (Copyright (c) 2021 Jakub M. Tomczak; full text in LICENSES/jmtomczak-intro_dgm.txt)
Domain: generative model, normalizing flow (RealNVP coupling layers, maximum likelihood)

Kept as written: ``RealNVP`` (``coupling`` with ``yb = (xb - t) * exp(-s)`` forward, ``permute`` by ``flip(1)``,
``f`` accumulating ``log_det_J - s.sum(1)``, ``f_inv``, ``forward`` returning the mean or summed NLL under the
prior, ``sample``), the ``nets`` / ``nett`` lambdas (D 64, M 256: Linear-LeakyReLU-Linear-LeakyReLU-Linear, tanh on
the scale), ``num_flows`` 8, the MultivariateNormal prior, Adamax over the trainable parameters at lr 1e-3,
``training``'s loop body (dequantization ``batch + (1 - rand) / 2``, ``model.forward(batch)``, zero_grad,
``backward(retain_graph=True)``, step) and ``evaluation`` (summed NLL over the loader, divided by N), the
DataLoaders (batch 64, the training one shuffled) and the 1000 / 350 / rest split.

Deviations from the original:
- scikit-learn's ``load_digits`` is not here: ``Digits`` reads 1797 synthetic 8x8 "digits" made from ``seed`` (ten
  stroke templates with integer intensities 0..16 as in the sklearn set, each drawn with a random one-pixel shift,
  intensity jitter and rounding), flattened to 64 values.
- ``pytorch_model_summary``'s print, matplotlib figures, ``torch.save`` of the best model and the prints are dropped;
  ``RealNVP.__init__``'s print is kept commented.
- ``training`` is not run epoch by epoch: ``train_step`` is one batch of its loop (the loader re-iterated at each
  epoch), returning the loss; ``eval_fn`` is ``evaluation`` on the validation loader with the current model
  (``model_best=model``, as the loop calls it).
- the Program's batch is one dequantized training batch (the first 64 images), and ``loss_fn`` returns the model's
  output (the NLL its ``forward`` computes).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, SIM102, PLR0402, RUF046

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


def load_digits(seed):
    """(port) sklearn's digits: 1797 images 8x8 with integer values 0..16, synthetic, from ``seed``."""
    rng = np.random.default_rng(seed)
    templates = np.zeros((10, 10, 10))
    for k in range(10):
        for _ in range(3):
            r0, c0, r1, c1 = rng.integers(1, 9, size=4)
            for s in np.linspace(0, 1, 16):
                templates[k, int(round(r0 + s * (r1 - r0))), int(round(c0 + s * (c1 - c0)))] = 16.0
    data = np.zeros((1797, 64))
    for n in range(1797):
        k = n % 10
        dr, dc = rng.integers(0, 3, size=2)
        img = templates[k, dr:dr + 8, dc:dc + 8] * rng.uniform(0.6, 1.0)
        img = img + rng.normal(0, 1.5, size=(8, 8))
        data[n] = np.clip(np.round(img), 0, 16).reshape(64)
    return type("Bunch", (), {"data": data})


class Digits(Dataset):
    """Scikit-Learn Digits dataset."""

    def __init__(self, mode='train', transforms=None, seed=0):
        digits = load_digits(seed)
        if mode == 'train':
            self.data = digits.data[:1000].astype(np.float32)
        elif mode == 'val':
            self.data = digits.data[1000:1350].astype(np.float32)
        else:
            self.data = digits.data[1350:].astype(np.float32)

        self.transforms = transforms

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        sample = self.data[idx]
        if self.transforms:
            sample = self.transforms(sample)
        return sample


class RealNVP(nn.Module):
    def __init__(self, nets, nett, num_flows, prior, D=2, dequantization=True):
        super(RealNVP, self).__init__()

        # print('RealNVP by JT.')  (port) the print dropped

        self.dequantization = dequantization

        self.prior = prior
        self.t = torch.nn.ModuleList([nett() for _ in range(num_flows)])
        self.s = torch.nn.ModuleList([nets() for _ in range(num_flows)])
        self.num_flows = num_flows

        self.D = D
        self.bug = None  # (port) the bug switch

    def coupling(self, x, index, forward=True):
        # x: input, either images (for the first transformation) or outputs from the previous transformation
        # index: it determines the index of the transformation
        # forward: whether it is a pass from x to y (forward=True), or from y to x (forward=False)

        (xa, xb) = torch.chunk(x, 2, 1)

        s = self.s[index](xa)
        t = self.t[index](xa)

        if forward:
            #yb = f^{-1}(x)
            yb = (xb - t) * torch.exp(-s)
        else:
            #xb = f(y)
            yb = torch.exp(s) * xb + t

        return torch.cat((xa, yb), 1), s

    def permute(self, x):
        return x.flip(1)

    def f(self, x):
        log_det_J, z = x.new_zeros(x.shape[0]), x
        for i in range(self.num_flows):
            z, s = self.coupling(z, i, forward=True)
            z = self.permute(z)
            if self.bug == "log_det_sign_flipped":
                log_det_J = log_det_J + s.sum(dim=1)
            else:
                log_det_J = log_det_J - s.sum(dim=1)

        return z, log_det_J

    def f_inv(self, z):
        x = z
        for i in reversed(range(self.num_flows)):
            x = self.permute(x)
            x, _ = self.coupling(x, i, forward=False)

        return x

    def forward(self, x, reduction='avg'):
        z, log_det_J = self.f(x)
        if reduction == 'sum':
            return -(self.prior.log_prob(z) + log_det_J).sum()
        else:
            return -(self.prior.log_prob(z) + log_det_J).mean()

    def sample(self, batchSize):
        z = self.prior.sample((batchSize, self.D))
        z = z[:, 0, :]
        x = self.f_inv(z)
        return x.view(-1, self.D)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_data = Digits(mode='train', seed=seed)
    val_data = Digits(mode='val', seed=seed)

    training_loader = DataLoader(train_data, batch_size=64, shuffle=True)
    val_loader = DataLoader(val_data, batch_size=64, shuffle=False)

    D = 64   # input dimension
    M = 256  # the number of neurons in scale (s) and translation (t) nets

    lr = 1e-3 # learning rate

    # The number of invertible transformations
    num_flows = 8

    # scale (s) network
    nets = lambda: nn.Sequential(nn.Linear(D // 2, M), nn.LeakyReLU(),
                                 nn.Linear(M, M), nn.LeakyReLU(),
                                 nn.Linear(M, D // 2), nn.Tanh())

    # translation (t) network
    nett = lambda: nn.Sequential(nn.Linear(D // 2, M), nn.LeakyReLU(),
                                 nn.Linear(M, M), nn.LeakyReLU(),
                                 nn.Linear(M, D // 2))

    # Prior (a.k.a. the base distribution): Gaussian
    prior = torch.distributions.MultivariateNormal(torch.zeros(D), torch.eye(D))
    # Init RealNVP
    model = RealNVP(nets, nett, num_flows, prior, D=D, dequantization=True)
    model.bug = bug

    # OPTIMIZER
    optimizer = torch.optim.Adamax([p for p in model.parameters() if p.requires_grad == True], lr=lr)

    def evaluation(test_loader, name=None, model_best=None, epoch=None):
        # EVALUATION
        model_best.eval()
        loss = 0.
        N = 0.
        for indx_batch, test_batch in enumerate(test_loader):
            if hasattr(model, 'dequantization'):
                if model.dequantization:
                    test_batch = test_batch + (1. - torch.rand(test_batch.shape))/2.
            loss_t = model_best.forward(test_batch, reduction='sum')
            loss = loss + loss_t.item()
            N = N + test_batch.shape[0]
        loss = loss / N

        return loss

    st = {"it": None}

    def train_step():
        # one batch of training()'s main loop; the next epoch starts (model.train(), a new shuffle) when it runs out
        batch = next(st["it"], None) if st["it"] is not None else None
        if batch is None:
            model.train()
            st["it"] = iter(training_loader)
            batch = next(st["it"])
        if hasattr(model, 'dequantization'):
            if model.dequantization:
                batch = batch + (1. - torch.rand(batch.shape))/2.
        loss = model.forward(batch)

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward(retain_graph=True)
        optimizer.step()
        return loss.item()

    first = torch.from_numpy(train_data.data[:64])
    first = first + (1. - torch.rand(first.shape))/2.

    return Program(name="introdgm_realnvp", model=model, batch=(first,), loss_fn=lambda loss, _targets: loss,
                   optimizer=optimizer, train_step=train_step,
                   eval_fn=lambda m, _b=None: evaluation(val_loader, model_best=m))


build = functools.partial(_build, bug=None)

BUGS = [
    # the coupling's log-determinant added with the wrong sign (classic): f's Jacobian term rewards expanding
    # the data instead of paying for it, so the objective is no longer the likelihood.
    Bug("log_det_sign_flipped", functools.partial(_build, bug="log_det_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() left out of the loop (classic): every batch's gradient adds onto all earlier ones.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

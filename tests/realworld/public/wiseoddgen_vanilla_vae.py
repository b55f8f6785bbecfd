"""Vanilla VAE of wiseodd/generative-models (``VAE/vanilla_vae/vae_pytorch.py``): hand-made weight tensors with
Xavier-style init, a one-hidden-layer ReLU encoder ``Q(X)`` giving ``z_mu`` and a log-variance ``z_var``,
reparameterised ``sample_z``, a one-hidden-layer ReLU decoder ``P(z)`` ending in a sigmoid; the loss is
``binary_cross_entropy(X_sample, X, size_average=False) / mb_size`` plus the mean over the batch of the analytic KL;
Adam (lr 1e-3) over the hand-kept ``params`` list; ``loss.backward()``, ``solver.step()``, then the "Housekeeping"
loop that replaces every parameter's gradient by zeros.

Source: https://github.com/wiseodd/generative-models
Commit: b930d5fa9e2f69adfd4ea8ec759f38f6ce6da4c2
Files: VAE/vanilla_vae/vae_pytorch.py
License: Unlicense (public domain dedication; full text in LICENSES/wiseodd-generative-models.txt)
Domain: generative model (VAE, Bernoulli decoder, MLP on 28x28 images)

Deviations from the original:
- data: ``tensorflow.examples.tutorials.mnist``'s MNIST download is replaced by 512 synthetic 28x28 images made
  from ``seed`` (one or two white horizontal or vertical strokes of random position and length on black,
  flattened to 784 values in [0, 1] as ``read_data_sets`` gives them); ``mnist.train.next_batch(mb_size)`` is
  a seeded permutation walked in order, reshuffled at each epoch. ``X_dim`` 784, ``y_dim`` 10 (unused),
  ``mb_size`` 64, ``Z_dim`` 100, ``h_dim`` 128 and ``lr`` 1e-3 unchanged.
- the weights are module-level ``Variable(..., requires_grad=True)`` tensors in the original; here they are the
  same tensors (same names, shapes and init) registered as ``nn.Parameter`` on a small ``nn.Module``
  (``VanillaVAE``) whose ``forward`` runs ``Q``, ``sample_z`` and ``P`` as the loop does, so that a model object
  exists; ``Q``, ``P`` and ``sample_z`` read the module's tensors (``m.Wxh`` for ``Wxh``), their bodies unchanged.
  ``sample_z`` draws ``eps`` from the build's seeded generator.
- ``import tensorflow``, matplotlib plotting, printing and the sample PNGs every 1000 iterations are left out;
  ``loss.data[0]`` (which no longer runs) is not needed.
- one ``train_step`` is one iteration of ``for it in range(100000)``; it returns the loss. ``loss_fn`` is the
  loop's loss applied to the model's outputs ``(X_sample, z_mu, z_var)``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402  (the original's style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as nn
import torch.optim as optim
from torch import nn as torch_nn
from torch.autograd import Variable

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

mb_size = 64
Z_dim = 100
X_dim = 784
y_dim = 10
h_dim = 128
c = 0
lr = 1e-3
N_IMAGES = 512


def xavier_init(size):
    in_dim = size[0]
    xavier_stddev = 1. / np.sqrt(in_dim / 2.)
    return Variable(torch.randn(*size) * xavier_stddev, requires_grad=True)


class VanillaVAE(torch_nn.Module):
    """The script's module-level tensors, registered under their own names."""

    def __init__(self, gen):
        super().__init__()
        self.gen = gen
        # =============================== Q(z|X) ======================================
        self.Wxh = torch_nn.Parameter(xavier_init(size=[X_dim, h_dim]))
        self.bxh = torch_nn.Parameter(Variable(torch.zeros(h_dim), requires_grad=True))
        self.Whz_mu = torch_nn.Parameter(xavier_init(size=[h_dim, Z_dim]))
        self.bhz_mu = torch_nn.Parameter(Variable(torch.zeros(Z_dim), requires_grad=True))
        self.Whz_var = torch_nn.Parameter(xavier_init(size=[h_dim, Z_dim]))
        self.bhz_var = torch_nn.Parameter(Variable(torch.zeros(Z_dim), requires_grad=True))
        # =============================== P(X|z) ======================================
        self.Wzh = torch_nn.Parameter(xavier_init(size=[Z_dim, h_dim]))
        self.bzh = torch_nn.Parameter(Variable(torch.zeros(h_dim), requires_grad=True))
        self.Whx = torch_nn.Parameter(xavier_init(size=[h_dim, X_dim]))
        self.bhx = torch_nn.Parameter(Variable(torch.zeros(X_dim), requires_grad=True))

    def forward(self, X):
        # Forward
        z_mu, z_var = Q(self, X)
        z = sample_z(self, z_mu, z_var)
        X_sample = P(self, z)
        return X_sample, z_mu, z_var


def Q(m, X):
    h = nn.relu(X @ m.Wxh + m.bxh.repeat(X.size(0), 1))
    z_mu = h @ m.Whz_mu + m.bhz_mu.repeat(h.size(0), 1)
    z_var = h @ m.Whz_var + m.bhz_var.repeat(h.size(0), 1)
    return z_mu, z_var


def sample_z(m, mu, log_var):
    eps = Variable(torch.randn(mb_size, Z_dim, generator=m.gen))
    return mu + torch.exp(log_var / 2) * eps


def P(m, z):
    h = nn.relu(z @ m.Wzh + m.bzh.repeat(z.size(0), 1))
    X = nn.sigmoid(h @ m.Whx + m.bhx.repeat(h.size(0), 1))
    return X


def make_strokes(gen, n):
    """Stand-in for MNIST: one or two white strokes (horizontal or vertical) per 28x28 image, flattened."""
    imgs = torch.zeros(n, 28, 28)
    for i in range(n):
        for _ in range(1 + int(torch.randint(0, 2, (1,), generator=gen))):
            pos = int(torch.randint(4, 24, (1,), generator=gen))
            start = int(torch.randint(2, 10, (1,), generator=gen))
            length = int(torch.randint(10, 17, (1,), generator=gen))
            if torch.rand(1, generator=gen) < 0.5:
                imgs[i, pos - 1:pos + 2, start:start + length] = 1.0
            else:
                imgs[i, start:start + length, pos - 1:pos + 2] = 1.0
    return imgs.view(n, X_dim).numpy().astype(np.float32)


class _Train:
    """``mnist.train`` of the original: ``next_batch`` walks a shuffled copy of the images."""

    def __init__(self, images, gen):
        self.images = images
        self.gen = gen
        self.order = torch.randperm(len(images), generator=gen).numpy()
        self.pos = 0

    def next_batch(self, n):
        if self.pos + n > len(self.images):
            self.order = torch.randperm(len(self.images), generator=self.gen).numpy()
            self.pos = 0
        idx = self.order[self.pos:self.pos + n]
        self.pos += n
        return self.images[idx], np.zeros((n, y_dim), dtype=np.float32)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    mnist_train = _Train(make_strokes(gen, N_IMAGES), gen)

    vae = VanillaVAE(torch.Generator().manual_seed(seed + 1))

    # =============================== TRAINING ====================================

    if bug == "var_head_left_out_of_params":
        params = [vae.Wxh, vae.bxh, vae.Whz_mu, vae.bhz_mu,
                  vae.Wzh, vae.bzh, vae.Whx, vae.bhx]
    else:
        params = [vae.Wxh, vae.bxh, vae.Whz_mu, vae.bhz_mu, vae.Whz_var, vae.bhz_var,
                  vae.Wzh, vae.bzh, vae.Whx, vae.bhx]

    solver = optim.Adam(params, lr=lr)

    def loss_fn(outputs, X):
        X_sample, z_mu, z_var = outputs
        # Loss
        if bug == "recon_mean_over_pixels":
            recon_loss = nn.binary_cross_entropy(X_sample, X)
        else:
            recon_loss = nn.binary_cross_entropy(X_sample, X, size_average=False) / mb_size
        kl_loss = torch.mean(0.5 * torch.sum(torch.exp(z_var) + z_mu**2 - 1. - z_var, 1))
        loss = recon_loss + kl_loss
        return loss

    def train_step():
        X, _ = mnist_train.next_batch(mb_size)
        X = Variable(torch.from_numpy(X))

        # Forward
        X_sample, z_mu, z_var = vae(X)

        # Loss
        loss = loss_fn((X_sample, z_mu, z_var), X)

        # Backward
        loss.backward()

        # Update
        solver.step()

        # Housekeeping
        if bug != "housekeeping_dropped":
            for p in params:
                if p.grad is not None:
                    data = p.grad.data
                    p.grad = Variable(data.new().resize_as_(data).zero_())
        return loss.detach()

    first = torch.from_numpy(mnist_train.images[:mb_size])
    return Program(name="wiseoddgen_vanilla_vae", model=vae, batch=(first, first), loss_fn=loss_fn,
                   optimizer=solver, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the reconstruction term averaged over the 784 pixels (size_average left at its default, classic reduction
    # slip): the KL term outweighs it by about three orders of magnitude and the decoder learns little.
    Bug("recon_mean_over_pixels", functools.partial(_build, bug="recon_mean_over_pixels"), "learning_ledger",
        ("OBJECTIVE",)),
    # the hand-kept ``params`` list leaves out the log-variance head (classic: parameters missing from the
    # optimizer); its weights keep their initial values.
    Bug("var_head_left_out_of_params", functools.partial(_build, bug="var_head_left_out_of_params"),
        "four_structures", ("Whz_var",)),
    # the Housekeeping loop that zeroes the gradients after the step dropped (classic): gradients accumulate over
    # every iteration.
    Bug("housekeeping_dropped", functools.partial(_build, bug="housekeeping_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

# ruff: noqa: UP008
"""The diffusion probabilistic model of Sohl-Dickstein et al. ("Deep Unsupervised Learning using Nonequilibrium
Thermodynamics", ICML 2015) on the 2-D Swiss roll, as MaximeVandegar/Papers-in-100-Lines-of-Code writes it: a forward
process of 40 Gaussian steps with a sigmoid beta schedule; the reverse process is an MLP with a shared head and one
tail per time step that outputs the mean and log-variance of ``p(x_{t-1} | x_t)``; each iteration draws a fresh
batch and one time step t in [2, 40], noises the batch to ``x_t`` in closed form, computes the Gaussian posterior
``q(x_{t-1} | x_t, x_0)`` and minimizes the mean KL divergence between it and the model's Gaussian; Adam.

Source: https://github.com/MaximeVandegar/Papers-in-100-Lines-of-Code
Commit: af27efe121e78c7a288acb9a340df890cf30090d
Files: ``Deep_Unsupervised_Learning_using_Nonequilibrium_Thermodynamics/diffusion_models.py`` (``sample_batch``,
``MLP``, ``DiffusionModel``, ``train``, ``__main__``)
License: MIT (Copyright (c) 2021 Maxime Vandegar; full text in LICENSES/MaximeVandegar-Papers-in-100-Lines-of-Code.txt)
Domain: diffusion model (the original 2015 formulation: per-step Gaussian reverse kernels trained by the KL to the
forward posterior)

Kept as written: ``MLP`` (hidden_dim 128 as ``__main__`` builds it, N 40 tails), ``DiffusionModel``
(``forward_process`` with the posterior mean and variance from the Sohl-Dickstein reference code, ``reverse``,
``sample``), ``train``'s loop body (a fresh batch, ``t = np.random.randint(2, 40 + 1)``, ``forward_process``,
``reverse``, the KL expression, ``KL.mean()``, zero_grad / backward / step), ``Adam(model_mlp.parameters())``.

Deviations from the original:
- sklearn is not installed: ``make_swiss_roll(size)`` (noise 0) is written out in numpy, drawing from a generator
  seeded from ``seed``; ``t`` is drawn from ``np.random`` seeded from ``seed``;
- sizes for 2 CPU cores: batch_size 64_000 -> 512; the 150_000 iterations are not counted; CPU instead of CUDA;
  lr 1e-4 -> 1e-3 so that a few dozen steps move the held-out KL (the per-step loss depends mostly on the drawn t);
- one ``train_step`` is one iteration of ``train``'s loop, returning the loss; tqdm, the loss list and ``plot`` are
  dropped; ``eval_fn`` is the mean KL over all 39 trained steps on a fixed held-out batch (``model.eval()`` is a no-op
  here: no dropout, no normalization);
- the Program's model is the ``MLP`` (the module the optimizer owns; ``DiffusionModel`` has no ``forward``), its
  batch ``((x_t, t), (mu_posterior, sigma_posterior))`` for one fixed batch at t = 20, its ``loss_fn`` the KL of
  ``train`` on the MLP's output split as ``reverse`` splits it;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.utils.data
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

device = 'cpu'  # (port) 'cuda'


def make_swiss_roll(n_samples, rng):  # (port) sklearn.datasets.make_swiss_roll with noise 0.0, written out
    t = 1.5 * np.pi * (1 + 2 * rng.uniform(size=n_samples))
    y = 21 * rng.uniform(size=n_samples)
    return np.stack([t * np.cos(t), y, t * np.sin(t)], axis=1), t


def sample_batch(size, rng):
    x, _ = make_swiss_roll(size, rng)
    return x[:, [2, 0]] / 10.0 * np.array([1, -1])


class MLP(nn.Module):

    def __init__(self, N=40, data_dim=2, hidden_dim=64):
        super(MLP, self).__init__()

        self.network_head = nn.Sequential(nn.Linear(data_dim, hidden_dim), nn.ReLU(),
                                          nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), )
        self.network_tail = nn.ModuleList([nn.Sequential(nn.Linear(hidden_dim, hidden_dim),
                                                         nn.ReLU(), nn.Linear(hidden_dim, data_dim * 2)
                                                         ) for _ in range(N)])

    def forward(self, x, t: int):
        h = self.network_head(x)
        return self.network_tail[t](h)


class DiffusionModel(nn.Module):

    def __init__(self, model: nn.Module, n_steps=40, device='cuda'):
        super().__init__()

        self.model = model
        self.device = device

        betas = torch.linspace(-18, 10, n_steps)
        self.beta = torch.sigmoid(betas) * (3e-1 - 1e-5) + 1e-5

        self.alpha = 1. - self.beta
        self.alpha_bar = torch.cumprod(self.alpha, dim=0)
        self.n_steps = n_steps
        self.sigma2 = self.beta

    def forward_process(self, x0, t):

        t = t - 1  # Start indexing at 0
        beta_forward = self.beta[t]
        alpha_forward = self.alpha[t]
        alpha_cum_forward = self.alpha_bar[t]
        xt = x0 * torch.sqrt(alpha_cum_forward) + torch.randn_like(x0) * torch.sqrt(1. - alpha_cum_forward)
        # Retrieved from https://github.com/Sohl-Dickstein/Diffusion-Probabilistic-Models/blob/master/model.py#L203
        mu1_scl = torch.sqrt(alpha_cum_forward / alpha_forward)
        mu2_scl = 1. / torch.sqrt(alpha_forward)
        cov1 = 1. - alpha_cum_forward / alpha_forward
        cov2 = beta_forward / alpha_forward
        lam = 1. / cov1 + 1. / cov2
        mu = (x0 * mu1_scl / cov1 + xt * mu2_scl / cov2) / lam
        sigma = torch.sqrt(1. / lam)
        return mu, sigma, xt

    def reverse(self, xt, t):

        t = t - 1  # Start indexing at 0
        if t == 0: return None, None, xt
        mu, h = self.model(xt, t).chunk(2, dim=1)
        sigma = torch.sqrt(torch.exp(h))
        samples = mu + torch.randn_like(xt) * sigma
        return mu, sigma, samples

    def sample(self, size, device):
        noise = torch.randn((size, 2)).to(device)
        samples = [noise]
        for t in range(self.n_steps):
            _, _, x = self.reverse(samples[-1], self.n_steps - t - 1 + 1)
            samples.append(x)
        return samples


def kl_loss(mu_posterior, sigma_posterior, mu, sigma, bug=None):
    # (port) the KL lines of train()'s loop body
    if bug == "log_sigma_terms_swapped":
        KL = (torch.log(sigma_posterior) - torch.log(sigma) + (sigma_posterior ** 2 + (mu_posterior - mu) ** 2) / (
                2 * sigma ** 2) - 0.5)
    else:
        KL = (torch.log(sigma) - torch.log(sigma_posterior) + (sigma_posterior ** 2 + (mu_posterior - mu) ** 2) / (
                2 * sigma ** 2) - 0.5)
    loss = KL.mean()
    return loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    model_mlp = MLP(hidden_dim=128).to(device)
    model = DiffusionModel(model_mlp)
    params = model_mlp.network_tail.parameters() if bug == "optimizer_over_tails_only" else model_mlp.parameters()
    optimizer = torch.optim.Adam(params, lr=1e-3)  # (port) lr 1e-4
    batch_size = 512  # (port) 64_000

    def train_step():
        x0 = torch.from_numpy(sample_batch(batch_size, rng)).float().to(device)
        t = np.random.randint(2, 40 + 1)
        mu_posterior, sigma_posterior, xt = model.forward_process(x0, t)
        if bug == "posterior_from_other_batch":
            # classic: a second call to sample_batch feeds the posterior, so the target belongs to other points
            x0_other = torch.from_numpy(sample_batch(batch_size, rng)).float().to(device)
            mu_posterior, sigma_posterior, _ = model.forward_process(x0_other, t)
        mu, sigma, _ = model.reverse(xt, t)

        loss = kl_loss(mu_posterior, sigma_posterior, mu, sigma, bug)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    def noised(x0, t, g):  # forward_process's x_t and posterior, with the noise drawn from g
        ab = model.alpha_bar[t - 1]
        xt = x0 * torch.sqrt(ab) + torch.randn(x0.shape, generator=g) * torch.sqrt(1. - ab)
        return _posterior(model, x0, xt, t)

    held_out = torch.from_numpy(sample_batch(1024, np.random.default_rng(seed + 1))).float()

    def eval_fn(m, _batch=None):
        g, losses = torch.Generator().manual_seed(seed + 2), []
        with torch.no_grad():
            for t in range(2, 41):
                mu_p, sigma_p, xt = noised(held_out, t, g)
                mu, h = m(xt, t - 1).chunk(2, dim=1)
                losses.append(float(kl_loss(mu_p, sigma_p, mu, torch.sqrt(torch.exp(h)))))
        return float(np.mean(losses))

    x0 = torch.from_numpy(sample_batch(batch_size, np.random.default_rng(seed + 3))).float()
    t0 = 20
    mu_p, sigma_p, xt = noised(x0, t0, torch.Generator().manual_seed(seed + 4))

    def loss_fn(outputs, target):
        mu, h = outputs.chunk(2, dim=1)
        return kl_loss(target[0], target[1], mu, torch.sqrt(torch.exp(h)), bug)

    return Program(name="papers100_nonequilibrium_diffusion", model=model_mlp, batch=((xt, t0 - 1), (mu_p, sigma_p)),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


def _posterior(model, x0, xt, t):
    """forward_process's posterior lines for a given x_t (the Program's fixed batch)."""
    t = t - 1
    alpha_forward, alpha_cum_forward = model.alpha[t], model.alpha_bar[t]
    mu1_scl, mu2_scl = torch.sqrt(alpha_cum_forward / alpha_forward), 1. / torch.sqrt(alpha_forward)
    cov1, cov2 = 1. - alpha_cum_forward / alpha_forward, model.beta[t] / alpha_forward
    lam = 1. / cov1 + 1. / cov2
    return (x0 * mu1_scl / cov1 + xt * mu2_scl / cov2) / lam, torch.sqrt(1. / lam), xt


build = functools.partial(_build, bug=None)

BUGS = [
    # classic pipeline slip: the posterior q(x_{t-1} | x_t, x_0) is computed from a second sample_batch call, so the
    # reverse kernel at x_t is fitted to the posterior of unrelated points.
    Bug("posterior_from_other_batch", functools.partial(_build, bug="posterior_from_other_batch"), "learning_ledger",
        ("TASK",)),
    # classic sign slip: the two log-sigma terms of the Gaussian KL swapped, so the loss falls without bound as the
    # model's sigma grows instead of being minimized at the posterior's.
    Bug("log_sigma_terms_swapped", functools.partial(_build, bug="log_sigma_terms_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: Adam built over the per-step tails only; the shared network_head stays at its initialization.
    Bug("optimizer_over_tails_only", functools.partial(_build, bug="optimizer_over_tails_only"), "four_structures",
        ("network_head",)),
]

"""A Gaussian VAE (isotropic-noise encoder and decoder MLPs, analytic KL to a standard normal prior) fit to 8x8
digit images, from tonyduan/variational-autoencoders.

Source: https://github.com/tonyduan/variational-autoencoders, commit 2f6b2593880525f52097bffcca0a74c7dd2de38a, files
``src/blocks.py`` (``NoiseType``, ``NormalNetwork``, ``VAE``) and ``examples/ex_digits.py`` (the data standardization,
the model, the optimizer, the schedule and the loop). License: MIT (Copyright (c) 2019 Tony Duan; full text in
LICENSES/tonyduan-variational-autoencoders.txt).

Kept as written: ``NormalNetwork`` (three hidden ReLU layers, the mean and one log-sigma channel for ``ISOTROPIC``
noise, ``exp(log_sigma + eps)``), ``VAE`` (``z_given_x`` and ``x_given_z`` isotropic, ``loss``: the KL of the
encoder's Normal to the prior, a reparameterized sample, the decoder's summed log-likelihood, ``-(rec_loss -
kl_div).squeeze(dim=1)``; as written the per-dimension KL of shape [N, latent_dim] broadcasts against the [N, 1]
log-likelihood, so the mean that follows averages the KL over the latent dimensions instead of summing it), the
example's standardization (per-feature mean and ddof-1 sd clipped at 0.01), ``VAE(input_dim=64, latent_dim=2,
hidden_dim=100)``, Adam lr 0.001, ``CosineAnnealingLR`` over ``--iterations`` (2000) and the loop body (zero_grad,
``model.loss(x).mean()``, backward, step, scheduler step) on the full data set.

Deviations:
- sklearn is not installed, so ``load_digits`` (1797 8x8 images, grey levels 0-16) is replaced by 1797 synthetic 8x8
  images with grey levels 0-16 made from ``seed``: ten seeded stroke prototypes, each image one prototype shifted by at
  most one pixel, with per-pixel noise, rounded and clipped to [0, 16].
- the logging every 100 iterations and the sampling / plotting after the loop are dropped; ``train_step`` is one
  iteration of the loop and returns the loss; ``eval_fn`` is the mean negative ELBO (the same ``model.loss``) of the
  standardized data under ``torch.no_grad()``.
- ``VAE`` has no ``forward`` in the original; one is added that returns ``loss(x)`` (the per-example negative ELBO), so
  the Program's model can be called on its batch; the Program's ``loss_fn`` is its mean, the loop's loss.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from enum import Enum, auto

import numpy as np
import torch
from torch import nn, optim
from torch.distributions import Normal, kl

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

ITERATIONS = 2000


# ===== src/blocks.py =====
class NoiseType(Enum):
    DIAGONAL = auto()
    ISOTROPIC = auto()
    FIXED = auto()


class NormalNetwork(nn.Module):

    def __init__(self, in_dim, out_dim, hidden_dim, noise_type, fixed_noise_level=None):
        super().__init__()
        assert (fixed_noise_level is not None) == (noise_type is NoiseType.FIXED)
        num_sigma_channels = {
            NoiseType.DIAGONAL: out_dim,
            NoiseType.ISOTROPIC: 1,
            NoiseType.FIXED: 0,
        }[noise_type]
        self.in_dim, self.out_dim = in_dim, out_dim
        self.noise_type, self.fixed_noise_level = noise_type, fixed_noise_level
        self.network = nn.Sequential(
            nn.Linear(in_dim, hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, out_dim + num_sigma_channels),
        )

    def forward(self, x, eps=1e-6):
        params = self.network(x)
        mu, log_sigma_param = params[..., :self.out_dim], params[..., self.out_dim:]
        if self.noise_type is NoiseType.DIAGONAL:
            sigma = torch.exp(log_sigma_param + eps)
        if self.noise_type is NoiseType.ISOTROPIC:
            sigma = torch.exp(log_sigma_param + eps).repeat(1, self.out_dim)
        if self.noise_type is NoiseType.FIXED:
            sigma = torch.full_like(mu, fill_value=self.fixed_noise_level)
        return Normal(loc=mu, scale=sigma)


class VAE(nn.Module):

    def __init__(self, input_dim, latent_dim, hidden_dim, bug=None):
        super().__init__()
        self.prior = Normal(torch.zeros(latent_dim), torch.ones(latent_dim))
        self.z_given_x = NormalNetwork(input_dim, latent_dim, hidden_dim, NoiseType.ISOTROPIC)
        self.x_given_z = NormalNetwork(latent_dim, input_dim, hidden_dim, NoiseType.ISOTROPIC)
        self.bug = bug

    def loss(self, x):
        pred_z = self.z_given_x(x)
        kl_div = kl.kl_divergence(pred_z, self.prior)
        if self.bug == "z_sampled_without_rsample":
            monte_carlo_z = pred_z.sample()
        else:
            monte_carlo_z = pred_z.rsample()
        monte_carlo_x = self.x_given_z(monte_carlo_z)
        rec_loss = torch.sum(monte_carlo_x.log_prob(x), dim=1, keepdim=True)
        if self.bug == "kl_sign_flipped":
            return -(rec_loss + kl_div).squeeze(dim=1)
        return -(rec_loss - kl_div).squeeze(dim=1)

    def sample_z(self, n_samples):
        return self.prior.rsample((n_samples,))

    def forward(self, x):  # (port) not in the original (VAE has no forward): the per-example loss, so it can be called
        return self.loss(x)


# ===== the data: synthetic stand-in for sklearn's load_digits =====
def load_digits(seed, n=1797):
    g = np.random.RandomState(seed)
    protos = []
    for _ in range(10):
        img = np.zeros((10, 10))
        for _ in range(3):  # three strokes per prototype
            r0, c0 = g.randint(1, 9, size=2)
            dr, dc = [(0, 1), (1, 0), (1, 1), (1, -1)][g.randint(4)]
            for k in range(5):
                r, c = r0 + k * dr, c0 + k * dc
                if 0 <= r < 10 and 0 <= c < 10:
                    img[r, c] = 16.0
        protos.append(img)
    y = g.randint(10, size=n)
    x = np.zeros((n, 64))
    for i in range(n):
        sr, sc = g.randint(0, 3, size=2)
        img = protos[y[i]][sr:sr + 8, sc:sc + 8] + g.randn(8, 8) * 2.0
        x[i] = np.clip(np.round(img), 0, 16).reshape(-1)
    return x, y


def _build(seed, bug=None):
    torch.manual_seed(seed)
    x, _ = load_digits(seed)
    input_mean = np.mean(x, axis=0, keepdims=True)
    input_sd = np.std(x, axis=0, keepdims=True, ddof=1).clip(min=0.01)
    x = (x - input_mean) / input_sd

    model = VAE(input_dim=64, latent_dim=2, hidden_dim=100, bug=bug)

    optimizer = optim.Adam(model.parameters(), lr=0.001)
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, ITERATIONS)
    x = torch.tensor(x, dtype=torch.float32)

    def train_step():
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss = model.loss(x).mean()
        loss.backward()
        optimizer.step()
        scheduler.step()
        return loss.item()

    def eval_fn(m, _batch=None):
        with torch.no_grad():
            return float(m.loss(x).mean())

    return Program(name="tonyduanvae_digits", model=model, batch=(x, x), loss_fn=lambda out, _targets=None: out.mean(), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip in the ELBO: ``-(rec_loss + kl_div)``: the KL term is rewarded, pushing the posterior away
    # from the prior instead of towards it.
    Bug("kl_sign_flipped", functools.partial(_build, bug="kl_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the latent drawn with ``sample()`` instead of ``rsample()``: no gradient of the reconstruction term
    # reaches the encoder (only the KL term trains it).
    Bug("z_sampled_without_rsample", functools.partial(_build, bug="z_sampled_without_rsample"), "learning_ledger",
        ("GRADIENT",)),
    # optimizer.zero_grad() left out of the loop (classic): gradients accumulate over the iterations.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

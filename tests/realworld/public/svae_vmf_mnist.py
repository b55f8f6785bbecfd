# ruff: noqa: UP008, PLR0402, B008, PLW0211, RUF012, RUF059
"""Hyperspherical VAE (S-VAE) from nicola-decao/s-vae-pytorch (``examples/mnist.py`` with ``distribution='vmf'``):
a two-hidden-layer MLP encoder giving a mean direction (normalized onto the unit sphere) and a concentration
(``softplus + 1``), a von Mises-Fisher posterior sampled with the reparameterized rejection sampler (Wood's
algorithm for the radial part, a Householder rotation to the mean direction), a uniform prior on the sphere, an MLP
decoder to Bernoulli logits; the loss is the summed BCE-with-logits reconstruction plus the closed-form KL(vMF ||
uniform) (built from the exponentially scaled Bessel function ``ive``, with its own autograd backward), Adam(1e-3),
dynamic binarization of every batch.

Source: https://github.com/nicola-decao/s-vae-pytorch
Commit: 671c46c0772a2c92a602252311864c48c816bc44
Files: ``examples/mnist.py`` (``ModelVAE``, ``train``), ``hyperspherical_vae/distributions/von_mises_fisher.py``
(``VonMisesFisher``, the registered KL), ``hyperspherical_vae/distributions/hyperspherical_uniform.py``
(``HypersphericalUniform``), ``hyperspherical_vae/ops/ive.py`` (``IveFunction``)
License: MIT (Copyright (c) 2018 Nicola De Cao; full text in LICENSES/nicola-decao-s-vae-pytorch.txt)
Domain: generative (VAE with a hyperspherical latent: von Mises-Fisher posterior, uniform prior)

Kept as written: ``ModelVAE`` (the ``vmf`` branch: ``fc_e0``/``fc_e1``/``fc_mean``/``fc_var``, the mean normalized,
``softplus + 1`` concentration, ``fc_d0``/``fc_d1``/``fc_logits``), ``VonMisesFisher`` (``rsample``,
``__sample_w_rej``, ``__while_loop`` with k=1, ``__householder_rotation``, ``entropy``, ``log_prob``), the KL
registered against ``HypersphericalUniform``, ``IveFunction`` (scipy's ``ive`` forward, the recurrence backward),
``train``'s loop body (zero_grad, dynamic binarization against uniform noise, ``BCEWithLogitsLoss(reduction='none')
.sum(-1).mean()`` + the KL's mean, backward, step), Adam(lr=1e-3), ``z_dim = Z_DIM + 1`` with Z_DIM 5.

Deviations from the original:
- MNIST (torchvision download) is not here: the images are synthetic, made from ``seed``: 8x8 grey images
  ``sigmoid(8 W u + 2 c)`` with ``u`` a random direction in 3 dimensions and ``W``, ``c`` fixed per seed (a learnable
  low-dimensional rule), 2048 training and 256 test images; the 784 inputs and outputs of the MLPs become 64;
- sizes for 2 CPU cores: H_DIM 128 -> 32, batch_size 64 -> 32;
- the normal-VAE run of the example, ``test`` and ``log_likelihood`` (importance-sampled evaluation) are dropped;
  ``train_step`` is one iteration of ``train``'s loop, returning the loss; ``eval_fn`` is the same loss on the test
  images (binarized once at build time);
- ``HypersphericalUniform.__log_surface_area``, ``VonMisesFisher`` and ``IveFunction`` are copied unchanged; the
  ive approximations it does not call and the ``m == 3`` sampler ``__sample_w3`` (m is 6 here) are left out; the
  copied code is reformatted to 118 columns;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from numbers import Number

import numpy as np
import scipy.special
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
from torch.distributions.kl import register_kl

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_TEST, N_PIX = 2048, 256, 64
SELF_CHECK_STEPS = 60


# hyperspherical_vae/ops/ive.py
class IveFunction(torch.autograd.Function):
    @staticmethod
    def forward(self, v, z):
        assert isinstance(v, Number), "v must be a scalar"
        self.save_for_backward(z)
        self.v = v
        z_cpu = z.data.cpu().numpy()
        if np.isclose(v, 0):
            output = scipy.special.i0e(z_cpu, dtype=z_cpu.dtype)
        elif np.isclose(v, 1):
            output = scipy.special.i1e(z_cpu, dtype=z_cpu.dtype)
        else:  #  v > 0
            output = scipy.special.ive(v, z_cpu, dtype=z_cpu.dtype)
        return torch.Tensor(output).to(z.device)

    @staticmethod
    def backward(self, grad_output):
        z = self.saved_tensors[-1]
        return (None, grad_output * (ive(self.v - 1, z) - ive(self.v, z) * (self.v + z) / z))


ive = IveFunction.apply


# hyperspherical_vae/distributions/hyperspherical_uniform.py
class HypersphericalUniform(torch.distributions.Distribution):
    support = torch.distributions.constraints.real
    has_rsample = False
    _mean_carrier_measure = 0

    @property
    def dim(self):
        return self._dim

    @property
    def device(self):
        return self._device

    @device.setter
    def device(self, val):
        self._device = val if isinstance(val, torch.device) else torch.device(val)

    def __init__(self, dim, validate_args=None, device="cpu"):
        super(HypersphericalUniform, self).__init__(torch.Size([dim]), validate_args=validate_args)
        self._dim = dim
        self.device = device

    def sample(self, shape=torch.Size()):
        output = (
            torch.distributions.Normal(0, 1)
            .sample((shape if isinstance(shape, torch.Size) else torch.Size([shape])) + torch.Size([self._dim + 1]))
            .to(self.device)
        )
        return output / output.norm(dim=-1, keepdim=True)

    def entropy(self):
        return self.__log_surface_area()

    def log_prob(self, x):
        return -torch.ones(x.shape[:-1], device=self.device) * self.__log_surface_area()

    def __log_surface_area(self):
        if torch.__version__ >= "1.0.0":
            lgamma = torch.lgamma(torch.tensor([(self._dim + 1) / 2]).to(self.device))
        else:
            lgamma = torch.lgamma(torch.Tensor([(self._dim + 1) / 2], device=self.device))
        return math.log(2) + ((self._dim + 1) / 2) * math.log(math.pi) - lgamma


# hyperspherical_vae/distributions/von_mises_fisher.py
class VonMisesFisher(torch.distributions.Distribution):
    arg_constraints = {"loc": torch.distributions.constraints.real, "scale": torch.distributions.constraints.positive}
    support = torch.distributions.constraints.real
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def mean(self):
        return self.loc * (ive(self.__m / 2, self.scale) / ive(self.__m / 2 - 1, self.scale))

    @property
    def stddev(self):
        return self.scale

    def __init__(self, loc, scale, validate_args=None, k=1):
        self.dtype = loc.dtype
        self.loc = loc
        self.scale = scale
        self.device = loc.device
        self.__m = loc.shape[-1]
        self.__e1 = (torch.Tensor([1.0] + [0] * (loc.shape[-1] - 1))).to(self.device)
        self.k = k
        super().__init__(self.loc.size(), validate_args=validate_args)

    def sample(self, shape=torch.Size()):
        with torch.no_grad():
            return self.rsample(shape)

    def rsample(self, shape=torch.Size()):
        shape = shape if isinstance(shape, torch.Size) else torch.Size([shape])
        w = self.__sample_w_rej(shape=shape)  # (port) m = 6 here: the m == 3 branch (__sample_w3) is left out
        v = (
            torch.distributions.Normal(0, 1)
            .sample(shape + torch.Size(self.loc.shape))
            .to(self.device)
            .transpose(0, -1)[1:]
        ).transpose(0, -1)
        v = v / v.norm(dim=-1, keepdim=True)
        w_ = torch.sqrt(torch.clamp(1 - (w**2), 1e-10))
        x = torch.cat((w, w_ * v), -1)
        z = self.__householder_rotation(x)
        return z.type(self.dtype)

    def __sample_w_rej(self, shape):
        c = torch.sqrt((4 * (self.scale**2)) + (self.__m - 1) ** 2)
        b_true = (-2 * self.scale + c) / (self.__m - 1)
        # using Taylor approximation with a smooth swift from 10 < scale < 11
        # to avoid numerical errors for large scale
        b_app = (self.__m - 1) / (4 * self.scale)
        s = torch.min(
            torch.max(torch.tensor([0.0], dtype=self.dtype, device=self.device), self.scale - 10),
            torch.tensor([1.0], dtype=self.dtype, device=self.device),
        )
        b = b_app * s + b_true * (1 - s)
        a = (self.__m - 1 + 2 * self.scale + c) / 4
        d = (4 * a * b) / (1 + b) - (self.__m - 1) * math.log(self.__m - 1)
        self.__b, (self.__e, self.__w) = b, self.__while_loop(b, a, d, shape, k=self.k)
        return self.__w

    @staticmethod
    def first_nonzero(x, dim, invalid_val=-1):
        mask = x > 0
        idx = torch.where(
            mask.any(dim=dim), mask.float().argmax(dim=1).squeeze(), torch.tensor(invalid_val, device=x.device)
        )
        return idx

    def __while_loop(self, b, a, d, shape, k=20, eps=1e-20):
        #  matrix while loop: samples a matrix of [A, k] samples, to avoid looping all together
        b, a, d = [e.repeat(*shape, *([1] * len(self.scale.shape))).reshape(-1, 1) for e in (b, a, d)]
        w, e, bool_mask = (
            torch.zeros_like(b).to(self.device),
            torch.zeros_like(b).to(self.device),
            (torch.ones_like(b) == 1).to(self.device),
        )
        sample_shape = torch.Size([b.shape[0], k])
        shape = shape + torch.Size(self.scale.shape)
        while bool_mask.sum() != 0:
            con1 = torch.tensor((self.__m - 1) / 2, dtype=torch.float64)
            con2 = torch.tensor((self.__m - 1) / 2, dtype=torch.float64)
            e_ = torch.distributions.Beta(con1, con2).sample(sample_shape).to(self.device).type(self.dtype)
            u = torch.distributions.Uniform(0 + eps, 1 - eps).sample(sample_shape).to(self.device).type(self.dtype)
            w_ = (1 - (1 + b) * e_) / (1 - (1 - b) * e_)
            t = (2 * a * b) / (1 - (1 - b) * e_)
            accept = ((self.__m - 1.0) * t.log() - t + d) > torch.log(u)
            accept_idx = self.first_nonzero(accept, dim=-1, invalid_val=-1).unsqueeze(1)
            accept_idx_clamped = accept_idx.clamp(0)
            # we use .abs(), in order to not get -1 index issues, the -1 is still used afterwards
            w_ = w_.gather(1, accept_idx_clamped.view(-1, 1))
            e_ = e_.gather(1, accept_idx_clamped.view(-1, 1))
            reject = accept_idx < 0
            accept = ~reject if torch.__version__ >= "1.2.0" else 1 - reject
            w[bool_mask * accept] = w_[bool_mask * accept]
            e[bool_mask * accept] = e_[bool_mask * accept]
            bool_mask[bool_mask * accept] = reject[bool_mask * accept]
        return e.reshape(shape), w.reshape(shape)

    def __householder_rotation(self, x):
        u = self.__e1 - self.loc
        u = u / (u.norm(dim=-1, keepdim=True) + 1e-5)
        z = x - 2 * (x * u).sum(-1, keepdim=True) * u
        return z

    def entropy(self):
        output = -self.scale * ive(self.__m / 2, self.scale) / ive((self.__m / 2) - 1, self.scale)
        return output.view(*(output.shape[:-1])) + self._log_normalization()

    def log_prob(self, x):
        return self._log_unnormalized_prob(x) - self._log_normalization()

    def _log_unnormalized_prob(self, x):
        output = self.scale * (self.loc * x).sum(-1, keepdim=True)
        return output.view(*(output.shape[:-1]))

    def _log_normalization(self):
        output = -(
            (self.__m / 2 - 1) * torch.log(self.scale)
            - (self.__m / 2) * math.log(2 * math.pi)
            - (self.scale + torch.log(ive(self.__m / 2 - 1, self.scale)))
        )
        return output.view(*(output.shape[:-1]))


@register_kl(VonMisesFisher, HypersphericalUniform)
def _kl_vmf_uniform(vmf, hyu):
    return -vmf.entropy() + hyu.entropy()


# examples/mnist.py (the ``vmf`` branches; the ``normal`` ones are left out)
class ModelVAE(torch.nn.Module):
    def __init__(self, h_dim, z_dim, activation=F.relu, distribution="normal", bug=None):
        super(ModelVAE, self).__init__()
        self.z_dim, self.activation, self.distribution = z_dim, activation, distribution
        self.bug = bug
        # 2 hidden layers encoder
        self.fc_e0 = nn.Linear(N_PIX, h_dim * 2)
        self.fc_e1 = nn.Linear(h_dim * 2, h_dim)
        # compute mean and concentration of the von Mises-Fisher
        self.fc_mean = nn.Linear(h_dim, z_dim)
        self.fc_var = nn.Linear(h_dim, 1)
        # 2 hidden layers decoder
        self.fc_d0 = nn.Linear(z_dim, h_dim)
        self.fc_d1 = nn.Linear(h_dim, h_dim * 2)
        self.fc_logits = nn.Linear(h_dim * 2, N_PIX)

    def encode(self, x):
        # 2 hidden layers encoder
        x = self.activation(self.fc_e0(x))
        x = self.activation(self.fc_e1(x))
        # compute mean and concentration of the von Mises-Fisher
        z_mean = self.fc_mean(x)
        if self.bug != "mean_not_on_sphere":
            z_mean = z_mean / z_mean.norm(dim=-1, keepdim=True)
        # the `+ 1` prevent collapsing behaviors
        z_var = F.softplus(self.fc_var(x)) + 1
        return z_mean, z_var

    def decode(self, z):
        x = self.activation(self.fc_d0(z))
        x = self.activation(self.fc_d1(x))
        x = self.fc_logits(x)
        return x

    def reparameterize(self, z_mean, z_var):
        q_z = VonMisesFisher(z_mean, z_var)
        p_z = HypersphericalUniform(self.z_dim - 1)
        return q_z, p_z

    def forward(self, x):
        z_mean, z_var = self.encode(x)
        q_z, p_z = self.reparameterize(z_mean, z_var)
        z = q_z.rsample()
        x_ = self.decode(z)
        return (z_mean, z_var), (q_z, p_z), z, x_


def _images(gen, n, W, c):
    """(port) Synthetic grey images: a random direction in 3 dimensions through a fixed map, squashed to [0, 1]."""
    u = torch.randn(n, 3, generator=gen)
    u = u / u.norm(dim=-1, keepdim=True)
    return torch.sigmoid(8 * u @ W + 2 * c)


def _loss(model, x_mb, bug=None):
    _, (q_z, p_z), _, x_mb_ = model(x_mb.reshape(-1, N_PIX))
    loss_recon = nn.BCEWithLogitsLoss(reduction="none")(x_mb_, x_mb.reshape(-1, N_PIX)).sum(-1).mean()
    loss_KL = torch.distributions.kl.kl_divergence(q_z, p_z).mean()
    if bug == "kl_sign_flipped":
        return loss_recon - loss_KL
    loss = loss_recon + loss_KL
    return loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    W, c = torch.randn(3, N_PIX, generator=gen), torch.randn(N_PIX, generator=gen)
    train_x, test_x = _images(gen, N_TRAIN, W, c), _images(gen, N_TEST, W, c)
    test_x = (test_x > torch.rand(test_x.shape, generator=gen)).float()
    train_set = torch.utils.data.TensorDataset(train_x, torch.zeros(N_TRAIN))
    loader_gen = torch.Generator().manual_seed(seed)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=32, shuffle=True, generator=loader_gen)

    # hidden dimension and dimension of latent space
    H_DIM = 32  # (port) 128
    Z_DIM = 5
    # hyper-spherical  VAE
    modelS = ModelVAE(h_dim=H_DIM, z_dim=Z_DIM + 1, distribution="vmf", bug=bug)
    optimizerS = optim.Adam(modelS.parameters(), lr=1e-3)
    model, optimizer = modelS, optimizerS
    st = {"stream": None}

    def train_step():
        try:
            i, (x_mb, y_mb) = next(st["stream"])
        except (StopIteration, TypeError):
            st["stream"] = enumerate(train_loader)
            i, (x_mb, y_mb) = next(st["stream"])
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        # dynamic binarization
        x_mb = (x_mb > torch.distributions.Uniform(0, 1).sample(x_mb.shape)).float()
        loss = _loss(model, x_mb, bug)
        loss.backward()
        optimizer.step()
        return loss.item()

    def loss_fn(output, x_mb):
        _, (q_z, p_z), _, x_mb_ = output
        loss_recon = nn.BCEWithLogitsLoss(reduction="none")(x_mb_, x_mb.reshape(-1, N_PIX)).sum(-1).mean()
        return loss_recon + torch.distributions.kl.kl_divergence(q_z, p_z).mean()

    def eval_fn(model, _batch=None):
        with torch.no_grad():
            return float(loss_fn(model(test_x), test_x))

    batch = (test_x[:32], test_x[:32])
    return Program(
        name="svae_vmf_mnist",
        model=model,
        batch=batch,
        loss_fn=loss_fn,
        optimizer=optimizer,
        train_step=train_step,
        eval_fn=eval_fn,
    )


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip: the KL term subtracted from the reconstruction loss (the ELBO's sign mixed up), so the
    # concentration is pushed up without bound instead of being held near the uniform prior.
    Bug("kl_sign_flipped", functools.partial(_build, bug="kl_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the encoder's mean direction not normalized onto the unit sphere before it parameterizes the vMF;
    # the Householder rotation then maps the samples off the sphere and the KL ignores the mean entirely.
    Bug("mean_not_on_sphere", functools.partial(_build, bug="mean_not_on_sphere"), "learning_ledger", ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() left out of the loop, so every step applies the sum of all past gradients.
    Bug(
        "no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (), kind="step.grad_accumulation"
    ),
]

"""beta-TCVAE on dSprites from rtqichen/beta-tcvae, run as the README's ``python vae_quant.py --dataset shapes
--beta 6 --tcvae`` (the MLP VAE the paper used for dSprites): ``MLPEncoder`` (4096 -> 1200 -> 1200 -> 2 x z_dim,
with the original's unused ``conv_z``), ``MLPDecoder`` (z -> 1200 -> 1200 -> 1200 -> 4096 with Tanh, Bernoulli
logits), ``lib.dist.Normal`` (reparameterized sampling, log-density) for q(z|x) and p(z), ``lib.dist.Bernoulli`` for
p(x|z), and ``VAE.elbo``'s beta-TCVAE objective: log p(x|z) - (log q(z|x) - log q(z)) - beta (log q(z) - prod_j
log q(z_j)) - (1 - lambda) (prod_j log q(z_j) - log p(z)), with q(z) and its marginals estimated by minibatch
weighted sampling over the batch (``logsumexp`` - log(batch_size * dataset_size)); Adam(lr 1e-3); the loop's
``anneal_kl`` (no annealing: lambda 0, beta 6), ``zero_grad``, ``obj.mean().mul(-1).backward()``, ``step``.

Source: https://github.com/rtqichen/beta-tcvae
Commit: 1a3577dbb14642b9ac27010928d12132d0c0fb91
Files: vae_quant.py, lib/dist.py (Normal, Bernoulli), lib/functions.py (STHeaviside), lib/utils.py, lib/datasets.py
(Shapes), README.md (the training command)
License: MIT (Copyright (c) 2018 Ricky Tian Qi Chen; full text in LICENSES/rtqichen-beta-tcvae.txt)
Domain: vision, generative (VAE with a total-correlation penalty, disentanglement)

Deviations from the original:
- sizes: the MLPs' hidden width 1200 -> 128, batch 2048 -> 64, the 737280 dSprites images -> 640 (the dataset
  size enters the q(z) estimate as in the original: ``len(train_loader.dataset)``); 64x64 images, z_dim 10 and the
  loss and optimizer settings are kept;
- data: the dSprites npz is replaced by synthetic 64x64 binary sprites made from ``seed`` in the dSprites manner
  (a square, an ellipse or a triangle at a random scale and position, white on black); DataLoader without workers;
- ``torch.cuda.set_device``, ``.cuda(async=True)``, ``Variable`` (no-ops on CPU here), visdom, checkpoint saving,
  printing and the every-``log_freq`` (200) ``plot_vs_gt_shapes`` / ``vae.eval()`` block are dropped; the final
  ``elbo_decomposition`` report is not run; ``elbo.mean().data[0]`` (a 0-dim index that modern torch refuses) is
  written ``.item()``;
- of ``lib/dist.py`` only ``Normal`` and ``Bernoulli`` (the classes this command uses) are copied, and of ``VAE``
  the methods training uses: the ``--conv`` networks, ``model_sample`` and the ``--mss`` branch (with
  ``_log_importance_weight_matrix``) are not part of the ported command (``--mss`` raises here);
- ``main()`` parses arguments; here ``args`` is the README command's namespace;
- one ``train_step`` is one iteration of the ``while iteration < num_iterations`` loop's body; the declared model is
  ``ELBOView`` (the VAE has no ``forward``: its training objective is the ``elbo`` method, so the declared model is
  this view of the same VAE returning ``(obj, elbo)``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0124, PLR0402, RUF059, UP004, UP008, UP032  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types
from numbers import Number

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Function
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_DATA, HIDDEN = 640, 128
eps = 1e-8


# ---- lib/functions.py --------------------------------------------------------------------------------------------

class STHeaviside(Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.zeros(x.size()).type_as(x)
        y[x >= 0] = 1
        return y

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


# ---- lib/dist.py -------------------------------------------------------------------------------------------------

class Normal(nn.Module):
    """Samples from a Normal distribution using the reparameterization trick.
    """

    def __init__(self, mu=0, sigma=1, bug=None):
        super(Normal, self).__init__()
        self.bug = bug
        self.normalization = torch.Tensor([np.log(2 * np.pi)])

        self.mu = torch.Tensor([mu])
        self.logsigma = torch.Tensor([math.log(sigma)])

    def _check_inputs(self, size, mu_logsigma):
        if size is None and mu_logsigma is None:
            raise ValueError(
                'Either one of size or params should be provided.')
        elif size is not None and mu_logsigma is not None:
            mu = mu_logsigma.select(-1, 0).expand(size)
            logsigma = mu_logsigma.select(-1, 1).expand(size)
            return mu, logsigma
        elif size is not None:
            mu = self.mu.expand(size)
            logsigma = self.logsigma.expand(size)
            return mu, logsigma
        elif mu_logsigma is not None:
            mu = mu_logsigma.select(-1, 0)
            logsigma = mu_logsigma.select(-1, 1)
            return mu, logsigma
        else:
            raise ValueError(
                'Given invalid inputs: size={}, mu_logsigma={})'.format(
                    size, mu_logsigma))

    def sample(self, size=None, params=None):
        mu, logsigma = self._check_inputs(size, params)
        if self.bug == "sample_not_reparameterized":
            return torch.normal(mu.detach(), torch.exp(logsigma).detach())
        std_z = torch.randn(mu.size()).type_as(mu.data)
        sample = std_z * torch.exp(logsigma) + mu
        return sample

    def log_density(self, sample, params=None):
        if params is not None:
            mu, logsigma = self._check_inputs(None, params)
        else:
            mu, logsigma = self._check_inputs(sample.size(), None)
            mu = mu.type_as(sample)
            logsigma = logsigma.type_as(sample)

        c = self.normalization.type_as(sample.data)
        inv_sigma = torch.exp(-logsigma)
        tmp = (sample - mu) * inv_sigma
        return -0.5 * (tmp * tmp + 2 * logsigma + c)

    @property
    def nparams(self):
        return 2


class Bernoulli(nn.Module):
    """Samples from a Bernoulli distribution where the probability is given
    by the sigmoid of the given parameter.
    """

    def __init__(self, p=0.5, stgradient=False):
        super(Bernoulli, self).__init__()
        p = torch.Tensor([p])
        self.p = torch.log(p / (1 - p) + eps)
        self.stgradient = stgradient

    def _check_inputs(self, size, ps):
        if size is None and ps is None:
            raise ValueError(
                'Either one of size or params should be provided.')
        elif size is not None and ps is not None:
            if ps.ndimension() > len(size):
                return ps.squeeze(-1).expand(size)
            else:
                return ps.expand(size)
        elif size is not None:
            return self.p.expand(size)
        elif ps is not None:
            return ps
        else:
            raise ValueError(
                'Given invalid inputs: size={}, ps={})'.format(size, ps))

    def _sample_logistic(self, size):
        u = torch.rand(size)
        l = torch.log(u + eps) - torch.log(1 - u + eps)
        return l

    def sample(self, size=None, params=None):
        presigm_ps = self._check_inputs(size, params)
        logp = F.logsigmoid(presigm_ps)
        logq = F.logsigmoid(-presigm_ps)
        l = self._sample_logistic(logp.size()).type_as(presigm_ps)
        z = logp - logq + l
        b = STHeaviside.apply(z)
        return b if self.stgradient else b.detach()

    def log_density(self, sample, params=None):
        presigm_ps = self._check_inputs(sample.size(), params).type_as(sample)
        p = (torch.sigmoid(presigm_ps) + eps) * (1 - 2 * eps)
        logp = sample * torch.log(p + eps) + (1 - sample) * torch.log(1 - p + eps)
        return logp

    @property
    def nparams(self):
        return 1


# ---- vae_quant.py ------------------------------------------------------------------------------------------------

class MLPEncoder(nn.Module):
    def __init__(self, output_dim):
        super(MLPEncoder, self).__init__()
        self.output_dim = output_dim

        self.fc1 = nn.Linear(4096, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc3 = nn.Linear(HIDDEN, output_dim)

        self.conv_z = nn.Conv2d(64, output_dim, 4, 1, 0)

        # setup the non-linearity
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        h = x.view(-1, 64 * 64)
        h = self.act(self.fc1(h))
        h = self.act(self.fc2(h))
        h = self.fc3(h)
        z = h.view(x.size(0), self.output_dim)
        return z


class MLPDecoder(nn.Module):
    def __init__(self, input_dim):
        super(MLPDecoder, self).__init__()
        self.net = nn.Sequential(
            nn.Linear(input_dim, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, 4096)
        )

    def forward(self, z):
        h = z.view(z.size(0), -1)
        h = self.net(h)
        mu_img = h.view(z.size(0), 1, 64, 64)
        return mu_img


class VAE(nn.Module):
    def __init__(self, z_dim, use_cuda=False, prior_dist=None, q_dist=None,
                 include_mutinfo=True, tcvae=False, conv=False, mss=False, bug=None):
        super(VAE, self).__init__()
        self.bug = bug

        self.use_cuda = use_cuda
        self.z_dim = z_dim
        self.include_mutinfo = include_mutinfo
        self.tcvae = tcvae
        self.lamb = 0
        self.beta = 1
        self.mss = mss
        self.x_dist = Bernoulli()

        # Model-specific
        # distribution family of p(z)
        self.prior_dist = prior_dist if prior_dist is not None else Normal()
        self.q_dist = q_dist if q_dist is not None else Normal()
        # hyperparameters for prior p(z)
        self.register_buffer('prior_params', torch.zeros(self.z_dim, 2))

        # create the encoder and decoder networks
        self.encoder = MLPEncoder(z_dim * self.q_dist.nparams)
        self.decoder = MLPDecoder(z_dim)

    # return prior parameters wrapped in a suitable Variable
    def _get_prior_params(self, batch_size=1):
        expanded_size = (batch_size,) + self.prior_params.size()
        prior_params = self.prior_params.expand(expanded_size)
        return prior_params

    # define the guide (i.e. variational distribution) q(z|x)
    def encode(self, x):
        x = x.view(x.size(0), 1, 64, 64)
        # use the encoder to get the parameters used to define q(z|x)
        z_params = self.encoder.forward(x).view(x.size(0), self.z_dim, self.q_dist.nparams)
        # sample the latent code z
        zs = self.q_dist.sample(params=z_params)
        return zs, z_params

    def decode(self, z):
        x_params = self.decoder.forward(z).view(z.size(0), 1, 64, 64)
        if self.bug == "decoder_output_sigmoided":
            x_params = x_params.sigmoid()
        xs = self.x_dist.sample(params=x_params)
        return xs, x_params

    # define a helper function for reconstructing images
    def reconstruct_img(self, x):
        zs, z_params = self.encode(x)
        xs, x_params = self.decode(zs)
        return xs, x_params, zs, z_params

    def elbo(self, x, dataset_size):
        # log p(x|z) + log p(z) - log q(z|x)
        batch_size = x.size(0)
        x = x.view(batch_size, 1, 64, 64)
        prior_params = self._get_prior_params(batch_size)
        x_recon, x_params, zs, z_params = self.reconstruct_img(x)
        logpx = self.x_dist.log_density(x, params=x_params).view(batch_size, -1).sum(1)
        logpz = self.prior_dist.log_density(zs, params=prior_params).view(batch_size, -1).sum(1)
        logqz_condx = self.q_dist.log_density(zs, params=z_params).view(batch_size, -1).sum(1)

        elbo = logpx + logpz - logqz_condx

        if self.beta == 1 and self.include_mutinfo and self.lamb == 0:
            return elbo, elbo.detach()

        # compute log q(z) ~= log 1/(NM) sum_m=1^M q(z|x_m) = - log(MN) + logsumexp_m(q(z|x_m))
        _logqz = self.q_dist.log_density(
            zs.view(batch_size, 1, self.z_dim),
            z_params.view(1, batch_size, self.z_dim, self.q_dist.nparams)
        )

        if not self.mss:
            # minibatch weighted sampling
            if self.bug == "joint_and_marginals_swapped":
                logqz = (logsumexp(_logqz, dim=1, keepdim=False) - math.log(batch_size * dataset_size)).sum(1)
                logqz_prodmarginals = (logsumexp(_logqz.sum(2), dim=1, keepdim=False) - math.log(batch_size * dataset_size))
            else:
                logqz_prodmarginals = (logsumexp(_logqz, dim=1, keepdim=False) - math.log(batch_size * dataset_size)).sum(1)
                logqz = (logsumexp(_logqz.sum(2), dim=1, keepdim=False) - math.log(batch_size * dataset_size))
        else:
            raise NotImplementedError("--mss is not part of the ported command")

        if not self.tcvae:
            if self.include_mutinfo:
                modified_elbo = logpx - self.beta * (
                    (logqz_condx - logpz) -
                    self.lamb * (logqz_prodmarginals - logpz)
                )
            else:
                modified_elbo = logpx - self.beta * (
                    (logqz - logqz_prodmarginals) +
                    (1 - self.lamb) * (logqz_prodmarginals - logpz)
                )
        else:
            if self.include_mutinfo:
                modified_elbo = logpx - \
                    (logqz_condx - logqz) - \
                    self.beta * (logqz - logqz_prodmarginals) - \
                    (1 - self.lamb) * (logqz_prodmarginals - logpz)
            else:
                modified_elbo = logpx - \
                    self.beta * (logqz - logqz_prodmarginals) - \
                    (1 - self.lamb) * (logqz_prodmarginals - logpz)

        return modified_elbo, elbo.detach()


def logsumexp(value, dim=None, keepdim=False):
    """Numerically stable implementation of the operation

    value.exp().sum(dim, keepdim).log()
    """
    if dim is not None:
        m, _ = torch.max(value, dim=dim, keepdim=True)
        value0 = value - m
        if keepdim is False:
            m = m.squeeze(dim)
        return m + torch.log(torch.sum(torch.exp(value0),
                                       dim=dim, keepdim=keepdim))
    else:
        m = torch.max(value)
        sum_exp = torch.sum(torch.exp(value - m))
        if isinstance(sum_exp, Number):
            return m + math.log(sum_exp)
        else:
            return m + torch.log(sum_exp)


def anneal_kl(args, vae, iteration):
    if args.dataset == 'shapes':
        warmup_iter = 7000
    elif args.dataset == 'faces':
        warmup_iter = 2500

    if args.lambda_anneal:
        vae.lamb = max(0, 0.95 - 1 / warmup_iter * iteration)  # 1 --> 0
    else:
        vae.lamb = 0
    if args.beta_anneal:
        vae.beta = min(args.beta, args.beta / warmup_iter * iteration)  # 0 --> 1
    else:
        vae.beta = args.beta


class RunningAverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self, momentum=0.97):
        self.momentum = momentum
        self.reset()

    def reset(self):
        self.val = None
        self.avg = 0

    def update(self, val):
        if self.val is None:
            self.avg = val
        else:
            self.avg = self.avg * self.momentum + val * (1 - self.momentum)
        self.val = val


def isnan(tensor):
    return (tensor != tensor)


# ---- lib/datasets.py (Shapes), with synthetic sprites --------------------------------------------------------------

class Shapes(object):

    def __init__(self, seed):
        self.imgs = _sprites(seed, N_DATA)

    def __len__(self):
        return self.imgs.size(0)

    def __getitem__(self, index):
        x = self.imgs[index].view(1, 64, 64)
        return x


def _sprites(seed, n):
    """dSprites-like binary 64x64 images: a square, an ellipse or a triangle, random scale and position."""
    gen = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(64.0), torch.arange(64.0), indexing="ij")
    shape = torch.randint(0, 3, (n,), generator=gen)
    scale = 5 + 7 * torch.rand(n, generator=gen)
    cy, cx = (16 + 32 * torch.rand(2, n, generator=gen))
    dy = (yy[None] - cy[:, None, None]) / scale[:, None, None]
    dx = (xx[None] - cx[:, None, None]) / scale[:, None, None]
    square = (dy.abs() <= 1) & (dx.abs() <= 1)
    ellipse = (dy ** 2 + (dx / 1.6) ** 2) <= 1
    triangle = (dy <= 1) & (dy >= -1) & (dx.abs() <= (dy + 1) / 2)
    sel = shape[:, None, None]
    img = torch.where(sel == 0, square, torch.where(sel == 1, ellipse, triangle))
    return img.float()


class ELBOView(nn.Module):
    """``vae.elbo(x, dataset_size)`` as a module (deviation: the VAE has no ``forward``; its training objective is the
    ``elbo`` method, so the declared model is this view of the same VAE)."""

    def __init__(self, vae, dataset_size):
        super().__init__()
        self.vae = vae
        self.dataset_size = dataset_size

    def forward(self, x):
        return self.vae.elbo(x, self.dataset_size)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = types.SimpleNamespace(dataset='shapes', dist='normal', num_epochs=50, batch_size=64, learning_rate=1e-3,
                                 latent_dim=10, beta=6, tcvae=True, exclude_mutinfo=False, beta_anneal=False,
                                 lambda_anneal=False, mss=False, conv=False, gpu=0, visdom=False, save='test1',
                                 log_freq=200)

    # data loader
    train_set = Shapes(seed)
    train_loader = DataLoader(dataset=train_set, batch_size=args.batch_size, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))

    # setup the VAE
    prior_dist = Normal()
    q_dist = Normal(bug=bug)

    vae = VAE(z_dim=args.latent_dim, use_cuda=False, prior_dist=prior_dist, q_dist=q_dist,
        include_mutinfo=not args.exclude_mutinfo, tcvae=args.tcvae, conv=args.conv, mss=args.mss, bug=bug)

    # setup the optimizer
    optimizer = optim.Adam(vae.parameters(), lr=args.learning_rate)

    # training loop
    dataset_size = len(train_loader.dataset)
    num_iterations = len(train_loader) * args.num_epochs
    # initialize loss accumulator
    elbo_running_mean = RunningAverageMeter()

    def loop():
        iteration = 0
        while iteration < num_iterations:
            for i, x in enumerate(train_loader):
                iteration += 1
                vae.train()
                anneal_kl(args, vae, iteration)
                optimizer.zero_grad()
                # do ELBO gradient and accumulate loss
                obj, elbo = vae.elbo(x, dataset_size)
                if isnan(obj).any():
                    raise ValueError('NaN spotted in objective.')
                obj.mean().mul(-1).backward()
                elbo_running_mean.update(elbo.mean().item())
                optimizer.step()
                yield obj.mean().mul(-1).detach()

    steps = loop()
    anneal_kl(args, vae, 1)

    batch = next(iter(DataLoader(train_set, batch_size=args.batch_size)))
    return Program(name="betatcvae_shapes", model=ELBOView(vae, dataset_size), batch=(batch, batch),
                   loss_fn=lambda out, _x: out[0].mean().mul(-1), optimizer=optimizer,
                   train_step=lambda: next(steps), loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the two minibatch-weighted estimates swapped: log q(z) is taken from the per-dimension marginals and the
    # product of marginals from the joint, so the beta-weighted total-correlation penalty changes sign and rewards
    # dependence between the latents (classic).
    Bug("joint_and_marginals_swapped", functools.partial(_build, bug="joint_and_marginals_swapped"),
        "learning_ledger", ("OBJECTIVE",)),
    # a sigmoid applied to the decoder's output before it is passed as Bernoulli parameters, which the Bernoulli's
    # log_density sigmoids again: the likelihood is computed on sigmoid(sigmoid(logits)) (classic).
    Bug("decoder_output_sigmoided", functools.partial(_build, bug="decoder_output_sigmoided"), "learning_ledger",
        ("OBJECTIVE",)),
    # z drawn with torch.normal(mu, sigma) instead of the reparameterized mu + sigma * eps: no gradient of the
    # reconstruction term reaches the encoder through the sample (classic).
    Bug("sample_not_reparameterized", functools.partial(_build, bug="sample_not_reparameterized"),
        "learning_ledger", ("GRADIENT",)),
]

# ruff: noqa: UP039
"""JointVAE (Dupont, NeurIPS 2018): a VAE with a continuous (Gaussian) and a discrete (Gumbel-softmax relaxed
categorical) latent, trained with pixel-wise binary cross-entropy plus the two KL terms held at linearly increasing
capacities (``gamma * |C(t) - KL|`` for each, C rising from 0 to 5 nats over 25000 iterations, gamma 30, the discrete
capacity also capped at the sum of ``log(dim)``), the whole normalised by the number of pixels; Adam lr 5e-4.

Source: https://github.com/Schlumberger/joint-vae
Commit: 80fa464f46666eec08fdb197c23beab5098aec40
Files: ``main.py`` (the MNIST run: ``latent_spec = {'cont': 10, 'disc': [10]}``, the capacities, Adam, batch 64),
``jointvae/training.py`` (``Trainer``), ``jointvae/models.py`` (``VAE``, in ``_jointvae_lib.py``),
``utils/dataloaders.py`` (``get_mnist_dataloaders``)
License: MIT (Copyright (c) 2018 Schlumberger; full text in LICENSES/Schlumberger-joint-vae.txt)
Domain: generative model, VAE with joint continuous and discrete latents (Gumbel-softmax, capacity annealing)

Kept as written: ``VAE`` (encoder, ``fc_mean`` / ``fc_log_var`` / ``fc_alphas`` with softmax, the reparameterized
normal and Gumbel-softmax samples at temperature 0.67, the means / one-hot argmax in eval mode, the decoder with a
final sigmoid), ``Trainer.__init__``, ``_train_iteration`` (zero_grad, forward, ``_loss_function``, backward, step),
``_loss_function`` and the KL helpers (with their loss recording), ``main.py``'s settings (lr 5e-4, capacities
``[0.0, 5.0, 25000, 30]`` for both latents).

Deviations from the original:
- MNIST (torchvision download, resized to 32x32) is replaced by 512 synthetic 32x32 one-channel images made from
  ``seed``: one of 10 stroke glyphs (the discrete factor) drawn at a random offset and stroke brightness (continuous
  factors), in [0, 1]; the loader shuffles with a seeded generator;
- sizes for 2 CPU cores: the VAE's conv channels 32 / 64 -> 16 / 32 and hidden units 256 -> 64 (in
  ``_jointvae_lib.py``), batch_size 64 -> 32; ``use_cuda`` False;
- ``Trainer.train`` and ``_train_epoch`` (the epoch loop, prints and the training gif) are left out: one
  ``train_step`` is one ``_train_iteration`` on the next batch of the loader (a new shuffled epoch when it runs
  out); ``Trainer`` is built with ``model.train()`` as ``train`` does;
- the Program's model is the VAE, its batch ``(x,)`` a fixed batch and ``loss_fn`` the trainer's
  ``_loss_function`` on the VAE's ``(recon, latent_dist)`` (it advances nothing: ``num_steps`` moves in
  ``_train_iteration``); the build sets a ``bug`` attribute on the trainer for the variants;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _jointvae_lib import VAE

N_IMAGES = 512  # (port) synthetic data
EPS = 1e-12


# ---- jointvae/training.py (train() and _train_epoch(), the epoch loop with its prints and gif, left out) ---------

class Trainer():
    def __init__(self, model, optimizer, cont_capacity=None,
                 disc_capacity=None, print_loss_every=50, record_loss_every=5,
                 use_cuda=False):
        self.model = model
        self.optimizer = optimizer
        self.cont_capacity = cont_capacity
        self.disc_capacity = disc_capacity
        self.print_loss_every = print_loss_every
        self.record_loss_every = record_loss_every
        self.use_cuda = use_cuda

        if self.model.is_continuous and self.cont_capacity is None:
            raise RuntimeError("Model is continuous but cont_capacity not provided.")

        if self.model.is_discrete and self.disc_capacity is None:
            raise RuntimeError("Model is discrete but disc_capacity not provided.")

        if self.use_cuda:
            self.model.cuda()

        # Initialize attributes
        self.num_steps = 0
        self.batch_size = None
        self.losses = {'loss': [],
                       'recon_loss': [],
                       'kl_loss': []}

        # Keep track of divergence values for each latent variable
        if self.model.is_continuous:
            self.losses['kl_loss_cont'] = []
            # For every dimension of continuous latent variables
            for i in range(self.model.latent_spec['cont']):
                self.losses['kl_loss_cont_' + str(i)] = []

        if self.model.is_discrete:
            self.losses['kl_loss_disc'] = []
            # For every discrete latent variable
            for i in range(len(self.model.latent_spec['disc'])):
                self.losses['kl_loss_disc_' + str(i)] = []

    def _train_iteration(self, data):
        self.num_steps += 1
        if self.use_cuda:
            data = data.cuda()

        if getattr(self, "bug", None) == "zero_grad_after_backward":  # (port) set at build
            recon_batch, latent_dist = self.model(data)
            loss = self._loss_function(data, recon_batch, latent_dist)
            loss.backward()
            self.optimizer.zero_grad()
            self.optimizer.step()
            return loss.item()
        self.optimizer.zero_grad()
        recon_batch, latent_dist = self.model(data)
        loss = self._loss_function(data, recon_batch, latent_dist)
        loss.backward()
        self.optimizer.step()

        train_loss = loss.item()
        return train_loss

    def _loss_function(self, data, recon_data, latent_dist):
        # Reconstruction loss is pixel wise cross-entropy
        recon_loss = F.binary_cross_entropy(recon_data.view(-1, self.model.num_pixels),
                                            data.view(-1, self.model.num_pixels))
        # F.binary_cross_entropy takes mean over pixels, so unnormalise this
        if getattr(self, "bug", None) != "recon_mean_over_pixels":  # (port) set at build
            recon_loss *= self.model.num_pixels

        # Calculate KL divergences
        kl_cont_loss = 0  # Used to compute capacity loss (but not a loss in itself)
        kl_disc_loss = 0  # Used to compute capacity loss (but not a loss in itself)
        cont_capacity_loss = 0
        disc_capacity_loss = 0

        if self.model.is_continuous:
            # Calculate KL divergence
            mean, logvar = latent_dist['cont']
            kl_cont_loss = self._kl_normal_loss(mean, logvar)
            # Linearly increase capacity of continuous channels
            cont_min, cont_max, cont_num_iters, cont_gamma = \
                self.cont_capacity
            # Increase continuous capacity without exceeding cont_max
            cont_cap_current = (cont_max - cont_min) * self.num_steps / float(cont_num_iters) + cont_min
            cont_cap_current = min(cont_cap_current, cont_max)
            # Calculate continuous capacity loss
            cont_capacity_loss = cont_gamma * torch.abs(cont_cap_current - kl_cont_loss)

        if self.model.is_discrete:
            # Calculate KL divergence
            kl_disc_loss = self._kl_multiple_discrete_loss(latent_dist['disc'])
            # Linearly increase capacity of discrete channels
            disc_min, disc_max, disc_num_iters, disc_gamma = \
                self.disc_capacity
            # Increase discrete capacity without exceeding disc_max or theoretical
            # maximum (i.e. sum of log of dimension of each discrete variable)
            disc_cap_current = (disc_max - disc_min) * self.num_steps / float(disc_num_iters) + disc_min
            disc_cap_current = min(disc_cap_current, disc_max)
            # Require float conversion here to not end up with numpy float
            disc_theoretical_max = sum([float(np.log(disc_dim)) for disc_dim in self.model.latent_spec['disc']])
            disc_cap_current = min(disc_cap_current, disc_theoretical_max)
            # Calculate discrete capacity loss
            disc_capacity_loss = disc_gamma * torch.abs(disc_cap_current - kl_disc_loss)

        # Calculate total kl value to record it
        kl_loss = kl_cont_loss + kl_disc_loss

        # Calculate total loss
        total_loss = recon_loss + cont_capacity_loss + disc_capacity_loss

        # Record losses
        if self.model.training and self.num_steps % self.record_loss_every == 1:
            self.losses['recon_loss'].append(recon_loss.item())
            self.losses['kl_loss'].append(kl_loss.item())
            self.losses['loss'].append(total_loss.item())

        # To avoid large losses normalise by number of pixels
        return total_loss / self.model.num_pixels

    def _kl_normal_loss(self, mean, logvar):
        # Calculate KL divergence
        kl_values = -0.5 * (1 + logvar - mean.pow(2) - logvar.exp())
        # Mean KL divergence across batch for each latent variable
        kl_means = torch.mean(kl_values, dim=0)
        # KL loss is sum of mean KL of each latent variable
        kl_loss = torch.sum(kl_means)

        # Record losses
        if self.model.training and self.num_steps % self.record_loss_every == 1:
            self.losses['kl_loss_cont'].append(kl_loss.item())
            for i in range(self.model.latent_spec['cont']):
                self.losses['kl_loss_cont_' + str(i)].append(kl_means[i].item())

        return kl_loss

    def _kl_multiple_discrete_loss(self, alphas):
        # Calculate kl losses for each discrete latent
        kl_losses = [self._kl_discrete_loss(alpha) for alpha in alphas]

        # Total loss is sum of kl loss for each discrete latent
        kl_loss = torch.sum(torch.cat(kl_losses))

        # Record losses
        if self.model.training and self.num_steps % self.record_loss_every == 1:
            self.losses['kl_loss_disc'].append(kl_loss.item())
            for i in range(len(alphas)):
                self.losses['kl_loss_disc_' + str(i)].append(kl_losses[i].item())

        return kl_loss

    def _kl_discrete_loss(self, alpha):
        disc_dim = int(alpha.size()[-1])
        log_dim = torch.Tensor([np.log(disc_dim)])
        if self.use_cuda:
            log_dim = log_dim.cuda()
        # Calculate negative entropy of each row
        neg_entropy = torch.sum(alpha * torch.log(alpha + EPS), dim=1)
        # Take mean of negative entropy across batch
        mean_neg_entropy = torch.mean(neg_entropy, dim=0)
        # KL loss of alpha with uniform categorical variable
        kl_loss = log_dim + mean_neg_entropy
        if getattr(self, "bug", None) == "disc_kl_sign_flipped":  # (port) set at build
            kl_loss = log_dim - mean_neg_entropy
        return kl_loss


# ---- (port) the data: synthetic glyphs in place of torchvision's MNIST -------------------------------------------

_GLYPHS = [  # 10 stroke glyphs on a 5x5 grid (rows of bits), drawn 4x larger
    ["01110", "10001", "10001", "10001", "01110"], ["00100", "01100", "00100", "00100", "01110"],
    ["11110", "00001", "01110", "10000", "11111"], ["11110", "00001", "00110", "00001", "11110"],
    ["10010", "10010", "11111", "00010", "00010"], ["11111", "10000", "11110", "00001", "11110"],
    ["01110", "10000", "11110", "10001", "01110"], ["11111", "00010", "00100", "01000", "01000"],
    ["01110", "10001", "01110", "10001", "01110"], ["01110", "10001", "01111", "00001", "01110"],
]


def make_images(n, seed):
    g = torch.Generator().manual_seed(seed)
    glyphs = torch.tensor([[[int(c) for c in row] for row in gl] for gl in _GLYPHS], dtype=torch.float32)
    glyphs = glyphs.repeat_interleave(4, 1).repeat_interleave(4, 2)  # [10, 20, 20]
    x = torch.zeros(n, 1, 32, 32)
    labels = torch.randint(0, 10, (n,), generator=g)
    offsets = torch.randint(0, 13, (n, 2), generator=g)
    brightness = 0.6 + 0.4 * torch.rand(n, generator=g)
    for i in range(n):
        r, c = offsets[i].tolist()
        x[i, 0, r:r + 20, c:c + 20] = glyphs[labels[i]] * brightness[i]
    return x, labels


def _build(seed, bug=None):
    torch.manual_seed(seed)
    batch_size = 32  # (port) main.py: 64
    lr = 5e-4

    images, labels = make_images(N_IMAGES, seed)
    data_loader = DataLoader(TensorDataset(images, labels), batch_size=batch_size, shuffle=True,
                             generator=torch.Generator().manual_seed(seed))
    img_size = (1, 32, 32)

    # Define latent spec and model
    latent_spec = {'cont': 10, 'disc': [10]}
    model = VAE(img_size=img_size, latent_spec=latent_spec,
                use_cuda=False)

    # Define optimizer
    optimizer = optim.Adam(model.parameters(), lr=lr)

    # Define trainer
    trainer = Trainer(model, optimizer,
                      cont_capacity=[0.0, 5.0, 25000, 30],
                      disc_capacity=[0.0, 5.0, 25000, 30],
                      use_cuda=False)
    trainer.bug = bug  # (port) the variant
    trainer.batch_size = data_loader.batch_size
    trainer.model.train()
    state = {"it": iter(data_loader)}

    def train_step():  # one iteration of _train_epoch's loop
        try:
            data, _label = next(state["it"])
        except StopIteration:
            state["it"] = iter(data_loader)
            data, _label = next(state["it"])
        return trainer._train_iteration(data)

    def loss_fn(outputs, targets):
        recon_batch, latent_dist = outputs
        return trainer._loss_function(targets, recon_batch, latent_dist)

    x = next(iter(DataLoader(TensorDataset(images, labels), batch_size=batch_size)))[0]
    return Program(name="jointvae_mnist", model=model, batch=(x, x), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, loader=data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the discrete KL's sign flipped (log(dim) minus the negative entropy), the slip reported for another
    # Gumbel-softmax VAE in https://github.com/dev4488/VAE_gumble_softmax/issues/1; the capacity term then pushes
    # the categorical posterior the wrong way.
    Bug("disc_kl_sign_flipped", functools.partial(_build, bug="disc_kl_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic reduction slip: the reconstruction BCE left as a mean over pixels (``recon_loss *= num_pixels``
    # dropped), so the capacity terms (gamma 30) outweigh the reconstruction by about a thousand.
    Bug("recon_mean_over_pixels", functools.partial(_build, bug="recon_mean_over_pixels"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() moved after backward(); every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

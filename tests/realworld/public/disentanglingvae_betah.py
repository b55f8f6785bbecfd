"""beta-VAE (Higgins et al.) on MNIST from YannDubs/disentangling-vae: the Burgess et al. encoder (three stride-2
4x4 convolutions of 32 channels, two 256-unit linear layers, a linear layer giving mean and log-variance
interleaved) and the mirrored decoder with a sigmoid output, kaiming-uniform init; ``BetaHLoss``: Bernoulli
reconstruction (``binary_cross_entropy`` summed, per image) plus ``beta`` times the KL to N(0, I) (per-dimension
batch mean, summed), the KL weight linearly annealed over ``reg_anneal`` steps; Adam lr 5e-4.

Source: https://github.com/YannDubs/disentangling-vae
Commit: f0452191bab6d94eba0b4e6a065f74dcfd54ac52
Files: main.py, hyperparam.ini (sections Custom, Common_mnist, Common_betaH), disvae/training.py,
disvae/models/vae.py, disvae/models/encoders.py, disvae/models/decoders.py, disvae/models/losses.py,
disvae/utils/initialization.py, utils/datasets.py
License: MIT (Copyright (c) 2018 Schlumberger, 2019 Yann Dubois, Aleco Kastanos, Dave Lines, Bart Melman; full text
in LICENSES/YannDubs-disentangling-vae.txt)
Domain: vision, generative model (beta-VAE, Bernoulli decoder, annealed KL)

Kept as written: ``VAE`` (``reparameterize``, ``forward``, ``reset_parameters``), ``EncoderBurgess``,
``DecoderBurgess``, ``weights_init``/``linear_init``/``get_activation_name``/``get_gain``, ``BaseLoss._pre_call``,
``BetaHLoss``, ``_reconstruction_loss``, ``_kl_normal_loss``, ``linear_annealing``, ``Trainer._train_iteration``
(forward, ``loss_f(data, recon_batch, latent_dist, self.model.training, storer, latent_sample=...)``, zero_grad,
backward, step), and the configuration ``python main.py betaH_mnist -x betaH_mnist`` reads (``model`` Burgess,
``latent_dim`` 10, ``rec_dist`` bernoulli, ``reg_anneal`` 10000, ``betaH_B`` 4, lr 5e-4, ``Adam(model.parameters())``).

Deviations from the original:
- sizes for 2 CPU cores: batch_size 64 -> 16 (the 32x32 images are kept: the VAE refuses other sizes);
  ``reg_anneal`` 10000 -> 200 so that the KL term takes part within a short run (over 10000 steps it is ~0 for the
  first hundred);
- data: torchvision's MNIST download (``Resize(32)``, ``ToTensor``) is replaced by synthetic 32x32 "digits" in
  [0, 1] made from ``seed`` (10 classes of thick stroke patterns, shifted by up to two pixels, with pixel noise); the
  DataLoader shuffles with a ``torch.Generator(seed)``, no workers;
- ``np.product`` (gone from numpy 2) is ``np.prod``; the ``eval``-by-name lookups of ``get_encoder``/``get_decoder``
  return the two classes directly; ``Trainer.__call__``'s epochs, tqdm bar, ``LossesLogger`` file, gif visualizer
  and checkpoints are dropped; the ``try/except ValueError`` for the FactorVAE loss is dropped (not that loss);
- one ``train_step`` is one ``_train_iteration`` (the next epoch starts when the loader runs out), returning the
  loss; ``storer`` is a fresh ``defaultdict(list)`` per epoch as in ``__call__``; the Program's loss is
  ``BetaHLoss`` at the current annealing weight on the model's output tuple;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP032, C408, PERF102, PLW0127, RUF059, F841

from __future__ import annotations

import abc
import functools
import pathlib
import sys
from collections import defaultdict

import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


# disvae/utils/initialization.py
def get_activation_name(activation):
    """Given a string or a `torch.nn.modules.activation` return the name of the activation."""
    if isinstance(activation, str):
        return activation

    mapper = {nn.LeakyReLU: "leaky_relu", nn.ReLU: "relu", nn.Tanh: "tanh",
              nn.Sigmoid: "sigmoid", nn.Softmax: "sigmoid"}
    for k, v in mapper.items():
        if isinstance(activation, k):
            return k

    raise ValueError("Unkown given activation type : {}".format(activation))


def get_gain(activation):
    """Given an object of `torch.nn.modules.activation` or an activation name
    return the correct gain."""
    if activation is None:
        return 1

    activation_name = get_activation_name(activation)

    param = None if activation_name != "leaky_relu" else activation.negative_slope
    gain = nn.init.calculate_gain(activation_name, param)

    return gain


def linear_init(layer, activation="relu"):
    """Initialize a linear layer.
    Args:
        layer (nn.Linear): parameters to initialize.
        activation (`torch.nn.modules.activation` or str, optional) activation that
            will be used on the `layer`.
    """
    x = layer.weight

    if activation is None:
        return nn.init.xavier_uniform_(x)

    activation_name = get_activation_name(activation)

    if activation_name == "leaky_relu":
        a = 0 if isinstance(activation, str) else activation.negative_slope
        return nn.init.kaiming_uniform_(x, a=a, nonlinearity='leaky_relu')
    elif activation_name == "relu":
        return nn.init.kaiming_uniform_(x, nonlinearity='relu')
    elif activation_name in ["sigmoid", "tanh"]:
        return nn.init.xavier_uniform_(x, gain=get_gain(activation))


def weights_init(module):
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        # TO-DO: check litterature
        linear_init(module)
    elif isinstance(module, nn.Linear):
        linear_init(module)


# disvae/models/encoders.py
class EncoderBurgess(nn.Module):
    def __init__(self, img_size,
                 latent_dim=10):
        r"""Encoder of the model proposed in [1].

        Parameters
        ----------
        img_size : tuple of ints
            Size of images. E.g. (1, 32, 32) or (3, 64, 64).

        latent_dim : int
            Dimensionality of latent output.
        """
        super(EncoderBurgess, self).__init__()

        # Layer parameters
        hid_channels = 32
        kernel_size = 4
        hidden_dim = 256
        self.latent_dim = latent_dim
        self.img_size = img_size
        # Shape required to start transpose convs
        self.reshape = (hid_channels, kernel_size, kernel_size)
        n_chan = self.img_size[0]

        # Convolutional layers
        cnn_kwargs = dict(stride=2, padding=1)
        self.conv1 = nn.Conv2d(n_chan, hid_channels, kernel_size, **cnn_kwargs)
        self.conv2 = nn.Conv2d(hid_channels, hid_channels, kernel_size, **cnn_kwargs)
        self.conv3 = nn.Conv2d(hid_channels, hid_channels, kernel_size, **cnn_kwargs)

        # If input image is 64x64 do fourth convolution
        if self.img_size[1] == self.img_size[2] == 64:
            self.conv_64 = nn.Conv2d(hid_channels, hid_channels, kernel_size, **cnn_kwargs)

        # Fully connected layers
        self.lin1 = nn.Linear(np.prod(self.reshape), hidden_dim)
        self.lin2 = nn.Linear(hidden_dim, hidden_dim)

        # Fully connected layers for mean and variance
        self.mu_logvar_gen = nn.Linear(hidden_dim, self.latent_dim * 2)

    def forward(self, x):
        batch_size = x.size(0)

        # Convolutional layers with ReLu activations
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        if self.img_size[1] == self.img_size[2] == 64:
            x = torch.relu(self.conv_64(x))

        # Fully connected layers with ReLu activations
        x = x.view((batch_size, -1))
        x = torch.relu(self.lin1(x))
        x = torch.relu(self.lin2(x))

        # Fully connected layer for log variance and mean
        # Log std-dev in paper (bear in mind)
        mu_logvar = self.mu_logvar_gen(x)
        mu, logvar = mu_logvar.view(-1, self.latent_dim, 2).unbind(-1)

        return mu, logvar


# disvae/models/decoders.py
class DecoderBurgess(nn.Module):
    def __init__(self, img_size,
                 latent_dim=10):
        r"""Decoder of the model proposed in [1].

        Parameters
        ----------
        img_size : tuple of ints
            Size of images. E.g. (1, 32, 32) or (3, 64, 64).

        latent_dim : int
            Dimensionality of latent output.
        """
        super(DecoderBurgess, self).__init__()

        # Layer parameters
        hid_channels = 32
        kernel_size = 4
        hidden_dim = 256
        self.img_size = img_size
        # Shape required to start transpose convs
        self.reshape = (hid_channels, kernel_size, kernel_size)
        n_chan = self.img_size[0]
        self.img_size = img_size

        # Fully connected layers
        self.lin1 = nn.Linear(latent_dim, hidden_dim)
        self.lin2 = nn.Linear(hidden_dim, hidden_dim)
        self.lin3 = nn.Linear(hidden_dim, np.prod(self.reshape))

        # Convolutional layers
        cnn_kwargs = dict(stride=2, padding=1)
        # If input image is 64x64 do fourth convolution
        if self.img_size[1] == self.img_size[2] == 64:
            self.convT_64 = nn.ConvTranspose2d(hid_channels, hid_channels, kernel_size, **cnn_kwargs)

        self.convT1 = nn.ConvTranspose2d(hid_channels, hid_channels, kernel_size, **cnn_kwargs)
        self.convT2 = nn.ConvTranspose2d(hid_channels, hid_channels, kernel_size, **cnn_kwargs)
        self.convT3 = nn.ConvTranspose2d(hid_channels, n_chan, kernel_size, **cnn_kwargs)

    def forward(self, z):
        batch_size = z.size(0)

        # Fully connected layers with ReLu activations
        x = torch.relu(self.lin1(z))
        x = torch.relu(self.lin2(x))
        x = torch.relu(self.lin3(x))
        x = x.view(batch_size, *self.reshape)

        # Convolutional layers with ReLu activations
        if self.img_size[1] == self.img_size[2] == 64:
            x = torch.relu(self.convT_64(x))
        x = torch.relu(self.convT1(x))
        x = torch.relu(self.convT2(x))
        # Sigmoid activation for final conv layer
        x = torch.sigmoid(self.convT3(x))

        return x


# disvae/models/vae.py
class VAE(nn.Module):
    def __init__(self, img_size, encoder, decoder, latent_dim):
        """
        Class which defines model and forward pass.

        Parameters
        ----------
        img_size : tuple of ints
            Size of images. E.g. (1, 32, 32) or (3, 64, 64).
        """
        super(VAE, self).__init__()

        if list(img_size[1:]) not in [[32, 32], [64, 64]]:
            raise RuntimeError("{} sized images not supported. Only (None, 32, 32) and (None, 64, 64) supported. Build your own architecture or reshape images!".format(img_size))

        self.latent_dim = latent_dim
        self.img_size = img_size
        self.num_pixels = self.img_size[1] * self.img_size[2]
        self.encoder = encoder(img_size, self.latent_dim)
        self.decoder = decoder(img_size, self.latent_dim)

        self.reset_parameters()

    def reparameterize(self, mean, logvar):
        """
        Samples from a normal distribution using the reparameterization trick.
        """
        if self.training:
            std = torch.exp(0.5 * logvar)
            eps = torch.randn_like(std)
            return mean + std * eps
        else:
            # Reconstruction mode
            return mean

    def forward(self, x):
        """
        Forward pass of model.
        """
        latent_dist = self.encoder(x)
        latent_sample = self.reparameterize(*latent_dist)
        if getattr(self, "bug", None) == "latent_detached":  # (port) bug switch
            latent_sample = latent_sample.detach()
        reconstruct = self.decoder(latent_sample)
        return reconstruct, latent_dist, latent_sample

    def reset_parameters(self):
        self.apply(weights_init)


def init_specific_model(model_type, img_size, latent_dim):
    """Return an instance of a VAE with encoder and decoder from `model_type`."""
    encoder = EncoderBurgess  # (port) get_encoder(model_type)
    decoder = DecoderBurgess  # (port) get_decoder(model_type)
    model = VAE(img_size, encoder, decoder, latent_dim)
    model.model_type = model_type  # store to help reloading
    return model


# disvae/models/losses.py
class BaseLoss(abc.ABC):
    """
    Base class for losses.
    """

    def __init__(self, record_loss_every=50, rec_dist="bernoulli", steps_anneal=0):
        self.n_train_steps = 0
        self.record_loss_every = record_loss_every
        self.rec_dist = rec_dist
        self.steps_anneal = steps_anneal

    @abc.abstractmethod
    def __call__(self, data, recon_data, latent_dist, is_train, storer, **kwargs):
        """
        Calculates loss for a batch of data.
        """

    def _pre_call(self, is_train, storer):
        if is_train:
            self.n_train_steps += 1

        if not is_train or self.n_train_steps % self.record_loss_every == 1:
            storer = storer
        else:
            storer = None

        return storer


class BetaHLoss(BaseLoss):
    """
    Compute the Beta-VAE loss as in [1]
    """

    def __init__(self, beta=4, **kwargs):
        super().__init__(**kwargs)
        self.beta = beta

    def __call__(self, data, recon_data, latent_dist, is_train, storer, **kwargs):
        storer = self._pre_call(is_train, storer)

        rec_loss = _reconstruction_loss(data, recon_data,
                                        storer=storer,
                                        distribution=self.rec_dist, bug=getattr(self, "bug", None))
        kl_loss = _kl_normal_loss(*latent_dist, storer)
        anneal_reg = (linear_annealing(0, 1, self.n_train_steps, self.steps_anneal)
                      if is_train else 1)
        loss = rec_loss + anneal_reg * (self.beta * kl_loss)

        if storer is not None:
            storer['loss'].append(loss.item())

        return loss


def _reconstruction_loss(data, recon_data, distribution="bernoulli", storer=None, bug=None):
    """
    Calculates the per image reconstruction loss for a batch of data. I.e. negative
    log likelihood.
    """
    batch_size, n_chan, height, width = recon_data.size()
    is_colored = n_chan == 3

    if distribution == "bernoulli":
        if bug == "bce_mean_not_sum":
            loss = F.binary_cross_entropy(recon_data, data, reduction="mean")
        else:
            loss = F.binary_cross_entropy(recon_data, data, reduction="sum")
    elif distribution == "gaussian":
        # loss in [0,255] space but normalized by 255 to not be too big
        loss = F.mse_loss(recon_data * 255, data * 255, reduction="sum") / 255
    elif distribution == "laplace":
        # loss in [0,255] space but normalized by 255 to not be too big but
        # multiply by 255 and divide 255, is the same as not doing anything for L1
        loss = F.l1_loss(recon_data, data, reduction="sum")
        loss = loss * 3  # emperical value to give similar values than bernoulli => use same hyperparam
        loss = loss * (loss != 0)  # masking to avoid nan
    else:
        raise ValueError("Unkown distribution: {}".format(distribution))

    loss = loss / batch_size

    if storer is not None:
        storer['recon_loss'].append(loss.item())

    return loss


def _kl_normal_loss(mean, logvar, storer=None):
    """
    Calculates the KL divergence between a normal distribution
    with diagonal covariance and a unit normal distribution.
    """
    latent_dim = mean.size(1)
    # batch mean of kl for each latent dimension
    latent_kl = 0.5 * (-1 - logvar + mean.pow(2) + logvar.exp()).mean(dim=0)
    total_kl = latent_kl.sum()

    if storer is not None:
        storer['kl_loss'].append(total_kl.item())
        for i in range(latent_dim):
            storer['kl_loss_' + str(i)].append(latent_kl[i].item())

    return total_kl


def linear_annealing(init, fin, step, annealing_steps):
    """Linear annealing of a parameter."""
    if annealing_steps == 0:
        return fin
    assert fin > init
    delta = fin - init
    annealed = min(init + delta * step / annealing_steps, fin)
    return annealed


class StrokeDigits(torch.utils.data.Dataset):
    """10 classes of 32x32 thick stroke patterns (2-3 bars each), shifted by up to two pixels, with pixel noise, in
    [0, 1]."""

    def __init__(self, seed, n=640, img=32):
        gen = torch.Generator().manual_seed(seed)
        templates = torch.zeros(10, img, img)
        for c in range(10):
            for _ in range(2 + c % 2):
                k = int(torch.randint(6, img - 6, (), generator=gen))
                lo = int(torch.randint(4, img // 2, (), generator=gen))
                hi = lo + int(torch.randint(8, img // 2, (), generator=gen))
                if float(torch.rand((), generator=gen)) < 0.5:
                    templates[c, k - 2:k + 2, lo:hi] = 1.0
                else:
                    templates[c, lo:hi, k - 2:k + 2] = 1.0
        self.labels = torch.arange(n) % 10
        shifts = torch.randint(-2, 3, (n, 2), generator=gen)
        imgs = torch.stack([torch.roll(templates[int(c)], shifts=tuple(sh.tolist()), dims=(0, 1))
                            for c, sh in zip(self.labels, shifts)])
        self.images = (0.9 * imgs + 0.1 * torch.rand(n, img, img, generator=gen)).clamp(0, 1).unsqueeze(1)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]

    def __len__(self):
        return len(self.labels)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    img_size = (1, 32, 32)
    batch_size, lr, latent_dim = 16, 5e-4, 10
    train_loader = torch.utils.data.DataLoader(StrokeDigits(seed), batch_size=batch_size, shuffle=True,
                                               generator=torch.Generator().manual_seed(seed))

    model = init_specific_model("Burgess", img_size, latent_dim)
    model.bug = bug  # (port) the bug switch, per instance
    optimizer = optim.Adam(model.parameters(), lr=lr)
    loss_f = BetaHLoss(beta=4, rec_dist="bernoulli", steps_anneal=200)  # (port) reg_anneal 10000
    loss_f.bug = bug

    model.train()
    state = {"it": iter(train_loader), "storer": defaultdict(list)}

    def _train_iteration(data, storer):
        batch_size, channel, height, width = data.size()
        recon_batch, latent_dist, latent_sample = model(data)
        loss = loss_f(data, recon_batch, latent_dist, model.training,
                      storer, latent_sample=latent_sample)
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    def train_step():
        try:
            data, _ = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_loader)
            state["storer"] = defaultdict(list)
            data, _ = next(state["it"])
        return _train_iteration(data, state["storer"])

    xb = train_loader.dataset.images[:batch_size]

    def loss_fn(output, data):
        recon_batch, latent_dist, _ = output
        rec_loss = _reconstruction_loss(data, recon_batch, distribution=loss_f.rec_dist, bug=bug)
        kl_loss = _kl_normal_loss(*latent_dist)
        anneal_reg = linear_annealing(0, 1, loss_f.n_train_steps, loss_f.steps_anneal)
        return rec_loss + anneal_reg * (loss_f.beta * kl_loss)

    return Program(name="disentanglingvae_betah", model=model, batch=(xb, xb), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: binary_cross_entropy left at reduction="mean" (then divided by the batch size again): the
    # reconstruction term shrinks ~1000x against the beta * KL term, and the posterior collapses to the prior.
    Bug("bce_mean_not_sum", functools.partial(_build, bug="bce_mean_not_sum"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the latent sample detached before the decoder: the encoder learns from the KL term only, so the code
    # carries nothing about the image.
    Bug("latent_detached", functools.partial(_build, bug="latent_detached"), "learning_ledger", ("DEPENDENCY",)),
    # classic: optimizer.zero_grad() left out of _train_iteration: gradients pile up over the steps (README rule 6).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]

# ruff: noqa: UP032, RUF059
"""Convolutional VAE from kuc2477/pytorch-vae: ``model.VAE`` (three stride-2 convolutions with BatchNorm + ReLU,
linear heads for the posterior mean and log-variance, a reparameterised sample, a linear projection back to the
feature map and three stride-2 transposed convolutions ending in a sigmoid), trained by ``train.train_model``:
summed BCE reconstruction over the batch size plus the analytic KL over the batch size, Adam(lr, weight_decay),
zero_grad / forward / backward / step per batch, on MNIST padded to 32x32.

Source: https://github.com/kuc2477/pytorch-vae
Commit: 726a27eb668edcd7a6afdd23a2ee001a1f31d54f
Files: ``model.py`` (``VAE``), ``train.py`` (``train_model``), ``main.py`` (argument defaults, the model built from
the dataset config), ``data.py`` (the MNIST transforms: ToTensor, ToPILImage, Pad(2), ToTensor), ``utils.py``
(``get_data_loader``)
License: MIT (Copyright (c) 2017 Ha Junsoo; full text in LICENSES/kuc2477-pytorch-vae.txt)
Domain: vision, generative (convolutional VAE: Bernoulli likelihood, Gaussian posterior, reparameterisation)

Kept as written: ``VAE`` (encoder, ``q``, ``z``, ``project``, decoder, ``reconstruction_loss``,
``kl_divergence_loss``, ``_conv``/``_deconv``/``_linear``), ``train_model``'s loop body (``optimizer.zero_grad()``
before the forward, ``total_loss = reconstruction_loss + kl_divergence_loss``, backward, step), Adam with
``--weight-decay 1e-6``, the Pad(2) of the MNIST transform, a fresh shuffled loader per epoch.

Deviations from the original:
- MNIST is not here: the digits are synthetic, made from ``seed`` (ten smoothed random 7x7 glyphs, one per class,
  upsampled to 28x28 and shifted by up to 2 pixels, in [0, 1]), padded by 2 to 32x32 as ``data.py`` does; 1024
  training and 256 test images.
- ``z`` tests ``self._is_on_cuda`` (a bound method, always true) and so calls ``.cuda()`` on CPU: the port calls
  ``self._is_on_cuda()`` as ``sample`` does; ``nn.BCELoss(size_average=False)`` is written ``reduction='sum'`` (the
  same sum; ``size_average`` is deprecated).
- sizes for 2 CPU cores: ``--kernel-num 128`` -> 32, ``--z-size 128`` -> 16, ``--batch-size`` 64 -> 32; ``--lr``
  3e-5 -> 1e-3 so that 30 steps show learning.
- visdom logging, image samples and checkpoints are dropped; ``train_step`` is one iteration of the loop,
  returning the total loss; ``eval_fn`` is the total loss on the test images under ``eval()``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.autograd import Variable
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_TEST = 1024, 256


class args:  # (port) main.py's defaults, sizes as listed in the docstring
    dataset = 'mnist'
    kernel_num = 32  # (port) 128
    z_size = 16  # (port) 128
    batch_size = 32  # (port) 64
    lr = 1e-3  # (port) 3e-05
    weight_decay = 1e-06


# ---- model.py --------------------------------------------------------------------------------------------------

class VAE(nn.Module):
    def __init__(self, label, image_size, channel_num, kernel_num, z_size, bug=None):
        # configurations
        super().__init__()
        self.bug = bug
        self.label = label
        self.image_size = image_size
        self.channel_num = channel_num
        self.kernel_num = kernel_num
        self.z_size = z_size

        # encoder
        self.encoder = nn.Sequential(
            self._conv(channel_num, kernel_num // 4),
            self._conv(kernel_num // 4, kernel_num // 2),
            self._conv(kernel_num // 2, kernel_num, last=True),
        )

        # encoded feature's size and volume
        self.feature_size = image_size // 8
        self.feature_volume = kernel_num * (self.feature_size ** 2)

        # q
        self.q_mean = self._linear(self.feature_volume, z_size, relu=False)
        self.q_logvar = self._linear(self.feature_volume, z_size, relu=False)

        # projection
        self.project = self._linear(z_size, self.feature_volume, relu=False)

        # decoder
        self.decoder = nn.Sequential(
            self._deconv(kernel_num, kernel_num // 2),
            self._deconv(kernel_num // 2, kernel_num // 4),
            self._deconv(kernel_num // 4, channel_num, last=True),
            nn.Sigmoid()
        )

    def forward(self, x):
        # encode x
        encoded = self.encoder(x)

        # sample latent code z from q given x.
        mean, logvar = self.q(encoded)
        z = self.z(mean, logvar)
        z_projected = self.project(z).view(
            -1, self.kernel_num,
            self.feature_size,
            self.feature_size,
        )

        # reconstruct x from z
        x_reconstructed = self.decoder(z_projected)

        # return the parameters of distribution of q given x and the
        # reconstructed image.
        return (mean, logvar), x_reconstructed

    # ==============
    # VAE components
    # ==============

    def q(self, encoded):
        unrolled = encoded.view(-1, self.feature_volume)
        return self.q_mean(unrolled), self.q_logvar(unrolled)

    def z(self, mean, logvar):
        std = logvar.mul(0.5).exp_()
        eps = (
            Variable(torch.randn(std.size())).cuda() if self._is_on_cuda() else  # (port) upstream: no call
            Variable(torch.randn(std.size()))
        )
        if self.bug == "latent_mean_detached":
            return eps.mul(std).add_(mean.detach())  # (bug) the sampled code carries no gradient to q_mean
        return eps.mul(std).add_(mean)

    def reconstruction_loss(self, x_reconstructed, x):
        return nn.BCELoss(reduction='sum')(x_reconstructed, x) / x.size(0)  # (port) size_average=False

    def kl_divergence_loss(self, mean, logvar):
        if self.bug == "kl_sign_flipped":
            return -((mean**2 + logvar.exp() - 1 - logvar) / 2).sum() / mean.size(0)  # (bug) the KL rewarded
        return ((mean**2 + logvar.exp() - 1 - logvar) / 2).sum() / mean.size(0)

    # =====
    # Utils
    # =====

    @property
    def name(self):
        return (
            'VAE'
            '-{kernel_num}k'
            '-{label}'
            '-{channel_num}x{image_size}x{image_size}'
        ).format(
            label=self.label,
            kernel_num=self.kernel_num,
            image_size=self.image_size,
            channel_num=self.channel_num,
        )

    def sample(self, size):
        z = Variable(
            torch.randn(size, self.z_size).cuda() if self._is_on_cuda() else
            torch.randn(size, self.z_size)
        )
        z_projected = self.project(z).view(
            -1, self.kernel_num,
            self.feature_size,
            self.feature_size,
        )
        return self.decoder(z_projected).data

    def _is_on_cuda(self):
        return next(self.parameters()).is_cuda

    # ======
    # Layers
    # ======

    def _conv(self, channel_size, kernel_num, last=False):
        conv = nn.Conv2d(
                channel_size, kernel_num,
                kernel_size=3, stride=2, padding=1,
        )
        return conv if last else nn.Sequential(
            conv,
            nn.BatchNorm2d(kernel_num),
            nn.ReLU(),
        )

    def _deconv(self, channel_num, kernel_num, last=False):
        deconv = nn.ConvTranspose2d(
            channel_num, kernel_num,
            kernel_size=4, stride=2, padding=1,
        )
        return deconv if last else nn.Sequential(
            deconv,
            nn.BatchNorm2d(kernel_num),
            nn.ReLU(),
        )

    def _linear(self, in_size, out_size, relu=True):
        return nn.Sequential(
            nn.Linear(in_size, out_size),
            nn.ReLU(),
        ) if relu else nn.Linear(in_size, out_size)


# ---- (port) data.py with synthetic digits ------------------------------------------------------------------------

class Glyphs(Dataset):
    def __init__(self, gen, n, glyphs):
        self.labels = torch.randint(0, 10, (n,), generator=gen)
        imgs = F.interpolate(glyphs[self.labels][:, None], size=(24, 24), mode="bilinear", align_corners=False)
        imgs = F.pad(imgs, (2, 2, 2, 2))
        shifts = torch.randint(-2, 3, (n, 2), generator=gen)
        imgs = torch.stack([torch.roll(im, (int(s[0]), int(s[1])), dims=(-2, -1)) for im, s in zip(imgs, shifts)])
        self.images = F.pad(imgs.clamp(0, 1), (2, 2, 2, 2))  # transforms.Pad(2): 28x28 -> 32x32

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.images[idx], self.labels[idx]


# ---- train.py / main.py ----------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    glyphs = F.avg_pool2d(torch.rand(10, 1, 9, 9, generator=gen), 3, 1)[:, 0]
    glyphs = (glyphs > glyphs.flatten(1).median(1).values[:, None, None]).float()
    dataset = Glyphs(gen, N_TRAIN, glyphs)
    test_set = Glyphs(gen, N_TEST, glyphs)

    vae = VAE(
        label=args.dataset,
        image_size=32,
        channel_num=1,
        kernel_num=args.kernel_num,
        z_size=args.z_size,
        bug=bug,
    )
    model = vae

    # prepare optimizer and model
    model.train()
    optimizer = optim.Adam(
        model.parameters(), lr=args.lr,
        weight_decay=args.weight_decay,
    )

    loader_gen = torch.Generator().manual_seed(seed)
    st = {"stream": None}

    def train_step():
        try:
            batch_index, (x, _) = next(st["stream"])
        except (StopIteration, TypeError):
            data_loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, generator=loader_gen)
            st["stream"] = enumerate(data_loader, 1)
            batch_index, (x, _) = next(st["stream"])

        # prepare data on gpu if needed
        x = Variable(x)

        # flush gradients and run the model forward
        optimizer.zero_grad()
        (mean, logvar), x_reconstructed = model(x)
        reconstruction_loss = model.reconstruction_loss(x_reconstructed, x)
        kl_divergence_loss = model.kl_divergence_loss(mean, logvar)
        total_loss = reconstruction_loss + kl_divergence_loss

        # backprop gradients from the loss
        total_loss.backward()
        optimizer.step()
        return total_loss.item()

    def loss_fn(output, x):
        (mean, logvar), x_reconstructed = output
        return model.reconstruction_loss(x_reconstructed, x) + model.kl_divergence_loss(mean, logvar)

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        with torch.no_grad():
            x = test_set.images
            out = float(loss_fn(model(x), x))
        model.train(was)
        return out

    x0 = dataset.images[:args.batch_size]
    return Program(name="kuc2477vae_mnist", model=model, batch=(x0, x0), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the KL term's sign flipped: the posterior is pushed away from the prior instead of towards it (classic).
    Bug("kl_sign_flipped", functools.partial(_build, bug="kl_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # the posterior mean detached inside the reparameterisation: q_mean learns only from the KL, never from the
    # reconstruction (classic).
    Bug("latent_mean_detached", functools.partial(_build, bug="latent_mean_detached"), "learning_ledger",
        ("DEPENDENCY",)),
]

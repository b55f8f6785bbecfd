"""WGAN-GP on MNIST from caogang/wgan-gp, the PyTorch port of Gulrajani et al.'s "Improved Training of Wasserstein
GANs": a generator (Linear to 4*4*4*DIM, two transposed convolutions with a crop to 7x7, a stride-2 transposed
convolution to 28x28, sigmoid) and a critic (three stride-2 convolutions with ReLU, a Linear to one score), the critic
trained CRITIC_ITERS=5 times per generator iteration with ``D_real.backward(mone)``, ``D_fake.backward(one)`` and
the gradient penalty (LAMBDA 10, interpolates between real and detached fake, ``create_graph=True``) backwarded
separately, the generator on ``G.backward(mone)`` with the critic's ``requires_grad`` switched off; Adam lr 1e-4,
betas (0.5, 0.9) for both.

Source: https://github.com/caogang/wgan-gp
Commit: ae47a185ed2e938c39cf3eb2f06b32dc1b6a2064
Files: gan_mnist.py, tflib/mnist.py
License: MIT (Copyright (c) 2017 Ishaan Gulrajani; full text in LICENSES/caogang-wgan-gp.txt)
Domain: vision, GAN (WGAN-GP on flattened 28x28 images)

Kept as written: ``Generator`` and ``Discriminator`` (shapes, the ``[:, :, :7, :7]`` crop, the sigmoid, the
flattened 784-dim interface), ``calc_gradient_penalty`` (``alpha`` of shape ``[BATCH_SIZE, 1]`` expanded,
``gradients.norm(2, dim=1)`` on the flattened images), the loop body of one generator iteration (the
``requires_grad`` switches, ``netD.zero_grad()``, the three separate backwards with ``one``/``mone``, ``D_cost``
and ``Wasserstein_D``, ``optimizerD.step()``; ``netG.zero_grad()``, ``G.backward(mone)``, ``optimizerG.step()``),
the optimizers, ``CRITIC_ITERS`` 5 and ``LAMBDA`` 10, ``inf_train_gen``.

Deviations from the original:
- Python 2 -> 3: ``print netG``, ``xrange`` and ``data.next()`` are ``print``-free, ``range`` and ``next(data)``;
  the ``autograd.Variable`` wrappers (no-ops since torch 0.4) are dropped, ``volatile=True`` (ignored since torch
  0.4) is dropped: ``netG(noise).data`` detaches the fake as the original's ``.data`` did;
  ``autograd.Variable(interpolates, requires_grad=True)`` is ``interpolates.detach().requires_grad_(True)``;
  ``torch.FloatTensor([1])`` for ``one``/``mone`` becomes a 0-dim tensor (``backward`` on a 0-dim ``mean()`` needs
  a 0-dim gradient in this torch);
- sizes for 2 CPU cores: DIM 64 -> 8, BATCH_SIZE 50 -> 16 (the 28x28 images kept);
- data: ``tflib/mnist.py``'s MNIST download is replaced by synthetic 28x28 "digits" in [0, 1] made from ``seed``
  (10 classes of stroke patterns, shifted by up to two pixels, with pixel noise), flattened to 784 as ``tflib``
  gives them; ``train_gen`` shuffles with ``np.random.RandomState(seed)`` each epoch and yields ``[BATCH_SIZE,
  784]`` float32 batches as ``mnist_generator`` does (no labelled mask);
- CUDA, matplotlib, ``tflib.plot`` logging, the dev-set critic cost and the sample grids are dropped;
- one ``train_step`` is one iteration of ``for iteration in xrange(ITERS)`` (5 critic steps and one generator step)
  and returns the last critic step's ``D_cost``; it ends by switching the critic's ``requires_grad`` back on (the
  next iteration's first lines, run early so that the Program's critic is trainable between calls); the Program's model is the critic, its batch one real batch and one
  generated batch, its loss ``D_cost`` on them (with the gradient penalty);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.autograd as autograd
import torch.nn as nn
import torch.optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

DIM = 8  # Model dimensionality  (port) 64
BATCH_SIZE = 16  # Batch size  (port) 50
CRITIC_ITERS = 5  # For WGAN and WGAN-GP, number of critic iters per gen iter
LAMBDA = 10  # Gradient penalty lambda hyperparameter
OUTPUT_DIM = 784  # Number of pixels in MNIST (28*28)
SELF_CHECK_STEPS = 8  # 8 generator iterations = 40 critic updates


# ==================Definition Start======================
class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()

        preprocess = nn.Sequential(
            nn.Linear(128, 4*4*4*DIM),
            nn.ReLU(True),
        )
        block1 = nn.Sequential(
            nn.ConvTranspose2d(4*DIM, 2*DIM, 5),
            nn.ReLU(True),
        )
        block2 = nn.Sequential(
            nn.ConvTranspose2d(2*DIM, DIM, 5),
            nn.ReLU(True),
        )
        deconv_out = nn.ConvTranspose2d(DIM, 1, 8, stride=2)

        self.block1 = block1
        self.block2 = block2
        self.deconv_out = deconv_out
        self.preprocess = preprocess
        self.sigmoid = nn.Sigmoid()

    def forward(self, input):
        output = self.preprocess(input)
        output = output.view(-1, 4*DIM, 4, 4)
        output = self.block1(output)
        output = output[:, :, :7, :7]
        output = self.block2(output)
        output = self.deconv_out(output)
        output = self.sigmoid(output)
        return output.view(-1, OUTPUT_DIM)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()

        main = nn.Sequential(
            nn.Conv2d(1, DIM, 5, stride=2, padding=2),
            # nn.Linear(OUTPUT_DIM, 4*4*4*DIM),
            nn.ReLU(True),
            nn.Conv2d(DIM, 2*DIM, 5, stride=2, padding=2),
            # nn.Linear(4*4*4*DIM, 4*4*4*DIM),
            nn.ReLU(True),
            nn.Conv2d(2*DIM, 4*DIM, 5, stride=2, padding=2),
            # nn.Linear(4*4*4*DIM, 4*4*4*DIM),
            nn.ReLU(True),
        )
        self.main = main
        self.output = nn.Linear(4*4*4*DIM, 1)

    def forward(self, input):
        input = input.view(-1, 1, 28, 28)
        out = self.main(input)
        out = out.view(-1, 4*4*4*DIM)
        out = self.output(out)
        return out.view(-1)


def calc_gradient_penalty(netD, real_data, fake_data, bug=None):
    alpha = torch.rand(BATCH_SIZE, 1)
    alpha = alpha.expand(real_data.size())

    interpolates = alpha * real_data + ((1 - alpha) * fake_data)

    interpolates = interpolates.detach().requires_grad_(True)

    disc_interpolates = netD(interpolates)

    gradients = autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                              grad_outputs=torch.ones(disc_interpolates.size()),
                              create_graph=True, retain_graph=True, only_inputs=True)[0]

    if bug == "gp_norm_over_channels":
        # https://github.com/caogang/wgan-gp/issues/27: the norm taken over dim=1 of image-shaped gradients (the
        # channel axis) instead of over every pixel of an example
        gradients = gradients.view(-1, 1, 28, 28)
    gradient_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean() * LAMBDA
    return gradient_penalty
# ==================Definition End======================


class StrokeDigits:
    """(port) MNIST's stand-in: 10 classes of 28x28 stroke patterns (2-3 bars each), shifted by up to two pixels, with
    pixel noise, in [0, 1], flattened to 784 as tflib/mnist.py gives them."""

    def __init__(self, seed, n=640):
        gen = torch.Generator().manual_seed(seed)
        templates = torch.zeros(10, 28, 28)
        for c in range(10):
            for _ in range(2 + c % 2):
                k = int(torch.randint(6, 22, (), generator=gen))
                lo = int(torch.randint(4, 12, (), generator=gen))
                hi = lo + int(torch.randint(8, 14, (), generator=gen))
                if float(torch.rand((), generator=gen)) < 0.5:
                    templates[c, k - 2:k + 1, lo:hi] = 1.0
                else:
                    templates[c, lo:hi, k - 2:k + 1] = 1.0
        self.targets = (torch.arange(n) % 10).numpy().astype('int32')
        shifts = torch.randint(-2, 3, (n, 2), generator=gen)
        yy, xx = torch.meshgrid(torch.arange(28), torch.arange(28), indexing="ij")
        rows = (yy.unsqueeze(0) - shifts[:, 0].view(n, 1, 1)) % 28
        cols = (xx.unsqueeze(0) - shifts[:, 1].view(n, 1, 1)) % 28
        labels = torch.from_numpy(self.targets).long().view(n, 1, 1)
        imgs = templates[labels, rows, cols]
        imgs = (0.9 * imgs + 0.1 * torch.rand(n, 28, 28, generator=gen)).clamp(0, 1)
        self.images = imgs.reshape(n, OUTPUT_DIM).numpy().astype('float32')


def mnist_generator(data, batch_size, rng):
    """tflib/mnist.py's ``mnist_generator`` (images and targets shuffled alike each epoch), on a seeded RandomState."""
    images, targets = data

    def get_epoch():
        rng_state = rng.get_state()
        rng.shuffle(images)
        rng.set_state(rng_state)
        rng.shuffle(targets)

        image_batches = images.reshape(-1, batch_size, 784)
        target_batches = targets.reshape(-1, batch_size)

        for i in range(len(image_batches)):
            yield (np.copy(image_batches[i]), np.copy(target_batches[i]))

    return get_epoch


def _build(seed, bug=None):
    torch.manual_seed(seed)
    digits = StrokeDigits(seed)
    train_gen = mnist_generator((digits.images, digits.targets), BATCH_SIZE, np.random.RandomState(seed))

    # Dataset iterator
    def inf_train_gen():
        while True:
            for images, targets in train_gen():
                yield images

    netG = Generator()
    netD = Discriminator()

    optimizerD = optim.Adam(netD.parameters(), lr=1e-4, betas=(0.5, 0.9))
    optimizerG = optim.Adam(netG.parameters(), lr=1e-4, betas=(0.5, 0.9))

    one = torch.tensor(1.0)
    mone = one * -1

    data = inf_train_gen()

    def train_step():
        ############################
        # (1) Update D network
        ###########################
        for p in netD.parameters():  # reset requires_grad
            p.requires_grad = True  # they are set to False below in netG update

        for iter_d in range(CRITIC_ITERS):
            _data = next(data)
            real_data = torch.Tensor(_data)
            real_data_v = real_data

            if bug != "netD_zero_grad_dropped":
                netD.zero_grad()

            # train with real
            D_real = netD(real_data_v)
            D_real = D_real.mean()
            D_real.backward(one if bug == "backward_signs_swapped" else mone)

            # train with fake
            noise = torch.randn(BATCH_SIZE, 128)
            noisev = noise  # totally freeze netG
            fake = netG(noisev).data
            inputv = fake
            D_fake = netD(inputv)
            D_fake = D_fake.mean()
            D_fake.backward(mone if bug == "backward_signs_swapped" else one)

            # train with gradient penalty
            gradient_penalty = calc_gradient_penalty(netD, real_data_v.data, fake.data, bug=bug)
            gradient_penalty.backward()

            D_cost = D_fake - D_real + gradient_penalty
            Wasserstein_D = D_real - D_fake  # noqa: F841
            optimizerD.step()

        ############################
        # (2) Update G network
        ###########################
        for p in netD.parameters():
            p.requires_grad = False  # to avoid computation
        netG.zero_grad()

        noise = torch.randn(BATCH_SIZE, 128)
        noisev = noise
        fake = netG(noisev)
        G = netD(fake)
        G = G.mean()
        G.backward(mone)
        G_cost = -G  # noqa: F841
        optimizerG.step()
        for p in netD.parameters():  # (port) the next iteration's first lines, so the Program's critic is trainable
            p.requires_grad = True
        return D_cost.detach()

    real = torch.Tensor(digits.images[:BATCH_SIZE])
    with torch.no_grad():
        fake = netG(torch.randn(BATCH_SIZE, 128))

    def loss_fn(d_out, targets):  # D_cost on the critic's outputs for cat([real, fake])
        real_, fake_ = targets
        D_real = d_out[:len(real_)].mean()
        D_fake = d_out[len(real_):].mean()
        gradient_penalty = calc_gradient_penalty(netD, real_, fake_, bug=bug)
        if bug == "backward_signs_swapped":
            return D_real - D_fake + gradient_penalty
        return D_fake - D_real + gradient_penalty

    return Program(name="caogangwgangp_mnist", model=netD, batch=(torch.cat([real, fake]), (real, fake)),
                   loss_fn=loss_fn, optimizer=optimizerD, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # https://github.com/caogang/wgan-gp/issues/27: the penalty's norm over dim=1 of [B, 1, 28, 28] gradients is the
    # absolute value of each pixel's gradient, so every pixel is pushed to a unit gradient instead of each example's
    # whole gradient: not the 1-Lipschitz penalty of the paper.
    Bug("gp_norm_over_channels", functools.partial(_build, bug="gp_norm_over_channels"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: one and mone swapped in the critic's backwards (D_real.backward(one), D_fake.backward(mone)) while the
    # generator keeps G.backward(mone): the critic scores generated images as real.
    Bug("backward_signs_swapped", functools.partial(_build, bug="backward_signs_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: netD.zero_grad() dropped from the critic loop: each critic step applies the sum of every gradient
    # since the start.
    Bug("netD_zero_grad_dropped", functools.partial(_build, bug="netD_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

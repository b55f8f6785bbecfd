"""WGAN-GP from the repository's WGAN collection (``python main.py --model WGAN-GP --dataset fashion-mnist``):
a DCGAN-style generator (transposed convolutions, BatchNorm, ReLU, tanh) and a critic without batch norm
(strided convolutions, ``InstanceNorm2d(affine=True)``, LeakyReLU, no sigmoid), Adam (lr 1e-4, betas (0.5, 0.999))
for each, 5 critic iterations per generator iteration; the critic's terms are backpropagated separately
(``d_loss_real.backward(mone)``, ``d_loss_fake.backward(one)``, ``gradient_penalty.backward()``) and the
generator's by ``g_loss.backward(mone)``; the gradient penalty ``((||grad||_2 - 1) ** 2).mean() * 10`` at random
interpolates of real and fake images.

Source: https://github.com/Zeleni9/pytorch-wgan
Commit: 7f5b52d638746c8b2abdd65dc26319f1de3be8cf
Files: models/wgan_gradient_penalty.py, main.py, utils/data_loader.py
License: MIT (Copyright (c) 2022 Green9)
Domain: generative adversarial network (WGAN with gradient penalty)

Deviations from the original:
- sizes: the filters [1024, 512, 256] -> [32, 16, 8] in both networks (latent 100, 32x32 one-channel images and
  the layer structure unchanged), batch_size 64 -> 16 (``self.batch_size`` and the loader's);
- data: Fashion-MNIST (download, ``Resize(32)``, ``Normalize((0.5,), (0.5,))``) is replaced by 128 synthetic 32x32
  one-channel images made from ``seed`` (a bright bar, horizontal or vertical, or a filled square at a random
  place) in [-1, 1], with dummy labels, in a shuffled ``DataLoader``;
- ``WGAN_GP.train`` is split: its set-up lines run in ``start`` and one iteration of its ``for g_iter`` loop body
  (5 critic iterations, then the generator update) is ``train_iteration``, one ``train_step``; the every-100
  iterations sampling, checkpointing, tensorboard logging and prints are left out; ``check_cuda(False)``; the
  ``Logger`` is not created; ``Variable(...)`` wrappers kept (they are identities);
- ``train_step`` returns the last critic iteration's ``d_loss = d_loss_fake - d_loss_real + gradient_penalty``
  (the critic's objective), 15 of them in ``self_check``; the Program's model is the critic, its batch ``(cat([real, fake]), (real, fake))`` and
  ``loss_fn`` that objective on the critic's outputs for it (the penalty calls the critic on the interpolates).
"""
# ruff: noqa: PLW0127, UP004, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
import types

import torch
import torch.nn as nn
import torch.optim as optim
from torch import autograd
from torch.autograd import Variable

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

F1, F2, F3 = 32, 16, 8  # the original's filters [1024, 512, 256], shrunk
SELF_CHECK_STEPS = 15  # 15 generator iterations = 75 critic updates


# ---- models/wgan_gradient_penalty.py -----------------------------------------------------------------------------

class Generator(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        # Filters [1024, 512, 256]
        # Input_dim = 100
        # Output_dim = C (number of channels)
        self.main_module = nn.Sequential(
            # Z latent vector 100
            nn.ConvTranspose2d(in_channels=100, out_channels=F1, kernel_size=4, stride=1, padding=0),
            nn.BatchNorm2d(num_features=F1),
            nn.ReLU(True),

            # State (1024x4x4)
            nn.ConvTranspose2d(in_channels=F1, out_channels=F2, kernel_size=4, stride=2, padding=1),
            nn.BatchNorm2d(num_features=F2),
            nn.ReLU(True),

            # State (512x8x8)
            nn.ConvTranspose2d(in_channels=F2, out_channels=F3, kernel_size=4, stride=2, padding=1),
            nn.BatchNorm2d(num_features=F3),
            nn.ReLU(True),

            # State (256x16x16)
            nn.ConvTranspose2d(in_channels=F3, out_channels=channels, kernel_size=4, stride=2, padding=1))
            # output of main module --> Image (Cx32x32)

        self.output = nn.Tanh()

    def forward(self, x):
        x = self.main_module(x)
        return self.output(x)


class Discriminator(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        # Filters [256, 512, 1024]
        # Input_dim = channels (Cx64x64)
        # Output_dim = 1
        self.main_module = nn.Sequential(
            # Omitting batch normalization in critic because our new penalized training objective (WGAN with gradient penalty) is no longer valid
            # in this setting, since we penalize the norm of the critic's gradient with respect to each input independently and not the enitre batch.
            # There is not good & fast implementation of layer normalization --> using per instance normalization nn.InstanceNorm2d()
            # Image (Cx32x32)
            nn.Conv2d(in_channels=channels, out_channels=F3, kernel_size=4, stride=2, padding=1),
            nn.InstanceNorm2d(F3, affine=True),
            nn.LeakyReLU(0.2, inplace=True),

            # State (256x16x16)
            nn.Conv2d(in_channels=F3, out_channels=F2, kernel_size=4, stride=2, padding=1),
            nn.InstanceNorm2d(F2, affine=True),
            nn.LeakyReLU(0.2, inplace=True),

            # State (512x8x8)
            nn.Conv2d(in_channels=F2, out_channels=F1, kernel_size=4, stride=2, padding=1),
            nn.InstanceNorm2d(F1, affine=True),
            nn.LeakyReLU(0.2, inplace=True))
            # output of main module --> State (1024x4x4)

        self.output = nn.Sequential(
            # The output of D is no longer a probability, we do not apply sigmoid at the output of D.
            nn.Conv2d(in_channels=F1, out_channels=1, kernel_size=4, stride=1, padding=0))


    def forward(self, x):
        x = self.main_module(x)
        return self.output(x)


class WGAN_GP(object):
    def __init__(self, args, bug=None):
        self.bug = bug
        self.G = Generator(args.channels)
        self.D = Discriminator(args.channels)
        self.C = args.channels

        # Check if cuda is available
        self.check_cuda(args.cuda)

        # WGAN values from paper
        self.learning_rate = 1e-4
        self.b1 = 0.5
        self.b2 = 0.999
        self.batch_size = 16

        # WGAN_gradient penalty uses ADAM
        self.d_optimizer = optim.Adam(self.D.parameters(), lr=self.learning_rate, betas=(self.b1, self.b2))
        self.g_optimizer = optim.Adam(self.G.parameters(), lr=self.learning_rate, betas=(self.b1, self.b2))

        self.number_of_images = 10

        self.generator_iters = args.generator_iters
        self.critic_iter = 5
        self.lambda_term = 10

    def get_torch_variable(self, arg):
        if self.cuda:
            return Variable(arg).cuda(self.cuda_index)
        else:
            return Variable(arg)

    def check_cuda(self, cuda_flag=False):
        if cuda_flag:
            self.cuda_index = 0
            self.cuda = True
            self.D.cuda(self.cuda_index)
            self.G.cuda(self.cuda_index)
        else:
            self.cuda = False

    def start(self, train_loader):
        # Now batches are callable self.data.next()
        self.data = self.get_infinite_batches(train_loader)

        one = torch.tensor(1, dtype=torch.float)
        mone = one * -1
        if self.cuda:
            one = one.cuda(self.cuda_index)
            mone = mone.cuda(self.cuda_index)
        self.one, self.mone = one, mone

    def train_iteration(self, g_iter):
        one, mone = self.one, self.mone
        # Requires grad, Generator requires_grad = False
        for p in self.D.parameters():
            p.requires_grad = True

        d_loss_real = 0
        d_loss_fake = 0
        Wasserstein_D = 0
        # Train Dicriminator forward-loss-backward-update self.critic_iter times while 1 Generator forward-loss-backward-update
        for d_iter in range(self.critic_iter):
            if self.bug != "d_zero_grad_dropped":
                self.D.zero_grad()

            images = self.data.__next__()
            # Check for batch to have full batch_size
            if (images.size()[0] != self.batch_size):
                continue

            z = torch.randn((self.batch_size, 100, 1, 1))

            images, z = self.get_torch_variable(images), self.get_torch_variable(z)

            # Train discriminator
            # WGAN - Training discriminator more iterations than generator
            # Train with real images
            d_loss_real = self.D(images)
            d_loss_real = d_loss_real.mean()
            if self.bug == "d_real_backward_one":
                d_loss_real.backward(one)
            else:
                d_loss_real.backward(mone)

            # Train with fake images
            z = self.get_torch_variable(torch.randn(self.batch_size, 100, 1, 1))

            fake_images = self.G(z)
            d_loss_fake = self.D(fake_images)
            d_loss_fake = d_loss_fake.mean()
            d_loss_fake.backward(one)

            # Train with gradient penalty
            gradient_penalty = self.calculate_gradient_penalty(images.data, fake_images.data)
            gradient_penalty.backward()


            d_loss = d_loss_fake - d_loss_real + gradient_penalty
            Wasserstein_D = d_loss_real - d_loss_fake
            self.d_optimizer.step()

        # Generator update
        for p in self.D.parameters():
            p.requires_grad = False  # to avoid computation

        self.G.zero_grad()
        # train generator
        # compute loss with fake images
        z = self.get_torch_variable(torch.randn(self.batch_size, 100, 1, 1))
        fake_images = self.G(z)
        g_loss = self.D(fake_images)
        g_loss = g_loss.mean()
        g_loss.backward(mone)
        g_cost = -g_loss
        self.g_optimizer.step()
        return d_loss, g_cost, Wasserstein_D

    def calculate_gradient_penalty(self, real_images, fake_images):
        eta = torch.FloatTensor(self.batch_size,1,1,1).uniform_(0,1)
        eta = eta.expand(self.batch_size, real_images.size(1), real_images.size(2), real_images.size(3))
        if self.cuda:
            eta = eta.cuda(self.cuda_index)
        else:
            eta = eta

        interpolated = eta * real_images + ((1 - eta) * fake_images)

        if self.cuda:
            interpolated = interpolated.cuda(self.cuda_index)
        else:
            interpolated = interpolated

        # define it to calculate gradient
        interpolated = Variable(interpolated, requires_grad=True)

        # calculate probability of interpolated examples
        prob_interpolated = self.D(interpolated)

        # calculate gradients of probabilities with respect to examples
        gradients = autograd.grad(outputs=prob_interpolated, inputs=interpolated,
                               grad_outputs=torch.ones(
                                   prob_interpolated.size()).cuda(self.cuda_index) if self.cuda else torch.ones(
                                   prob_interpolated.size()),
                               create_graph=True, retain_graph=True)[0]

        if self.bug != "gp_norm_not_flattened":
            # flatten the gradients to it calculates norm batchwise
            gradients = gradients.view(gradients.size(0), -1)

        grad_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean() * self.lambda_term
        return grad_penalty

    def get_infinite_batches(self, data_loader):
        while True:
            for i, (images, _) in enumerate(data_loader):
                yield images


# ---- data (stands in for utils/data_loader.py's Fashion-MNIST) ---------------------------------------------------

def make_images(gen, n, size=32):
    """Bright bars (horizontal or vertical) or filled squares at random places on a dark background, in [-1, 1]."""
    x = -torch.ones(n, 1, size, size)
    for k in range(n):
        kind = int(torch.randint(0, 3, (1,), generator=gen))
        r, c = torch.randint(4, size - 12, (2,), generator=gen).tolist()
        if kind == 0:
            x[k, 0, r:r + 4, 4:size - 4] = 1.0
        elif kind == 1:
            x[k, 0, 4:size - 4, c:c + 4] = 1.0
        else:
            x[k, 0, r:r + 10, c:c + 10] = 1.0
    return x


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    images = make_images(gen, 128)
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, torch.zeros(128)),
                                               batch_size=16, shuffle=True, generator=gen)
    args = types.SimpleNamespace(channels=1, cuda=False, generator_iters=40000)
    model = WGAN_GP(args, bug=bug)
    model.start(train_loader)
    state = {"g_iter": 0}

    def train_step():
        d_loss, _g_cost, _w = model.train_iteration(state["g_iter"])
        state["g_iter"] += 1
        return d_loss.detach()

    real = images[:16]
    with torch.no_grad():
        fake = model.G(torch.randn(16, 100, 1, 1, generator=torch.Generator().manual_seed(seed)))

    def loss_fn(d_out, targets):  # the critic's d_loss on its outputs for cat([real, fake])
        real, fake = targets
        d_loss_real = d_out[:len(real)].mean()
        if bug == "d_real_backward_one":
            d_loss_real = -d_loss_real
        d_loss_fake = d_out[len(real):].mean()
        gradient_penalty = model.calculate_gradient_penalty(real, fake)
        return d_loss_fake - d_loss_real + gradient_penalty

    return Program(name="pytorchwgan_wgangp", model=model.D, batch=(torch.cat([real, fake]), (real, fake)),
                   loss_fn=loss_fn, optimizer=model.d_optimizer, train_step=train_step, loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # https://github.com/Zeleni9/pytorch-wgan/issues/40 (fixed in 9fec344): the gradients are not flattened before
    # norm(2, dim=1), so the penalty pushes each pixel's channel norm to 1 instead of each sample's gradient norm.
    Bug("gp_norm_not_flattened", functools.partial(_build, bug="gp_norm_not_flattened"), "learning_ledger",
        ("OBJECTIVE",)),
    # the one/mone sign slip of https://github.com/Zeleni9/pytorch-wgan/pull/53 (there the generator's
    # backward(one) in wgan_clipping.py), here in the critic's real term: the critic minimizes D(real) + D(fake).
    Bug("d_real_backward_one", functools.partial(_build, bug="d_real_backward_one"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: self.D.zero_grad() dropped from the critic loop: gradients accumulate over every critic iteration.
    Bug("d_zero_grad_dropped", functools.partial(_build, bug="d_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

"""SN-GAN (DCGAN-like) from christiancosgrove/pytorch-spectral-normalization-gan, run as the README's
``python main.py --model dcgan --loss bce``: ``model.Generator`` (ConvTranspose + BatchNorm + ReLU stack, Tanh
output), ``model.Discriminator`` (seven convs wrapped in the repository's ``SpectralNorm`` module, LeakyReLU 0.1,
a spectrally normalized linear head; ``SpectralNorm`` keeps ``weight_bar`` as the trained parameter and
``weight_u``/``weight_v`` as ``requires_grad=False`` Parameters updated by one power iteration per forward),
trained by ``main.py``'s loop: ``disc_iters`` (5) discriminator updates per batch with ``BCEWithLogitsLoss`` on
real (ones) and generated (zeros) images, then one generator update with ``BCEWithLogitsLoss`` against ones;
Adam(lr 2e-4, betas (0.0, 0.9)) for each, the discriminator's over ``filter(lambda p: p.requires_grad, ...)``;
``ExponentialLR(gamma=0.99)`` for both, stepped per epoch.

Source: https://github.com/christiancosgrove/pytorch-spectral-normalization-gan
Commit: 12dcf945a6359301d63d1e0da3708cd0f0590b19
Files: main.py, model.py, spectral_normalization.py, README.md (the dcgan/bce command)
License: MIT (Copyright (c) 2017 Christian Cosgrove; full text in
LICENSES/christiancosgrove-pytorch-spectral-normalization-gan.txt)
Domain: vision, GAN (spectral normalization, non-saturating BCE loss, 5 D steps per G step)

Deviations from the original:
- sizes: the generator's widths 512/256/128/64 -> 64/32/16/8 and the discriminator's 64..512 -> 8..64 (so the
  head takes ``w_g * w_g * 64``), ``Z_dim`` 128 -> 32, batch 64 -> 16, 50000 CIFAR images -> 160; images stay
  32x32 and the depth, kernels, strides, ``disc_iters``, the loss and the optimizers' settings are kept;
- data: CIFAR-10 is replaced by synthetic 32x32 RGB images made from ``seed`` (a soft disc of a random colour on a
  darker background, plus noise), scaled to [-1, 1] as ``Normalize((0.5,)*3, (0.5,)*3)`` does (torchvision is not
  available); DataLoader without workers;
- ``.cuda()``, ``Variable`` (a no-op), printing, sample plotting and checkpoint saving are dropped (CPU);
  ``disc_loss.data[0]`` printing is gone with the printing;
- ``main.py`` runs at import with argparse; here its objects are built in ``_build`` from the README command's
  arguments;
- one ``train_step`` is one discriminator update of ``train()``'s inner ``for _ in range(disc_iters)`` loop (it
  returns ``disc_loss``); after the fifth the generator update runs as in the original, and the end of the loader
  steps both schedulers (the end of ``train(epoch)``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: F841, PLR0402, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
import types

import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import Parameter
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN = 160
G1, G2, G3, G4 = 64, 32, 16, 8
D1, D2, D3, D4 = 8, 16, 32, 64


# ---- spectral_normalization.py ----------------------------------------------------------------------------------

def l2normalize(v, eps=1e-12):
    return v / (v.norm() + eps)


class SpectralNorm(nn.Module):
    def __init__(self, module, name='weight', power_iterations=1):
        super(SpectralNorm, self).__init__()
        self.module = module
        self.name = name
        self.power_iterations = power_iterations
        if not self._made_params():
            self._make_params()

    def _update_u_v(self):
        u = getattr(self.module, self.name + "_u")
        v = getattr(self.module, self.name + "_v")
        w = getattr(self.module, self.name + "_bar")

        height = w.data.shape[0]
        for _ in range(self.power_iterations):
            v.data = l2normalize(torch.mv(torch.t(w.view(height,-1).data), u.data))
            u.data = l2normalize(torch.mv(w.view(height,-1).data, v.data))

        # sigma = torch.dot(u.data, torch.mv(w.view(height,-1).data, v.data))
        sigma = u.dot(w.view(height, -1).mv(v))
        setattr(self.module, self.name, w / sigma.expand_as(w))

    def _made_params(self):
        try:
            u = getattr(self.module, self.name + "_u")
            v = getattr(self.module, self.name + "_v")
            w = getattr(self.module, self.name + "_bar")
            return True
        except AttributeError:
            return False


    def _make_params(self):
        w = getattr(self.module, self.name)

        height = w.data.shape[0]
        width = w.view(height, -1).data.shape[1]

        u = Parameter(w.data.new(height).normal_(0, 1), requires_grad=False)
        v = Parameter(w.data.new(width).normal_(0, 1), requires_grad=False)
        u.data = l2normalize(u.data)
        v.data = l2normalize(v.data)
        w_bar = Parameter(w.data)

        del self.module._parameters[self.name]

        self.module.register_parameter(self.name + "_u", u)
        self.module.register_parameter(self.name + "_v", v)
        self.module.register_parameter(self.name + "_bar", w_bar)


    def forward(self, *args):
        self._update_u_v()
        return self.module.forward(*args)


# ---- model.py ----------------------------------------------------------------------------------------------------

channels = 3
leak = 0.1
w_g = 4

class Generator(nn.Module):
    def __init__(self, z_dim):
        super(Generator, self).__init__()
        self.z_dim = z_dim

        self.model = nn.Sequential(
            nn.ConvTranspose2d(z_dim, G1, 4, stride=1),
            nn.BatchNorm2d(G1),
            nn.ReLU(),
            nn.ConvTranspose2d(G1, G2, 4, stride=2, padding=(1,1)),
            nn.BatchNorm2d(G2),
            nn.ReLU(),
            nn.ConvTranspose2d(G2, G3, 4, stride=2, padding=(1,1)),
            nn.BatchNorm2d(G3),
            nn.ReLU(),
            nn.ConvTranspose2d(G3, G4, 4, stride=2, padding=(1,1)),
            nn.BatchNorm2d(G4),
            nn.ReLU(),
            nn.ConvTranspose2d(G4, channels, 3, stride=1, padding=(1,1)),
            nn.Tanh())

    def forward(self, z):
        return self.model(z.view(-1, self.z_dim, 1, 1))

class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()

        self.conv1 = SpectralNorm(nn.Conv2d(channels, D1, 3, stride=1, padding=(1,1)))

        self.conv2 = SpectralNorm(nn.Conv2d(D1, D1, 4, stride=2, padding=(1,1)))
        self.conv3 = SpectralNorm(nn.Conv2d(D1, D2, 3, stride=1, padding=(1,1)))
        self.conv4 = SpectralNorm(nn.Conv2d(D2, D2, 4, stride=2, padding=(1,1)))
        self.conv5 = SpectralNorm(nn.Conv2d(D2, D3, 3, stride=1, padding=(1,1)))
        self.conv6 = SpectralNorm(nn.Conv2d(D3, D3, 4, stride=2, padding=(1,1)))
        self.conv7 = SpectralNorm(nn.Conv2d(D3, D4, 3, stride=1, padding=(1,1)))


        self.fc = SpectralNorm(nn.Linear(w_g * w_g * D4, 1))

    def forward(self, x):
        m = x
        m = nn.LeakyReLU(leak)(self.conv1(m))
        m = nn.LeakyReLU(leak)(self.conv2(m))
        m = nn.LeakyReLU(leak)(self.conv3(m))
        m = nn.LeakyReLU(leak)(self.conv4(m))
        m = nn.LeakyReLU(leak)(self.conv5(m))
        m = nn.LeakyReLU(leak)(self.conv6(m))
        m = nn.LeakyReLU(leak)(self.conv7(m))

        return self.fc(m.view(-1,w_g * w_g * D4))


# ---- synthetic CIFAR-shaped data ---------------------------------------------------------------------------------

def _images(seed, n):
    gen = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    centre = 10 + 12 * torch.rand(n, 2, generator=gen)
    radius = 5 + 5 * torch.rand(n, generator=gen)
    d2 = (yy[None] - centre[:, 0, None, None]) ** 2 + (xx[None] - centre[:, 1, None, None]) ** 2
    disc = torch.sigmoid((radius[:, None, None] ** 2 - d2) / 8.0)[:, None]
    colour = torch.rand(n, 3, 1, 1, generator=gen)
    x = 0.15 + disc * (colour * 0.8) + 0.03 * torch.randn(n, 3, 32, 32, generator=gen)
    x = x.clamp(0, 1)
    return (x - 0.5) / 0.5  # transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = types.SimpleNamespace(batch_size=16, lr=2e-4, loss='bce', checkpoint_dir='checkpoints', model='dcgan')

    data_x = _images(seed, N_TRAIN)
    loader = DataLoader(TensorDataset(data_x, torch.zeros(N_TRAIN, dtype=torch.long)), batch_size=args.batch_size,
                        shuffle=True, generator=torch.Generator().manual_seed(seed))

    Z_dim = 32
    #number of updates to discriminator for every update to generator
    disc_iters = 5

    discriminator = Discriminator()
    generator = Generator(Z_dim)

    # because the spectral normalization module creates parameters that don't require gradients (u and v), we don't want to
    # optimize these using sgd. We only let the optimizer operate on parameters that _do_ require gradients
    # TODO: replace Parameters with buffers, which aren't returned from .parameters() method.
    optim_disc = optim.Adam(filter(lambda p: p.requires_grad, discriminator.parameters()), lr=args.lr, betas=(0.0,0.9))
    optim_gen  = optim.Adam(generator.parameters(), lr=args.lr, betas=(0.0,0.9))

    # use an exponentially decaying learning rate
    scheduler_d = optim.lr_scheduler.ExponentialLR(optim_disc, gamma=0.99)
    scheduler_g = optim.lr_scheduler.ExponentialLR(optim_gen, gamma=0.99)

    def d_logits_for_loss(logits):
        if bug == "sigmoid_before_bce_with_logits":
            return torch.sigmoid(logits)
        return logits

    def fake_target():
        if bug == "fake_target_ones":
            return torch.ones(args.batch_size, 1)
        return torch.zeros(args.batch_size, 1)

    def train(epoch):
        for batch_idx, (data, target) in enumerate(loader):
            if data.size()[0] != args.batch_size:
                continue

            # update discriminator
            for _ in range(disc_iters):
                z = torch.randn(args.batch_size, Z_dim)
                if bug != "disc_zero_grad_dropped":
                    optim_disc.zero_grad()
                optim_gen.zero_grad()
                if args.loss == 'hinge':
                    disc_loss = nn.ReLU()(1.0 - discriminator(data)).mean() + nn.ReLU()(1.0 + discriminator(generator(z))).mean()
                elif args.loss == 'wasserstein':
                    disc_loss = -discriminator(data).mean() + discriminator(generator(z)).mean()
                else:
                    disc_loss = nn.BCEWithLogitsLoss()(d_logits_for_loss(discriminator(data)), torch.ones(args.batch_size, 1)) + \
                        nn.BCEWithLogitsLoss()(d_logits_for_loss(discriminator(generator(z))), fake_target())
                disc_loss.backward()
                optim_disc.step()
                yield disc_loss.detach()

            z = torch.randn(args.batch_size, Z_dim)

            # update generator
            optim_disc.zero_grad()
            optim_gen.zero_grad()
            if args.loss == 'hinge' or args.loss == 'wasserstein':
                gen_loss = -discriminator(generator(z)).mean()
            else:
                gen_loss = nn.BCEWithLogitsLoss()(d_logits_for_loss(discriminator(generator(z))), torch.ones(args.batch_size, 1))
            gen_loss.backward()
            optim_gen.step()

        scheduler_d.step()
        scheduler_g.step()

    def loop():
        for epoch in range(2000):
            yield from train(epoch)

    steps = loop()

    real = next(iter(loader))[0]
    with torch.no_grad():
        fake = generator(torch.randn(args.batch_size, Z_dim))

    def loss_fn(d_real, fake):
        """The discriminator's loss: its output for the real batch (the model's output for ``batch``) against ones,
        the generated batch (the target) through the discriminator against zeros, as the loop computes it."""
        return nn.BCEWithLogitsLoss()(d_logits_for_loss(d_real), torch.ones(len(d_real), 1)) + \
            nn.BCEWithLogitsLoss()(d_logits_for_loss(discriminator(fake)),
                                   (torch.ones if bug == "fake_target_ones" else torch.zeros)(len(fake), 1))

    return Program(name="sngan_dcgan", model=discriminator, batch=(real, fake), loss_fn=loss_fn,
                   optimizer=optim_disc, train_step=lambda: next(steps), loader=loader, frozen=("*_u", "*_v"))


build = functools.partial(_build, bug=None)

BUGS = [
    # a sigmoid applied to the discriminator's logits before BCEWithLogitsLoss (which applies its own): the loss is
    # computed on sigmoid(sigmoid(logit)), bounded away from 0 and 1, and its gradient vanishes (classic).
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # the generated images labelled with torch.ones like the real ones (classic copy-paste slip): the discriminator
    # is trained to call everything real and gives the generator nothing to learn from.
    # where re-declared in review (2026-12-07): a player's targets swapped is an objective pushing the wrong way
    # (OBJECTIVE's objective.adversarial_direction), as the corpus' other GAN target slips are declared
    Bug("fake_target_ones", functools.partial(_build, bug="fake_target_ones"), "learning_ledger", ("OBJECTIVE",)),
    # optim_disc.zero_grad() left out of the discriminator loop: its gradients accumulate across the five updates and
    # pick up the generator update's backward through it (classic; whole discriminator).
    Bug("disc_zero_grad_dropped", functools.partial(_build, bug="disc_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

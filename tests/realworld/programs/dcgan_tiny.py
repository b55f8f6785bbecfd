"""A tiny DCGAN: netG (ConvTranspose2d/BatchNorm/ReLU, Tanh) from nz=8 noise to 1x16x16, netD (Conv2d/LeakyReLU(0.2)/
BatchNorm, Sigmoid) in `main` Sequentials; BCELoss with real_label 1. / fake_label 0.; two Adam optimizers
(lr 2e-4, betas (0.5, 0.999)). The program's model is the discriminator, its batch real and fake images with 0/1 targets;
one train_step is the D step (real then fake, fake.detach()) and then the G step (labels flipped to real)."""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

nz, ngf, ndf, nc = 8, 16, 8, 1


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


def make_real(seed: int, n: int = 16):
    """'Real' images: smooth blobs in [-1, 1] (what Normalize((0.5,), (0.5,)) gives), unlike the generator's first noise."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    cy, cx = 4 + 8 * torch.rand(n, 1, 1, generator=g), 4 + 8 * torch.rand(n, 1, 1, generator=g)
    blob = torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 8.0)
    return (2.0 * blob - 1.0).unsqueeze(1)


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    real = make_real(seed)
    b_size = real.size(0)
    netG, netD = Generator(), Discriminator()
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    real_label, fake_label = 1.0, 0.0
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    g_params = netD.parameters() if bug == "optimizerG_over_netD" else netG.parameters()
    optimizerG = torch.optim.Adam(g_params, lr=2e-4, betas=(0.5, 0.999))
    noise_gen = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        fake0 = netG(torch.randn(b_size, nz, 1, 1, generator=noise_gen))
    images = torch.cat([real, fake0])
    labels = torch.cat([torch.full((b_size,), real_label), torch.full((b_size,), fake_label)])

    def train_step():
        netD.zero_grad()
        label = torch.full((b_size,), real_label)
        errD_real = criterion(netD(real), label)
        errD_real.backward()
        noise = torch.randn(b_size, nz, 1, 1, generator=noise_gen)
        fake = netG(noise)
        label.fill_(fake_label)
        errD_fake = criterion(netD(fake.detach()), label)
        errD_fake.backward()
        errD = errD_real + errD_fake
        optimizerD.step()
        netG.zero_grad()
        label.fill_(real_label)
        errG = criterion(netD(fake), label)
        errG.backward()
        optimizerG.step()
        return errD

    return Program(name="dcgan_tiny", model=netD, batch=(images, labels), loss_fn=criterion, optimizer=optimizerD,
                   train_step=train_step, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    # optimizerD and optimizerG both own netD's parameters: four_structures (before step_probe in the ladder) names it
    Bug("optimizerG_over_netD", functools.partial(_build, bug="optimizerG_over_netD"), "four_structures", ("main.0.weight",),
        "optimizer.multiple_owners"),
]

"""An SN-GAN style discriminator: nn.utils.spectral_norm (the legacy hook API: weight_orig, weight_u, weight_v) on every
Conv2d and the final Linear, LeakyReLU(0.1), one logit; binary real/fake classification of 3x16x16 images on 0./1. float
targets with BCEWithLogitsLoss; Adam lr 2e-4 betas (0.5, 0.999)."""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import spectral_norm

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class SNDiscriminator(nn.Module):
    def __init__(self, ch: int = 8, sigmoid_output: bool = False):
        super().__init__()
        self.conv1 = spectral_norm(nn.Conv2d(3, ch, 3, 1, 1))
        self.conv2 = spectral_norm(nn.Conv2d(ch, ch * 2, 4, 2, 1))
        self.conv3 = spectral_norm(nn.Conv2d(ch * 2, ch * 2, 4, 2, 1))
        self.fc = spectral_norm(nn.Linear(ch * 2 * 4 * 4, 1))
        self.sigmoid_output = sigmoid_output

    def forward(self, x):
        h = F.leaky_relu(self.conv1(x), 0.1)
        h = F.leaky_relu(self.conv2(h), 0.1)
        h = F.leaky_relu(self.conv3(h), 0.1)
        out = self.fc(h.flatten(1))
        return torch.sigmoid(out) if self.sigmoid_output else out


def make_images(seed: int, n: int = 16):
    """'Real' images are smooth (low-frequency), 'fake' ones are high-frequency noise; the label is which."""
    g = torch.Generator().manual_seed(seed)
    smooth = F.interpolate(torch.randn(n // 2, 3, 4, 4, generator=g), size=(16, 16), mode="bilinear", align_corners=False)
    noisy = 0.5 * torch.randn(n // 2, 3, 16, 16, generator=g)
    images = torch.cat([smooth, noisy])
    labels = torch.cat([torch.ones(n // 2, 1), torch.zeros(n // 2, 1)])
    perm = torch.randperm(n, generator=g)
    return images[perm], labels[perm]


def is_smooth(x):
    """The labelling rule: smooth images have small neighbour differences (total variation)."""
    tv = (x[..., 1:] - x[..., :-1]).abs().mean(dim=(1, 2, 3))
    return (tv < 0.35).float().unsqueeze(1)


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    images, labels = make_images(seed)
    netD = SNDiscriminator(sigmoid_output=bug == "sigmoid_before_bce_logits")
    criterion = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))

    def train_step():
        netD.train()
        optimizer.zero_grad()
        loss = criterion(netD(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    return Program(name="spectral_norm_disc", model=netD, batch=(images, labels), loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, task_probe=is_smooth, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("sigmoid_before_bce_logits", functools.partial(_build, bug="sigmoid_before_bce_logits"), "learning_ledger",
        ("OBJECTIVE",)),
]

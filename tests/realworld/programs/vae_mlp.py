"""Kingma & Welling VAE on flattened 1x16x16 images in [0, 1]: fc1 -> (fc21, fc22) for mu/logvar, the
reparameterization trick, fc3 -> fc4 -> sigmoid decoder; forward returns (recon, mu, logvar); the loss is
BCE(reduction="sum") + KLD divided by the batch size; Adam 1e-3. The batch is (images, images): the target is the input."""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMAGE_DIM, HIDDEN, LATENT = 16 * 16, 64, 8


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(IMAGE_DIM, HIDDEN)
        self.fc21 = nn.Linear(HIDDEN, LATENT)
        self.fc22 = nn.Linear(HIDDEN, LATENT)
        self.fc3 = nn.Linear(LATENT, HIDDEN)
        self.fc4 = nn.Linear(HIDDEN, IMAGE_DIM)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        if not self.training:
            return mu
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, IMAGE_DIM))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def make_images(seed: int, n: int = 32):
    """Images are sigmoids of random mixtures of 4 smooth basis images: low-dimensional, so a VAE can reconstruct them."""
    g = torch.Generator().manual_seed(seed)
    basis = F.interpolate(torch.randn(4, 1, 4, 4, generator=g), size=(16, 16), mode="bilinear", align_corners=False)
    coeff = torch.randn(n, 4, generator=g)
    return torch.sigmoid(3.0 * torch.einsum("nk,kchw->nchw", coeff, basis))


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    images = make_images(seed)
    model = VAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_function(recon_x, x, mu, logvar):
        BCE = F.binary_cross_entropy(recon_x, x.view(-1, IMAGE_DIM), reduction="sum")
        if bug == "kld_sign":
            KLD = 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        else:
            KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return (BCE + KLD) / x.size(0)

    def loss_fn(outputs, targets):
        recon_batch, mu, logvar = outputs
        return loss_function(recon_batch, targets, mu, logvar)

    def train_step():
        model.train()
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(images)
        loss = loss_function(recon_batch, images, mu, logvar)
        loss.backward()
        optimizer.step()
        return loss

    return Program(name="vae_mlp", model=model, batch=(images, images), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, task_probe=lambda x: x)


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("kld_sign", functools.partial(_build, bug="kld_sign"), "learning_ledger", ("OBJECTIVE",)),
]

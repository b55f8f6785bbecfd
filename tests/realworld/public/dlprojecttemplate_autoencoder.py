# ruff: noqa: RUF059  (the original's code style is kept as written)
"""The LightningModule ``LitAutoEncoder`` of Lightning-AI/deep-learning-project-template: an MLP encoder
(784 -> 64 -> 3) and decoder (3 -> 64 -> 784), MSE reconstruction of the flattened image in ``training_step``,
Adam(lr 1e-3) from ``configure_optimizers``, trained by ``Trainer.fit`` on MNIST with batch size 32.

Source: https://github.com/Lightning-AI/deep-learning-project-template
Commit: faef5bbf4f3c392b9e4d71e606edaab5ce4d0aaf
Files: project/lit_autoencoder.py
License: Apache-2.0 (full text in LICENSES/Lightning-AI-deep-learning-project-template.txt)
Domain: Lightning module (autoencoder, reconstruction)

Kept as written: ``LitAutoEncoder`` (encoder, decoder, ``forward`` returning the embedding, ``training_step``
flattening ``x`` and returning ``F.mse_loss(x_hat, x)``, ``configure_optimizers``), batch size 32 (the script's
``--batch_size`` default), ``pl.seed_everything(1234)`` replaced by the seed.

Deviations from the original:
- the Trainer's fit loop is driven one batch at a time as Lightning's automatic optimization runs it:
  ``training_step`` inside the optimizer closure, then the ``optimizer_zero_grad`` hook, then the module's
  ``backward``, all called by the ``optimizer_step`` hook (``optimizer.step(closure=...)``); the module has no
  ``validation_step``, so ``fit`` runs no validation (as in the original); ``trainer.test`` is not run (the module
  has no ``test_step``); ``Trainer.from_argparse_args`` (removed from Lightning 2) and argparse are dropped;
- data: MNIST (a download, torchvision) is replaced by synthetic 28x28 one-channel images made from ``seed`` that
  lie on a 3-dimensional manifold (a fixed random smooth decoder of a 3-d code, squashed to [0, 1] as ToTensor
  gives), 1100 images split 1000 / 100 with ``random_split``; the loaders are the script's (no shuffling);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import logging
import pathlib
import sys

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program
from _lightning_loop import automatic_step

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)


# ---------------------------------------------------------------- project/lit_autoencoder.py
class LitAutoEncoder(pl.LightningModule):

    def __init__(self, bug=None):
        super().__init__()
        self.bug = bug
        self.encoder = nn.Sequential(
            nn.Linear(28 * 28, 64),
            nn.ReLU(),
            nn.Linear(64, 3)
        )
        self.decoder = nn.Sequential(
            nn.Linear(3, 64),
            nn.ReLU(),
            nn.Linear(64, 28 * 28)
        )

    def forward(self, x):
        # in lightning, forward defines the prediction/inference actions
        embedding = self.encoder(x)
        return embedding

    def training_step(self, batch, batch_idx):
        x, y = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        if self.bug == "code_detached":  # classic: the code detached (as for a frozen encoder): the encoder never learns
            z = z.detach()
        x_hat = self.decoder(z)
        loss = F.mse_loss(x_hat, x)
        return loss

    def configure_optimizers(self):
        if self.bug == "optimizer_over_encoder_only":  # classic: only the encoder handed to the optimizer
            return torch.optim.Adam(self.encoder.parameters(), lr=1e-3)
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        return optimizer

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        if self.bug == "zero_grad_hook_overridden":  # classic: the hook overridden with a no-op (meant for accumulation)
            return
        super().optimizer_zero_grad(epoch, batch_idx, optimizer)


def _synthetic_mnist(seed, n=1100):
    """Stand-in for MNIST('', train=True, transform=ToTensor()): (image [1, 28, 28] in [0, 1], label) pairs."""
    g = torch.Generator().manual_seed(seed)
    code = torch.randn(n, 3, generator=g)
    w1 = torch.randn(3, 32, generator=g)
    w2 = torch.randn(32, 28 * 28, generator=g) / 32 ** 0.5
    images = torch.sigmoid(2.0 * torch.tanh(code @ w1) @ w2).view(n, 1, 28, 28)
    labels = (code[:, 0] > 0).long() + 2 * (code[:, 1] > 0).long()
    return TensorDataset(images, labels)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    batch_size = 32

    # ------------
    # data
    # ------------
    dataset = _synthetic_mnist(seed)
    mnist_train, mnist_val = random_split(dataset, [1000, 100], generator=torch.Generator().manual_seed(seed))

    train_loader = DataLoader(mnist_train, batch_size=batch_size)
    DataLoader(mnist_val, batch_size=batch_size)  # val_loader: fit runs no validation (no validation_step)

    # ------------
    # model
    # ------------
    model = LitAutoEncoder(bug=bug)
    optimizer = model.configure_optimizers()

    train_step = automatic_step(model, optimizer, train_loader)  # the fit loop's automatic optimization

    def loss_fn(x_hat, x):
        return F.mse_loss(x_hat, x.view(x.size(0), -1))

    def eval_fn(model, batch):
        x, _y = batch
        x = x.view(x.size(0), -1)
        with torch.no_grad():
            return float(F.mse_loss(model.decoder(model.encoder(x)), x))

    first = next(iter(train_loader))
    return Program(name="dlprojecttemplate_autoencoder", model=model, batch=(first[0], first[1]),
                   loss_fn=lambda loss, _t: loss, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: configure_optimizers hands only the encoder's parameters to Adam; the decoder never moves.
    Bug("optimizer_over_encoder_only", functools.partial(_build, bug="optimizer_over_encoder_only"), "four_structures",
        ("decoder",)),
    # classic: the code z detached before the decoder; the encoder gets no gradient and stays at its init.
    Bug("code_detached", functools.partial(_build, bug="code_detached"), "reachability", ("encoder",)),
    # classic: optimizer_zero_grad overridden with a no-op (a hook meant for accumulation): gradients pile up.
    Bug("zero_grad_hook_overridden", functools.partial(_build, bug="zero_grad_hook_overridden"), "step_probe",
        (), kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

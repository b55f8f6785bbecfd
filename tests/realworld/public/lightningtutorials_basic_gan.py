"""The "PyTorch Lightning Basic GAN Tutorial": ``Generator`` (MLP blocks of Linear, ``BatchNorm1d(out_feat, 0.8)``,
LeakyReLU 0.01, Tanh output), ``Discriminator`` (MLP, LeakyReLU 0.2, Sigmoid output), and the ``GAN``
LightningModule with ``automatic_optimization = False``: ``training_step`` samples noise, toggles the generator's
optimizer, BCE of D(G(z)) against "valid", ``manual_backward``, step, zero_grad, untoggle; then toggles the
discriminator's optimizer, BCE on the real images against "valid" and on the detached generated images against
"fake", their average, ``manual_backward``, step, zero_grad, untoggle. ``configure_optimizers``: two Adam (lr 2e-4,
betas (0.5, 0.999)). Trained by ``pl.Trainer(max_epochs=5)`` on the ``MNISTDataModule``.

Source: https://github.com/Lightning-AI/tutorials
Commit: 15817658a2d63afa338b9e1cd8454fb98d746fac
Files: lightning_examples/basic-gan/gan.py
License: Apache-2.0 (LICENSES/Lightning-AI-tutorials.txt)
Domain: Lightning module, GAN (manual optimization, two optimizers)

Deviations from the original:
- sizes: 1x8x8 images (1x28x28), latent_dim 16 (100), generator widths 16/32/64/128 (128/256/512/1024),
  discriminator widths 64/32 (512/256); batch size 64 (the CPU default), lr and betas as written;
- data: MNIST (a torchvision download) is replaced by 1100 synthetic 8x8 "digits" made from ``seed`` (each of 10
  classes a fixed random stroke pattern in [0, 1], plus noise), split 1000/100 with ``random_split`` in
  ``setup``; ``ToTensor`` + ``Normalize((0.1307,), (0.3081,))`` are written out (no torchvision); no workers;
- the image logging (``torchvision.utils.make_grid`` + ``self.logger.experiment.add_image`` in ``training_step``
  and ``on_validation_epoch_end``) is left out: there is no torchvision and no logger;
- the Trainer's fit loop is driven one batch at a time: a ``Trainer(barebones=True)`` is attached
  (``strategy.connect``, the two optimizers of ``configure_optimizers`` set on the strategy) so that
  ``self.optimizers()``, ``toggle_optimizer``, ``manual_backward`` and ``self.log`` (a no-op under barebones) work;
  with ``automatic_optimization`` off only ``training_step`` runs, as in Lightning; ``validation_step`` is a no-op
  (as written) and is not run; one ``train_step`` is one ``training_step`` on the next batch, returning the
  discriminator's loss (the original returns nothing; the losses are only logged);
- the Program shows the discriminator's half (as a user would inspect D): its model is the discriminator, its batch
  the real images and a batch of generated images, its loss ``d_loss``, its optimizer ``optimizer_d``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import logging
import pathlib
import sys
import warnings

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

BATCH_SIZE = 64
WIDTHS_G = (16, 32, 64, 128)  # 128, 256, 512, 1024 in the original
WIDTHS_D = (64, 32)  # 512, 256 in the original


class MNISTDataModule(pl.LightningDataModule):
    def __init__(self, seed, batch_size: int = BATCH_SIZE, num_workers: int = 0):
        super().__init__()
        self.seed = seed
        self.batch_size = batch_size
        self.num_workers = num_workers

        # transforms.ToTensor() + transforms.Normalize((0.1307,), (0.3081,)) written out
        self.transform = lambda x: (x - 0.1307) / 0.3081

        self.dims = (1, 8, 8)
        self.num_classes = 10

    def prepare_data(self):
        pass  # download

    def setup(self, stage=None):
        # Assign train/val datasets for use in dataloaders
        if stage == "fit" or stage is None:
            gen = torch.Generator().manual_seed(self.seed)
            strokes = (torch.rand(10, 1, 8, 8, generator=gen) < 0.3).float()
            labels = torch.randint(0, 10, (1100,), generator=gen)
            imgs = (strokes[labels] + 0.1 * torch.rand(1100, 1, 8, 8, generator=gen)).clamp(0, 1)
            mnist_full = TensorDataset(self.transform(imgs), labels)
            self.mnist_train, self.mnist_val = random_split(mnist_full, [1000, 100], generator=gen)

    def train_dataloader(self):
        return DataLoader(
            self.mnist_train,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
        )

    def val_dataloader(self):
        return DataLoader(self.mnist_val, batch_size=self.batch_size, num_workers=self.num_workers)


class Generator(nn.Module):
    def __init__(self, latent_dim, img_shape):
        super().__init__()
        self.img_shape = img_shape

        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.01, inplace=True))
            return layers

        self.model = nn.Sequential(
            *block(latent_dim, WIDTHS_G[0], normalize=False),
            *block(WIDTHS_G[0], WIDTHS_G[1]),
            *block(WIDTHS_G[1], WIDTHS_G[2]),
            *block(WIDTHS_G[2], WIDTHS_G[3]),
            nn.Linear(WIDTHS_G[3], int(np.prod(img_shape))),
            nn.Tanh(),
        )

    def forward(self, z):
        img = self.model(z)
        img = img.view(img.size(0), *self.img_shape)
        return img


class Discriminator(nn.Module):
    def __init__(self, img_shape):
        super().__init__()

        self.model = nn.Sequential(
            nn.Linear(int(np.prod(img_shape)), WIDTHS_D[0]),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(WIDTHS_D[0], WIDTHS_D[1]),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(WIDTHS_D[1], 1),
            nn.Sigmoid(),
        )

    def forward(self, img):
        img_flat = img.view(img.size(0), -1)
        validity = self.model(img_flat)

        return validity


class GAN(pl.LightningModule):
    def __init__(
        self,
        channels,
        width,
        height,
        latent_dim: int = 16,
        lr: float = 0.0002,
        b1: float = 0.5,
        b2: float = 0.999,
        batch_size: int = BATCH_SIZE,
        bug=None,
        **kwargs,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.bug = bug

        # networks
        data_shape = (channels, width, height)
        self.generator = Generator(latent_dim=self.hparams.latent_dim, img_shape=data_shape)
        self.discriminator = Discriminator(img_shape=data_shape)

        self.validation_z = torch.randn(8, self.hparams.latent_dim)

        self.example_input_array = torch.zeros(2, self.hparams.latent_dim)

    def forward(self, z):
        return self.generator(z)

    def adversarial_loss(self, y_hat, y):
        if self.bug == "bce_with_logits_on_sigmoid":
            # the "numerically safer" loss swapped in while the discriminator still ends in nn.Sigmoid()
            return F.binary_cross_entropy_with_logits(y_hat, y)
        return F.binary_cross_entropy(y_hat, y)

    def training_step(self, batch):
        imgs, _ = batch

        optimizer_g, optimizer_d = self.optimizers()

        # sample noise
        z = torch.randn(imgs.shape[0], self.hparams.latent_dim)
        z = z.type_as(imgs)

        # train generator
        # generate images
        self.toggle_optimizer(optimizer_g)
        self.generated_imgs = self(z)

        # ground truth result (ie: all fake)
        # put on GPU because we created this tensor inside training_loop
        valid = torch.ones(imgs.size(0), 1)
        valid = valid.type_as(imgs)

        # adversarial loss is binary cross-entropy
        g_loss = self.adversarial_loss(self.discriminator(self.generated_imgs), valid)
        self.log("g_loss", g_loss, prog_bar=True)
        self.manual_backward(g_loss)
        optimizer_g.step()
        optimizer_g.zero_grad()
        self.untoggle_optimizer(optimizer_g)

        # train discriminator
        # Measure discriminator's ability to classify real from generated samples
        self.toggle_optimizer(optimizer_d)

        # how well can it label as real?
        valid = torch.ones(imgs.size(0), 1)
        valid = valid.type_as(imgs)

        real_loss = self.adversarial_loss(self.discriminator(imgs), valid)

        # how well can it label as fake?
        fake = torch.zeros(imgs.size(0), 1)
        fake = fake.type_as(imgs)

        fake_loss = self.adversarial_loss(self.discriminator(self.generated_imgs.detach()), fake)

        # discriminator loss is the average of these
        d_loss = (real_loss + fake_loss) / 2
        self.log("d_loss", d_loss, prog_bar=True)
        self.manual_backward(d_loss)
        optimizer_d.step()
        optimizer_d.zero_grad()
        self.untoggle_optimizer(optimizer_d)
        return d_loss.detach()  # (port) the loss the self-check reads; the original returns nothing

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        lr = self.hparams.lr
        b1 = self.hparams.b1
        b2 = self.hparams.b2

        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        if self.bug == "opt_d_over_generator":
            # copy-paste slip: the discriminator's Adam built over the generator's parameters
            opt_d = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        else:
            opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
        return [opt_g, opt_d], []


def _build(seed, bug=None):
    pl.seed_everything(seed, verbose=False)
    dm = MNISTDataModule(seed)
    model = GAN(*dm.dims, bug=bug)
    dm.prepare_data()
    dm.setup("fit")
    train_loader = dm.train_dataloader()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(barebones=True, accelerator="cpu", devices=1, max_epochs=5)
    trainer.strategy.connect(model)
    model.trainer = trainer
    optimizers, _schedulers = model.configure_optimizers()
    trainer.strategy.optimizers = optimizers
    optimizer_d = optimizers[1]

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return model.training_step(next_batch())

    real = next(iter(train_loader))[0]
    with torch.no_grad():
        generated = model(torch.randn(real.shape[0], model.hparams.latent_dim))

    def loss_fn(d_real, generated_imgs):
        """``d_loss``: the discriminator's output on the real images is the model's output for ``batch``; the
        generated images (the batch's second element) go through the discriminator here, as the step runs it."""
        valid = torch.ones(d_real.size(0), 1).type_as(d_real)
        fake = torch.zeros(d_real.size(0), 1).type_as(d_real)
        real_loss = model.adversarial_loss(d_real, valid)
        fake_loss = model.adversarial_loss(model.discriminator(generated_imgs.detach()), fake)
        return (real_loss + fake_loss) / 2

    return Program(name="lightningtutorials_basic_gan", model=model.discriminator, batch=(real, generated),
                   loss_fn=loss_fn, optimizer=optimizer_d, train_step=train_step, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # F.binary_cross_entropy_with_logits in adversarial_loss while the discriminator keeps its final nn.Sigmoid()
    # (classic): the loss applies a second sigmoid, its outputs live in (0.5, 0.73) and the gradients shrink.
    Bug("bce_with_logits_on_sigmoid", functools.partial(_build, bug="bce_with_logits_on_sigmoid"), "learning_ledger",
        ("OBJECTIVE",)),
    # configure_optimizers builds opt_d over self.generator.parameters() (classic copy-paste slip): the
    # discriminator never moves and its steps move the generator instead.
    Bug("opt_d_over_generator", functools.partial(_build, bug="opt_d_over_generator"), "four_structures",
        ("model.0",)),
]

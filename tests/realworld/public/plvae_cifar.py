"""William Falcon's variational autoencoder LightningModule (pytorch-lightning-vae, the code of his "Variational
Autoencoder Demystified With PyTorch Implementation" tutorial): a ResNet-18 encoder (CIFAR stem: 3x3 conv, no
max-pool) from Lightning-Bolts into ``fc_mu``/``fc_var``, ``z = q.rsample()`` of ``Normal(mu, exp(log_var / 2))``,
a Bolts ResNet-18 decoder; the loss is the ELBO with a Gaussian likelihood of learnable log-scale (``log_scale``, a
``Parameter`` at 0) summed over the pixels and a single-sample Monte Carlo KL (``q.log_prob(z) - p.log_prob(z)``
summed over the latents), ``(kl - recon_loss).mean()``; ``configure_optimizers`` returns Adam(lr 1e-4); ``train()``
fits it on CIFAR-10 for 20 epochs.

Source: https://github.com/williamFalcon/pytorch-lightning-vae
Commit: 1608c979f339915de0e7149661e87c8a9e5ac9f2
Files: vae.py (+ ``resnet18_encoder``/``resnet18_decoder`` of pytorch-lightning-bolts, which vae.py imports, ported
       in ``_bolts_resnet.py`` from https://github.com/Lightning-Universe/lightning-bolts at
       34958a8892d42714edf02ba896fd5861ebb3cb7e, src/pl_bolts/models/autoencoders/components.py, and shared with
       ``lightningbolts_vae``)
License: Apache-2.0 (full text in LICENSES/williamFalcon-pytorch-lightning-vae.txt; Bolts: Apache-2.0,
         LICENSES/Lightning-Universe-lightning-bolts.txt)
Domain: Lightning module (variational autoencoder, Gaussian likelihood with a learned scale, Monte Carlo KL)

Kept as written: ``VAE.__init__`` (encoder, decoder, ``fc_mu``, ``fc_var``, ``log_scale``), ``configure_optimizers``,
``gaussian_likelihood``, ``kl_divergence``, ``training_step`` (its ``log_dict`` included, less its repeated
``'kl'`` key).

Deviations from the original:
- sizes: CIFAR-10's 32x32 images -> 16x16 (``input_height`` 16), batch_size 32 (``CIFAR10DataModule``'s default)
  -> 16; the Bolts ResNet-18 encoder and decoder keep their blocks and layout but their channel counts are scaled by
  1/8 (``WIDTH`` 8 for the hard-coded 64, so ``enc_out_dim`` 512 -> 64), latent_dim 256 -> 64; lr 1e-4
  unchanged;
- ``pl.seed_everything(1234)`` at import is ``torch.manual_seed(seed)`` in ``build``;
- data: CIFAR-10 is replaced by synthetic 3x16x16 images in [0, 1] made from ``seed`` (a colour gradient background
  and one or two soft coloured blobs, ``_bolts_resnet.make_images``, as in ``lightningbolts_vae``), 256 for training
  and 64 for validation; ``CIFAR10DataModule``'s normalization is left out (the images are already in [0, 1]); the
  training DataLoader shuffles with a generator seeded from ``seed``, no worker processes;
- the Trainer's fit loop is driven one batch at a time as Lightning's automatic optimization runs it
  (``_lightning_loop.automatic_step``: ``training_step`` inside the optimizer closure, the ``optimizer_zero_grad``
  hook, ``backward``, all called by ``optimizer_step``); a ``Trainer(barebones=True)`` is attached so that
  ``self.log_dict`` works; the ``ImageSampler`` callback, the argparser, ``gpus`` and ``ImagenetDataModule`` are
  left out; the module imports ``LightningModule`` from ``pytorch_lightning``;
- the module has no ``forward`` in the original (only ``training_step``); one is added for the Program
  (encoder, ``fc_mu``/``fc_var``, ``rsample``, decoder: ``training_step``'s lines up to ``x_hat``), and ``loss_fn`` is
  ``-gaussian_likelihood(x_hat, log_scale, x).mean()`` on its output (the KL term needs the posterior, which
  ``forward`` does not return, and is part of ``training_step``'s loss, ``train_step``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
from __future__ import annotations

import functools
import logging
import pathlib
import sys
import warnings

import torch
from pytorch_lightning import LightningModule, Trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _bolts_resnet
from _api import Bug, Program
from _bolts_resnet import make_images
from _lightning_loop import automatic_step

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
INPUT_HEIGHT, BATCH_SIZE, N_TRAIN, N_VAL = 16, 16, 256, 64
WIDTH = 8  # the ResNet-18 base width (64 in the original): every channel count is scaled by WIDTH / 64
# (port) Bolts' components (_bolts_resnet.py) at this width, called as vae.py calls them
resnet18_encoder = functools.partial(_bolts_resnet.resnet18_encoder, width=WIDTH)
resnet18_decoder = functools.partial(_bolts_resnet.resnet18_decoder, width=WIDTH)


# ---- vae.py ------------------------------------------------------------------------------------------------

class VAE(LightningModule):
    def __init__(self, enc_out_dim=512, latent_dim=256, input_height=32, bug=None):
        super().__init__()

        self.save_hyperparameters()
        self.bug = bug

        # encoder, decoder
        self.encoder = resnet18_encoder(False, False)
        self.decoder = resnet18_decoder(
            latent_dim=latent_dim,
            input_height=input_height,
            first_conv=False,
            maxpool1=False
        )

        # distribution parameters
        self.fc_mu = nn.Linear(enc_out_dim, latent_dim)
        self.fc_var = nn.Linear(enc_out_dim, latent_dim)

        # for the gaussian likelihood
        self.log_scale = nn.Parameter(torch.Tensor([0.0]))

    def forward(self, x):  # (port) training_step's lines up to x_hat; the original has no forward
        x_encoded = self.encoder(x)
        mu, log_var = self.fc_mu(x_encoded), self.fc_var(x_encoded)
        std = torch.exp(log_var / 2)
        q = torch.distributions.Normal(mu, std)
        z = q.sample() if self.bug == "sample_instead_of_rsample" else q.rsample()
        return self.decoder(z)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-4)

    def gaussian_likelihood(self, x_hat, logscale, x):
        scale = torch.exp(logscale)
        mean = x_hat
        dist = torch.distributions.Normal(mean, scale)

        # measure prob of seeing image under p(x|z)
        log_pxz = dist.log_prob(x)
        return log_pxz.sum(dim=(1, 2, 3))

    def kl_divergence(self, z, mu, std):
        # --------------------------
        # Monte carlo KL divergence
        # --------------------------
        # 1. define the first two probabilities (in this case Normal for both)
        p = torch.distributions.Normal(torch.zeros_like(mu), torch.ones_like(std))
        q = torch.distributions.Normal(mu, std)

        # 2. get the probabilities from the equation
        log_qzx = q.log_prob(z)
        log_pz = p.log_prob(z)

        # kl
        if self.bug == "kl_terms_swapped":
            kl = (log_pz - log_qzx)
        else:
            kl = (log_qzx - log_pz)
        kl = kl.sum(-1)
        return kl

    def training_step(self, batch, batch_idx):
        x, _ = batch

        # encode x to get the mu and variance parameters
        x_encoded = self.encoder(x)
        mu, log_var = self.fc_mu(x_encoded), self.fc_var(x_encoded)

        # sample z from q
        std = torch.exp(log_var / 2)
        q = torch.distributions.Normal(mu, std)
        z = q.sample() if self.bug == "sample_instead_of_rsample" else q.rsample()

        # decoded
        x_hat = self.decoder(z)

        # reconstruction loss
        recon_loss = self.gaussian_likelihood(x_hat, self.log_scale, x)

        # kl
        kl = self.kl_divergence(z, mu, std)

        # elbo
        elbo = (kl - recon_loss)
        elbo = elbo.mean()

        self.log_dict({
            'elbo': elbo,
            'kl': kl.mean(),
            'recon_loss': recon_loss.mean(),
            'reconstruction': recon_loss.mean(),
        })

        return elbo


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_x, _ = make_images(seed, N_TRAIN, N_VAL, INPUT_HEIGHT)
    # CIFAR10DataModule: (image, label) pairs; the VAE ignores the labels
    data_train = TensorDataset(train_x, torch.zeros(N_TRAIN, dtype=torch.long))
    train_dataloader = DataLoader(data_train, batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
                                  generator=torch.Generator().manual_seed(seed))

    vae = VAE(enc_out_dim=8 * WIDTH, latent_dim=64, input_height=INPUT_HEIGHT, bug=bug)

    # the pieces of Trainer.fit that the step-by-step loop below needs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1)
    trainer.strategy.connect(vae)
    vae.trainer = trainer
    optimizer = vae.configure_optimizers()

    train_step = automatic_step(vae, optimizer, train_dataloader)

    def loss_fn(x_hat, x):
        return -vae.gaussian_likelihood(x_hat, vae.log_scale, x).mean()

    first = next(iter(DataLoader(data_train, batch_size=BATCH_SIZE)))
    # the reconstruction's target is the input itself
    return Program(name="plvae_cifar", model=vae, batch=(first[0], first[0]), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # classic: the Monte Carlo KL's two log-densities swapped (log p(z) - log q(z|x)): the loss rewards a posterior
    # far from the prior, the ELBO's regularizer turned into its opposite.
    Bug("kl_terms_swapped", functools.partial(_build, bug="kl_terms_swapped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: `q.sample()` instead of `q.rsample()`: the latent sample is cut from the encoder's graph, so the
    # reconstruction term no longer trains the encoder (only the Monte Carlo KL's log q(z|x) reaches fc_mu / fc_var).
    Bug("sample_instead_of_rsample", functools.partial(_build, bug="sample_instead_of_rsample"), "learning_ledger",
        ("DEPENDENCY",)),
]

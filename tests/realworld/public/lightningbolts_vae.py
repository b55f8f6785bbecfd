"""The variational autoencoder LightningModule of Lightning-Bolts (``pl_bolts.models.autoencoders.VAE``): a
ResNet-18 encoder (CIFAR stem: 3x3 conv, no max-pool) into ``fc_mu``/``fc_var``, a reparameterized sample
``q.rsample()`` of ``Normal(mu, exp(log_var / 2))``, a ResNet-18 decoder of resize-convolutions; the loss is the
mean-squared reconstruction error plus ``kl_coeff`` (0.1) times the mean ``kl_divergence(q, p)`` against a standard
normal prior; ``configure_optimizers`` returns Adam(lr 1e-4); ``cli_main`` fits it on CIFAR-10
(``CIFAR10DataModule``: ToTensor, shuffled, batch 256 from the module's argparser).

Source: https://github.com/Lightning-Universe/lightning-bolts
Commit: 34958a8892d42714edf02ba896fd5861ebb3cb7e
Files: src/pl_bolts/models/autoencoders/basic_vae/basic_vae_module.py, src/pl_bolts/models/autoencoders/components.py
       (in ``_bolts_resnet.py``, shared with ``plvae_cifar``), src/pl_bolts/datamodules/cifar10_datamodule.py
License: Apache-2.0 (full text in LICENSES/Lightning-Universe-lightning-bolts.txt)
Domain: Lightning module (variational autoencoder)

Chosen for the "time series or Lightning" slot over a thuml/Time-Series-Library model: the corpus has a time-series
port (ltsflinear_dlinear) whose ``Exp_Main`` loop is the same Autoformer-lineage loop TSLib's
``exp_long_term_forecasting`` runs, and no variational model yet.

Deviations from the original:
- sizes: CIFAR-10's 32x32 images -> 16x16 (``input_height`` 16, a multiple of the decoder's upscale factor 8),
  batch_size 256 -> 16; the ResNet-18 encoder and decoder keep their blocks and layout but their channel counts are
  scaled by 1/4 (``WIDTH`` 16 for the hard-coded 64; 128/256/512 -> 32/64/128, so enc_out_dim 512 -> 128 and the
  decoder's ``Linear`` to 512*4*4 -> 128*4*4), latent_dim 256 -> 64; kl_coeff 0.1 and lr 1e-4 unchanged;
- data: CIFAR-10 is replaced by synthetic 3x16x16 images in [0, 1] made from ``seed`` (a colour gradient
  background and one or two soft coloured blobs, ``_bolts_resnet.make_images``), 256 for training and 64 for
  validation, already split (the datamodule's ``val_split`` is not used), ToTensor (no normalization, the
  datamodule's default); the training DataLoader shuffles with a generator seeded from ``seed``, no worker processes;
- only ``enc_type="resnet18"`` is ported (the resnet50 bottleneck blocks are left out of components.py and of
  ``valid_encoders``); ``from_pretrained``/``pretrained_urls`` (AWS checkpoints) and the ``@under_review``
  decorators (a warning) are left out; the module imports ``LightningModule`` from ``pytorch_lightning``;
- the Trainer's fit loop is driven one batch at a time as Lightning's automatic optimization runs it (as in
  ``lightninghydra_mnist``): ``training_step`` inside the optimizer closure, then the ``optimizer_zero_grad`` hook,
  the module's ``backward``, all called by the ``optimizer_step`` hook; at the end of an epoch the validation loop
  runs (``eval()``, ``no_grad``, ``validation_step``, back to ``train()``). A ``Trainer(barebones=True)`` is
  attached so that ``self.log_dict`` works (barebones makes it a no-op); the sanity check, callbacks,
  checkpointing and loggers are left out;
- ``loss_fn`` is the reconstruction term applied to ``forward``'s output (the decoded sample); the KL term needs
  the posterior, which ``forward`` does not return, and is part of ``training_step``'s loss (``train_step``);
  ``eval_fn`` is ``validation_step``'s loss on a batch (``eval()``, ``no_grad``);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import logging
import pathlib
import sys
import warnings

import torch
from pytorch_lightning import LightningModule, Trainer
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import _bolts_resnet
from _api import Bug, Program
from _bolts_resnet import make_images
from _lightning_loop import automatic_step

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
INPUT_HEIGHT, BATCH_SIZE, N_TRAIN, N_VAL = 16, 16, 256, 64
WIDTH = 16  # the ResNet-18 base width (64 in the original): every channel count is scaled by WIDTH / 64
# (port) Bolts' components (_bolts_resnet.py) at this width, called as vae.py calls them
resnet18_encoder = functools.partial(_bolts_resnet.resnet18_encoder, width=WIDTH)
resnet18_decoder = functools.partial(_bolts_resnet.resnet18_decoder, width=WIDTH)


# ---- src/pl_bolts/models/autoencoders/basic_vae/basic_vae_module.py ------------------------------------------

class VAE(LightningModule):
    """Standard VAE with Gaussian Prior and approx posterior."""

    def __init__(
        self,
        input_height: int,
        enc_type: str = "resnet18",
        first_conv: bool = False,
        maxpool1: bool = False,
        enc_out_dim: int = 512,
        kl_coeff: float = 0.1,
        latent_dim: int = 256,
        lr: float = 1e-4,
        bug: str | None = None,
        **kwargs,
    ) -> None:
        """
        Args:
            input_height: height of the images
            enc_type: option between resnet18 or resnet50
            first_conv: use standard kernel_size 7, stride 2 at start or
                replace it with kernel_size 3, stride 1 conv
            maxpool1: use standard maxpool to reduce spatial dim of feat by a factor of 2
            enc_out_dim: set according to the out_channel count of
                encoder used (512 for resnet18, 2048 for resnet50)
            kl_coeff: coefficient for kl term of the loss
            latent_dim: dim of latent space
            lr: learning rate for Adam
        """

        super().__init__()

        self.save_hyperparameters(ignore=["bug"])
        self.bug = bug

        self.lr = lr
        self.kl_coeff = kl_coeff
        self.enc_out_dim = enc_out_dim
        self.latent_dim = latent_dim
        self.input_height = input_height

        valid_encoders = {
            "resnet18": {
                "enc": resnet18_encoder,
                "dec": resnet18_decoder,
            },
        }

        if enc_type not in valid_encoders:
            self.encoder = resnet18_encoder(first_conv, maxpool1)
            self.decoder = resnet18_decoder(self.latent_dim, self.input_height, first_conv, maxpool1)
        else:
            self.encoder = valid_encoders[enc_type]["enc"](first_conv, maxpool1)
            self.decoder = valid_encoders[enc_type]["dec"](self.latent_dim, self.input_height, first_conv, maxpool1)

        self.fc_mu = nn.Linear(self.enc_out_dim, self.latent_dim)
        self.fc_var = nn.Linear(self.enc_out_dim, self.latent_dim)

    def forward(self, x):
        x = self.encoder(x)
        mu = self.fc_mu(x)
        log_var = self.fc_var(x)
        p, q, z = self.sample(mu, log_var)
        return self.decoder(z)

    def _run_step(self, x):
        x = self.encoder(x)
        mu = self.fc_mu(x)
        log_var = self.fc_var(x)
        p, q, z = self.sample(mu, log_var)
        return z, self.decoder(z), p, q

    def sample(self, mu, log_var):
        std = torch.exp(log_var / 2)
        p = torch.distributions.Normal(torch.zeros_like(mu), torch.ones_like(std))
        q = torch.distributions.Normal(mu, std)
        if self.bug == "sample_instead_of_rsample":
            z = q.sample()  # no reparameterization: z carries no gradient back to mu and log_var
        else:
            z = q.rsample()
        return p, q, z

    def step(self, batch, batch_idx):
        x, y = batch
        z, x_hat, p, q = self._run_step(x)

        recon_loss = F.mse_loss(x_hat, x, reduction="mean")

        kl = torch.distributions.kl_divergence(q, p)
        kl = kl.mean()
        if self.bug != "kl_coeff_not_applied":
            kl *= self.kl_coeff

        loss = kl + recon_loss

        logs = {
            "recon_loss": recon_loss,
            "kl": kl,
            "loss": loss,
        }
        return loss, logs

    def training_step(self, batch, batch_idx):
        loss, logs = self.step(batch, batch_idx)
        self.log_dict({f"train_{k}": v for k, v in logs.items()}, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, logs = self.step(batch, batch_idx)
        self.log_dict({f"val_{k}": v for k, v in logs.items()})
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_x, val_x = make_images(seed, N_TRAIN, N_VAL, INPUT_HEIGHT)
    # CIFAR10DataModule: (image, label) pairs; the VAE ignores the labels
    data_train = TensorDataset(train_x, torch.zeros(N_TRAIN, dtype=torch.long))
    data_val = TensorDataset(val_x, torch.zeros(N_VAL, dtype=torch.long))
    train_dataloader = DataLoader(data_train, batch_size=BATCH_SIZE, shuffle=True, num_workers=0, drop_last=False,
                                  generator=torch.Generator().manual_seed(seed))
    val_dataloader = DataLoader(data_val, batch_size=BATCH_SIZE, shuffle=False, num_workers=0, drop_last=False)

    # cli_main: args.input_height = dm.dims[-1]; model = VAE(**vars(args))
    module = VAE(input_height=INPUT_HEIGHT, enc_type="resnet18", first_conv=False, maxpool1=False,
                 enc_out_dim=8 * WIDTH, kl_coeff=0.1, latent_dim=64, lr=1e-4, bug=bug)

    # the pieces of Trainer.fit that the step-by-step loop below needs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1)
    trainer.strategy.connect(module)
    module.trainer = trainer
    optimizer = module.configure_optimizers()

    def validation_epoch():
        module.eval()
        with torch.no_grad():
            for batch_idx, batch in enumerate(val_dataloader):
                module.validation_step(batch, batch_idx)
        module.train()

    train_step = automatic_step(module, optimizer, train_dataloader, epoch_end=validation_epoch)

    def eval_fn(model, batch):
        """validation_step's loss on a batch (its `y`, the label, is unused by the VAE)"""
        model.eval()
        with torch.no_grad():
            loss = model.validation_step(batch, 0)
        model.train()
        return float(loss)

    first = next(iter(DataLoader(data_train, batch_size=BATCH_SIZE)))
    # the reconstruction's target is the input itself
    return Program(name="lightningbolts_vae", model=module, batch=(first[0], first[0]),
                   loss_fn=lambda x_hat, x: F.mse_loss(x_hat, x, reduction="mean"), optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # `kl *= self.kl_coeff` missing from `step`: the KL term enters the loss at weight 1 instead of kl_coeff (0.1),
    # as before https://github.com/Lightning-Universe/lightning-bolts/pull/330 ("Use kl_coeff in loss function
    # calculation").
    Bug("kl_coeff_not_applied", functools.partial(_build, bug="kl_coeff_not_applied"), "learning_ledger",
        ("OBJECTIVE",)),
    # `q.sample()` instead of `q.rsample()` (classic): the latent sample is cut from the encoder's graph, so the
    # reconstruction term no longer trains the encoder (only the KL term reaches fc_mu / fc_var).
    Bug("sample_instead_of_rsample", functools.partial(_build, bug="sample_instead_of_rsample"), "learning_ledger",
        ("DEPENDENCY",)),
]

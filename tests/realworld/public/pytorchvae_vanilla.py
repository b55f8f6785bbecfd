"""Vanilla VAE of AntixK/PyTorch-VAE trained by the repository's Lightning experiment: ``VanillaVAE`` (five strided
conv + BatchNorm + LeakyReLU encoder blocks, ``fc_mu``/``fc_var`` heads, reparameterisation, a transposed-conv decoder
ending in Tanh) with its ``loss_function`` (``F.mse_loss(recons, input)`` + ``kld_weight`` * the batch-mean KL to the
unit Gaussian), wrapped in ``VAEXperiment`` (``training_step`` passes ``M_N = kld_weight`` = 0.00025,
``validation_step`` passes ``M_N = 1.0``; ``configure_optimizers``: Adam(lr 0.005, weight_decay 0) and
ExponentialLR(gamma 0.95) stepped every epoch), with the settings of ``configs/vae.yaml``.

Source: https://github.com/AntixK/PyTorch-VAE
Commit: a6896b944c918dd7030e7d795a8c13e5c6345ec7
Files: models/vanilla_vae.py, models/base.py, models/types_.py, experiment.py, run.py, dataset.py, configs/vae.yaml
License: Apache-2.0 (Copyright Anand Krishnamoorthy Subramanian 2020)
Domain: generative model (variational autoencoder, Lightning module)

Deviations from the original:
- sizes: ``hidden_dims`` [32, 64, 128, 256, 512] -> [16, 32, 64, 128, 512] (the last width kept at 512, which
  ``decode`` hard-codes in ``result.view(-1, 512, 2, 2)``), latent_dim 128 -> 16, batch 64 -> 16 (train and
  validation), 64x64 images unchanged; 256 training and 32 validation images;
- the experiment is written for Lightning 1.5.6; only ``pytorch_lightning`` 2.x is installed. ``run.py``'s Trainer
  (TensorBoard logger, LearningRateMonitor, ModelCheckpoint, DDP plugin, GPUs) is not used: the fit loop is driven
  one batch at a time as Lightning's automatic optimization runs it (``training_step`` inside the optimizer closure,
  the ``optimizer_zero_grad`` hook, the module's ``backward``, all under ``optimizer_step``); at the end of an epoch
  the validation loop runs (``eval()``, ``no_grad``, ``validation_step``) and the epoch scheduler steps. A
  ``Trainer(barebones=True)`` is attached so that ``self.log_dict`` works (barebones makes it a no-op);
  ``on_validation_end``'s ``sample_images`` (torchvision ``save_image`` into the logger's folder) is left out;
- ``seed_everything(1265)`` is replaced by ``torch.manual_seed(seed)``;
- data: CelebA is replaced by synthetic 64x64 RGB images made from ``seed`` (a smooth two-colour background with one
  coloured disc of random position and radius) with three attributes per image standing in for CelebA's 40 (unused
  by the model, as in the original); torchvision is not available, so of the transforms (RandomHorizontalFlip,
  CenterCrop(148), Resize(64), ToTensor) the flip is written out in plain torch and the images are made at 64x64
  in [0, 1] directly; shuffled training DataLoader without workers;
- one ``train_step`` is one training batch; ``eval_fn`` is ``validation_step``'s loss (``M_N = 1.0``) on a batch, so
  ``validation_step`` returns its loss (the original returns nothing); the LaTeX backslashes of ``loss_function``'s
  docstring are escaped.
"""
# ruff: noqa: E722, PLC0132, RUF013, S110, UP006, UP008, UP035  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import logging
import pathlib
import sys
import warnings
from abc import abstractmethod
from typing import Any, List, TypeVar

import pytorch_lightning as pl
import torch
from pytorch_lightning import Trainer
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program
from _lightning_loop import automatic_step

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
N_TRAIN, N_VAL, PATCH_SIZE = 256, 32, 64

# configs/vae.yaml (sizes shrunk, see the docstring)
VAE_YAML = {
    'model_params': {'name': 'VanillaVAE', 'in_channels': 3, 'latent_dim': 16, 'hidden_dims': [16, 32, 64, 128, 512]},
    'data_params': {'train_batch_size': 16, 'val_batch_size': 16, 'patch_size': 64, 'num_workers': 0},
    'exp_params': {'LR': 0.005, 'weight_decay': 0.0, 'scheduler_gamma': 0.95, 'kld_weight': 0.00025,
                   'manual_seed': 1265},
    'trainer_params': {'max_epochs': 100},
}


# ---- models/types_.py, models/base.py ------------------------------------------------------------------------

Tensor = TypeVar('torch.tensor')


class BaseVAE(nn.Module):

    def __init__(self) -> None:
        super(BaseVAE, self).__init__()

    def encode(self, input: Tensor) -> List[Tensor]:
        raise NotImplementedError

    def decode(self, input: Tensor) -> Any:
        raise NotImplementedError

    def sample(self, batch_size:int, current_device: int, **kwargs) -> Tensor:
        raise NotImplementedError

    def generate(self, x: Tensor, **kwargs) -> Tensor:
        raise NotImplementedError

    @abstractmethod
    def forward(self, *inputs: Tensor) -> Tensor:
        pass

    @abstractmethod
    def loss_function(self, *inputs: Any, **kwargs) -> Tensor:
        pass


# ---- models/vanilla_vae.py -----------------------------------------------------------------------------------

class VanillaVAE(BaseVAE):


    def __init__(self,
                 in_channels: int,
                 latent_dim: int,
                 hidden_dims: List = None,
                 bug: str | None = None,
                 **kwargs) -> None:
        super(VanillaVAE, self).__init__()

        self.latent_dim = latent_dim
        self.bug = bug

        modules = []
        if hidden_dims is None:
            hidden_dims = [32, 64, 128, 256, 512]

        # Build Encoder
        for h_dim in hidden_dims:
            modules.append(
                nn.Sequential(
                    nn.Conv2d(in_channels, out_channels=h_dim,
                              kernel_size= 3, stride= 2, padding  = 1),
                    nn.BatchNorm2d(h_dim),
                    nn.LeakyReLU())
            )
            in_channels = h_dim

        self.encoder = nn.Sequential(*modules)
        self.fc_mu = nn.Linear(hidden_dims[-1]*4, latent_dim)
        self.fc_var = nn.Linear(hidden_dims[-1]*4, latent_dim)


        # Build Decoder
        modules = []

        self.decoder_input = nn.Linear(latent_dim, hidden_dims[-1] * 4)

        hidden_dims.reverse()

        for i in range(len(hidden_dims) - 1):
            modules.append(
                nn.Sequential(
                    nn.ConvTranspose2d(hidden_dims[i],
                                       hidden_dims[i + 1],
                                       kernel_size=3,
                                       stride = 2,
                                       padding=1,
                                       output_padding=1),
                    nn.BatchNorm2d(hidden_dims[i + 1]),
                    nn.LeakyReLU())
            )



        self.decoder = nn.Sequential(*modules)

        self.final_layer = nn.Sequential(
                            nn.ConvTranspose2d(hidden_dims[-1],
                                               hidden_dims[-1],
                                               kernel_size=3,
                                               stride=2,
                                               padding=1,
                                               output_padding=1),
                            nn.BatchNorm2d(hidden_dims[-1]),
                            nn.LeakyReLU(),
                            nn.Conv2d(hidden_dims[-1], out_channels= 3,
                                      kernel_size= 3, padding= 1),
                            nn.Tanh())

    def encode(self, input: Tensor) -> List[Tensor]:
        """
        Encodes the input by passing through the encoder network
        and returns the latent codes.
        :param input: (Tensor) Input tensor to encoder [N x C x H x W]
        :return: (Tensor) List of latent codes
        """
        result = self.encoder(input)
        result = torch.flatten(result, start_dim=1)

        # Split the result into mu and var components
        # of the latent Gaussian distribution
        mu = self.fc_mu(result)
        log_var = self.fc_var(result)

        return [mu, log_var]

    def decode(self, z: Tensor) -> Tensor:
        """
        Maps the given latent codes
        onto the image space.
        :param z: (Tensor) [B x D]
        :return: (Tensor) [B x C x H x W]
        """
        result = self.decoder_input(z)
        result = result.view(-1, 512, 2, 2)
        result = self.decoder(result)
        result = self.final_layer(result)
        return result

    def reparameterize(self, mu: Tensor, logvar: Tensor) -> Tensor:
        """
        Reparameterization trick to sample from N(mu, var) from
        N(0,1).
        :param mu: (Tensor) Mean of the latent Gaussian [B x D]
        :param logvar: (Tensor) Standard deviation of the latent Gaussian [B x D]
        :return: (Tensor) [B x D]
        """
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return eps * std + mu

    def forward(self, input: Tensor, **kwargs) -> List[Tensor]:
        mu, log_var = self.encode(input)
        z = self.reparameterize(mu, log_var)
        if self.bug == "latent_detached":
            z = z.detach()  # "the decoder should not push on the encoder": only the KL term trains the encoder
        return  [self.decode(z), input, mu, log_var]

    def loss_function(self,
                      *args,
                      **kwargs) -> dict:
        """
        Computes the VAE loss function.
        KL(N(\\mu, \\sigma), N(0, 1)) = \\log \\frac{1}{\\sigma} + \\frac{\\sigma^2 + \\mu^2}{2} - \\frac{1}{2}
        :param args:
        :param kwargs:
        :return:
        """
        recons = args[0]
        input = args[1]
        mu = args[2]
        log_var = args[3]

        kld_weight = kwargs['M_N'] # Account for the minibatch samples from the dataset
        recons_loss =F.mse_loss(recons, input)


        if self.bug == "kld_sign_flipped":
            kld_loss = torch.mean(0.5 * torch.sum(1 + log_var - mu ** 2 - log_var.exp(), dim = 1), dim = 0)
        else:
            kld_loss = torch.mean(-0.5 * torch.sum(1 + log_var - mu ** 2 - log_var.exp(), dim = 1), dim = 0)

        loss = recons_loss + kld_weight * kld_loss
        return {'loss': loss, 'Reconstruction_Loss':recons_loss.detach(), 'KLD':-kld_loss.detach()}

    def sample(self,
               num_samples:int,
               current_device: int, **kwargs) -> Tensor:
        """
        Samples from the latent space and return the corresponding
        image space map.
        :param num_samples: (Int) Number of samples
        :param current_device: (Int) Device to run the model
        :return: (Tensor)
        """
        z = torch.randn(num_samples,
                        self.latent_dim)

        z = z.to(current_device)

        samples = self.decode(z)
        return samples

    def generate(self, x: Tensor, **kwargs) -> Tensor:
        """
        Given an input image x, returns the reconstructed image
        :param x: (Tensor) [B x C x H x W]
        :return: (Tensor) [B x C x H x W]
        """

        return self.forward(x)[0]


vae_models = {'VanillaVAE': VanillaVAE}


# ---- experiment.py -------------------------------------------------------------------------------------------

class VAEXperiment(pl.LightningModule):

    def __init__(self,
                 vae_model: BaseVAE,
                 params: dict) -> None:
        super(VAEXperiment, self).__init__()

        self.model = vae_model
        self.params = params
        self.curr_device = None
        self.hold_graph = False
        try:
            self.hold_graph = self.params['retain_first_backpass']
        except:
            pass

    def forward(self, input: Tensor, **kwargs) -> Tensor:
        return self.model(input, **kwargs)

    def training_step(self, batch, batch_idx, optimizer_idx = 0):
        real_img, labels = batch
        self.curr_device = real_img.device

        results = self.forward(real_img, labels = labels)
        train_loss = self.model.loss_function(*results,
                                              M_N = self.params['kld_weight'], #al_img.shape[0]/ self.num_train_imgs,
                                              optimizer_idx=optimizer_idx,
                                              batch_idx = batch_idx)

        self.log_dict({key: val.item() for key, val in train_loss.items()}, sync_dist=True)

        return train_loss['loss']

    def validation_step(self, batch, batch_idx, optimizer_idx = 0):
        real_img, labels = batch
        self.curr_device = real_img.device

        results = self.forward(real_img, labels = labels)
        val_loss = self.model.loss_function(*results,
                                            M_N = 1.0, #real_img.shape[0]/ self.num_val_imgs,
                                            optimizer_idx = optimizer_idx,
                                            batch_idx = batch_idx)

        self.log_dict({f"val_{key}": val.item() for key, val in val_loss.items()}, sync_dist=True)
        return val_loss['loss']  # (the original returns nothing; eval_fn reads the loss)

    def configure_optimizers(self):

        optims = []
        scheds = []

        optimizer = optim.Adam(self.model.parameters(),
                               lr=self.params['LR'],
                               weight_decay=self.params['weight_decay'])
        optims.append(optimizer)
        # Check if more than 1 optimizer is required (Used for adversarial training)
        try:
            if self.params['LR_2'] is not None:
                optimizer2 = optim.Adam(getattr(self.model,self.params['submodel']).parameters(),
                                        lr=self.params['LR_2'])
                optims.append(optimizer2)
        except:
            pass

        try:
            if self.params['scheduler_gamma'] is not None:
                scheduler = optim.lr_scheduler.ExponentialLR(optims[0],
                                                             gamma = self.params['scheduler_gamma'])
                scheds.append(scheduler)

                # Check if another scheduler is required for the second optimizer
                try:
                    if self.params['scheduler_gamma_2'] is not None:
                        scheduler2 = optim.lr_scheduler.ExponentialLR(optims[1],
                                                                      gamma = self.params['scheduler_gamma_2'])
                        scheds.append(scheduler2)
                except:
                    pass
                return optims, scheds
        except:
            return optims


# ---- data: synthetic 64x64 "faces" (a disc on a smooth background) -------------------------------------------

class DiscImages(Dataset):
    """MyCelebA stand-in: (image in [0, 1], attributes); the training split flips horizontally at random."""

    def __init__(self, gen, n, train):
        yy, xx = torch.meshgrid(torch.linspace(0, 1, PATCH_SIZE), torch.linspace(0, 1, PATCH_SIZE), indexing="ij")
        bg_a, bg_b = torch.rand(n, 3, 1, 1, generator=gen), torch.rand(n, 3, 1, 1, generator=gen)
        background = bg_a * (1 - yy) + bg_b * yy
        cx, cy = 0.2 + 0.6 * torch.rand(n, 1, 1, generator=gen), 0.2 + 0.6 * torch.rand(n, 1, 1, generator=gen)
        radius = 0.1 + 0.15 * torch.rand(n, 1, 1, generator=gen)
        colour_idx = torch.randint(0, 3, (n,), generator=gen)
        colour = torch.eye(3)[colour_idx][:, :, None, None] * 0.8 + 0.1
        disc = (((xx - cx) ** 2 + (yy - cy) ** 2) < radius ** 2).float()[:, None]
        self.images = background * (1 - disc) + colour * disc
        self.attrs = torch.stack([(cx.flatten() > 0.5).long(), (cy.flatten() > 0.5).long(), colour_idx], dim=1)
        self.train = train
        self.gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        img = self.images[idx]
        if float(torch.rand(1, generator=self.gen)) < 0.5:  # transforms.RandomHorizontalFlip()
            img = img.flip(-1)
        return img, self.attrs[idx]


def _build(seed, bug=None):
    config = copy.deepcopy(VAE_YAML)  # config = yaml.safe_load(file): VanillaVAE reverses hidden_dims in place
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_dataset = DiscImages(gen, N_TRAIN, train=True)
    val_dataset = DiscImages(gen, N_VAL, train=False)

    model = vae_models[config['model_params']['name']](**config['model_params'], bug=bug)
    experiment = VAEXperiment(model,
                              config['exp_params'])

    train_dataloader = DataLoader(train_dataset, batch_size=config['data_params']['train_batch_size'],
                                  num_workers=0, shuffle=True, pin_memory=False,
                                  generator=torch.Generator().manual_seed(seed))
    val_dataloader = DataLoader(val_dataset, batch_size=config['data_params']['val_batch_size'], num_workers=0,
                                shuffle=False, pin_memory=False)

    # the pieces of Trainer.fit that the step-by-step loop below needs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1,
                          max_epochs=config['trainer_params']['max_epochs'])
    trainer.strategy.connect(experiment)
    experiment.trainer = trainer
    optims, scheds = experiment.configure_optimizers()
    optimizer, scheduler = optims[0], scheds[0]

    def validation_epoch():
        experiment.eval()
        with torch.no_grad():
            for batch_idx, batch in enumerate(val_dataloader):
                experiment.validation_step(batch, batch_idx)
        experiment.train()

    def epoch_end():
        validation_epoch()
        scheduler.step()  # ExponentialLR, interval "epoch"

    train_step = automatic_step(experiment, optimizer, train_dataloader, epoch_end=epoch_end)

    def loss_fn(results, labels):
        return experiment.model.loss_function(*results, M_N=experiment.params['kld_weight'])['loss']

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            loss = model.validation_step(batch, 0)
        model.train()
        return float(loss)

    first = next(iter(DataLoader(train_dataset, batch_size=config['data_params']['train_batch_size'])))
    return Program(name="pytorchvae_vanilla", model=experiment, batch=(first[0], first[1]), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build)

BUGS = [
    # the minus sign moved off the KL term (the sign of this KLD confuses readers of the repository:
    # https://github.com/AntixK/PyTorch-VAE/issues/68): the loss now rewards moving the posterior away from the prior.
    Bug("kld_sign_flipped", functools.partial(_build, bug="kld_sign_flipped"), "learning_ledger", ("OBJECTIVE",)),
    # the sampled latent detached before the decoder: the reconstruction loss no longer reaches the encoder, which
    # is trained by the KL term alone (classic).
    Bug("latent_detached", functools.partial(_build, bug="latent_detached"), "learning_ledger", ("DEPENDENCY",)),
]

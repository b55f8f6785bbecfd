# ruff: noqa: UP031, W605, RUF059, C414
"""VQ-VAE on CIFAR-10 as a Lightning module, from karpathy/deep-vector-quantization: DeepMind's convolutional encoder /
decoder with residual blocks, the ``VQVAEQuantize`` bottleneck (1x1 projection, k-means initialization of the
codebook on the first training batch, nearest-code lookup, codebook + 0.25 commitment loss scaled by ``kld_scale``,
straight-through estimator), the fixed-variance Normal reconstruction NLL, AdamW with decay / no-decay parameter
groups, and the ``DecayLR`` callback's cosine lr annealing written before every batch.

Source: https://github.com/karpathy/deep-vector-quantization
Commit: c3c026a1ccea369bc892ad6dde5e6d6cd5a508a4
Files: ``dvq/vqvae.py``, ``dvq/model/quantize.py``, ``dvq/model/deepmind_enc_dec.py``, ``dvq/model/loss.py``,
``dvq/data/cifar10.py``
License: MIT (Copyright (c) 2021 Andrej Karpathy; full text in LICENSES/karpathy-deep-vector-quantization.txt)
Domain: vision, generative / discrete autoencoder (VQ-VAE, Lightning module)

Kept as written: ``VQVAE`` (``forward``, ``training_step``: ``inmap``, forward, ``nll`` + latent loss;
``validation_step``'s reconstruction loss and perplexity; ``configure_optimizers``: the whitelist / blacklist split
into a decayed (1e-4) and an undecayed group, ``AdamW(lr=3e-4, betas=(0.9, 0.999), eps=1e-8)``), ``cos_anneal``,
``DecayLR`` (3e-4 -> 1.25e-6 over 1 200 000 steps), ``VQVAEQuantize`` (kmeans2 with ``minit='points'`` on up to
20 000 projected vectors, the distance expansion, ``commitment_cost`` 0.25, ``kld_scale`` 10), ``ResBlock``,
``DeepMindEncoder``, ``DeepMindDecoder``, ``Normal`` (``inmap`` to [-0.5, 0.5], ``nll`` over the sonnet
CIFAR-10 data variance), the default flavours (``vqvae``, ``deepmind``, ``l2``) and ``CIFAR10Data``'s transforms
(RandomCrop with 4 reflect-padded pixels, RandomHorizontalFlip, ToTensor; validation ToTensor only;
``drop_last=True``).

Deviations from the original:
- sizes for 2 CPU cores: ``n_hid`` 64 -> 16, ``num_embeddings`` 512 -> 64, ``embedding_dim`` 64 -> 16, images
  32x32 -> 16x16 (the random crop keeps its 4-pixel reflect padding), batch 128 -> 32;
- data: CIFAR-10 is not here: synthetic 16x16 RGB images in [0, 1] made from ``seed`` (ten classes of a coloured
  shape on a textured background), 320 training and 64 validation images; the torchvision transforms are written
  out on tensors; the loaders shuffle with a ``torch.Generator(seed)``, no workers; ``pl.seed_everything(1337)`` is
  ``torch.manual_seed(seed)`` and ``np.random.seed(seed)`` (kmeans2 draws from NumPy's global generator);
- the script is written for an older Lightning (``Trainer.add_argparse_args``, five-argument callback hooks); only
  ``pytorch_lightning`` 2.x is installed. The fit loop is driven one batch at a time as Lightning's automatic
  optimization runs it (``training_step`` inside the optimizer closure, the ``optimizer_zero_grad`` hook, the
  module's ``backward``, all under ``optimizer_step``), with ``DecayLR.on_train_batch_start`` called before each
  batch with the number of optimizer steps taken so far as ``trainer.global_step``; a ``Trainer(barebones=True)``
  is attached so that ``self.log`` works (a no-op there); ``ModelCheckpoint`` and the argument parser are dropped;
  the ``from model...`` imports are the definitions in this file; the unused ``OpenAI`` encoder / decoder,
  ``GumbelQuantize``, ``LogitLaplace``, ``DecayTemperature`` and ``RampBeta`` (gumbel flavour only) are left out,
  so ``PatchedConv2d`` is not in the whitelist; the k-means print is dropped;
- one ``train_step`` is one training batch; ``eval_fn`` is ``validation_step``'s reconstruction loss averaged over
  the validation loader (lower is better);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types
import warnings

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning import Trainer
from scipy.cluster.vq import kmeans2
from torch import nn
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG = 16


# dvq/model/deepmind_enc_dec.py
class ResBlock(nn.Module):
    def __init__(self, input_channels, channel):
        super().__init__()

        self.conv = nn.Sequential(
            nn.Conv2d(input_channels, channel, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(channel, input_channels, 1),
        )

    def forward(self, x):
        out = self.conv(x)
        out += x
        out = F.relu(out)
        return out


class DeepMindEncoder(nn.Module):

    def __init__(self, input_channels=3, n_hid=64):
        super().__init__()

        self.net = nn.Sequential(
            nn.Conv2d(input_channels, n_hid, 4, stride=2, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(n_hid, 2*n_hid, 4, stride=2, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(2*n_hid, 2*n_hid, 3, padding=1),
            nn.ReLU(),
            ResBlock(2*n_hid, 2*n_hid//4),
            ResBlock(2*n_hid, 2*n_hid//4),
        )

        self.output_channels = 2 * n_hid
        self.output_stide = 4

    def forward(self, x):
        return self.net(x)


class DeepMindDecoder(nn.Module):

    def __init__(self, n_init=32, n_hid=64, output_channels=3):
        super().__init__()

        self.net = nn.Sequential(
            nn.Conv2d(n_init, 2*n_hid, 3, padding=1),
            nn.ReLU(),
            ResBlock(2*n_hid, 2*n_hid//4),
            ResBlock(2*n_hid, 2*n_hid//4),
            nn.ConvTranspose2d(2*n_hid, n_hid, 4, stride=2, padding=1),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(n_hid, output_channels, 4, stride=2, padding=1),
        )

    def forward(self, x):
        return self.net(x)


# dvq/model/quantize.py
class VQVAEQuantize(nn.Module):
    """
    Neural Discrete Representation Learning, van den Oord et al. 2017
    https://arxiv.org/abs/1711.00937

    Follows the original DeepMind implementation
    https://github.com/deepmind/sonnet/blob/v2/sonnet/src/nets/vqvae.py
    https://github.com/deepmind/sonnet/blob/v2/examples/vqvae_example.ipynb
    """
    def __init__(self, num_hiddens, n_embed, embedding_dim, bug=None):
        super().__init__()
        self.bug = bug

        self.embedding_dim = embedding_dim
        self.n_embed = n_embed

        self.kld_scale = 10.0

        self.proj = nn.Conv2d(num_hiddens, embedding_dim, 1)
        self.embed = nn.Embedding(n_embed, embedding_dim)

        self.register_buffer('data_initialized', torch.zeros(1))

    def forward(self, z):
        B, C, H, W = z.size()

        # project and flatten out space, so (B, C, H, W) -> (B*H*W, C)
        z_e = self.proj(z)
        z_e = z_e.permute(0, 2, 3, 1) # make (B, H, W, C)
        flatten = z_e.reshape(-1, self.embedding_dim)

        # DeepMind def does not do this but I find I have to... ;\
        if self.training and self.data_initialized.item() == 0:
            rp = torch.randperm(flatten.size(0))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (port) kmeans2's empty-cluster warning
                kd = kmeans2(flatten[rp[:20000]].data.cpu().numpy(), self.n_embed, minit='points')
            self.embed.weight.data.copy_(torch.from_numpy(kd[0]))
            self.data_initialized.fill_(1)
            # TODO: this won't work in multi-GPU setups

        dist = (
            flatten.pow(2).sum(1, keepdim=True)
            - 2 * flatten @ self.embed.weight.t()
            + self.embed.weight.pow(2).sum(1, keepdim=True).t()
        )
        _, ind = (-dist).max(1)
        ind = ind.view(B, H, W)

        # vector quantization cost that trains the embedding vectors
        z_q = self.embed_code(ind) # (B, H, W, C)
        commitment_cost = 0.25
        if self.bug == "commitment_terms_swapped":
            diff = commitment_cost * (z_q - z_e.detach()).pow(2).mean() + (z_q.detach() - z_e).pow(2).mean()
        else:
            diff = commitment_cost * (z_q.detach() - z_e).pow(2).mean() + (z_q - z_e.detach()).pow(2).mean()
        diff *= self.kld_scale

        if self.bug != "straight_through_dropped":
            z_q = z_e + (z_q - z_e).detach() # noop in forward pass, straight-through gradient estimator in backward pass
        z_q = z_q.permute(0, 3, 1, 2) # stack encodings into channels again: (B, C, H, W)
        return z_q, diff, ind

    def embed_code(self, embed_id):
        return F.embedding(embed_id, self.embed.weight)


# dvq/model/loss.py
class Normal:
    """
    simple normal distribution with fixed variance, as used by DeepMind in their VQVAE
    note that DeepMind's reconstruction loss (I think incorrectly?) misses a factor of 2,
    which I have added to the normalizer of the reconstruction loss in nll(), we'll report
    number that is half of what we expect in their jupyter notebook
    """
    data_variance = 0.06327039811675479 # cifar-10 data variance, from deepmind sonnet code

    @classmethod
    def inmap(cls, x):
        return x - 0.5 # map [0,1] range to [-0.5, 0.5]

    @classmethod
    def unmap(cls, x):
        return torch.clamp(x + 0.5, 0, 1)

    @classmethod
    def nll(cls, x, mu):
        return ((x - mu)**2).mean() / (2 * cls.data_variance) #+ math.log(math.sqrt(2 * math.pi * cls.data_variance))


# dvq/vqvae.py
class VQVAE(pl.LightningModule):

    def __init__(self, args, input_channels=3, bug=None):
        super().__init__()
        self.args = args

        # encoder/decoder module pair
        Encoder, Decoder = {
            'deepmind': (DeepMindEncoder, DeepMindDecoder),
        }[args.enc_dec_flavor]
        self.encoder = Encoder(input_channels=input_channels, n_hid=args.n_hid)
        self.decoder = Decoder(n_init=args.embedding_dim, n_hid=args.n_hid, output_channels=input_channels)

        # the quantizer module sandwiched between them, +contributes a KL(posterior || prior) loss to ELBO
        QuantizerModule = {
            'vqvae': VQVAEQuantize,
        }[args.vq_flavor]
        self.quantizer = QuantizerModule(self.encoder.output_channels, args.num_embeddings, args.embedding_dim,
                                         bug=bug)

        # the data reconstruction loss in the ELBO
        ReconLoss = {
            'l2': Normal,
        }[args.loss_flavor]
        self.recon_loss = ReconLoss

    def forward(self, x):
        z = self.encoder(x)
        z_q, latent_loss, ind = self.quantizer(z)
        x_hat = self.decoder(z_q)
        return x_hat, latent_loss, ind

    def training_step(self, batch, batch_idx):
        x, y = batch # hate that i have to do this here in the model
        x = self.recon_loss.inmap(x)
        x_hat, latent_loss, ind = self.forward(x)
        recon_loss = self.recon_loss.nll(x, x_hat)
        loss = recon_loss + latent_loss
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch # hate that i have to do this here in the model
        x = self.recon_loss.inmap(x)
        x_hat, latent_loss, ind = self.forward(x)
        recon_loss = self.recon_loss.nll(x, x_hat)
        self.log('val_recon_loss', recon_loss, prog_bar=True)

        # debugging: cluster perplexity. when perplexity == num_embeddings then all clusters are used exactly equally
        encodings = F.one_hot(ind, self.quantizer.n_embed).float().reshape(-1, self.quantizer.n_embed)
        avg_probs = encodings.mean(0)
        perplexity = (-(avg_probs * torch.log(avg_probs + 1e-10)).sum()).exp()
        cluster_use = torch.sum(avg_probs > 0)
        self.log('val_perplexity', perplexity, prog_bar=True)
        self.log('val_cluster_use', cluster_use, prog_bar=True)
        return recon_loss  # (port) returned for eval_fn

    def configure_optimizers(self):

        # separate out all parameters to those that will and won't experience regularizing weight decay
        decay = set()
        no_decay = set()
        whitelist_weight_modules = (torch.nn.Linear, torch.nn.Conv2d, torch.nn.ConvTranspose2d)
        blacklist_weight_modules = (torch.nn.LayerNorm, torch.nn.BatchNorm2d, torch.nn.Embedding)
        for mn, m in self.named_modules():
            for pn, p in m.named_parameters():
                fpn = '%s.%s' % (mn, pn) if mn else pn # full param name

                if pn.endswith('bias'):
                    # all biases will not be decayed
                    no_decay.add(fpn)
                elif pn.endswith('weight') and isinstance(m, whitelist_weight_modules):
                    # weights of whitelist modules will be weight decayed
                    decay.add(fpn)
                elif pn.endswith('weight') and isinstance(m, blacklist_weight_modules):
                    # weights of blacklist modules will NOT be weight decayed
                    no_decay.add(fpn)

        # validate that we considered every parameter
        param_dict = {pn: p for pn, p in self.named_parameters()}
        inter_params = decay & no_decay
        union_params = decay | no_decay
        assert len(inter_params) == 0, "parameters %s made it into both decay/no_decay sets!" % (str(inter_params), )
        assert len(param_dict.keys() - union_params) == 0, "parameters %s were not separated into either decay/no_decay set!" \
                                                    % (str(param_dict.keys() - union_params), )

        # create the pytorch optimizer object
        optim_groups = [
            {"params": [param_dict[pn] for pn in sorted(list(decay))], "weight_decay": 1e-4},
            {"params": [param_dict[pn] for pn in sorted(list(no_decay))], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(optim_groups, lr=3e-4, betas=(0.9, 0.999), eps=1e-08, weight_decay=1e-4)
        self.optimizer = optimizer

        return optimizer


# -----------------------------------------------------------------------------
def cos_anneal(e0, e1, t0, t1, e):
    """ ramp from (e0, t0) -> (e1, t1) through a cosine schedule based on e \in [e0, e1] """
    alpha = max(0, min(1, (e - e0) / (e1 - e0))) # what fraction of the way through are we
    alpha = 1.0 - math.cos(alpha * math.pi/2) # warp through cosine
    t = alpha * t1 + (1 - alpha) * t0 # interpolate accordingly
    return t


class DecayLR(pl.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        # The step size is annealed from 1e10−4 to 1.25e10−6 over 1,200,000 updates. I use 3e-4
        t = cos_anneal(0, 1200000, 3e-4, 1.25e-6, trainer.global_step)
        for g in pl_module.optimizer.param_groups:
            g['lr'] = t


# (port) dvq/data/cifar10.py on synthetic CIFAR-style images
class SyntheticCifar(torch.utils.data.Dataset):
    """Ten classes of 16x16 RGB images in [0, 1]: a class colour and shape (disc, square, bar, cross) on a textured
    background."""

    def __init__(self, seed, n, transform):
        gen = torch.Generator().manual_seed(seed)
        self.transform = transform
        self.targets = torch.arange(n) % 10
        yy, xx = torch.meshgrid(torch.arange(IMG), torch.arange(IMG), indexing='ij')
        palette = torch.rand(10, 3, generator=torch.Generator().manual_seed(777))
        imgs = []
        for c in self.targets.tolist():
            bg = 0.3 * torch.rand(3, 1, 1, generator=gen) + 0.1 * torch.rand(3, IMG, IMG, generator=gen)
            cy, cx = torch.randint(4, IMG - 4, (2,), generator=gen).tolist()
            shape = c % 4
            if shape == 0:
                mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= 12
            elif shape == 1:
                mask = ((yy - cy).abs() <= 3) & ((xx - cx).abs() <= 3)
            elif shape == 2:
                mask = (yy - cy).abs() <= 1
            else:
                mask = ((yy - cy).abs() <= 1) | ((xx - cx).abs() <= 1)
            img = torch.where(mask, palette[c][:, None, None].expand(3, IMG, IMG), bg)
            imgs.append(img.clamp(0, 1))
        self.data = torch.stack(imgs)

    def __getitem__(self, i):
        return self.transform(self.data[i]), self.targets[i]

    def __len__(self):
        return len(self.targets)


def train_transform(img):
    # T.RandomCrop(32, padding=4, padding_mode='reflect'), T.RandomHorizontalFlip(), T.ToTensor()
    padded = F.pad(img[None], (4, 4, 4, 4), mode='reflect')[0]
    i, j = torch.randint(0, 9, (2,)).tolist()
    img = padded[:, i:i + IMG, j:j + IMG]
    if float(torch.rand(1)) < 0.5:
        img = img.flip(-1)
    return img


def val_transform(img):
    return img


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)

    args = types.SimpleNamespace(vq_flavor='vqvae', enc_dec_flavor='deepmind', loss_flavor='l2',
                                 num_embeddings=64, embedding_dim=16, n_hid=16,  # (port) 512, 64, 64
                                 batch_size=32, num_workers=0)  # (port) 128, 8

    train_dataloader = DataLoader(SyntheticCifar(seed, 320, train_transform), batch_size=args.batch_size,
                                  num_workers=args.num_workers, drop_last=True, shuffle=True,
                                  generator=torch.Generator().manual_seed(seed))
    val_dataloader = DataLoader(SyntheticCifar(seed + 1000, 64, val_transform), batch_size=args.batch_size,
                                num_workers=args.num_workers, drop_last=True)

    model = VQVAE(args, bug=bug)

    # annealing schedules for lots of constants
    callbacks = []
    callbacks.append(DecayLR())

    # the pieces of Trainer.fit that the step-by-step loop below needs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(barebones=True, accelerator="cpu", devices=1, max_steps=3000000)
    trainer.strategy.connect(model)
    model.trainer = trainer
    optimizer = model.configure_optimizers()

    state = {"it": None, "epoch": 0, "batch_idx": 0, "global_step": 0}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:
                state["epoch"] += 1
            model.train()
            state["it"], state["batch_idx"] = iter(train_dataloader), 0
            return next(state["it"])

    def train_step():
        batch = next_batch()
        batch_idx = state["batch_idx"]
        state["batch_idx"] += 1
        fit_state = types.SimpleNamespace(global_step=state["global_step"])
        for cb in callbacks:
            cb.on_train_batch_start(fit_state, model, batch, batch_idx, 0)
        result = {}

        def closure():
            loss = model.training_step(batch, batch_idx)
            model.optimizer_zero_grad(state["epoch"], batch_idx, optimizer)
            model.backward(loss)
            result["loss"] = loss.detach().clone()
            return result["loss"]

        model.optimizer_step(state["epoch"], batch_idx, optimizer, optimizer_closure=closure)
        state["global_step"] += 1
        return result["loss"]

    def eval_fn(m, batch):
        model.eval()
        losses = []
        with torch.no_grad():
            for batch_idx, b in enumerate(val_dataloader):
                losses.append(float(model.validation_step(b, batch_idx)))
        model.train()
        return sum(losses) / len(losses)

    def loss_fn(outputs, x):
        x_hat, latent_loss, ind = outputs
        return model.recon_loss.nll(x, x_hat) + latent_loss

    first = next(iter(DataLoader(train_dataloader.dataset, batch_size=args.batch_size)))
    x0 = model.recon_loss.inmap(first[0])
    return Program(name="deepvq_vqvae", model=model, batch=(x0, x0), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``z_q = z_e + (z_q - z_e).detach()`` left out: the decoder sees the codebook vectors themselves and the
    # reconstruction loss never reaches the encoder (classic VQ-VAE slip).
    Bug("straight_through_dropped", functools.partial(_build, bug="straight_through_dropped"), "learning_ledger",
        ("DEPENDENCY",)),
    # the stop-gradients of the two VQ terms exchanged: the codebook gets the 0.25 commitment weight and the encoder
    # the full codebook pull -- the repository's own model.py before the fix of
    # https://github.com/karpathy/deep-vector-quantization/issues/2 (commit b39653a).
    Bug("commitment_terms_swapped", functools.partial(_build, bug="commitment_terms_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
]

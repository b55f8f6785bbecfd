"""FactorVAE (Kim & Mnih, "Disentangling by Factorising") as 1Konny/FactorVAE trains it on dSprites
(``scripts/run_dsprites_gamma6p4.sh``): the ``FactorVAE1`` conv encoder giving ``mu`` and ``logvar`` as a 1x1 map,
reparameterisation, the transposed-conv decoder giving logits; the VAE loss is the Bernoulli reconstruction
(``binary_cross_entropy_with_logits`` summed, divided by the batch) + KL + ``gamma`` times the total-correlation
estimate ``(D_z[:, :1] - D_z[:, 1:]).mean()`` of a 6-layer MLP discriminator; the discriminator is trained by
cross-entropy to tell ``z`` from ``permute_dims`` of a second batch's ``z`` (each latent dimension shuffled on its
own); two Adam optimizers (VAE lr 1e-4 betas 0.9/0.999, D lr 1e-4 betas 0.5/0.9), VAE step then D step per batch.

Source: https://github.com/1Konny/FactorVAE
Commit: 8c97b1fc6150fa8f9241468b2c687b83335543d4
Files: solver.py, model.py, ops.py, dataset.py, main.py, scripts/run_dsprites_gamma6p4.sh
License: MIT (Copyright (c) 2018 WonKwang Lee; full text in LICENSES/1Konny-FactorVAE.txt)
Domain: vision, generative model (disentangling VAE with an adversarial total-correlation penalty)

Deviations from the original:
- sizes: batch_size 64 -> 16; the discriminator's hidden width 1000 -> 256 (six linear layers kept); z_dim 10,
  gamma 6.4 and the 64x64 image size unchanged; both learning rates 1e-4 -> 1e-3 so that 30 steps show the loss
  falling (the original runs 7e5 iterations);
- data: the dSprites .npz is replaced by 256 synthetic 64x64 binary images made from ``seed`` (one square, ellipse
  or triangle of random scale and position, as dSprites' shapes), in the repository's ``CustomTensorDataset``
  (second image by ``random.choice``, the module ``random`` seeded with ``seed``); shuffled DataLoader, no workers;
- the D step's first term: solver.py computes ``D_tc_loss`` from the ``D_z`` of the VAE step, whose graph runs
  through the encoder that ``optim_VAE.step()`` has just changed in place; since PyTorch 1.5 that backward raises
  (the RuntimeError of https://github.com/1Konny/FactorVAE/issues/15 and #13). The port evaluates the discriminator
  on ``z.detach()`` there: the same value and the same gradient for ``D`` (``D`` is not stepped in between); the
  gradient the original also sent into the VAE was cleared by the next ``optim_VAE.zero_grad()`` unused;
- ``cuda()`` moves, visdom, tqdm, checkpoints and the traversal GIFs are left out; ``recon_loss``'s deprecated
  ``size_average=False`` is written as its equivalent ``reduction='sum'``;
- one ``train_step`` is one iteration of ``Solver.train``'s inner loop (returns ``vae_loss``); the Program's model is
  the VAE, its ``loss_fn`` the VAE loss under the current discriminator; ``eval_fn`` the reconstruction loss and KL
  of a batch under ``no_grad`` (the original has no validation pass);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402  (the original's style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE = 16
Z_DIM = 10
GAMMA = 6.4
LR_VAE = 1e-3  # the original 1e-4
LR_D = 1e-3  # the original 1e-4
D_WIDTH = 256  # the original 1000


# ---- model.py --------------------------------------------------------------------------------------------------

class Discriminator(nn.Module):
    def __init__(self, z_dim):
        super(Discriminator, self).__init__()
        self.z_dim = z_dim
        self.net = nn.Sequential(
            nn.Linear(z_dim, D_WIDTH),
            nn.LeakyReLU(0.2, True),
            nn.Linear(D_WIDTH, D_WIDTH),
            nn.LeakyReLU(0.2, True),
            nn.Linear(D_WIDTH, D_WIDTH),
            nn.LeakyReLU(0.2, True),
            nn.Linear(D_WIDTH, D_WIDTH),
            nn.LeakyReLU(0.2, True),
            nn.Linear(D_WIDTH, D_WIDTH),
            nn.LeakyReLU(0.2, True),
            nn.Linear(D_WIDTH, 2),
        )
        self.weight_init()

    def weight_init(self, mode='normal'):
        if mode == 'kaiming':
            initializer = kaiming_init
        elif mode == 'normal':
            initializer = normal_init

        for block in self._modules:
            for m in self._modules[block]:
                initializer(m)

    def forward(self, z):
        return self.net(z).squeeze()


class FactorVAE1(nn.Module):
    """Encoder and Decoder architecture for 2D Shapes data."""
    def __init__(self, z_dim=10):
        super(FactorVAE1, self).__init__()
        self.z_dim = z_dim
        self.encode = nn.Sequential(
            nn.Conv2d(1, 32, 4, 2, 1),
            nn.ReLU(True),
            nn.Conv2d(32, 32, 4, 2, 1),
            nn.ReLU(True),
            nn.Conv2d(32, 64, 4, 2, 1),
            nn.ReLU(True),
            nn.Conv2d(64, 64, 4, 2, 1),
            nn.ReLU(True),
            nn.Conv2d(64, 128, 4, 1),
            nn.ReLU(True),
            nn.Conv2d(128, 2*z_dim, 1)
        )
        self.decode = nn.Sequential(
            nn.Conv2d(z_dim, 128, 1),
            nn.ReLU(True),
            nn.ConvTranspose2d(128, 64, 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(64, 64, 4, 2, 1),
            nn.ReLU(True),
            nn.ConvTranspose2d(64, 32, 4, 2, 1),
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 32, 4, 2, 1),
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 1, 4, 2, 1),
        )
        self.weight_init()

    def weight_init(self, mode='normal'):
        if mode == 'kaiming':
            initializer = kaiming_init
        elif mode == 'normal':
            initializer = normal_init

        for block in self._modules:
            for m in self._modules[block]:
                initializer(m)

    def reparametrize(self, mu, logvar):
        std = logvar.mul(0.5).exp_()
        eps = std.data.new(std.size()).normal_()
        return eps.mul(std).add_(mu)

    def forward(self, x, no_dec=False):
        stats = self.encode(x)
        mu = stats[:, :self.z_dim]
        logvar = stats[:, self.z_dim:]
        z = self.reparametrize(mu, logvar)

        if no_dec:
            return z.squeeze()
        else:
            x_recon = self.decode(z).view(x.size())
            return x_recon, mu, logvar, z.squeeze()


def kaiming_init(m):
    if isinstance(m, (nn.Linear, nn.Conv2d)):
        init.kaiming_normal_(m.weight)
        if m.bias is not None:
            m.bias.data.fill_(0)
    elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        m.weight.data.fill_(1)
        if m.bias is not None:
            m.bias.data.fill_(0)


def normal_init(m):
    if isinstance(m, (nn.Linear, nn.Conv2d)):
        init.normal_(m.weight, 0, 0.02)
        if m.bias is not None:
            m.bias.data.fill_(0)
    elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        m.weight.data.fill_(1)
        if m.bias is not None:
            m.bias.data.fill_(0)


# ---- ops.py ----------------------------------------------------------------------------------------------------

def recon_loss(x, x_recon):
    n = x.size(0)
    loss = F.binary_cross_entropy_with_logits(x_recon, x, reduction='sum').div(n)
    return loss


def kl_divergence(mu, logvar):
    kld = -0.5*(1+logvar-mu**2-logvar.exp()).sum(1).mean()
    return kld


def permute_dims(z, bug=None):
    assert z.dim() == 2

    B, _ = z.size()
    if bug == "permute_dims_one_perm":
        # one permutation for every latent dimension: the "permuted" batch is only the batch reordered, the same
        # joint distribution as q(z), so there is nothing for the discriminator to tell apart
        perm = torch.randperm(B).to(z.device)
        return z[perm]
    perm_z = []
    for z_j in z.split(1, 1):
        perm = torch.randperm(B).to(z.device)
        perm_z_j = z_j[perm]
        perm_z.append(perm_z_j)

    return torch.cat(perm_z, 1)


# ---- dataset.py ------------------------------------------------------------------------------------------------

class CustomTensorDataset(Dataset):
    def __init__(self, data_tensor, transform=None):
        self.data_tensor = data_tensor
        self.transform = transform
        self.indices = range(len(self))

    def __getitem__(self, index1):
        index2 = random.choice(self.indices)

        img1 = self.data_tensor[index1]
        img2 = self.data_tensor[index2]
        if self.transform is not None:
            img1 = self.transform(img1)
            img2 = self.transform(img2)

        return img1, img2

    def __len__(self):
        return self.data_tensor.size(0)


def make_sprites(gen, n, size=64):
    """dSprites-like binary images: one square, ellipse or triangle of random scale and position ([n, 1, 64, 64])."""
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    imgs = torch.zeros(n, 1, size, size)
    for i in range(n):
        shape = int(torch.randint(0, 3, (1,), generator=gen))
        r = 6 + 8 * float(torch.rand(1, generator=gen))
        cy, cx = (r + (size - 2 * r) * torch.rand(2, generator=gen)).tolist()
        dy, dx = (yy - cy) / r, (xx - cx) / r
        if shape == 0:
            mask = (dy.abs() <= 1) & (dx.abs() <= 1)
        elif shape == 1:
            mask = dy ** 2 + (dx / 0.6) ** 2 <= 1
        else:
            mask = (dy <= 1) & (dx.abs() <= (dy + 1) / 2)
        imgs[i, 0] = mask.float()
    return imgs


# ---- solver.py (Solver.__init__ / Solver.train) -----------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    gen = torch.Generator().manual_seed(seed)

    data = make_sprites(gen, 256)
    data_loader = DataLoader(CustomTensorDataset(data), batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                             generator=torch.Generator().manual_seed(seed))

    VAE = FactorVAE1(Z_DIM)
    optim_VAE = optim.Adam(VAE.parameters(), lr=LR_VAE, betas=(0.9, 0.999))
    D = Discriminator(Z_DIM)
    optim_D = optim.Adam(D.parameters(), lr=LR_D, betas=(0.5, 0.9))

    ones = torch.ones(BATCH_SIZE, dtype=torch.long)
    zeros = torch.zeros(BATCH_SIZE, dtype=torch.long)
    state = {"global_iter": 0, "it": iter(data_loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(data_loader)
            return next(state["it"])

    def vae_objective(outputs, x_true1):
        x_recon, mu, logvar, z = outputs
        vae_recon_loss = recon_loss(x_true1, x_recon)
        vae_kld = kl_divergence(mu, logvar)

        D_z = D(z)
        if bug == "tc_logits_swapped":
            # the density-ratio logits taken the wrong way round: the VAE is pushed to raise the total correlation
            vae_tc_loss = (D_z[:, 1:] - D_z[:, :1]).mean()
        else:
            vae_tc_loss = (D_z[:, :1] - D_z[:, 1:]).mean()

        return vae_recon_loss + vae_kld + GAMMA*vae_tc_loss, D_z

    def train_step():
        VAE.train()
        D.train()
        state["global_iter"] += 1
        x_true1, x_true2 = next_batch()

        x_recon, mu, logvar, z = VAE(x_true1)
        vae_loss, D_z = vae_objective((x_recon, mu, logvar, z), x_true1)

        optim_VAE.zero_grad()
        vae_loss.backward(retain_graph=True)
        optim_VAE.step()

        z_prime = VAE(x_true2, no_dec=True)
        z_pperm = permute_dims(z_prime, bug=bug).detach()
        D_z_pperm = D(z_pperm)
        if bug == "D_z_detached":
            # the workaround offered in https://github.com/1Konny/FactorVAE/issues/15 for the in-place RuntimeError:
            # D_z.detach() silences it, but the "z from q(z)" half of the discriminator's loss then carries no
            # gradient, and D learns only from the permuted samples
            D_tc_loss = 0.5*(F.cross_entropy(D_z.detach(), zeros) + F.cross_entropy(D_z_pperm, ones))
        else:
            D_z = D(z.detach())  # the VAE step's D_z (see the module docstring)
            D_tc_loss = 0.5*(F.cross_entropy(D_z, zeros) + F.cross_entropy(D_z_pperm, ones))

        optim_D.zero_grad()
        D_tc_loss.backward()
        optim_D.step()
        return vae_loss.detach()

    def loss_fn(outputs, x):
        return vae_objective(outputs, x)[0]

    def eval_fn(model, batch):
        x, _ = batch
        model.eval()
        with torch.no_grad():
            x_recon, mu, logvar, _z = model(x)
            r, k = recon_loss(x, x_recon), kl_divergence(mu, logvar)
        model.train()
        return float(r), float(k)

    first = data[:BATCH_SIZE]
    return Program(name="factorvae_dsprites", model=VAE, batch=(first, first), loss_fn=loss_fn,
                   optimizer=optim_VAE, train_step=train_step, eval_fn=eval_fn, loader=data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the workaround of https://github.com/1Konny/FactorVAE/issues/15 (D_z.detach() in D_tc_loss): the
    # discriminator's loss keeps a term with no gradient, D never learns what q(z) looks like.
    Bug("D_z_detached", functools.partial(_build, bug="D_z_detached"), "learning_ledger", ("OBJECTIVE",)),
    # one randperm for all latent dimensions (classic): the permuted batch has the same joint as q(z), the
    # discriminator's two classes are indistinguishable and the TC estimate carries no signal.
    Bug("permute_dims_one_perm", functools.partial(_build, bug="permute_dims_one_perm"), "learning_ledger",
        ("TASK",)),
    # the TC estimate's logits swapped (classic sign slip): gamma * TC rewards a more entangled code.
    Bug("tc_logits_swapped", functools.partial(_build, bug="tc_logits_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
]

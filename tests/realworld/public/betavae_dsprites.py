"""beta-VAE of 1Konny/Beta-VAE in the capacity-annealed form of Burgess et al. (objective B, model ``BetaVAE_B``), as
the repository's ``run_dsprites_B_gamma100_z10.sh`` trains it on dSprites: a four strided-conv + three-linear
encoder giving ``mu`` and ``logvar``, reparameterisation, the mirrored decoder giving logits; the loss is the
Bernoulli reconstruction (``binary_cross_entropy_with_logits`` summed over pixels, divided by the batch size) plus
``gamma * |total_kld - C|`` with the capacity ``C`` raised linearly from 0 to ``C_max`` over ``C_stop_iter``
iterations; Adam(lr 5e-4, betas 0.9/0.999), ``zero_grad`` / ``backward`` / ``step`` per batch (``Solver.train``).

Source: https://github.com/1Konny/Beta-VAE
Commit: 977a1ece88e190dd8a556b4e2efb665f759d0772
Files: model.py, solver.py, dataset.py, main.py, run_dsprites_B_gamma100_z10.sh
License: MIT (Copyright (c) 2018 WonKwang Lee)
Domain: generative model (disentangling beta-VAE, capacity annealing)

Deviations from the original:
- sizes: batch_size 64 -> 16, C_stop_iter 1e5 -> 100 (so the capacity rises within a short run); z_dim 10, gamma
  100, C_max 20, lr 5e-4, the model's widths and the 64x64 image size unchanged;
- data: the dSprites download (``download_dsprites.sh``, an .npz) is replaced by 256 synthetic 64x64 binary images
  made from ``seed`` (one white square, ellipse or triangle of random scale and position on black, as dSprites'
  shapes), kept in ``CustomTensorDataset`` as the original keeps dSprites; shuffled DataLoader without workers;
- ``cuda()`` moves, ``Variable`` wrapping of the batch, visdom plotting, tqdm, checkpoints and the traversal GIFs
  are left out; the module-wide ``warnings.filterwarnings("ignore")`` of solver.py is not installed (it would
  silence warnings for the whole process); the deprecated calls the original makes (``init.kaiming_normal``,
  ``size_average=False``, ``F.sigmoid``) are kept;
- one ``train_step`` is one iteration of ``Solver.train``'s inner loop; ``loss_fn`` is the beta-VAE loss at the
  current capacity ``C``; ``eval_fn`` is the reconstruction loss and KL of a batch under ``no_grad`` (the
  original has no validation pass).
"""
# ruff: noqa: PLR0402, UP008  (the original's style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
import torch.optim as optim
from torch.autograd import Variable
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

BATCH_SIZE = 16
Z_DIM = 10
GAMMA = 100
C_MAX = 20
C_STOP_ITER = 100
LR = 5e-4


# ---- model.py --------------------------------------------------------------------------------------------------

def reparametrize(mu, logvar):
    std = logvar.div(2).exp()
    eps = Variable(std.data.new(std.size()).normal_())
    return mu + std*eps


class View(nn.Module):
    def __init__(self, size):
        super(View, self).__init__()
        self.size = size

    def forward(self, tensor):
        return tensor.view(self.size)


class BetaVAE_H(nn.Module):
    """Model proposed in original beta-VAE paper(Higgins et al, ICLR, 2017)."""

    def __init__(self, z_dim=10, nc=3):
        super(BetaVAE_H, self).__init__()
        self.z_dim = z_dim
        self.nc = nc
        self.encoder = nn.Sequential(
            nn.Conv2d(nc, 32, 4, 2, 1),          # B,  32, 32, 32
            nn.ReLU(True),
            nn.Conv2d(32, 32, 4, 2, 1),          # B,  32, 16, 16
            nn.ReLU(True),
            nn.Conv2d(32, 64, 4, 2, 1),          # B,  64,  8,  8
            nn.ReLU(True),
            nn.Conv2d(64, 64, 4, 2, 1),          # B,  64,  4,  4
            nn.ReLU(True),
            nn.Conv2d(64, 256, 4, 1),            # B, 256,  1,  1
            nn.ReLU(True),
            View((-1, 256*1*1)),                 # B, 256
            nn.Linear(256, z_dim*2),             # B, z_dim*2
        )
        self.decoder = nn.Sequential(
            nn.Linear(z_dim, 256),               # B, 256
            View((-1, 256, 1, 1)),               # B, 256,  1,  1
            nn.ReLU(True),
            nn.ConvTranspose2d(256, 64, 4),      # B,  64,  4,  4
            nn.ReLU(True),
            nn.ConvTranspose2d(64, 64, 4, 2, 1), # B,  64,  8,  8
            nn.ReLU(True),
            nn.ConvTranspose2d(64, 32, 4, 2, 1), # B,  32, 16, 16
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 32, 4, 2, 1), # B,  32, 32, 32
            nn.ReLU(True),
            nn.ConvTranspose2d(32, nc, 4, 2, 1),  # B, nc, 64, 64
        )

        self.weight_init()

    def weight_init(self):
        for block in self._modules:
            for m in self._modules[block]:
                kaiming_init(m)

    def forward(self, x):
        distributions = self._encode(x)
        mu = distributions[:, :self.z_dim]
        logvar = distributions[:, self.z_dim:]
        z = reparametrize(mu, logvar)
        x_recon = self._decode(z)

        return x_recon, mu, logvar

    def _encode(self, x):
        return self.encoder(x)

    def _decode(self, z):
        return self.decoder(z)


class BetaVAE_B(BetaVAE_H):
    """Model proposed in understanding beta-VAE paper(Burgess et al, arxiv:1804.03599, 2018)."""

    def __init__(self, z_dim=10, nc=1):
        super(BetaVAE_B, self).__init__()
        self.nc = nc
        self.z_dim = z_dim

        self.encoder = nn.Sequential(
            nn.Conv2d(nc, 32, 4, 2, 1),          # B,  32, 32, 32
            nn.ReLU(True),
            nn.Conv2d(32, 32, 4, 2, 1),          # B,  32, 16, 16
            nn.ReLU(True),
            nn.Conv2d(32, 32, 4, 2, 1),          # B,  32,  8,  8
            nn.ReLU(True),
            nn.Conv2d(32, 32, 4, 2, 1),          # B,  32,  4,  4
            nn.ReLU(True),
            View((-1, 32*4*4)),                  # B, 512
            nn.Linear(32*4*4, 256),              # B, 256
            nn.ReLU(True),
            nn.Linear(256, 256),                 # B, 256
            nn.ReLU(True),
            nn.Linear(256, z_dim*2),             # B, z_dim*2
        )

        self.decoder = nn.Sequential(
            nn.Linear(z_dim, 256),               # B, 256
            nn.ReLU(True),
            nn.Linear(256, 256),                 # B, 256
            nn.ReLU(True),
            nn.Linear(256, 32*4*4),              # B, 512
            nn.ReLU(True),
            View((-1, 32, 4, 4)),                # B,  32,  4,  4
            nn.ConvTranspose2d(32, 32, 4, 2, 1), # B,  32,  8,  8
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 32, 4, 2, 1), # B,  32, 16, 16
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 32, 4, 2, 1), # B,  32, 32, 32
            nn.ReLU(True),
            nn.ConvTranspose2d(32, nc, 4, 2, 1), # B,  nc, 64, 64
        )
        self.weight_init()

    def weight_init(self):
        for block in self._modules:
            for m in self._modules[block]:
                kaiming_init(m)

    def forward(self, x):
        distributions = self._encode(x)
        mu = distributions[:, :self.z_dim]
        logvar = distributions[:, self.z_dim:]
        z = reparametrize(mu, logvar)
        x_recon = self._decode(z).view(x.size())

        return x_recon, mu, logvar

    def _encode(self, x):
        return self.encoder(x)

    def _decode(self, z):
        return self.decoder(z)


def kaiming_init(m):
    if isinstance(m, (nn.Linear, nn.Conv2d)):
        init.kaiming_normal(m.weight)
        if m.bias is not None:
            m.bias.data.fill_(0)
    elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        m.weight.data.fill_(1)
        if m.bias is not None:
            m.bias.data.fill_(0)


# ---- solver.py -------------------------------------------------------------------------------------------------

def reconstruction_loss(x, x_recon, distribution, bug=None):
    batch_size = x.size(0)
    assert batch_size != 0

    if distribution == 'bernoulli':
        if bug == "sigmoid_before_bce_with_logits":
            # the decoder's logits squashed before a loss that applies the sigmoid itself
            recon_loss = F.binary_cross_entropy_with_logits(F.sigmoid(x_recon), x, size_average=False).div(batch_size)
        elif bug == "recon_mean_over_pixels":
            # the reconstruction averaged over pixels (size_average left at its default) instead of summed
            recon_loss = F.binary_cross_entropy_with_logits(x_recon, x).div(batch_size)
        else:
            recon_loss = F.binary_cross_entropy_with_logits(x_recon, x, size_average=False).div(batch_size)
    elif distribution == 'gaussian':
        x_recon = F.sigmoid(x_recon)
        recon_loss = F.mse_loss(x_recon, x, size_average=False).div(batch_size)
    else:
        recon_loss = None

    return recon_loss


def kl_divergence(mu, logvar):
    batch_size = mu.size(0)
    assert batch_size != 0
    if mu.data.ndimension() == 4:
        mu = mu.view(mu.size(0), mu.size(1))
    if logvar.data.ndimension() == 4:
        logvar = logvar.view(logvar.size(0), logvar.size(1))

    klds = -0.5*(1 + logvar - mu.pow(2) - logvar.exp())
    total_kld = klds.sum(1).mean(0, True)
    dimension_wise_kld = klds.mean(0)
    mean_kld = klds.mean(1).mean(0, True)

    return total_kld, dimension_wise_kld, mean_kld


# ---- dataset.py ------------------------------------------------------------------------------------------------

class CustomTensorDataset(Dataset):
    def __init__(self, data_tensor):
        self.data_tensor = data_tensor

    def __getitem__(self, index):
        return self.data_tensor[index]

    def __len__(self):
        return self.data_tensor.size(0)


def make_sprites(gen, n, size=64):
    """dSprites-like binary images: one square, ellipse or triangle of random scale and position (shape [n, 1, 64, 64])."""
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


# ---- main.py / Solver --------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    decoder_dist = 'bernoulli'
    nc = 1

    net = BetaVAE_B(Z_DIM, nc)
    optimizer = optim.Adam(net.parameters(), lr=LR, betas=(0.9, 0.999))

    data = make_sprites(gen, 256)
    data_loader = DataLoader(CustomTensorDataset(data), batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                             generator=torch.Generator().manual_seed(seed))

    state = {"global_iter": 0, "it": iter(data_loader)}
    C_max = Variable(torch.FloatTensor([C_MAX]))

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(data_loader)
            return next(state["it"])

    def beta_vae_objective(outputs, x):
        x_recon, mu, logvar = outputs
        recon_loss = reconstruction_loss(x, x_recon, decoder_dist, bug=bug)
        total_kld, _dim_wise_kld, _mean_kld = kl_divergence(mu, logvar)
        C = torch.clamp(C_max/C_STOP_ITER*state["global_iter"], 0, C_max.data[0])
        beta_vae_loss = recon_loss + GAMMA*(total_kld-C).abs()
        return beta_vae_loss.squeeze()

    def train_step():
        net.train()
        state["global_iter"] += 1

        x = Variable(next_batch())
        x_recon, mu, logvar = net(x)
        beta_vae_loss = beta_vae_objective((x_recon, mu, logvar), x)

        if bug == "zero_grad_after_backward":
            beta_vae_loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            beta_vae_loss.backward()
        optimizer.step()
        return beta_vae_loss.detach()

    def eval_fn(model, batch):
        x, _ = batch
        model.eval()
        with torch.no_grad():
            x_recon, mu, logvar = model(x)
            recon_loss = reconstruction_loss(x, x_recon, decoder_dist)
            total_kld, _, _ = kl_divergence(mu, logvar)
        return float(recon_loss), float(total_kld)

    first = data[:BATCH_SIZE]
    return Program(name="betavae_dsprites", model=net, batch=(first, first), loss_fn=beta_vae_objective,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=data_loader)


build = functools.partial(_build)

BUGS = [
    # sigmoid applied to the decoder's logits before binary_cross_entropy_with_logits (classic): the reconstruction
    # target can never be matched, the loss saturates.
    Bug("sigmoid_before_bce_with_logits", functools.partial(_build, bug="sigmoid_before_bce_with_logits"),
        "learning_ledger", ("OBJECTIVE",)),
    # the reconstruction term averaged over the 4096 pixels instead of summed (classic reduction slip): gamma * |KL - C|
    # outweighs it by three orders of magnitude and the decoder learns almost nothing.
    Bug("recon_mean_over_pixels", functools.partial(_build, bug="recon_mean_over_pixels"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() moved after backward() (classic): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe",
        ("encoder.0.weight",)),
]

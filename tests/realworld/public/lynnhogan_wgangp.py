"""WGAN-GP from LynnHo's DCGAN/LSGAN/WGAN-GP/DRAGAN collection: ``ConvGenerator`` (transposed convolutions, BatchNorm,
ReLU, tanh) and ``ConvDiscriminator`` (strided convolutions, LeakyReLU, layer norm as ``GroupNorm(1, C)`` since batch
norm cannot be used with a gradient penalty), the WGAN losses (critic: ``-mean(D(real)) + mean(D(fake))``,
generator: ``-mean(D(fake))``) and the one-centred gradient penalty (``(||grad_x D(x)||_2 - 1)^2`` at random points
on the lines between real and fake samples, ``create_graph=True``) with weight 10; Adam (lr 2e-4, betas (0.5,
0.999)) for each network, ``n_d = 5`` critic updates per generator update.

Source: https://github.com/LynnHo/DCGAN-LSGAN-WGAN-GP-DRAGAN-Pytorch
Commit: 9e757de6f02dc5f3b31e380428787bf2b3137906
Files: train.py, module.py, torchprob/gan/loss.py, torchprob/gan/gradient_penalty.py, torchlib/layers/layers.py
(Identity), commands.sh (the run's flags)
License: MIT (Copyright (c) 2017 Zhenliang He; full text in LICENSES/LynnHo-DCGAN-LSGAN-WGAN-GP-DRAGAN-Pytorch.txt)
Domain: generative adversarial network (WGAN with gradient penalty)

Deviations from the original:
- the run's flags are commands.sh's Fashion-MNIST WGAN-GP line (``--adversarial_loss_mode=wgan
  --gradient_penalty_mode=1-gp --gradient_penalty_sample_mode=line --n_d=5``; gradient_penalty_weight 10,
  gradient_penalty_d_norm layer_norm, lr 2e-4, beta_1 0.5 are the defaults) with sizes for 2 CPU cores: images
  32x32 -> 16x16 (so n_G_upsamplings = n_D_downsamplings = 2 instead of 3), the networks' ``dim`` 64 -> 8,
  z_dim 128 -> 16, batch_size 64 -> 16;
- data: Fashion-MNIST (torchvision download) is replaced by 256 synthetic 16x16 one-channel images made from
  ``seed`` (a bright bar, horizontal or vertical, or a ring at a random place), scaled to [-1, 1] as
  ``Normalize(mean=[0.5], std=[0.5])`` gives; the loader shuffles with a seeded generator and drops the last
  incomplete batch (``drop_remainder=True``);
- the script's module-level objects are built in ``_build``; device cpu; tensorboard, tqdm, sampling to image files
  and checkpoints are left out; ``torchlib.Identity`` is copied; the noise comes from the global torch RNG, seeded
  at build;
- one ``train_step`` is one iteration of the inner epoch loop: ``train_D(x_real)``, ``it_d += 1``, and
  ``train_G()`` when ``it_d % n_d == 0``; it returns the critic's objective ``D_loss`` (``d_loss + gp * weight``,
  what ``train_D`` minimizes); the Program's model is the critic D, its batch ``(cat([x_real, x_fake]), (x_real,
  x_fake))`` and ``loss_fn`` is train_D's ``D_loss`` on D's outputs for that batch (the penalty calls D on the
  interpolates itself);
- the ``bug`` switches select the variants in ``BUGS`` (the penalty functions take a ``bug`` argument for them); with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import types

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program

N_IMAGES = 256
SIZE = 16


# ---- torchlib/layers/layers.py -----------------------------------------------------------------------------------

class Identity(torch.nn.Module):

    def __init__(self, *args, **keyword_args):
        super().__init__()

    def forward(self, x):
        return x


torchlib = types.SimpleNamespace(Identity=Identity)


# ---- module.py ---------------------------------------------------------------------------------------------------

def _get_norm_layer_2d(norm):
    if norm == 'none':
        return torchlib.Identity
    elif norm == 'batch_norm':
        return nn.BatchNorm2d
    elif norm == 'instance_norm':
        return functools.partial(nn.InstanceNorm2d, affine=True)
    elif norm == 'layer_norm':
        return lambda num_features: nn.GroupNorm(1, num_features)
    else:
        raise NotImplementedError


class ConvGenerator(nn.Module):

    def __init__(self,
                 input_dim=128,
                 output_channels=3,
                 dim=64,
                 n_upsamplings=4,
                 norm='batch_norm'):
        super().__init__()

        Norm = _get_norm_layer_2d(norm)

        def dconv_norm_relu(in_dim, out_dim, kernel_size=4, stride=2, padding=1):
            return nn.Sequential(
                nn.ConvTranspose2d(in_dim, out_dim, kernel_size, stride=stride, padding=padding, bias=False or Norm == torchlib.Identity),
                Norm(out_dim),
                nn.ReLU()
            )

        layers = []

        # 1: 1x1 -> 4x4
        d = min(dim * 2 ** (n_upsamplings - 1), dim * 8)
        layers.append(dconv_norm_relu(input_dim, d, kernel_size=4, stride=1, padding=0))

        # 2: upsamplings, 4x4 -> 8x8 -> 16x16 -> ...
        for i in range(n_upsamplings - 1):
            d_last = d
            d = min(dim * 2 ** (n_upsamplings - 2 - i), dim * 8)
            layers.append(dconv_norm_relu(d_last, d, kernel_size=4, stride=2, padding=1))

        layers.append(nn.ConvTranspose2d(d, output_channels, kernel_size=4, stride=2, padding=1))
        layers.append(nn.Tanh())

        self.net = nn.Sequential(*layers)

    def forward(self, z):
        x = self.net(z)
        return x


class ConvDiscriminator(nn.Module):

    def __init__(self,
                 input_channels=3,
                 dim=64,
                 n_downsamplings=4,
                 norm='batch_norm'):
        super().__init__()

        Norm = _get_norm_layer_2d(norm)

        def conv_norm_lrelu(in_dim, out_dim, kernel_size=4, stride=2, padding=1):
            return nn.Sequential(
                nn.Conv2d(in_dim, out_dim, kernel_size, stride=stride, padding=padding, bias=False or Norm == torchlib.Identity),
                Norm(out_dim),
                nn.LeakyReLU(0.2)
            )

        layers = []

        # 1: downsamplings, ... -> 16x16 -> 8x8 -> 4x4
        d = dim
        layers.append(nn.Conv2d(input_channels, d, kernel_size=4, stride=2, padding=1))
        layers.append(nn.LeakyReLU(0.2))

        for i in range(n_downsamplings - 1):
            d_last = d
            d = min(dim * 2 ** (i + 1), dim * 8)
            layers.append(conv_norm_lrelu(d_last, d, kernel_size=4, stride=2, padding=1))

        # 2: logit
        layers.append(nn.Conv2d(d, 1, kernel_size=4, stride=1, padding=0))

        self.net = nn.Sequential(*layers)

    def forward(self, x):
        y = self.net(x)
        return y


# ---- torchprob/gan/loss.py ---------------------------------------------------------------------------------------

def get_gan_losses_fn():
    bce = torch.nn.BCEWithLogitsLoss()

    def d_loss_fn(r_logit, f_logit):
        r_loss = bce(r_logit, torch.ones_like(r_logit))
        f_loss = bce(f_logit, torch.zeros_like(f_logit))
        return r_loss, f_loss

    def g_loss_fn(f_logit):
        f_loss = bce(f_logit, torch.ones_like(f_logit))
        return f_loss

    return d_loss_fn, g_loss_fn


def get_lsgan_losses_fn():
    mse = torch.nn.MSELoss()

    def d_loss_fn(r_logit, f_logit):
        r_loss = mse(r_logit, torch.ones_like(r_logit))
        f_loss = mse(f_logit, torch.zeros_like(f_logit))
        return r_loss, f_loss

    def g_loss_fn(f_logit):
        f_loss = mse(f_logit, torch.ones_like(f_logit))
        return f_loss

    return d_loss_fn, g_loss_fn


def get_wgan_losses_fn():
    def d_loss_fn(r_logit, f_logit):
        r_loss = -r_logit.mean()
        f_loss = f_logit.mean()
        return r_loss, f_loss

    def g_loss_fn(f_logit):
        f_loss = -f_logit.mean()
        return f_loss

    return d_loss_fn, g_loss_fn


def get_adversarial_losses_fn(mode):
    if mode == 'gan':
        return get_gan_losses_fn()
    elif mode == 'lsgan':
        return get_lsgan_losses_fn()
    elif mode == 'wgan':
        return get_wgan_losses_fn()
    raise NotImplementedError(mode)  # hinge_v1 / hinge_v2 are not copied


# ---- torchprob/gan/gradient_penalty.py ---------------------------------------------------------------------------

# ======================================
# =           sample method            =
# ======================================

def _sample_line(real, fake):
    shape = [real.size(0)] + [1] * (real.dim() - 1)
    alpha = torch.rand(shape, device=real.device)
    sample = real + alpha * (fake - real)
    return sample


def _sample_DRAGAN(real, fake):  # fake is useless
    beta = torch.rand_like(real)
    fake = real + 0.5 * real.std() * beta
    sample = _sample_line(real, fake)
    return sample


# ======================================
# =      gradient penalty method       =
# ======================================

def _norm(x, bug=None):
    if bug == "gp_norm_over_channels":
        # the norm taken over dim 1 only (the channel axis): one norm per pixel instead of one per sample
        return x.norm(p=2, dim=1)
    norm = x.view(x.size(0), -1).norm(p=2, dim=1)
    return norm


def _one_mean_gp(grad, bug=None):
    norm = _norm(grad, bug)
    gp = ((norm - 1)**2).mean()
    return gp


def _zero_mean_gp(grad, bug=None):
    norm = _norm(grad, bug)
    gp = (norm**2).mean()
    return gp


def _lipschitz_penalty(grad, bug=None):
    norm = _norm(grad, bug)
    gp = (torch.max(torch.zeros_like(norm), norm - 1)**2).mean()
    return gp


def gradient_penalty(f, real, fake, gp_mode, sample_mode, bug=None):
    sample_fns = {
        'line': _sample_line,
        'real': lambda real, fake: real,
        'fake': lambda real, fake: fake,
        'dragan': _sample_DRAGAN,
    }

    gp_fns = {
        '1-gp': _one_mean_gp,
        '0-gp': _zero_mean_gp,
        'lp': _lipschitz_penalty,
    }

    if gp_mode == 'none':
        gp = torch.tensor(0, dtype=real.dtype, device=real.device)
    else:
        x = sample_fns[sample_mode](real, fake).detach()
        x.requires_grad = True
        pred = f(x)
        # without create_graph the penalty is a constant: no gradient of it reaches D
        create_graph = bug != "gp_without_create_graph"
        grad = torch.autograd.grad(pred, x, grad_outputs=torch.ones_like(pred), create_graph=create_graph)[0]
        gp = gp_fns[gp_mode](grad, bug)

    return gp


# ---- data --------------------------------------------------------------------------------------------------------

class SyntheticImages(Dataset):
    """Stands in for ``OnlyImage(FashionMNIST)``: 16x16 one-channel images in [-1, 1], each a bright bar (horizontal
    or vertical) or a ring at a random place."""

    def __init__(self, n, seed):
        gen = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
        images = []
        for _ in range(n):
            kind = int(torch.randint(0, 3, (1,), generator=gen))
            cy, cx = (int(v) for v in torch.randint(4, SIZE - 4, (2,), generator=gen))
            if kind == 0:
                img = ((yy - cy).abs() <= 1) & ((xx - cx).abs() <= 5)
            elif kind == 1:
                img = ((xx - cx).abs() <= 1) & ((yy - cy).abs() <= 5)
            else:
                d = ((yy - cy) ** 2 + (xx - cx) ** 2).float().sqrt()
                img = (d >= 2) & (d <= 3.5)
            x = img.float() * 0.9 + 0.05 * torch.rand(SIZE, SIZE, generator=gen)
            images.append((x - 0.5) / 0.5)
        self.images = torch.stack(images)[:, None]

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i]


# ---- train.py ----------------------------------------------------------------------------------------------------

def get_args():
    """train.py's ``py.arg`` defaults with commands.sh's WGAN-GP flags and the sizes above."""
    return types.SimpleNamespace(dataset='synthetic', batch_size=16, epochs=50, lr=0.0002, beta_1=0.5, n_d=5,
                                 z_dim=16, adversarial_loss_mode='wgan', gradient_penalty_mode='1-gp',
                                 gradient_penalty_sample_mode='line', gradient_penalty_weight=10.0,
                                 experiment_name='none', gradient_penalty_d_norm='layer_norm')


def _build(seed, bug=None):
    args = get_args()
    device = torch.device("cpu")
    torch.manual_seed(seed)

    data_loader = DataLoader(SyntheticImages(N_IMAGES, seed), batch_size=args.batch_size, shuffle=True,
                             drop_last=True, generator=torch.Generator().manual_seed(seed))
    shape = [SIZE, SIZE, 1]
    n_G_upsamplings = n_D_downsamplings = 2

    # setup the normalization function for discriminator
    if args.gradient_penalty_mode == 'none':
        d_norm = 'batch_norm'
    else:  # cannot use batch normalization with gradient penalty
        d_norm = args.gradient_penalty_d_norm

    # networks
    G = ConvGenerator(args.z_dim, shape[-1], dim=8, n_upsamplings=n_G_upsamplings).to(device)
    D = ConvDiscriminator(shape[-1], dim=8, n_downsamplings=n_D_downsamplings, norm=d_norm).to(device)

    # adversarial_loss_functions
    d_loss_fn, g_loss_fn = get_adversarial_losses_fn(args.adversarial_loss_mode)

    # optimizer
    G_optimizer = torch.optim.Adam(G.parameters(), lr=args.lr, betas=(args.beta_1, 0.999))
    if bug == "d_optimizer_over_g":
        # copy-paste slip: the critic's optimizer is built over the generator's parameters
        D_optimizer = torch.optim.Adam(G.parameters(), lr=args.lr, betas=(args.beta_1, 0.999))
    else:
        D_optimizer = torch.optim.Adam(D.parameters(), lr=args.lr, betas=(args.beta_1, 0.999))

    def train_G():
        G.train()
        D.train()

        z = torch.randn(args.batch_size, args.z_dim, 1, 1).to(device)
        x_fake = G(z)

        x_fake_d_logit = D(x_fake)
        G_loss = g_loss_fn(x_fake_d_logit)

        G.zero_grad()
        G_loss.backward()
        G_optimizer.step()

        return {'g_loss': G_loss}

    def train_D(x_real):
        G.train()
        D.train()

        z = torch.randn(args.batch_size, args.z_dim, 1, 1).to(device)
        x_fake = G(z).detach()

        x_real_d_logit = D(x_real)
        x_fake_d_logit = D(x_fake)

        x_real_d_loss, x_fake_d_loss = d_loss_fn(x_real_d_logit, x_fake_d_logit)
        gp = gradient_penalty(functools.partial(D), x_real, x_fake, gp_mode=args.gradient_penalty_mode, sample_mode=args.gradient_penalty_sample_mode, bug=bug)

        D_loss = (x_real_d_loss + x_fake_d_loss) + gp * args.gradient_penalty_weight

        D.zero_grad()
        D_loss.backward()
        D_optimizer.step()

        return {'d_loss': x_real_d_loss + x_fake_d_loss, 'gp': gp}

    state = {"it": iter(data_loader), "it_d": 0, "it_g": 0}

    def train_step():  # one iteration of the inner epoch loop
        try:
            x_real = next(state["it"])
        except StopIteration:
            state["it"] = iter(data_loader)
            x_real = next(state["it"])
        x_real = x_real.to(device)

        D_loss_dict = train_D(x_real)
        state["it_d"] += 1

        if state["it_d"] % args.n_d == 0:
            train_G()
            state["it_g"] += 1
        return (D_loss_dict['d_loss'] + D_loss_dict['gp'] * args.gradient_penalty_weight).detach()

    x_real = next(iter(DataLoader(data_loader.dataset, batch_size=args.batch_size)))
    with torch.no_grad():
        x_fake = G(torch.randn(args.batch_size, args.z_dim, 1, 1, generator=torch.Generator().manual_seed(seed)))

    def loss_fn(d_logit, targets):  # train_D's D_loss on D's outputs for (cat([x_real, x_fake]))
        x_real, x_fake = targets
        x_real_d_logit, x_fake_d_logit = d_logit[:len(x_real)], d_logit[len(x_real):]
        x_real_d_loss, x_fake_d_loss = d_loss_fn(x_real_d_logit, x_fake_d_logit)
        gp = gradient_penalty(functools.partial(D), x_real, x_fake, gp_mode=args.gradient_penalty_mode, sample_mode=args.gradient_penalty_sample_mode, bug=bug)
        return (x_real_d_loss + x_fake_d_loss) + gp * args.gradient_penalty_weight

    return Program(name="lynnhogan_wgangp", model=D, batch=(torch.cat([x_real, x_fake]), (x_real, x_fake)),
                   loss_fn=loss_fn, optimizer=D_optimizer, train_step=train_step, loader=data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic, reported in other WGAN-GP code (e.g. https://github.com/caogang/wgan-gp/issues/27): the gradient's
    # norm is taken over dim 1 (channels) instead of over each flattened sample, so the penalty pushes every pixel's
    # gradient to norm 1 instead of each sample's.
    Bug("gp_norm_over_channels", functools.partial(_build, bug="gp_norm_over_channels"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: torch.autograd.grad without create_graph=True; the penalty is a constant and none of its gradient
    # reaches the critic's parameters.
    # where re-declared in review (2026-12-07): OBJECTIVE's objective.penalty_without_graph names this very
    # slip (the penalty's gradient with and without create_graph differ)
    Bug("gp_without_create_graph", functools.partial(_build, bug="gp_without_create_graph"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic copy-paste slip: the critic's optimizer is built over the generator's parameters; D never moves.
    Bug("d_optimizer_over_g", functools.partial(_build, bug="d_optimizer_over_g"), "four_structures",
        ("net.0.weight",)),
]

"""Glow as trained by ``train.py``: ``Glow`` (multi-scale blocks: squeeze, ``n_flow`` flows of ``ActNorm`` with
data-dependent initialization, the LU-decomposed invertible 1x1 convolution ``InvConv2dLU`` and the additive
``AffineCoupling`` (the script's default, no ``--affine``) ending in a zero-initialized ``ZeroConv2d``; a split with
a learned Gaussian prior), the 5-bit quantization and uniform dequantization of the images, ``calc_loss`` (negative
log-likelihood in bits per dimension with the discretization term), Adam lr 1e-4, and the loop body: the first
iteration only initializes ActNorm under ``no_grad``, then forward, ``logdet.mean()``, ``calc_loss``,
``model.zero_grad()``, backward, the (constant) warm-up lr, step.

Source: https://github.com/rosinality/glow-pytorch
Commit: 97081ff115a694cf04aeedbd58447f33d242c879
Files: train.py, model.py
License: MIT (LICENSES/rosinality-glow-pytorch.txt)
Domain: generative, normalizing flow (Glow: actnorm, invertible 1x1 conv, coupling, multi-scale prior)

Deviations from the original:
- sizes: 8x8 images (64), 2 blocks (4) of 2 flows (32), coupling networks 32 channels wide (``AffineCoupling``'s
  default ``filter_size`` 512 is 32 here); batch 16, n_bits 5 and lr 1e-4 are the script's defaults;
- data: the ``ImageFolder`` of CelebA images is replaced by 256 synthetic 8x8 RGB images made from ``seed`` (a
  random smooth colour pattern per image, a 2x2 template upsampled, plus noise, in [0, 1] as ``ToTensor`` gives);
  ``Resize``/``CenterCrop`` are the identity at this size and ``RandomHorizontalFlip`` is written out in torch
  (no torchvision); ``sample_data``'s endless loader is kept (``num_workers=0``, a seeded shuffle);
- no ``DataParallel`` (``model.module`` is the model itself), no CUDA, no tqdm; the sampling every 100 iterations
  (``utils.save_image``) and the checkpoints are left out, and with them the ``reverse`` methods, ``gaussian_sample``,
  ``calc_z_shapes`` and the plain ``InvConv2d`` of ``--no_lu`` (``Flow`` builds ``InvConv2dLU``, the default);
- the loop's first iteration (``i == 0``: the ActNorm initialization pass under ``no_grad``) runs in ``build``;
  one ``train_step`` is one later iteration of the loop;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: RUF059  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
from math import log, pi

import numpy as np
import torch
from scipy import linalg as la
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

logabs = lambda x: torch.log(torch.abs(x))

FILTER_SIZE = 32  # AffineCoupling's default filter_size (512 in the original)


# ---- model.py ----------------------------------------------------------------------------------------------------

class ActNorm(nn.Module):
    def __init__(self, in_channel, logdet=True):
        super().__init__()

        self.loc = nn.Parameter(torch.zeros(1, in_channel, 1, 1))
        self.scale = nn.Parameter(torch.ones(1, in_channel, 1, 1))

        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))
        self.logdet = logdet

    def initialize(self, input):
        with torch.no_grad():
            flatten = input.permute(1, 0, 2, 3).contiguous().view(input.shape[1], -1)
            mean = (
                flatten.mean(1)
                .unsqueeze(1)
                .unsqueeze(2)
                .unsqueeze(3)
                .permute(1, 0, 2, 3)
            )
            std = (
                flatten.std(1)
                .unsqueeze(1)
                .unsqueeze(2)
                .unsqueeze(3)
                .permute(1, 0, 2, 3)
            )

            self.loc.data.copy_(-mean)
            self.scale.data.copy_(1 / (std + 1e-6))

    def forward(self, input):
        _, _, height, width = input.shape

        if self.initialized.item() == 0:
            self.initialize(input)
            self.initialized.fill_(1)

        log_abs = logabs(self.scale)

        logdet = height * width * torch.sum(log_abs)

        if self.logdet:
            return self.scale * (input + self.loc), logdet

        else:
            return self.scale * (input + self.loc)

    def reverse(self, output):
        return output / self.scale - self.loc


class InvConv2dLU(nn.Module):
    def __init__(self, in_channel):
        super().__init__()

        weight = np.random.randn(in_channel, in_channel)
        q, _ = la.qr(weight)
        w_p, w_l, w_u = la.lu(q.astype(np.float32))
        w_s = np.diag(w_u)
        w_u = np.triu(w_u, 1)
        u_mask = np.triu(np.ones_like(w_u), 1)
        l_mask = u_mask.T

        w_p = torch.from_numpy(w_p)
        w_l = torch.from_numpy(w_l)
        w_s = torch.from_numpy(w_s)
        w_u = torch.from_numpy(w_u)

        self.register_buffer("w_p", w_p)
        self.register_buffer("u_mask", torch.from_numpy(u_mask))
        self.register_buffer("l_mask", torch.from_numpy(l_mask))
        self.register_buffer("s_sign", torch.sign(w_s))
        self.register_buffer("l_eye", torch.eye(l_mask.shape[0]))
        self.w_l = nn.Parameter(w_l)
        self.w_s = nn.Parameter(logabs(w_s))
        self.w_u = nn.Parameter(w_u)

    def forward(self, input):
        _, _, height, width = input.shape

        weight = self.calc_weight()

        out = F.conv2d(input, weight)
        logdet = height * width * torch.sum(self.w_s)

        return out, logdet

    def calc_weight(self):
        weight = (
            self.w_p
            @ (self.w_l * self.l_mask + self.l_eye)
            @ ((self.w_u * self.u_mask) + torch.diag(self.s_sign * torch.exp(self.w_s)))
        )

        return weight.unsqueeze(2).unsqueeze(3)

    def reverse(self, output):
        weight = self.calc_weight()

        return F.conv2d(output, weight.squeeze().inverse().unsqueeze(2).unsqueeze(3))


class ZeroConv2d(nn.Module):
    def __init__(self, in_channel, out_channel, padding=1):
        super().__init__()

        self.conv = nn.Conv2d(in_channel, out_channel, 3, padding=0)
        self.conv.weight.data.zero_()
        self.conv.bias.data.zero_()
        self.scale = nn.Parameter(torch.zeros(1, out_channel, 1, 1))

    def forward(self, input):
        out = F.pad(input, [1, 1, 1, 1], value=1)
        out = self.conv(out)
        out = out * torch.exp(self.scale * 3)

        return out


class AffineCoupling(nn.Module):
    def __init__(self, in_channel, filter_size=FILTER_SIZE, affine=True):
        super().__init__()

        self.affine = affine

        self.net = nn.Sequential(
            nn.Conv2d(in_channel // 2, filter_size, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(filter_size, filter_size, 1),
            nn.ReLU(inplace=True),
            ZeroConv2d(filter_size, in_channel if self.affine else in_channel // 2),
        )

        self.net[0].weight.data.normal_(0, 0.05)
        self.net[0].bias.data.zero_()

        self.net[2].weight.data.normal_(0, 0.05)
        self.net[2].bias.data.zero_()

    def forward(self, input):
        in_a, in_b = input.chunk(2, 1)

        if self.affine:
            log_s, t = self.net(in_a).chunk(2, 1)
            # s = torch.exp(log_s)
            s = F.sigmoid(log_s + 2)
            # out_a = s * in_a + t
            out_b = (in_b + t) * s

            logdet = torch.sum(torch.log(s).view(input.shape[0], -1), 1)

        else:
            net_out = self.net(in_a)
            out_b = in_b + net_out
            logdet = None

        return torch.cat([in_a, out_b], 1), logdet


class Flow(nn.Module):
    def __init__(self, in_channel, affine=True, conv_lu=True):
        super().__init__()

        self.actnorm = ActNorm(in_channel)

        self.invconv = InvConv2dLU(in_channel)

        self.coupling = AffineCoupling(in_channel, affine=affine)

    def forward(self, input):
        out, logdet = self.actnorm(input)
        out, det1 = self.invconv(out)
        out, det2 = self.coupling(out)

        logdet = logdet + det1
        if det2 is not None:
            logdet = logdet + det2

        return out, logdet


def gaussian_log_p(x, mean, log_sd):
    return -0.5 * log(2 * pi) - log_sd - 0.5 * (x - mean) ** 2 / torch.exp(2 * log_sd)


class Block(nn.Module):
    def __init__(self, in_channel, n_flow, split=True, affine=True, conv_lu=True, bug=None):
        super().__init__()

        squeeze_dim = in_channel * 4

        self.flows = nn.ModuleList()
        for i in range(n_flow):
            self.flows.append(Flow(squeeze_dim, affine=affine, conv_lu=conv_lu))

        self.split = split

        if split:
            self.prior = ZeroConv2d(in_channel * 2, in_channel * 4)

        else:
            self.prior = ZeroConv2d(in_channel * 4, in_channel * 8)
        self.bug = bug

    def forward(self, input):
        b_size, n_channel, height, width = input.shape
        if self.bug == "squeeze_viewed_not_permuted":
            # the squeeze as one view: rows of the image become channels, no 2x2 neighbourhoods gathered
            out = input.contiguous().view(b_size, n_channel * 4, height // 2, width // 2)
        else:
            squeezed = input.view(b_size, n_channel, height // 2, 2, width // 2, 2)
            squeezed = squeezed.permute(0, 1, 3, 5, 2, 4)
            out = squeezed.contiguous().view(b_size, n_channel * 4, height // 2, width // 2)

        logdet = 0

        for flow in self.flows:
            out, det = flow(out)
            logdet = logdet + det

        if self.split:
            out, z_new = out.chunk(2, 1)
            mean, log_sd = self.prior(out).chunk(2, 1)
            log_p = gaussian_log_p(z_new, mean, log_sd)
            log_p = log_p.view(b_size, -1).sum(1)

        else:
            zero = torch.zeros_like(out)
            mean, log_sd = self.prior(zero).chunk(2, 1)
            log_p = gaussian_log_p(out, mean, log_sd)
            log_p = log_p.view(b_size, -1).sum(1)
            z_new = out

        return out, logdet, log_p, z_new


class Glow(nn.Module):
    def __init__(
        self, in_channel, n_flow, n_block, affine=True, conv_lu=True, bug=None
    ):
        super().__init__()

        self.blocks = nn.ModuleList()
        n_channel = in_channel
        for i in range(n_block - 1):
            self.blocks.append(Block(n_channel, n_flow, affine=affine, conv_lu=conv_lu, bug=bug))
            n_channel *= 2
        self.blocks.append(Block(n_channel, n_flow, split=False, affine=affine, bug=bug))

    def forward(self, input):
        log_p_sum = 0
        logdet = 0
        out = input
        z_outs = []

        for block in self.blocks:
            out, det, log_p, z_new = block(out)
            z_outs.append(z_new)
            logdet = logdet + det

            if log_p is not None:
                log_p_sum = log_p_sum + log_p

        return log_p_sum, logdet, z_outs


# ---- train.py ----------------------------------------------------------------------------------------------------

class SyntheticImages(Dataset):
    """Stand-in for ``datasets.ImageFolder`` with ``Resize``/``CenterCrop`` (identity here), ``RandomHorizontalFlip``
    and ``ToTensor``."""

    def __init__(self, images):
        self.images = images

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = self.images[i]
        if torch.rand(()) < 0.5:
            img = img.flip(-1)
        return img, 0


def sample_data(dataset, batch_size, generator):
    loader = DataLoader(dataset, shuffle=True, batch_size=batch_size, num_workers=0, generator=generator)
    loader = iter(loader)

    while True:
        try:
            yield next(loader)

        except StopIteration:
            loader = DataLoader(
                dataset, shuffle=True, batch_size=batch_size, num_workers=0, generator=generator
            )
            loader = iter(loader)
            yield next(loader)


def calc_loss(log_p, logdet, image_size, n_bins, bug=None):
    # log_p = calc_log_p([z_list])
    n_pixel = image_size * image_size * 3

    loss = -log(n_bins) * n_pixel
    if bug == "logdet_left_out":
        loss = loss + log_p  # the change-of-variables term dropped: only the prior's likelihood of z
    else:
        loss = loss + logdet + log_p

    return (
        (-loss / (log(2) * n_pixel)).mean(),
        (log_p / (log(2) * n_pixel)).mean(),
        (logdet / (log(2) * n_pixel)).mean(),
    )


def _build(seed, bug=None):
    args = argparse.Namespace(batch=16, iter=200000, n_flow=2, n_block=2, no_lu=False, affine=False, n_bits=5,
                              lr=1e-4, img_size=8, temp=0.7, n_sample=20, path=None)
    torch.manual_seed(seed)
    np.random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    templates = F.interpolate(torch.rand(256, 3, 2, 2, generator=gen), size=args.img_size, mode="bilinear",
                              align_corners=False)
    images = (templates + 0.05 * torch.randn(256, 3, args.img_size, args.img_size, generator=gen)).clamp(0, 1)

    model_single = Glow(
        3, args.n_flow, args.n_block, affine=args.affine, conv_lu=not args.no_lu, bug=bug
    )
    model = model_single

    optimizer = optim.Adam(model.parameters(), lr=args.lr)

    # train(args, model, optimizer)
    dataset = iter(sample_data(SyntheticImages(images), args.batch, gen))
    n_bins = 2.0 ** args.n_bits

    def preprocess(image):
        image = image * 255

        if args.n_bits < 8:
            image = torch.floor(image / 2 ** (8 - args.n_bits))

        image = image / n_bins - 0.5
        return image

    # i == 0: the ActNorm initialization pass
    image, _ = next(dataset)
    image = preprocess(image)
    with torch.no_grad():
        log_p, logdet, _ = model(
            image + torch.rand_like(image) / n_bins
        )
    first = (image + torch.rand_like(image) / n_bins,)

    def train_step():
        image, _ = next(dataset)
        image = preprocess(image)

        log_p, logdet, _ = model(image + torch.rand_like(image) / n_bins)

        logdet = logdet.mean()

        loss, log_p, log_det = calc_loss(log_p, logdet, args.img_size, n_bins, bug=bug)
        if bug != "zero_grad_dropped":
            model.zero_grad()
        loss.backward()
        # warmup_lr = args.lr * min(1, i * batch_size / (50000 * 10))
        warmup_lr = args.lr
        optimizer.param_groups[0]["lr"] = warmup_lr
        optimizer.step()
        return loss.detach()

    def loss_fn(outputs, _targets):
        """The loop's ``logdet.mean()`` and ``calc_loss`` on the model's (log_p, logdet, z_outs)."""
        log_p, logdet, _ = outputs
        return calc_loss(log_p, logdet.mean(), args.img_size, n_bins, bug=bug)[0]

    return Program(name="glowpytorch_glow", model=model, batch=first, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # calc_loss without the log-determinant (classic flow slip): the objective is the prior's likelihood of z
    # alone, which the flow raises by shrinking everything towards 0 (ActNorm scales collapse).
    Bug("logdet_left_out", functools.partial(_build, bug="logdet_left_out"), "learning_ledger", ("OBJECTIVE",)),
    # model.zero_grad() left out (classic): every step applies the sum of all gradients so far.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
    # the squeeze written as a single view instead of view + permute (classic layout slip): each "2x2
    # neighbourhood" channel group holds half-rows of the image instead.
    Bug("squeeze_viewed_not_permuted", functools.partial(_build, bug="squeeze_viewed_not_permuted"), "tensor_trace",
        ("blocks.0",)),
]

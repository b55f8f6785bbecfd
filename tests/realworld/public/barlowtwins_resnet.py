# ruff: noqa: UP004, C408
"""Barlow Twins: a ResNet backbone and an MLP projector trained to make the cross-correlation matrix of two views'
batch-normalized embeddings the identity, with the repository's LARS optimizer and warm-up + cosine schedule.

Source: https://github.com/facebookresearch/barlowtwins
Commit: 8e8d284ca0bc02f88b92328e53f9b901e86b4a3c
Files: main.py (BarlowTwins, off_diagonal, LARS, adjust_learning_rate, Transform, GaussianBlur, Solarization, the
parameter groups and the loop body of main_worker)
License: MIT (Copyright (c) Facebook, Inc. and its affiliates; full text in LICENSES/facebookresearch-barlowtwins.txt)
Domain: self-supervised (redundancy reduction, two views, LARS)

Kept as written: ``BarlowTwins`` (backbone with ``fc = nn.Identity()``, the projector of Linear(bias=False) /
BatchNorm1d / ReLU blocks and a last Linear(bias=False), ``self.bn = BatchNorm1d(affine=False)``, ``c = bn(z1).T @
bn(z2)``, ``c.div_(batch_size)``, on-diagonal ``(c_ii - 1)^2`` and ``lambd`` times the squared off-diagonal),
``off_diagonal``, ``LARS`` (weight-decay and adaptation filters on 1-d parameters, eta 0.001, momentum 0.9), the two
parameter groups (weights / 1-d biases and norms), ``LARS(parameters, lr=0, weight_decay=1e-6,
weight_decay_filter=True, lars_adaptation_filter=True)``, ``adjust_learning_rate`` (10 warm-up epochs from 0, cosine
to 0.001 of base, base = batch_size / 256, times 0.2 for weights and 0.0048 for biases), lambd 0.0051, and the loop
body (adjust the lr, zero_grad, autocast forward, ``scaler.scale(loss).backward()``, ``scaler.step``,
``scaler.update``); the two view pipelines of ``Transform`` (blur p=1.0 / p=0.1, solarization p=0.0 / p=0.2).

Deviations from the original:
- one process, no GPU: ``torch.multiprocessing.spawn``, ``init_process_group``, ``SyncBatchNorm``,
  ``DistributedDataParallel``, the ``DistributedSampler`` and ``torch.distributed.all_reduce(c)`` (a sum over one
  process) are dropped; ``torch.cuda.amp`` (autocast, GradScaler) becomes ``torch.amp`` on the CPU, disabled.
- torchvision is not installed: ``torchvision.models.resnet50(zero_init_residual=True)`` becomes the written-out
  ResNet-18 of ``_tv_resnet.py`` (same module names, channel widths / 8, so the representation has 64 features, not
  2048), its residual branches' last BatchNorm weights set to 0 by hand as ``zero_init_residual`` does; the
  torchvision transforms are written out below on tensors: RandomResizedCrop (scale 0.08-1, bicubic),
  RandomHorizontalFlip, RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8) with the hue shift done as a rotation
  in YIQ space (torchvision shifts H in HSV), RandomGrayscale(p=0.2), PIL's GaussianBlur (sigma 0.1-2.0, as a
  separable Gaussian kernel), ``ImageOps.solarize`` (threshold 128/255), ToTensor's [0, 1] range and Normalize.
  Their random draws (the original's ``random`` module and torch RNG) come from one generator seeded from the seed.
- sizes for 2 CPU cores: ImageNet (``ImageFolder``) is replaced by 64 synthetic 32x32 RGB images made from the seed
  (a coloured square, disk or stripe pattern at a random place on a noisy background); crop size 224 -> 32;
  batch_size 2048 -> 32 (so base_lr = 32 / 256 as the formula gives); projector 8192-8192-8192 -> 128-128-128;
  workers 8 -> 0, pin_memory off.
- ``train_step`` runs one iteration of the epoch/step loop (a generator over the same two loops); the stats printing,
  the checkpoint resume/save and the final backbone save are dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.amp import GradScaler, autocast

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tv_resnet
from _api import Bug, Program

N_IMAGES, SIZE = 64, 32


# ---------------------------------------------------------------- main.py
def adjust_learning_rate(args, optimizer, loader, step):
    max_steps = args.epochs * len(loader)
    warmup_steps = 10 * len(loader)
    base_lr = args.batch_size / 256
    if step < warmup_steps:
        lr = base_lr * step / warmup_steps
    else:
        step -= warmup_steps
        max_steps -= warmup_steps
        q = 0.5 * (1 + math.cos(math.pi * step / max_steps))
        end_lr = base_lr * 0.001
        lr = base_lr * q + end_lr * (1 - q)
    optimizer.param_groups[0]['lr'] = lr * args.learning_rate_weights
    optimizer.param_groups[1]['lr'] = lr * args.learning_rate_biases


def off_diagonal(x):
    # return a flattened view of the off-diagonal elements of a square matrix
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def resnet_zero_init_residual():
    """``torchvision.models.resnet50(zero_init_residual=True)``, as the written-out ResNet-18 (width 8)."""
    net = _tv_resnet.resnet18(width=8)
    for m in net.modules():
        if isinstance(m, _tv_resnet.BasicBlock):
            nn.init.constant_(m.bn2.weight, 0)
    return net


class BarlowTwins(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.backbone = resnet_zero_init_residual()
        self.backbone.fc = nn.Identity()

        # projector
        sizes = [64] + list(map(int, args.projector.split('-')))
        layers = []
        for i in range(len(sizes) - 2):
            layers.append(nn.Linear(sizes[i], sizes[i + 1], bias=False))
            layers.append(nn.BatchNorm1d(sizes[i + 1]))
            layers.append(nn.ReLU(inplace=True))
        layers.append(nn.Linear(sizes[-2], sizes[-1], bias=False))
        self.projector = nn.Sequential(*layers)

        # normalization layer for the representations z1 and z2
        self.bn = nn.BatchNorm1d(sizes[-1], affine=False)

    def forward(self, y1, y2):
        z1 = self.projector(self.backbone(y1))
        z2 = self.projector(self.backbone(y2))

        # empirical cross-correlation matrix
        c = self.bn(z1).T @ self.bn(z2)

        # sum the cross-correlation matrix between all gpus
        c.div_(self.args.batch_size)

        on_diag = torch.diagonal(c).add_(-1).pow_(2).sum()
        if self.args.bug == "offdiag_pow_removed":
            # the change proposed in https://github.com/facebookresearch/barlowtwins/issues/50: the in-place pow_ on
            # the diagonal was read as squaring c, so the second pow_ was dropped
            off_diag = off_diagonal(c).sum()
        else:
            off_diag = off_diagonal(c).pow_(2).sum()
        loss = on_diag + self.args.lambd * off_diag
        return loss


class LARS(optim.Optimizer):
    def __init__(self, params, lr, weight_decay=0, momentum=0.9, eta=0.001,
                 weight_decay_filter=False, lars_adaptation_filter=False):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                        eta=eta, weight_decay_filter=weight_decay_filter,
                        lars_adaptation_filter=lars_adaptation_filter)
        super().__init__(params, defaults)


    def exclude_bias_and_norm(self, p):
        return p.ndim == 1

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g['params']:
                dp = p.grad

                if dp is None:
                    continue

                if not g['weight_decay_filter'] or not self.exclude_bias_and_norm(p):
                    dp = dp.add(p, alpha=g['weight_decay'])

                if not g['lars_adaptation_filter'] or not self.exclude_bias_and_norm(p):
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(param_norm > 0.,
                                    torch.where(update_norm > 0,
                                                (g['eta'] * param_norm / update_norm), one), one)
                    dp = dp.mul(q)

                param_state = self.state[p]
                if 'mu' not in param_state:
                    param_state['mu'] = torch.zeros_like(p)
                mu = param_state['mu']
                mu.mul_(g['momentum']).add_(dp)

                p.add_(mu, alpha=-g['lr'])


# ---------------------------------------------------------------- Transform, written out on tensors
def _u(g, lo, hi):
    return lo + (hi - lo) * torch.rand((), generator=g).item()


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None]


def random_resized_crop(img, size, g, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    _, h, w = img.shape
    area = h * w
    for _ in range(10):
        target = area * _u(g, *scale)
        aspect = math.exp(_u(g, math.log(ratio[0]), math.log(ratio[1])))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(torch.randint(0, h - ch + 1, (), generator=g))
            left = int(torch.randint(0, w - cw + 1, (), generator=g))
            break
    else:
        ch, cw, top, left = h, w, 0, 0
    crop = img[:, top:top + ch, left:left + cw]
    return F.interpolate(crop[None], size=(size, size), mode="bicubic", align_corners=False)[0].clamp(0, 1)


def color_jitter(img, g, brightness, contrast, saturation, hue):
    for op in torch.randperm(4, generator=g).tolist():
        if op == 0:
            img = (img * _u(g, 1 - brightness, 1 + brightness)).clamp(0, 1)
        elif op == 1:
            img = ((img - _gray(img).mean()) * _u(g, 1 - contrast, 1 + contrast) + _gray(img).mean()).clamp(0, 1)
        elif op == 2:
            img = ((img - _gray(img)) * _u(g, 1 - saturation, 1 + saturation) + _gray(img)).clamp(0, 1)
        else:
            theta = 2 * math.pi * _u(g, -hue, hue)
            yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
            rot = torch.tensor([[1.0, 0.0, 0.0], [0.0, math.cos(theta), -math.sin(theta)],
                                [0.0, math.sin(theta), math.cos(theta)]])
            img = torch.einsum("ij,jhw->ihw", torch.linalg.inv(yiq) @ rot @ yiq, img).clamp(0, 1)
    return img


def pil_gaussian_blur(img, sigma):
    radius = max(1, math.ceil(3 * sigma))
    x = torch.arange(-radius, radius + 1, dtype=torch.float32)
    k = torch.exp(-x ** 2 / (2 * sigma * sigma))
    k = k / k.sum()
    out = F.pad(img[None], (radius, radius, radius, radius), mode="replicate")
    out = F.conv2d(out, k.view(1, 1, -1, 1).repeat(3, 1, 1, 1), groups=3)
    out = F.conv2d(out, k.view(1, 1, 1, -1).repeat(3, 1, 1, 1), groups=3)
    return out[0]


class GaussianBlur(object):
    def __init__(self, p, g):
        self.p = p
        self.g = g

    def __call__(self, img):
        if _u(self.g, 0, 1) < self.p:
            sigma = _u(self.g, 0, 1) * 1.9 + 0.1
            return pil_gaussian_blur(img, sigma)
        else:
            return img


class Solarization(object):
    def __init__(self, p, g):
        self.p = p
        self.g = g

    def __call__(self, img):
        if _u(self.g, 0, 1) < self.p:
            return torch.where(img >= 128 / 255, 1 - img, img)
        else:
            return img


MEAN, STD = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


def compose(g, blur_p, solarize_p):
    blur, solarize = GaussianBlur(blur_p, g), Solarization(solarize_p, g)

    def transform(img):
        img = random_resized_crop(img, SIZE, g)
        if _u(g, 0, 1) < 0.5:
            img = img.flip(-1)
        if _u(g, 0, 1) < 0.8:
            img = color_jitter(img, g, 0.4, 0.4, 0.2, 0.1)
        if _u(g, 0, 1) < 0.2:
            img = _gray(img).repeat(3, 1, 1)
        img = solarize(blur(img))
        return (img - MEAN) / STD
    return transform


class Transform:
    def __init__(self, g):
        self.transform = compose(g, blur_p=1.0, solarize_p=0.0)
        self.transform_prime = compose(g, blur_p=0.1, solarize_p=0.2)

    def __call__(self, x):
        y1 = self.transform(x)
        y2 = self.transform_prime(x)
        return y1, y2


class SyntheticImages(torch.utils.data.Dataset):
    """64 images of 4 kinds (square, disk, horizontal stripes, vertical stripes) in random colours and places."""

    def __init__(self, seed, transform):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
        self.images, self.labels, self.transform = [], [], transform
        for i in range(N_IMAGES):
            kind = i % 4
            bg = 0.2 + 0.1 * torch.rand(3, 1, 1, generator=g) + 0.05 * torch.rand(3, SIZE, SIZE, generator=g)
            color = torch.rand(3, 1, 1, generator=g)
            cy, cx = torch.randint(8, SIZE - 8, (2,), generator=g).tolist()
            if kind == 0:
                mask = ((yy - cy).abs() < 6) & ((xx - cx).abs() < 6)
            elif kind == 1:
                mask = (yy - cy) ** 2 + (xx - cx) ** 2 < 49
            elif kind == 2:
                mask = (yy // 4) % 2 == 0
            else:
                mask = (xx // 4) % 2 == 0
            self.images.append(torch.where(mask, color, bg).clamp(0, 1))
            self.labels.append(kind)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


# ---------------------------------------------------------------- main_worker
def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = types.SimpleNamespace(workers=0, epochs=1000, batch_size=32, learning_rate_weights=0.2,
                                 learning_rate_biases=0.0048, weight_decay=1e-6, lambd=0.0051,
                                 projector='128-128-128', print_freq=100, bug=bug)

    model = BarlowTwins(args)
    param_weights = []
    param_biases = []
    # the bug variant builds the groups from the backbone alone: the projector never reaches the optimizer
    for param in (model.backbone.parameters() if bug == "projector_left_out_of_lars" else model.parameters()):
        if param.ndim == 1:
            param_biases.append(param)
        else:
            param_weights.append(param)
    parameters = [{'params': param_weights}, {'params': param_biases}]
    optimizer = LARS(parameters, lr=0, weight_decay=args.weight_decay,
                     weight_decay_filter=True,
                     lars_adaptation_filter=True)

    g = torch.Generator().manual_seed(seed)
    dataset = SyntheticImages(seed, Transform(g))
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, num_workers=args.workers,
        pin_memory=False, shuffle=True, generator=torch.Generator().manual_seed(seed))

    start_epoch = 0
    scaler = GradScaler("cpu", enabled=False)

    def loop():
        for epoch in range(start_epoch, args.epochs):
            for step, ((y1, y2), _) in enumerate(loader, start=epoch * len(loader)):
                adjust_learning_rate(args, optimizer, loader, step)
                optimizer.zero_grad()
                with autocast("cpu", enabled=False):
                    loss = model.forward(y1, y2)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                yield loss

    steps = loop()
    (y1, y2), _ = next(iter(torch.utils.data.DataLoader(SyntheticImages(seed, Transform(torch.Generator().manual_seed(
        seed + 1))), batch_size=args.batch_size)))

    return Program(name="barlowtwins_resnet", model=model, batch=({"y1": y1, "y2": y2},),
                   loss_fn=lambda loss, _targets: loss, optimizer=optimizer, train_step=lambda: next(steps),
                   loader=loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the "fix" proposed in https://github.com/facebookresearch/barlowtwins/issues/50 (closed by its author): the
    # off-diagonal term loses its square and becomes the plain sum of the off-diagonal correlations.
    Bug("offdiag_pow_removed", functools.partial(_build, bug="offdiag_pow_removed"), "learning_ledger",
        ("OBJECTIVE",)),
    # the LARS parameter groups are built from model.backbone only (classic: parameters missing from the optimizer).
    Bug("projector_left_out_of_lars", functools.partial(_build, bug="projector_left_out_of_lars"), "four_structures",
        ("projector.0.weight",)),
]

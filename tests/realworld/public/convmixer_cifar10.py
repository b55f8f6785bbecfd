"""ConvMixer ("Patches Are All You Need?", Trockman & Kolter) trained on CIFAR-10 by the repository's ``train.py``: a
patch-embedding convolution, ``depth`` blocks of a residual depthwise convolution and a pointwise convolution (each
GELU + BatchNorm), global average pooling and a linear head; AdamW with a piecewise-linear one-cycle lr
(``np.interp`` over epochs 0, 2/5, 4/5, 1 of the run, set by hand on ``param_groups[0]`` at every iteration),
``CrossEntropyLoss``, AMP with a GradScaler, ``model.train()`` at every iteration and an eval-mode test pass after
each epoch.

Source: https://github.com/locuslab/convmixer-cifar10
Commit: 2d3d9b73d3caa6112ecdcea866f1d2805f37cc8e
Files: train.py, README.md
License: MIT (Copyright (c) 2022 CMU Locus Lab; full text in LICENSES/locuslab-convmixer-cifar10.txt)
Domain: image classification (ConvMixer CNN, AdamW, per-iteration piecewise-linear lr schedule)

Kept as written: ``Residual``, ``ConvMixer`` (``padding="same"`` depthwise convs), the CIFAR-10 mean/std
normalisation, ``lr_schedule``, ``AdamW(lr=lr_max, weight_decay=wd)``, ``CrossEntropyLoss``, ``nn.DataParallel``
(on the CPU it calls the module), the loop body (``model.train()``, the lr set from ``epoch + (i + 1) /
len(trainloader)``, zero_grad, forward + loss, ``scaler.scale(loss).backward()``, ``scaler.step``,
``scaler.update``, the running train loss/accuracy) and the test pass in eval mode under ``no_grad``.

Deviations from the original:
- CIFAR-10 is not here (no download, no torchvision): synthetic 16x16 RGB images made from ``seed``, 4 classes,
  each a class colour from a seeded palette mixed with a per-image random texture (the rule: the mean colour gives
  the class); 128 training images (4 batches an epoch) and 64 test images;
- sizes for 2 CPU cores: ``--hdim 256 -> 64``, ``--depth 8 -> 4``, ``--psize 2``, ``--conv-ks 5`` unchanged,
  ``n_classes`` 10 -> 4, ``--batch-size 512 -> 32``, ``--epochs 25 -> 10``, ``--workers 2 -> 0``; ``--lr-max``,
  ``--wd``, ``--scale``, ``--reprob``, ``--jitter`` unchanged; argparse is replaced by a namespace with those values;
- torchvision's transforms are written out in plain torch on each image: ``RandomResizedCrop(16, scale=(0.75, 1),
  ratio=(1, 1))`` (bilinear), ``RandomHorizontalFlip``, ``ColorJitter(0.1, 0.1, 0.1)`` (brightness, contrast,
  saturation in that fixed order), ``Normalize``, ``RandomErasing(p=0.25)`` (value 0); ``RandAugment`` is left out;
- no GPU: ``.cuda()`` calls are dropped; ``torch.cuda.amp`` (autocast, GradScaler) becomes ``torch.amp`` on the
  CPU, disabled (scale/step/update run as no-op wrappers);
- the epoch loop is unrolled: one ``train_step`` is one iteration; when an epoch ends, the test pass runs (its
  accuracy kept instead of printed); ``eval_fn`` is the test pass's accuracy on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402  (the original's imports are kept as written)

from __future__ import annotations

import argparse
import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.amp import GradScaler, autocast

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_CLASSES, SIZE, N_TRAIN, N_TEST = 4, 16, 128, 64  # (port) synthetic data


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


def ConvMixer(dim, depth, kernel_size=5, patch_size=2, n_classes=10):
    return nn.Sequential(
        nn.Conv2d(3, dim, kernel_size=patch_size, stride=patch_size),
        nn.GELU(),
        nn.BatchNorm2d(dim),
        *[nn.Sequential(
                Residual(nn.Sequential(
                    nn.Conv2d(dim, dim, kernel_size, groups=dim, padding="same"),
                    nn.GELU(),
                    nn.BatchNorm2d(dim)
                )),
                nn.Conv2d(dim, dim, kernel_size=1),
                nn.GELU(),
                nn.BatchNorm2d(dim)
        ) for i in range(depth)],
        nn.AdaptiveAvgPool2d((1,1)),
        nn.Flatten(),
        nn.Linear(dim, n_classes)
    )


cifar10_mean = (0.4914, 0.4822, 0.4465)
cifar10_std = (0.2471, 0.2435, 0.2616)


# ---- (port) torchvision's transforms written out on one [3, H, W] image in [0, 1] -----------------------------

def _random_resized_crop(img, size, scale, g):
    area = float(torch.empty(1).uniform_(scale[0], scale[1], generator=g))
    side = max(1, min(img.shape[1], round(math.sqrt(area) * img.shape[1])))  # ratio (1, 1): a square
    top = int(torch.randint(0, img.shape[1] - side + 1, (1,), generator=g))
    left = int(torch.randint(0, img.shape[2] - side + 1, (1,), generator=g))
    crop = img[:, top:top + side, left:left + side]
    return F.interpolate(crop[None], size=(size, size), mode="bilinear", align_corners=False)[0]


def _color_jitter(img, jitter, g):
    def factor():
        return float(torch.empty(1).uniform_(1 - jitter, 1 + jitter, generator=g))
    img = (img * factor()).clamp(0, 1)  # brightness
    gray = (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])
    img = ((img - gray.mean()) * factor() + gray.mean()).clamp(0, 1)  # contrast
    gray = (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None]
    return ((img - gray) * factor() + gray).clamp(0, 1)  # saturation


def _random_erasing(img, p, g):
    if float(torch.rand(1, generator=g)) >= p:
        return img
    _, h, w = img.shape
    for _ in range(10):
        area = h * w * float(torch.empty(1).uniform_(0.02, 0.33, generator=g))
        ratio = math.exp(float(torch.empty(1).uniform_(math.log(0.3), math.log(3.3), generator=g)))
        eh, ew = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
        if eh < h and ew < w:
            i = int(torch.randint(0, h - eh + 1, (1,), generator=g))
            j = int(torch.randint(0, w - ew + 1, (1,), generator=g))
            img = img.clone()
            img[:, i:i + eh, j:j + ew] = 0
            return img
    return img


def _normalize(img):
    return (img - torch.tensor(cifar10_mean).view(3, 1, 1)) / torch.tensor(cifar10_std).view(3, 1, 1)


class _SyntheticCIFAR(torch.utils.data.Dataset):
    """(port) In place of ``torchvision.datasets.CIFAR10``: class colour + texture images, seeded."""

    def __init__(self, seed, n, train, args):
        g = torch.Generator().manual_seed(seed)
        palette = torch.rand(N_CLASSES, 3, generator=torch.Generator().manual_seed(seed + 7))
        self.targets = torch.randint(0, N_CLASSES, (n,), generator=g)
        texture = torch.rand(n, 3, SIZE, SIZE, generator=g)
        self.data = 0.55 * palette[self.targets].view(n, 3, 1, 1) + 0.45 * texture
        self.train, self.args, self.g = train, args, torch.Generator().manual_seed(seed + 1 + int(train))

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        img, args, g = self.data[i], self.args, self.g
        if self.train:  # train_transform
            img = _random_resized_crop(img, SIZE, (args.scale, 1.0), g)
            if float(torch.rand(1, generator=g)) < 0.5:
                img = img.flip(-1)
            img = _color_jitter(img, args.jitter, g)
            img = _random_erasing(_normalize(img), args.reprob, g)
        else:  # test_transform
            img = _normalize(img)
        return img, int(self.targets[i])


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    # (port) the argparse defaults, sizes as listed in the docstring
    args = argparse.Namespace(name="ConvMixer", batch_size=32, scale=0.75, reprob=0.25, ra_m=8, ra_n=1, jitter=0.1,
                              hdim=64, depth=4, psize=2, conv_ks=5, wd=0.01, clip_norm=False, epochs=10,
                              lr_max=0.01, workers=0)

    trainset = _SyntheticCIFAR(seed, N_TRAIN, True, args)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=args.batch_size,
                                              shuffle=True, num_workers=args.workers,
                                              generator=torch.Generator().manual_seed(seed))
    testset = _SyntheticCIFAR(seed + 1000, N_TEST, False, args)
    testloader = torch.utils.data.DataLoader(testset, batch_size=args.batch_size,
                                             shuffle=False, num_workers=args.workers)

    model = ConvMixer(args.hdim, args.depth, patch_size=args.psize, kernel_size=args.conv_ks, n_classes=N_CLASSES)
    model = nn.DataParallel(model)  # (port) .cuda() dropped

    lr_schedule = lambda t: np.interp([t], [0, args.epochs*2//5, args.epochs*4//5, args.epochs],
                                      [0, args.lr_max, args.lr_max/20.0, 0])[0]

    opt = optim.AdamW(model.parameters(), lr=args.lr_max, weight_decay=args.wd)
    criterion = nn.CrossEntropyLoss()
    scaler = GradScaler("cpu", enabled=False)  # (port) torch.cuda.amp.GradScaler()
    st = {"epoch": 0, "it": None, "i": 0, "test_acc": None}
    if bug == "train_mode_set_once":
        model.train()

    def train_step():
        if st["it"] is None:
            st["it"], st["i"] = iter(trainloader), 0
        i, (X, y) = st["i"], next(st["it"])
        epoch = st["epoch"]
        if bug != "train_mode_set_once":
            model.train()

        lr = lr_schedule(epoch + (i + 1)/len(trainloader))
        if bug == "lr_from_epoch_only":
            lr = lr_schedule(epoch)
        opt.param_groups[0].update(lr=lr)

        if bug != "zero_grad_after_backward":
            opt.zero_grad()
        with autocast("cpu", enabled=False):  # (port) torch.cuda.amp.autocast()
            output = model(X)
            loss = criterion(output, y)

        scaler.scale(loss).backward()
        if bug == "zero_grad_after_backward":
            opt.zero_grad()
        if args.clip_norm:
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()

        st["i"] += 1
        if st["i"] == len(trainloader):  # the epoch ends: the test pass
            st["it"], st["epoch"] = None, epoch + 1
            st["test_acc"] = test_pass()
        return loss.item()

    def test_pass():
        model.eval()
        test_acc, m = 0, 0
        with torch.no_grad():
            for i, (X, y) in enumerate(testloader):
                with autocast("cpu", enabled=False):
                    output = model(X)
                test_acc += (output.max(1)[1] == y).sum().item()
                m += y.size(0)
        return test_acc / m

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            X, y = batch
            acc = (model(X).max(1)[1] == y).float().mean().item()
        model.train(was)
        return acc

    batch = next(iter(testloader))
    return Program(name="convmixer_cifar10", model=model, batch=batch, loss_fn=criterion, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn, loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: model.train() called once before training instead of at every iteration, so after the first
    # epoch's test pass the model trains in eval mode: every BatchNorm normalises with its running statistics
    # and stops updating them.
    Bug("train_mode_set_once", functools.partial(_build, bug="train_mode_set_once"), "step_probe", ("module.2",)),
    # classic schedule slip: the lr read at the integer epoch instead of epoch + (i + 1) / len(trainloader): the
    # whole first epoch trains at lr 0 and the warm-up moves in steps.
    Bug("lr_from_epoch_only", functools.partial(_build, bug="lr_from_epoch_only"), "learning_ledger",
        ("PARAMETER_UPDATE",)),
    # opt.zero_grad() between the backward and the step: every update applies a zero gradient (only AdamW's
    # decoupled weight decay moves the weights; whole-model step slip).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

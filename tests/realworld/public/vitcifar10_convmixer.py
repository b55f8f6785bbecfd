"""ConvMixer image classifier trained by the repository's CIFAR-10 script (``python train_cifar10.py --net convmixer``):
patch-embedding convolution, depthwise/pointwise mixing blocks with GELU + BatchNorm and residual depthwise convs,
``nn.CrossEntropyLoss``, Adam (lr 1e-4), cosine annealing stepped per epoch, the loop body ``scaler.scale(loss)
.backward(); scaler.step(optimizer); scaler.update(); optimizer.zero_grad()`` under a ``GradScaler``, random crop
(padding 4) + horizontal flip + normalization, evaluation in ``net.eval()`` under ``no_grad``.

Source: https://github.com/kentaroy47/vision-transformers-cifar10
Commit: 5bb83d36018b314c3020558541015bb01bce15bc
Files: train_cifar10.py, models/convmixer.py
License: MIT (Copyright (c) 2020 Kentaro Yoshioka)
Domain: image classification (ConvMixer: patch conv, depthwise-separable mixing, BatchNorm)

Deviations from the original:
- sizes: ConvMixer(256, 16, kernel_size=8, patch_size=1) -> ConvMixer(32, 2, kernel_size=8, patch_size=1); images
  32x32 -> 16x16 (crop padding 4 kept), batch 512 -> 32, 10 classes;
- data: CIFAR-10 download replaced by a synthetic 3x16x16 dataset made from ``seed``: each class is a fixed random
  smooth colour pattern, an image is its class pattern plus noise (values in [0, 1]), normalized with the script's
  CIFAR-10 mean/std; ``RandomCrop(32, padding=4)`` and ``RandomHorizontalFlip`` are written out in torch per batch;
  RandAugment (PIL operations, ``randomaug.py``) is left out; ``Resize(size)`` is the identity at the native size;
- CPU: ``use_amp`` is False (``--noamp``): ``GradScaler(enabled=False)`` and ``autocast(enabled=False)`` pass through
  (the ``torch.amp`` spellings of the script's ``torch.cuda.amp`` calls); ``net.cuda()`` and wandb/csv/progress-bar
  logging and checkpointing are dropped;
- one ``train_step`` is one iteration of ``train(epoch)``'s batch loop; the epoch-end ``scheduler.step(epoch-1)`` is
  called after each pass over the synthetic loader (8 batches); ``net.train()`` (once per epoch in ``train``) is
  called at each step, since ``eval_fn`` (``test(epoch)``'s accuracy on a batch) leaves the net in eval mode.
"""
# ruff: noqa: PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- models/convmixer.py -----------------------------------------------------------------------------------------
# https://openreview.net/forum?id=TVHS5Y4dNvM


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


def ConvMixer(dim, depth, kernel_size=9, patch_size=7, n_classes=1000):
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


# ---- train_cifar10.py --------------------------------------------------------------------------------------------

mean = (0.4914, 0.4822, 0.4465)
std = (0.2023, 0.1994, 0.2010)
num_classes = 10
bs = 32
size = 16


def make_data(gen, n):
    """Class = a fixed random smooth colour pattern; an image is its class pattern plus noise, in [0, 1]."""
    patterns = F.interpolate(torch.rand(num_classes, 3, 4, 4, generator=gen), size=(size, size), mode="bilinear",
                             align_corners=False)
    labels = torch.randint(0, num_classes, (n,), generator=gen)
    images = (patterns[labels] + 0.15 * torch.randn(n, 3, size, size, generator=gen)).clamp(0, 1)
    return images, labels


def normalize(x):
    return (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


def transform_train(x, gen):
    """RandomCrop(size, padding=4) and RandomHorizontalFlip, then ToTensor/Normalize, per image of the batch."""
    padded = F.pad(x, (4, 4, 4, 4))
    out = torch.empty_like(x)
    for k in range(x.shape[0]):
        i, j = torch.randint(0, 9, (2,), generator=gen).tolist()
        img = padded[k, :, i:i + size, j:j + size]
        if torch.rand(1, generator=gen) < 0.5:
            img = img.flip(-1)
        out[k] = img
    return normalize(out)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_x, train_y = make_data(gen, 8 * bs)
    trainloader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train_x, train_y), batch_size=bs,
                                              shuffle=True, generator=gen)

    n_epochs = 200
    use_amp = False
    device = 'cpu'

    # from paper, accuracy >96%. you can tune the depth and dim to scale accuracy and speed.
    net = ConvMixer(32, 2, kernel_size=5, patch_size=2, n_classes=num_classes)

    # Loss is CE
    criterion = nn.CrossEntropyLoss()

    optimizer = optim.Adam(net.parameters(), lr=1e-4)

    # use cosine scheduling
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, n_epochs)

    ##### Training
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)

    state = {"epoch": 0, "it": iter(trainloader)}

    def train_step():
        try:
            inputs, targets = next(state["it"])
        except StopIteration:
            scheduler.step(state["epoch"] - 1)  # step cosine scheduling
            state["epoch"] += 1
            state["it"] = iter(trainloader)
            inputs, targets = next(state["it"])
        net.train()
        inputs = transform_train(inputs, gen)
        inputs, targets = inputs.to(device), targets.to(device)
        # Train with amp
        with torch.autocast("cuda", enabled=use_amp):
            outputs = net(inputs)
            if bug == "softmax_before_cross_entropy":
                # probabilities handed to CrossEntropyLoss, which applies log_softmax itself
                loss = criterion(outputs.softmax(dim=1), targets)
            else:
                loss = criterion(outputs, targets)
        if bug == "zero_grad_before_step":
            # the gradients cleared between the backward and the step: the step sees zero gradients
            scaler.scale(loss).backward()
            optimizer.zero_grad()
            scaler.step(optimizer)
            scaler.update()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        return loss.detach()

    ##### Validation
    def eval_fn(model, batch):
        inputs, targets = batch
        model.eval()
        correct = 0
        total = 0
        with torch.no_grad():
            outputs = model(inputs)
            _, predicted = outputs.max(1)
            total += targets.size(0)
            correct += predicted.eq(targets).sum().item()
        return 100. * correct / total

    batch = (normalize(train_x[:bs]), train_y[:bs])
    if bug == "softmax_before_cross_entropy":
        def loss_fn(outputs, targets):
            return criterion(outputs.softmax(dim=1), targets)
    else:
        def loss_fn(outputs, targets):
            return criterion(outputs, targets)
    return Program(name="vitcifar10_convmixer", model=net, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=trainloader)


build = functools.partial(_build)

BUGS = [
    # classic: softmax applied before nn.CrossEntropyLoss (log_softmax applied twice).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() moved between the backward and scaler.step(optimizer).
    Bug("zero_grad_before_step", functools.partial(_build, bug="zero_grad_before_step"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

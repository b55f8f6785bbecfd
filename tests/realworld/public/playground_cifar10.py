"""CIFAR-10 classifier of aaron-xichen/pytorch-playground (``cifar/``): the VGG-style ``CIFAR`` model of
``cifar/model.py`` (``make_layers`` over ``[c, c, M, 2c, 2c, M, 4c, 4c, M, (8c, 0), M]`` with conv + BatchNorm
(affine=False) + ReLU, one linear classifier), trained by ``cifar/train.py``: Adam (lr 1e-3, weight decay 0), the lr
multiplied by 0.1 at the epochs in ``decreasing_lr`` (80, 120), ``model.train()`` at each epoch, ``zero_grad`` /
``cross_entropy`` / ``backward`` / ``step`` per batch, and the test pass (``model.eval()``, mean cross-entropy and
accuracy) every ``test_interval`` (5) epochs; the training images are augmented by ``cifar/dataset.py``'s
``Pad(4)``, ``RandomCrop(32)``, ``RandomHorizontalFlip()``, ``ToTensor()``, ``Normalize((0.5,)*3, (0.5,)*3)``.

Source: https://github.com/aaron-xichen/pytorch-playground
Commit: 5d476295f1c1564c8074eb885bb6138d6bd09889
Files: cifar/train.py, cifar/model.py, cifar/dataset.py
License: MIT (Copyright (c) 2017 Aaron Chen; full text in LICENSES/aaron-xichen-pytorch-playground.txt)
Domain: image classification (VGG-style CNN, pad-crop-flip augmentation, Adam, step lr decay)

Deviations from the original:
- sizes (2 CPU cores): channel 128 -> 8, batch_size 200 -> 32; the 32x32 input, lr 1e-3, wd 0,
  decreasing_lr 80,120 and test_interval 5 unchanged.
- data: torchvision's CIFAR10 download is replaced by 192 training and 64 test 32x32 RGB images made from
  ``seed`` (each of the 10 classes is a fixed random 4x4 colour pattern upsampled to 32x32, one per image, plus
  pixel noise, values in [0, 1] as ``ToTensor`` gives them); the transforms are written out in plain torch (there
  is no torchvision here): zero padding by 4, a random 32x32 crop, a horizontal flip with probability 0.5, the
  normalization. DataLoader without workers.
- ``misc.logger`` / ``print`` redirection, gpu selection, ``DataParallel``, ``.cuda()``, the model snapshots, the
  ``print`` calls inside ``CIFAR.__init__`` and the IPython import are left out; ``loss.data[0]`` and
  ``Variable(..., volatile=True)`` (which no longer run) become ``loss.item()`` and ``torch.no_grad()`` in the
  test pass.
- one ``train_step`` is one batch of the epoch loop; the epoch's start (``model.train()``, the lr decrease) runs
  before its first batch and the test pass after its last batch on the epochs it is due (epoch 0, 5, ...), as in
  the original. It returns the loss. ``eval_fn`` is the test pass on one batch (loss, accuracy).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008  (the original's style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

CHANNEL = 8
BATCH_SIZE = 32
LR = 0.001
WD = 0.00
DECREASING_LR = '80,120'
TEST_INTERVAL = 5
N_TRAIN, N_TEST = 192, 64


# ---- cifar/model.py -------------------------------------------------------------------------------------------

class CIFAR(nn.Module):
    def __init__(self, features, n_channel, num_classes):
        super(CIFAR, self).__init__()
        assert isinstance(features, nn.Sequential), type(features)
        self.features = features
        self.classifier = nn.Sequential(
            nn.Linear(n_channel, num_classes)
        )

    def forward(self, x):
        x = self.features(x)
        x = x.view(x.size(0), -1)
        x = self.classifier(x)
        return x

def make_layers(cfg, batch_norm=False):
    layers = []
    in_channels = 3
    for i, v in enumerate(cfg):
        if v == 'M':
            layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
        else:
            padding = v[1] if isinstance(v, tuple) else 1
            out_channels = v[0] if isinstance(v, tuple) else v
            conv2d = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=padding)
            if batch_norm:
                layers += [conv2d, nn.BatchNorm2d(out_channels, affine=False), nn.ReLU()]
            else:
                layers += [conv2d, nn.ReLU()]
            in_channels = out_channels
    return nn.Sequential(*layers)

def cifar10(n_channel, pretrained=None):
    cfg = [n_channel, n_channel, 'M', 2*n_channel, 2*n_channel, 'M', 4*n_channel, 4*n_channel, 'M', (8*n_channel, 0), 'M']
    layers = make_layers(cfg, batch_norm=True)
    model = CIFAR(layers, n_channel=8*n_channel, num_classes=10)
    return model


# ---- cifar/dataset.py: CIFAR10 stand-in with the transforms written out -----------------------------------------

def make_cifar(gen, n_train, n_test):
    patterns = torch.rand(10, 3, 4, 4, generator=gen)
    patterns = F.interpolate(patterns, size=(32, 32), mode='nearest')

    def draw(n):
        target = torch.randint(0, 10, (n,), generator=gen)
        img = patterns[target] * 0.8 + 0.2 * torch.rand(n, 3, 32, 32, generator=gen)
        return img.clamp(0, 1), target

    return draw(n_train), draw(n_test)


class SyntheticCIFAR10(Dataset):
    def __init__(self, data, train):
        self.images, self.targets = data
        self.train = train

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        img = self.images[i]
        if self.train:
            img = F.pad(img, (4, 4, 4, 4))  # transforms.Pad(4)
            top, left = (int(v) for v in torch.randint(0, 9, (2,)))  # transforms.RandomCrop(32)
            img = img[:, top:top + 32, left:left + 32]
            if torch.rand(1) < 0.5:  # transforms.RandomHorizontalFlip()
                img = img.flip(-1)
        img = (img - 0.5) / 0.5  # transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
        return img, self.targets[i]


# ---- cifar/train.py -------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_data, test_data = make_cifar(gen, N_TRAIN, N_TEST)
    train_loader = DataLoader(SyntheticCIFAR10(train_data, train=True), batch_size=BATCH_SIZE, shuffle=True,
                              num_workers=0, generator=torch.Generator().manual_seed(seed))
    test_loader = DataLoader(SyntheticCIFAR10(test_data, train=False), batch_size=BATCH_SIZE, shuffle=False,
                             num_workers=0)
    model = cifar10(n_channel=CHANNEL)

    # optimizer
    optimizer = optim.Adam(model.parameters(), lr=LR, weight_decay=WD)
    decreasing_lr = list(map(int, DECREASING_LR.split(',')))

    state = {"epoch": 0, "it": None}

    def test_pass():
        model.eval()
        test_loss = 0
        correct = 0
        with torch.no_grad():
            for data, target in test_loader:
                indx_target = target.clone()
                data, target = Variable(data), Variable(target)
                output = model(data)
                test_loss += F.cross_entropy(output, target).item()
                pred = output.data.max(1)[1]  # get the index of the max log-probability
                correct += pred.cpu().eq(indx_target).sum()

        test_loss = test_loss / len(test_loader) # average over number of mini-batch
        acc = 100. * correct / len(test_loader.dataset)
        return test_loss, acc

    def next_batch():
        while True:
            if state["it"] is None:
                epoch = state["epoch"]
                if bug != "train_mode_not_restored":
                    model.train()
                if epoch in decreasing_lr:
                    optimizer.param_groups[0]['lr'] *= 0.1
                state["it"] = iter(train_loader)
            try:
                return next(state["it"])
            except StopIteration:
                if state["epoch"] % TEST_INTERVAL == 0:
                    test_pass()
                state["epoch"] += 1
                state["it"] = None

    def train_step():
        data, target = next_batch()
        data, target = Variable(data), Variable(target)

        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        output = model(data)
        if bug == "nll_loss_on_logits":
            loss = F.nll_loss(output, target)
        else:
            loss = F.cross_entropy(output, target)
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        return loss.detach()

    def loss_fn(output, target):
        if bug == "nll_loss_on_logits":
            return F.nll_loss(output, target)
        return F.cross_entropy(output, target)

    def eval_fn(m, batch):
        data, target = batch
        m.eval()
        with torch.no_grad():
            output = m(data)
            loss = F.cross_entropy(output, target).item()
            pred = output.data.max(1)[1]
        return loss, float(pred.eq(target).float().mean())

    first = next(iter(DataLoader(SyntheticCIFAR10(train_data, train=True), batch_size=BATCH_SIZE, shuffle=False)))
    return Program(name="playground_cifar10", model=model, batch=first, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # F.nll_loss on the raw logits instead of cross_entropy (classic): the loss is minus the target logit, unbounded
    # below, and the softmax never enters it.
    Bug("nll_loss_on_logits", functools.partial(_build, bug="nll_loss_on_logits"), "learning_ledger",
        ("OBJECTIVE",)),
    # model.train() left out of the epoch start (classic): after the first test pass (end of epoch 0) the model
    # trains in eval mode, BatchNorm on its running statistics.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe", (),
        kind="step.eval_mode_not_restored"),
    # optimizer.zero_grad() moved between backward() and step() (classic): every update is zero.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

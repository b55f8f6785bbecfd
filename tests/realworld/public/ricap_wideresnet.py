# ruff: noqa: UP008, PLR0402, UP004
"""RICAP (random image cropping and patching) on a Wide ResNet from 4uiiurz1/pytorch-ricap: ``train.py``'s ``train``
with ``--ricap True`` (a boundary (w, h) drawn from Beta(0.3, 0.3), four crops of four shuffled copies of the batch
patched into one image, the loss the area-weighted sum of the cross-entropies against the four shuffled label
vectors), the repository's pre-activation ``WideResNet`` (dropout 0.3, Kaiming fan-out init), SGD(lr 0.1, momentum
0.9, weight_decay 5e-4) filtered on ``requires_grad``, ``MultiStepLR(milestones 60,120,160, gamma 0.2)`` stepped at the
start of each epoch, ``validate`` under ``eval()``.

Source: https://github.com/4uiiurz1/pytorch-ricap
Commit: 108ec0405c91e735460ebe7da17f1a99b959d62b
Files: ``train.py`` (``parse_args``, ``train``, ``validate``, ``main``), ``wide_resnet.py`` (``conv3x3``, ``conv1x1``,
``BasicBlock``, ``WideResNet``), ``utils.py`` (``AverageMeter``, ``accuracy``), README (``--ricap True``)
License: MIT (Copyright (c) 2018 Takato Kimura; full text in LICENSES/4uiiurz1-pytorch-ricap.txt)
Domain: vision, image classification with RICAP (Wide ResNet, patched images, area-weighted soft labels, SGD +
MultiStepLR)

Kept as written: the RICAP branch of ``train`` (``np.random.beta``, ``np.random.randint``, ``torch.randperm`` per
patch, the crops ``input[idx][:, :, x_k:x_k + w_[k], y_k:y_k + h_[k]]``, the two ``torch.cat``s, ``W_[k] = w_[k] *
h_[k] / (I_x * I_y)``, ``loss = sum(W_[k] * criterion(output, c_[k]))``, the area-weighted accuracy), zero_grad /
backward / step, ``AverageMeter``, ``accuracy``; ``WideResNet`` and ``BasicBlock`` as written; ``CrossEntropyLoss``;
the optimizer and scheduler settings; the CIFAR-10 transforms (RandomCrop with padding 4, RandomHorizontalFlip,
ToTensor, Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))).

Deviations from the original:
- CIFAR-10 is not here: the images are synthetic, made from ``seed`` (each class a colour at least 0.25 from the
  others, plus smooth noise, in [0, 1] as ToTensor gives them), 16x16 instead of 32x32 (RandomCrop(16, padding=2)
  accordingly), 1024 training and 256 test images; ``batch_size`` 128 -> 32, ``num_workers`` 0 with a seeded
  generator; numpy's global generator seeded from ``seed``.
- sizes for 2 CPU cores: ``--depth 28 --width 10`` -> ``--depth 10 --width 2``.
- ``.cuda()`` calls dropped (CPU); tqdm, pandas logs and checkpoints dropped; ``scheduler.step()`` runs when a new
  epoch of the loader starts, as ``main`` calls it before each ``train``; ``train_step`` is one iteration of
  ``train``'s loop, returning the loss; ``eval_fn`` is ``validate``'s accuracy on the test images.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_CLASSES, IMG, N_TRAIN, N_TEST, BATCH_SIZE = 10, 16, 1024, 256, 32


class args:  # (port) parse_args() with --ricap True, sizes as listed in the docstring
    dataset = 'cifar10'
    depth = 10  # (port) 28
    width = 2  # (port) 10
    ricap = True
    ricap_beta = 0.3
    mixup = False
    lr = 1e-1
    milestones = '60,120,160'
    gamma = 0.2
    momentum = 0.9
    weight_decay = 5e-4


# ---- wide_resnet.py --------------------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                    padding=1, bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride,
                    bias=False)


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, dropout, stride=1):
        super(BasicBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(inplanes)
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.dropout = nn.Dropout(dropout)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes)
        self.relu = nn.ReLU(inplace=True)
        if stride != 1 or inplanes != planes:
            self.shortcut = conv1x1(inplanes, planes, stride)
            self.use_conv1x1 = True
        else:
            self.use_conv1x1 = False

    def forward(self, x):
        out = self.bn1(x)
        out = self.relu(out)

        if self.use_conv1x1:
            shortcut = self.shortcut(out)
        else:
            shortcut = x

        out = self.conv1(out)

        out = self.bn2(out)
        out = self.relu(out)
        out = self.dropout(out)
        out = self.conv2(out)

        out += shortcut

        return out


class WideResNet(nn.Module):
    def __init__(self, depth, width, num_classes=10, dropout=0.3):
        super(WideResNet, self).__init__()

        layer = (depth - 4) // 6

        self.inplanes = 16
        self.conv = conv3x3(3, 16)
        self.layer1 = self._make_layer(16*width, layer, dropout)
        self.layer2 = self._make_layer(32*width, layer, dropout, stride=2)
        self.layer3 = self._make_layer(64*width, layer, dropout, stride=2)
        self.bn = nn.BatchNorm2d(64*width)
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64*width, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.data = nn.init.kaiming_normal_(m.weight.data, mode='fan_out', nonlinearity='relu')

    def _make_layer(self, planes, blocks, dropout, stride=1):
        layers = []
        for i in range(blocks):
            layers.append(BasicBlock(self.inplanes, planes, dropout, stride if i == 0 else 1))
            self.inplanes = planes

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)

        x = self.bn(x)
        x = self.relu(x)
        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)

        return x


# ---- utils.py --------------------------------------------------------------------------------------------------

class AverageMeter(object):
    """Computes and stores the average and current value"""
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].view(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


# ---- (port) data: synthetic CIFAR-like images, the CIFAR-10 transforms in plain torch ------------------------------

MEAN = torch.tensor([0.4914, 0.4822, 0.4465])[:, None, None]
STD = torch.tensor([0.2023, 0.1994, 0.2010])[:, None, None]


def make_colours(gen):
    colours = []
    while len(colours) < NUM_CLASSES:
        c = torch.rand(3, generator=gen) * 0.8 + 0.1
        if all(float((c - d).norm()) > 0.25 for d in colours):
            colours.append(c)
    return torch.stack(colours)


class ColourImages(Dataset):
    """CIFAR-10 stand-in: a class colour plus smooth noise, in [0, 1]; RandomCrop(padding) + flip when training."""

    def __init__(self, gen, n, colours, train):
        self.labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        noise = F.interpolate(0.35 * torch.randn(n, 3, IMG // 4, IMG // 4, generator=gen), size=(IMG, IMG),
                              mode="bilinear", align_corners=False)
        self.images = (colours[self.labels][:, :, None, None] + noise).clamp(0, 1)
        self.train = train
        self.gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.train:
            x = F.pad(x, (2, 2, 2, 2))
            i, j = (int(v) for v in torch.randint(0, 5, (2,), generator=self.gen))
            x = x[:, i:i + IMG, j:j + IMG]
            if float(torch.rand(1, generator=self.gen)) < 0.5:
                x = x.flip(-1)
        return (x - MEAN) / STD, self.labels[idx]


# ---- train.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    colours = make_colours(gen)
    train_set = ColourImages(gen, N_TRAIN, colours, train=True)
    test_set = ColourImages(gen, N_TEST, colours, train=False)
    train_loader = torch.utils.data.DataLoader(
        train_set,
        batch_size=BATCH_SIZE,
        shuffle=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(seed))
    test_loader = torch.utils.data.DataLoader(
        test_set,
        batch_size=BATCH_SIZE,
        shuffle=False,
        num_workers=0)
    num_classes = 10

    criterion = nn.CrossEntropyLoss()

    # create model
    model = WideResNet(args.depth, args.width, num_classes=num_classes)

    optimizer = optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=args.lr,
            momentum=args.momentum, weight_decay=args.weight_decay)

    scheduler = lr_scheduler.MultiStepLR(optimizer,
            milestones=[int(e) for e in args.milestones.split(',')], gamma=args.gamma)

    st = {"it": None}
    losses = AverageMeter()
    scores = AverageMeter()

    def next_batch():
        if st["it"] is not None:
            try:
                return next(st["it"])
            except StopIteration:
                pass
        scheduler.step()  # main(): scheduler.step() before each epoch's train()
        model.train()
        st["it"] = iter(train_loader)
        return next(st["it"])

    def train_step():
        input, target = next_batch()
        # from original paper's appendix
        if args.ricap:
            I_x, I_y = input.size()[2:]

            w = int(np.round(I_x * np.random.beta(args.ricap_beta, args.ricap_beta)))
            h = int(np.round(I_y * np.random.beta(args.ricap_beta, args.ricap_beta)))
            w_ = [w, I_x - w, w, I_x - w]
            h_ = [h, h, I_y - h, I_y - h]

            cropped_images = {}
            c_ = {}
            W_ = {}
            for k in range(4):
                idx = torch.randperm(input.size(0))
                x_k = np.random.randint(0, I_x - w_[k] + 1)
                y_k = np.random.randint(0, I_y - h_[k] + 1)
                cropped_images[k] = input[idx][:, :, x_k:x_k + w_[k], y_k:y_k + h_[k]]
                if bug == "patch_labels_not_shuffled":
                    c_[k] = target  # (bug) the crops come from input[idx], the labels from the unshuffled batch
                else:
                    c_[k] = target[idx]
                W_[k] = w_[k] * h_[k] / (I_x * I_y)

            patched_images = torch.cat(
                (torch.cat((cropped_images[0], cropped_images[1]), 2),
                torch.cat((cropped_images[2], cropped_images[3]), 2)),
            3)

            output = model(patched_images)
            loss = sum([W_[k] * criterion(output, c_[k]) for k in range(4)])

            acc = sum([W_[k] * accuracy(output, c_[k])[0] for k in range(4)])

        losses.update(loss.item(), input.size(0))
        scores.update(acc.item(), input.size(0))

        # compute gradient and do optimizing step
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        sc = AverageMeter()
        with torch.no_grad():
            for input, target in test_loader:
                output = model(input)
                acc1 = accuracy(output, target)[0]
                sc.update(acc1.item(), input.size(0))
        model.train(was)
        return sc.avg

    batch = next(iter(DataLoader(test_set, batch_size=BATCH_SIZE, shuffle=False)))
    return Program(name="ricap_wideresnet", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # each patch's labels taken from the unshuffled batch while its pixels come from input[idx]: the soft label
    # no longer describes the patched image (classic: a permutation applied to the inputs only).
    Bug("patch_labels_not_shuffled", functools.partial(_build, bug="patch_labels_not_shuffled"), "learning_ledger",
        ("TASK",)),
    # optimizer.zero_grad() left out of the loop: gradients pile up across batches (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

"""Wide ResNet on CIFAR from xternalz/WideResNet-pytorch: the repository's ``WideResNet`` (3x3 stem, three
``NetworkBlock`` stages of pre-activation ``BasicBlock``s whose first block of a stage activates its input once
for both the residual branch and the 1x1 ``convShortcut``, final BN-ReLU, ``avg_pool2d(8)``, linear head,
Kaiming fan-out init), trained by ``train.py``: reflect-pad-4 + random crop 32 + horizontal flip + normalize,
``CrossEntropyLoss``, SGD(lr 0.1, momentum 0.9, Nesterov, weight_decay 5e-4), ``CosineAnnealingLR`` over
``len(train_loader) * epochs`` stepped every batch, ``validate`` (``eval()``, no_grad, precision@1) after each
epoch.

Source: https://github.com/xternalz/WideResNet-pytorch
Commit: 1171f93d5a9ae28eb5e603e5e7545f488d0df6ab
Files: train.py, wideresnet.py
License: MIT (Copyright (c) 2019 xternalz; full text in LICENSES/xternalz-WideResNet-pytorch.txt)
Domain: vision, image classification (wide pre-activation ResNet, per-batch cosine lr)

Deviations from the original:
- sizes: WRN-28-10 -> WRN-10-2 (``--layers 10 --widen-factor 2``, both command-line options of the script; one
  block per stage, widths 16/32/64/128), batch 128 -> 16, 50000 training images -> 256, 10000 validation images
  -> 32, epochs 200 -> 10 (the cosine horizon ``len(train_loader) * epochs`` follows); images stay 32x32 (the
  model's ``avg_pool2d(8)`` needs the 8x8 map);
- data: CIFAR-10 is replaced by synthetic RGB images made from ``seed`` (each class has its own colour, plus smooth
  noise; the label is the class whose colour is nearest to the image's mean colour); torchvision is not available,
  so the transforms (reflect pad 4, RandomCrop(32), RandomHorizontalFlip, ToTensor, Normalize with the script's
  mean/std) are written out in plain torch; DataLoader without workers;
- ``.cuda()``, ``cudnn.benchmark``, TensorBoard logging, checkpoint saving, ``AverageMeter`` bookkeeping and
  printing are dropped (CPU);
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in
  ``main()``: ``validate`` on the held-out set, then the next ``train()`` call's ``model.train()``; ``eval_fn`` is
  ``validate``'s precision@1 on a batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: F841, PLR0402, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim
import torch.utils.data
from torch.utils.data import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_VAL, NUM_CLASSES = 256, 32, 10


class _Args:
    epochs = 10
    batch_size = 16
    lr = 0.1
    momentum = 0.9
    nesterov = True
    weight_decay = 5e-4
    layers = 10
    widen_factor = 2
    droprate = 0
    augment = True
    dataset = "cifar10"


# ---- wideresnet.py -----------------------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, in_planes, out_planes, stride, dropRate=0.0, bug=None):
        super(BasicBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                               padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_planes, out_planes, kernel_size=3, stride=1,
                               padding=1, bias=False)
        self.droprate = dropRate
        self.equalInOut = (in_planes == out_planes)
        self.convShortcut = (not self.equalInOut) and nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride,
                               padding=0, bias=False) or None
        self.bug = bug

    def forward(self, x):
        if self.bug == "preactivation_not_reassigned":
            out = self.relu1(self.bn1(x))
        elif not self.equalInOut:
            x = self.relu1(self.bn1(x))
        else:
            out = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(out if self.equalInOut else x)))
        if self.droprate > 0:
            out = F.dropout(out, p=self.droprate, training=self.training)
        out = self.conv2(out)
        return torch.add(x if self.equalInOut else self.convShortcut(x), out)


class NetworkBlock(nn.Module):
    def __init__(self, nb_layers, in_planes, out_planes, block, stride, dropRate=0.0, bug=None):
        super(NetworkBlock, self).__init__()
        self.bug = bug
        self.layer = self._make_layer(block, in_planes, out_planes, nb_layers, stride, dropRate)

    def _make_layer(self, block, in_planes, out_planes, nb_layers, stride, dropRate):
        layers = []
        for i in range(int(nb_layers)):
            layers.append(block(i == 0 and in_planes or out_planes, out_planes, i == 0 and stride or 1, dropRate, bug=self.bug))
        return nn.Sequential(*layers)

    def forward(self, x):
        return self.layer(x)


class WideResNet(nn.Module):
    def __init__(self, depth, num_classes, widen_factor=1, dropRate=0.0, bug=None):
        super(WideResNet, self).__init__()
        nChannels = [16, 16*widen_factor, 32*widen_factor, 64*widen_factor]
        assert((depth - 4) % 6 == 0)
        n = (depth - 4) / 6
        block = BasicBlock
        # 1st conv before any network block
        self.conv1 = nn.Conv2d(3, nChannels[0], kernel_size=3, stride=1,
                               padding=1, bias=False)
        # 1st block
        self.block1 = NetworkBlock(n, nChannels[0], nChannels[1], block, 1, dropRate, bug=bug)
        # 2nd block
        self.block2 = NetworkBlock(n, nChannels[1], nChannels[2], block, 2, dropRate, bug=bug)
        # 3rd block
        self.block3 = NetworkBlock(n, nChannels[2], nChannels[3], block, 2, dropRate, bug=bug)
        # global average pooling and classifier
        self.bn1 = nn.BatchNorm2d(nChannels[3])
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(nChannels[3], num_classes)
        self.nChannels = nChannels[3]

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()

    def forward(self, x):
        out = self.conv1(x)
        out = self.block1(out)
        out = self.block2(out)
        out = self.block3(out)
        out = self.relu(self.bn1(out))
        out = F.avg_pool2d(out, 8)
        out = out.view(-1, self.nChannels)
        return self.fc(out)


# ---- train.py ----------------------------------------------------------------------------------------------------

def accuracy(output, target, topk=(1,)):
    """Computes the precision@k for the specified values of k"""
    maxk = max(topk)
    batch_size = target.size(0)
    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    res = []
    for k in topk:
        correct_k = correct[:k].view(-1).float().sum(0)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


MEAN = torch.tensor([x/255.0 for x in [125.3, 123.0, 113.9]]).view(3, 1, 1)
STD = torch.tensor([x/255.0 for x in [63.0, 62.1, 66.7]]).view(3, 1, 1)


class _SyntheticCIFAR(Dataset):
    """CIFAR-10-shaped images in [0, 1] (what ToTensor gives) with the script's transforms written out."""

    def __init__(self, images, labels, train, seed):
        self.images, self.labels, self.train = images, labels, train
        self.gen = torch.Generator().manual_seed(seed + 17)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i]
        if self.train:
            # transforms.Lambda(lambda x: F.pad(x.unsqueeze(0), (4,4,4,4), mode='reflect').squeeze()),
            # RandomCrop(32), RandomHorizontalFlip()
            x = F.pad(x.unsqueeze(0), (4, 4, 4, 4), mode='reflect').squeeze()
            top, left = torch.randint(0, 9, (2,), generator=self.gen).tolist()
            x = x[:, top:top + 32, left:left + 32]
            if torch.rand((), generator=self.gen) < 0.5:
                x = x.flip(-1)
        return (x - MEAN) / STD, self.labels[i]


def _data(seed):
    gen = torch.Generator().manual_seed(seed)
    colours = torch.rand(NUM_CLASSES, 3, generator=gen)

    def make(n):
        cls = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        noise = F.interpolate(torch.randn(n, 3, 8, 8, generator=gen), size=(32, 32), mode="bilinear",
                              align_corners=False)
        x = (colours[cls].view(n, 3, 1, 1) + 0.12 * noise).clamp(0, 1)
        labels = torch.cdist(x.mean(dim=(2, 3)), colours).argmin(dim=1)
        return x, labels

    return colours, make(N_TRAIN), make(N_VAL)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = _Args()
    colours, (train_x, train_y), (val_x, val_y) = _data(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    train_loader = torch.utils.data.DataLoader(_SyntheticCIFAR(train_x, train_y, True, seed),
                                               batch_size=args.batch_size, shuffle=True, generator=gen)
    val_loader = torch.utils.data.DataLoader(_SyntheticCIFAR(val_x, val_y, False, seed),
                                             batch_size=args.batch_size, shuffle=True, generator=gen)

    # create model
    model = WideResNet(args.layers, args.dataset == 'cifar10' and 10 or 100,
                       args.widen_factor, dropRate=args.droprate, bug=bug)

    # define loss function (criterion) and optimizer
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), args.lr,
                                momentum=args.momentum, nesterov = args.nesterov,
                                weight_decay=args.weight_decay)

    # cosine learning rate
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, len(train_loader)*args.epochs)

    def validate(val_loader, model, criterion):
        """Perform validation on the validation set"""
        total, n = 0.0, 0
        # switch to evaluate mode
        model.eval()
        for i, (input, target) in enumerate(val_loader):
            # compute output
            with torch.no_grad():
                output = model(input)
            loss = criterion(output, target)
            # measure accuracy and record loss
            prec1 = accuracy(output.data, target, topk=(1,))[0]
            total, n = total + prec1.item() * input.size(0), n + input.size(0)
        return total / n

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main()
                validate(val_loader, model, criterion)
            # switch to train mode
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        input, target = next_batch()
        # compute output
        output = model(input)
        loss = criterion(output, target)

        # compute gradient and do SGD step
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        scheduler.step()
        return loss.detach()

    def eval_fn(model, batch):
        input, target = batch
        model.eval()
        with torch.no_grad():
            prec1 = accuracy(model(input).data, target, topk=(1,))[0]
        model.train()
        return float(prec1)

    def true_labels(x):
        """The labelling rule: the class whose colour is nearest to the image's mean colour."""
        raw = x * STD + MEAN
        return torch.cdist(raw.mean(dim=(2, 3)), colours).argmin(dim=1)

    first = next(iter(torch.utils.data.DataLoader(_SyntheticCIFAR(train_x, train_y, False, seed),
                                                  batch_size=args.batch_size)))
    return Program(name="xternalzwrn_cifar", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=true_labels,
                   task="classification", loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the first block of a stage activates its input into ``out`` in both branches instead of rebinding ``x``: the
    # stage's conv1 and shortcut then read the raw, un-normalized input and that block's bn1 never reaches the loss
    # (classic slip in this pre-activation block's two-branch forward).
    Bug("preactivation_not_reassigned", functools.partial(_build, bug="preactivation_not_reassigned"),
        "reachability", ("layer.0.bn1",)),
    # zero_grad moved between backward and step: every step applies only momentum and weight decay, never the new
    # gradient (classic; whole model).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

"""CutMix training of clovaai/CutMix-PyTorch: with probability ``cutmix_prob`` a batch gets a box (``rand_bbox``:
side ``sqrt(1 - lam)`` of the image, ``lam ~ Beta(beta, beta)``, centre uniform, clipped at the border) pasted from
a shuffled copy of the batch, ``lam`` re-computed from the clipped box's area, and the loss mixed
``criterion(output, target_a) * lam + criterion(output, target_b) * (1. - lam)``; the repository's CIFAR ResNet
(``resnet.py``), ``nn.CrossEntropyLoss``, SGD (momentum 0.9, weight decay 1e-4, Nesterov), the step-decay
``adjust_learning_rate``, CIFAR augmentation (random crop with 4-pixel padding, horizontal flip, normalization).

Source: https://github.com/clovaai/CutMix-PyTorch
Commit: 2d8eb68faff7fe4962776ad51d175c3b01a25734
Files: train.py (main, train, rand_bbox, adjust_learning_rate, get_learning_rate, accuracy, validate), resnet.py
License: MIT (Copyright (c) 2019-present NAVER Corp.; LICENSES/clovaai-CutMix-PyTorch.txt)
Domain: image classification with CutMix regularization

Deviations from the original:
- configuration: ``--net_type resnet --dataset cifar10 --depth 8 --no-bottleneck --beta 1.0 --cutmix_prob 0.5``
  with the default lr 0.1, momentum 0.9, weight decay 1e-4 and epochs 300 (the README's CIFAR command uses
  PyramidNet-200; the repository's CIFAR ResNet at depth 8, one BasicBlock per stage, fits 2 CPU cores);
  batch 128 -> 16; ``torch.nn.DataParallel`` and ``.cuda()`` are dropped; ``print(bottleneck)`` and ``ResNet``'s
  ImageNet branch (not built for CIFAR) are left out;
- data: CIFAR-10 (a download) is replaced by 320 synthetic 32x32 uint8 images made from ``seed``: each class has a
  colour (drawn in [40, 215], redrawn until any two are 30 apart), an image is its class colour plus a random texture; the label is the class (the nearest colour to the
  image's mean colour, so a pasted box moves the image's colour toward its partner's class by the box's area);
- torchvision is not available: ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, ``ToTensor`` and
  ``Normalize`` (the CIFAR mean/std of train.py) are written out in plain torch on the global RNG;
- ``np.random`` calls draw from a ``np.random.RandomState(seed)`` instance (same calls), and ``np.int`` (removed
  from numpy) is ``int``;
- one ``train_step`` is one iteration of ``train``'s loop body (cutmix or plain forward, loss, zero_grad,
  backward, step); ``adjust_learning_rate`` and ``model.train()`` run when a new epoch starts; the meters,
  printing, timing and checkpointing are left out; ``eval_fn`` is ``validate``'s top-1 error on a given batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_TRAIN, N_VAL, BATCH_SIZE, NUM_CLASSES = 320, 64, 16, 10
MEAN = torch.tensor([x / 255.0 for x in [125.3, 123.0, 113.9]]).view(3, 1, 1)
STD = torch.tensor([x / 255.0 for x in [63.0, 62.1, 66.7]]).view(3, 1, 1)


class Args:
    net_type = 'resnet'
    dataset = 'cifar10'
    depth = 8
    bottleneck = False
    batch_size = BATCH_SIZE
    lr = 0.1
    momentum = 0.9
    weight_decay = 1e-4
    epochs = 300
    beta = 1.0
    cutmix_prob = 0.5


args = Args()


# ---- resnet.py -------------------------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    "3x3 convolution with padding"
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)

        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(Bottleneck, self).__init__()

        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * Bottleneck.expansion, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * Bottleneck.expansion)
        self.relu = nn.ReLU(inplace=True)

        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)

        out = self.conv3(out)
        out = self.bn3(out)
        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        out = self.relu(out)

        return out

class ResNet(nn.Module):
    def __init__(self, dataset, depth, num_classes, bottleneck=False):
        super(ResNet, self).__init__()
        self.dataset = dataset
        if self.dataset.startswith('cifar'):
            self.inplanes = 16
            if bottleneck == True:
                n = int((depth - 2) / 9)
                block = Bottleneck
            else:
                n = int((depth - 2) / 6)
                block = BasicBlock

            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(self.inplanes)
            self.relu = nn.ReLU(inplace=True)
            self.layer1 = self._make_layer(block, 16, n)
            self.layer2 = self._make_layer(block, 32, n, stride=2)
            self.layer3 = self._make_layer(block, 64, n, stride=2)
            self.avgpool = nn.AvgPool2d(8)
            self.fc = nn.Linear(64 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion,
                          kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        if self.dataset == 'cifar10' or self.dataset == 'cifar100':
            x = self.conv1(x)
            x = self.bn1(x)
            x = self.relu(x)

            x = self.layer1(x)
            x = self.layer2(x)
            x = self.layer3(x)

            x = self.avgpool(x)
            x = x.view(x.size(0), -1)
            x = self.fc(x)

        return x


# ---- train.py ----------------------------------------------------------------------------------------------------

def rand_bbox(size, lam, rs):
    W = size[2]
    H = size[3]
    cut_rat = np.sqrt(1. - lam)
    cut_w = int(W * cut_rat)
    cut_h = int(H * cut_rat)

    # uniform
    cx = rs.randint(W)
    cy = rs.randint(H)

    bbx1 = np.clip(cx - cut_w // 2, 0, W)
    bby1 = np.clip(cy - cut_h // 2, 0, H)
    bbx2 = np.clip(cx + cut_w // 2, 0, W)
    bby2 = np.clip(cy + cut_h // 2, 0, H)

    return bbx1, bby1, bbx2, bby2


def adjust_learning_rate(optimizer, epoch):
    """Sets the learning rate to the initial LR decayed by 10 every 30 epochs"""
    if args.dataset.startswith('cifar'):
        lr = args.lr * (0.1 ** (epoch // (args.epochs * 0.5))) * (0.1 ** (epoch // (args.epochs * 0.75)))
    elif args.dataset == ('imagenet'):
        if args.epochs == 300:
            lr = args.lr * (0.1 ** (epoch // 75))
        else:
            lr = args.lr * (0.1 ** (epoch // 30))

    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def accuracy(output, target, topk=(1,)):
    """Computes the precision@k for the specified values of k"""
    maxk = max(topk)
    batch_size = target.size(0)

    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))

    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0)
        wrong_k = batch_size - correct_k
        res.append(wrong_k.mul_(100.0 / batch_size))

    return res


# ---- data (synthetic CIFAR-10 stand-in) and the CIFAR transforms written out ----------------------------------

class ColourImages(torch.utils.data.Dataset):
    def __init__(self, colours, n, gen, transform):
        self.labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        texture = torch.randn(n, 3, 32, 32, generator=gen) * 30.0
        self.images = (colours[self.labels].view(n, 3, 1, 1) + texture).clamp(0, 255).to(torch.uint8)
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(self.images[i]), int(self.labels[i])


def to_tensor_normalized(img):
    return (img.float() / 255.0 - MEAN) / STD


def transform_train(img):
    # RandomCrop(32, padding=4), RandomHorizontalFlip(), ToTensor(), normalize
    padded = torch.nn.functional.pad(img, (4, 4, 4, 4))
    i, j = (int(v) for v in torch.randint(0, 9, (2,)))
    img = padded[:, i:i + 32, j:j + 32]
    if torch.rand(1) < 0.5:
        img = img.flip(-1)
    return to_tensor_normalized(img)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rs = np.random.RandomState(seed)
    gen = torch.Generator().manual_seed(seed)
    colours = 40.0 + torch.rand(NUM_CLASSES, 3, generator=gen) * 175.0
    while torch.pdist(colours).min() < 30.0:  # class colours kept apart
        colours = 40.0 + torch.rand(NUM_CLASSES, 3, generator=gen) * 175.0

    train_set = ColourImages(colours, N_TRAIN, gen, transform_train)
    val_set = ColourImages(colours, N_VAL, gen, to_tensor_normalized)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                                               generator=torch.Generator().manual_seed(seed))
    numberofclass = 10

    model = ResNet(args.dataset, args.depth, numberofclass, args.bottleneck)  # for ResNet

    # define loss function (criterion) and optimizer
    criterion = nn.CrossEntropyLoss()

    optimizer = torch.optim.SGD(model.parameters(), args.lr,
                                momentum=args.momentum,
                                weight_decay=args.weight_decay, nesterov=True)

    state = {"it": None, "epoch": -1}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):  # a new epoch
            state["epoch"] += 1
            adjust_learning_rate(optimizer, state["epoch"])
            # switch to train mode
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        input, target = next_batch()

        r = rs.rand(1)
        if args.beta > 0 and r < args.cutmix_prob:
            # generate mixed sample
            lam = rs.beta(args.beta, args.beta)
            rand_index = torch.randperm(input.size()[0])
            target_a = target
            target_b = target[rand_index]
            bbx1, bby1, bbx2, bby2 = rand_bbox(input.size(), lam, rs)
            input[:, :, bbx1:bbx2, bby1:bby2] = input[rand_index, :, bbx1:bbx2, bby1:bby2]
            if bug != "lam_not_adjusted":
                # adjust lambda to exactly match pixel ratio
                lam = 1 - ((bbx2 - bbx1) * (bby2 - bby1) / (input.size()[-1] * input.size()[-2]))
            # compute output
            output = model(input)
            if bug == "lam_weights_swapped":
                loss = criterion(output, target_a) * (1. - lam) + criterion(output, target_b) * lam
            elif bug == "mixed_input_hard_target":
                loss = criterion(output, target)
            else:
                loss = criterion(output, target_a) * lam + criterion(output, target_b) * (1. - lam)
        else:
            # compute output
            output = model(input)
            loss = criterion(output, target)

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        input, target = batch
        model.eval()
        with torch.no_grad():
            output = model(input)
            err1 = accuracy(output.data, target, topk=(1,))[0]
        model.train()
        return float(err1)

    def true_labels(x):
        """The labelling rule: the class whose colour is nearest to the image's mean colour (the crop's zero
        padding left out)."""
        raw = (x * STD + MEAN) * 255.0
        keep = (raw.abs().sum(dim=1, keepdim=True) > 1e-3).float()
        mean = (raw * keep).sum(dim=(2, 3)) / keep.sum(dim=(2, 3)).clamp(min=1)
        return torch.cdist(mean, colours).argmin(dim=1)

    first = next(iter(torch.utils.data.DataLoader(val_set, batch_size=BATCH_SIZE)))
    return Program(name="cutmix_resnet", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=true_labels,
                   task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # lam taken as drawn, not re-computed from the clipped box: where the box runs off the border the label weights
    # no longer match the pasted area (the repository's own bug, https://github.com/clovaai/CutMix-PyTorch/issues/1,
    # fixed by the "adjust lambda to exactly match pixel ratio" line).
    Bug("lam_not_adjusted", functools.partial(_build, bug="lam_not_adjusted"), "learning_ledger", ("OBJECTIVE",)),
    # the two label weights swapped: the pasted partner's label gets the kept area's weight (classic).
    Bug("lam_weights_swapped", functools.partial(_build, bug="lam_weights_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # the mixed images trained on their own hard labels, target_b never used (classic).
    Bug("mixed_input_hard_target", functools.partial(_build, bug="mixed_input_hard_target"), "learning_ledger",
        ("TASK",)),
]

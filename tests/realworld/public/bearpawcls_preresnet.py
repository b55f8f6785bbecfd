"""A pre-activation ResNet on CIFAR-10 as trained by the training-recipe script ``cifar.py`` with TRAINING.md's
PreResNet command (``-a preresnet --depth 110 --epochs 164 --schedule 81 122 --gamma 0.1 --wd 1e-4``):
``PreResNet`` (BasicBlock: BN-ReLU-conv twice plus the identity or a 1x1 conv shortcut, final BN-ReLU, 8x8 average
pooling, ``fc``; He-normal convs, BN weight 1 / bias 0), ``nn.CrossEntropyLoss``, SGD (lr 0.1, momentum 0.9,
weight decay 1e-4), ``adjust_learning_rate``'s step schedule, the RandomCrop(32, padding=4) + horizontal flip +
normalize transforms, and ``train()``'s loop body (forward, loss, top-1/top-5 ``accuracy``, zero_grad, backward,
step).

Source: https://github.com/bearpaw/pytorch-classification
Commit: 24f1c456f48c78133088c4eefd182ca9e6199b03
Files: cifar.py, models/cifar/preresnet.py, utils/eval.py, TRAINING.md
License: MIT (LICENSES/bearpaw-pytorch-classification.txt)
Domain: image classification (pre-activation ResNet, CIFAR training recipe)

Deviations from the original:
- sizes: depth 8 (one BasicBlock per stage; the command uses 110), train batch 16 (128), test batch 64 (100);
  the schedule (epochs 81 and 122, ``adjust_learning_rate`` called once per epoch) is kept, an epoch being 20
  batches here; the self-check runs 15 steps (``SELF_CHECK_STEPS``); lr, momentum, weight decay
  and gamma are the command's;
- data: CIFAR-10 (a torchvision download) is replaced by 320 train and 64 test synthetic 32x32 RGB images made
  from ``seed``: each of the 10 classes has its own smooth colour pattern (a random 4x4x3 template upsampled),
  plus noise, with values in [0, 1] as ``ToTensor`` gives; torchvision's ``RandomCrop(32, padding=4)``,
  ``RandomHorizontalFlip`` and ``Normalize`` (CIFAR means/stds kept) are written out in torch (no torchvision);
- no CUDA or ``DataParallel``, no ``Variable``, ``loss.data[0]`` is ``loss.item()`` (current torch); the progress
  bar, meters, logger, checkpoints and ``--resume`` are left out; ``args`` is an ``argparse.Namespace``;
- one ``train_step`` is one iteration of ``train()``'s batch loop (a new epoch, with ``adjust_learning_rate``,
  when the loader ends); ``eval_fn`` is ``test()``'s body on one batch returning the top-1 accuracy;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: F841, PLR0402, UP008, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import argparse
import functools
import math
import pathlib
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SELF_CHECK_STEPS = 15


# ---- models/cifar/preresnet.py -----------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    "3x3 convolution with padding"
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.bn1(x)
        out = self.relu(out)
        out = self.conv1(out)

        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual

        return out


class PreResNet(nn.Module):

    def __init__(self, depth, num_classes=1000, block_name='BasicBlock'):
        super(PreResNet, self).__init__()
        # Model type specifies number of layers for CIFAR-10 model
        if block_name.lower() == 'basicblock':
            assert (depth - 2) % 6 == 0, 'When use basicblock, depth should be 6n+2, e.g. 20, 32, 44, 56, 110, 1202'
            n = (depth - 2) // 6
            block = BasicBlock
        else:
            raise ValueError('block_name shoule be Basicblock or Bottleneck')

        self.inplanes = 16
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, padding=1,
                               bias=False)
        self.layer1 = self._make_layer(block, 16, n)
        self.layer2 = self._make_layer(block, 32, n, stride=2)
        self.layer3 = self._make_layer(block, 64, n, stride=2)
        self.bn = nn.BatchNorm2d(64 * block.expansion)
        self.relu = nn.ReLU(inplace=True)
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
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)

        x = self.layer1(x)  # 32x32
        x = self.layer2(x)  # 16x16
        x = self.layer3(x)  # 8x8
        x = self.bn(x)
        x = self.relu(x)

        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)

        return x


def preresnet(**kwargs):
    """
    Constructs a ResNet model.
    """
    return PreResNet(**kwargs)


# ---- utils/eval.py -----------------------------------------------------------------------------------------------

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
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


# ---- torchvision transforms written out ------------------------------------------------------------------------

MEAN = torch.tensor((0.4914, 0.4822, 0.4465)).view(3, 1, 1)
STD = torch.tensor((0.2023, 0.1994, 0.2010)).view(3, 1, 1)


class SyntheticCIFAR(data.Dataset):
    def __init__(self, images, labels, train):
        self.images, self.labels, self.train = images, labels, train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        if self.train:
            # transforms.RandomCrop(32, padding=4)
            padded = F.pad(img, (4, 4, 4, 4))
            top, left = random.randint(0, 8), random.randint(0, 8)
            img = padded[:, top:top + 32, left:left + 32]
            # transforms.RandomHorizontalFlip()
            if random.random() < 0.5:
                img = img.flip(-1)
        # transforms.Normalize(...)
        return (img - MEAN) / STD, self.labels[i]


def make_images(gen, templates, n):
    labels = torch.randint(0, 10, (n,), generator=gen)
    images = templates[labels] + 0.15 * torch.randn(n, 3, 32, 32, generator=gen)
    return images.clamp(0, 1), labels


def _build(seed, bug=None):
    args = argparse.Namespace(dataset='cifar10', workers=0, epochs=164, start_epoch=0, train_batch=16,
                              test_batch=64, lr=0.1, drop=0, schedule=[81, 122], gamma=0.1, momentum=0.9,
                              weight_decay=1e-4, arch='preresnet', depth=8, block_name='BasicBlock',
                              manualSeed=seed)
    state = {k: v for k, v in args._get_kwargs()}
    random.seed(args.manualSeed)
    torch.manual_seed(args.manualSeed)

    gen = torch.Generator().manual_seed(seed)
    templates = F.interpolate(torch.rand(10, 3, 4, 4, generator=gen), size=32, mode='bilinear',
                              align_corners=False)
    trainset = SyntheticCIFAR(*make_images(gen, templates, 320), train=True)
    testset = SyntheticCIFAR(*make_images(gen, templates, 64), train=False)
    trainloader = data.DataLoader(trainset, batch_size=args.train_batch, shuffle=True, num_workers=args.workers,
                                  generator=torch.Generator().manual_seed(seed))
    testloader = data.DataLoader(testset, batch_size=args.test_batch, shuffle=False, num_workers=args.workers)
    num_classes = 10

    model = preresnet(
                num_classes=num_classes,
                depth=args.depth,
                block_name=args.block_name,
            )
    if bug == "nll_loss_on_logits":
        criterion = nn.NLLLoss()  # the classifier's raw fc outputs taken as log-probabilities
    else:
        criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)

    def adjust_learning_rate(optimizer, epoch):
        if epoch in args.schedule:
            state['lr'] *= args.gamma
            for param_group in optimizer.param_groups:
                param_group['lr'] = state['lr']

    loop = {"epoch": args.start_epoch, "it": None}

    def next_batch():
        while True:
            if loop["it"] is None:
                adjust_learning_rate(optimizer, loop["epoch"])
                # switch to train mode
                model.train()
                loop["it"] = iter(trainloader)
            try:
                return next(loop["it"])
            except StopIteration:
                loop["it"] = None
                loop["epoch"] += 1

    def train_step():
        inputs, targets = next_batch()

        # compute output
        outputs = model(inputs)
        loss = criterion(outputs, targets)

        # measure accuracy and record loss
        prec1, prec5 = accuracy(outputs.data, targets.data, topk=(1, 5))

        # compute gradient and do SGD step
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model, batch):
        inputs, targets = batch
        # switch to evaluate mode
        model.eval()
        with torch.no_grad():
            outputs = model(inputs)
            prec1, prec5 = accuracy(outputs.data, targets.data, topk=(1, 5))
        model.train()
        return prec1.item()

    first = next(iter(data.DataLoader(trainset, batch_size=args.train_batch, shuffle=False)))
    return Program(name="bearpawcls_preresnet", model=model, batch=first, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, task="classification", loader=trainloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # criterion = nn.NLLLoss() on the network's raw fc outputs (classic): the loss is minus the target's logit,
    # unbounded below, not the cross-entropy.
    Bug("nll_loss_on_logits", functools.partial(_build, bug="nll_loss_on_logits"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() moved between backward and step (classic): every step applies a zero gradient (only
    # weight decay moves the weights).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

# ruff: noqa: UP008, PLR1704
"""SE-ResNet-20 on CIFAR-10 from moskomule/senet.pytorch: the repository's ``se_resnet20`` (3x3 stem, three stages of
``CifarSEBasicBlock`` whose second BatchNorm output is rescaled by a squeeze-and-excitation ``SELayer``: global
average pool, Linear(c, c/16) + ReLU + Linear(c/16, c) + Sigmoid, channel-wise product), trained by ``cifar.py``:
homura's ``SupervisedTrainer`` with ``F.cross_entropy``, SGD(lr 0.1, momentum 0.9, weight_decay 1e-4), ``StepLR(80,
0.1)`` stepped per epoch, one ``iteration`` (forward, loss, zero_grad, backward, step) per batch, ``test`` under
``eval()``.

Source: https://github.com/moskomule/senet.pytorch
Commit: 8cb2669fec6fa344481726f9199aa611f08c3fbd
Files: ``cifar.py``, ``senet/se_resnet.py`` (``CifarSEBasicBlock``, ``CifarSEResNet``, ``se_resnet20``),
``senet/se_module.py`` (``SELayer``); the loop body is homura's ``SupervisedTrainer.iteration`` and
``TrainerBase.train`` (https://github.com/moskomule/homura, ``homura/trainers.py`` at 3c00b431a61ed58252ba06e308bb5922a7b5db54,
Apache-2.0) and the CIFAR-10 transforms of ``homura/vision/data/__init__.py`` at that commit.
License: MIT (Copyright (c) 2018 Ryuichiro Hataya; full text in LICENSES/moskomule-senet.pytorch.txt); homura:
Apache-2.0
Domain: vision, image classification (squeeze-and-excitation residual CNN, SGD + step schedule)

Kept as written: ``SELayer``, ``conv3x3``, ``CifarSEBasicBlock`` (downsample 1x1 conv + BN where the width changes,
identity lambda otherwise), ``CifarSEResNet`` (Kaiming-normal convolutions, BN weight 1 / bias 0), ``se_resnet20``
with ``num_classes=10, reduction=16``; ``F.cross_entropy``; SGD(lr 1e-1, momentum 0.9, weight_decay 1e-4);
``StepLR(80, 0.1)``; homura's iteration (output, loss, ``zero_grad``, ``backward``, ``step``) and ``model.train()``
for training, ``model.eval()`` for ``test``; the train transforms RandomCrop(32, padding=4, reflect) and
RandomHorizontalFlip before ToTensor + Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)).

Deviations from the original:
- CIFAR-10 is not here: the images are synthetic, made from ``seed`` (each class a colour at least 0.25 from the
  others, plus smooth noise; values in [0, 1] as ToTensor gives them), 8x8 instead of 32x32 (RandomCrop(8,
  padding=1, reflect) accordingly), 1024 training and 256 test images; ``batch_size`` 64 -> 32;
  ``num_workers`` 0 and a seeded shuffling generator.
- homura's pieces are written out in plain torch: ``optim.SGD``/``lr_scheduler.StepLR`` are partials of the torch
  classes bound to the model inside the trainer; the callbacks, reporters, AMP (off on CPU) and debug hooks are
  dropped; ``train_step`` is one ``iteration`` of ``trainer.train(train_loader)`` (the scheduler steps when the
  loader runs out, as homura steps it per epoch); ``eval_fn`` is ``trainer.test``'s accuracy on the test images.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_CLASSES, IMG, N_TRAIN, N_TEST, BATCH_SIZE = 10, 8, 1024, 256, 32


# ---- senet/se_module.py ----------------------------------------------------------------------------------------

class SELayer(nn.Module):
    def __init__(self, channel, reduction=16):
        super(SELayer, self).__init__()
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Sequential(
            nn.Linear(channel, channel // reduction, bias=False),
            nn.ReLU(inplace=True),
            nn.Linear(channel // reduction, channel, bias=False),
            nn.Sigmoid()
        )

    def forward(self, x):
        b, c, _, _ = x.size()
        y = self.avg_pool(x).view(b, c)
        y = self.fc(y).view(b, c, 1, 1)
        return x * y.expand_as(x)


# ---- senet/se_resnet.py ----------------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class CifarSEBasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1, reduction=16):
        super(CifarSEBasicBlock, self).__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.se = SELayer(planes, reduction)
        if inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride, bias=False),
                                            nn.BatchNorm2d(planes))
        else:
            self.downsample = lambda x: x
        self.stride = stride

    def forward(self, x):
        residual = self.downsample(x)
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.se(out)

        out += residual
        out = self.relu(out)

        return out


class CifarSEResNet(nn.Module):
    def __init__(self, block, n_size, num_classes=10, reduction=16):
        super(CifarSEResNet, self).__init__()
        self.inplane = 16
        self.conv1 = nn.Conv2d(
            3, self.inplane, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplane)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(
            block, 16, blocks=n_size, stride=1, reduction=reduction)
        self.layer2 = self._make_layer(
            block, 32, blocks=n_size, stride=2, reduction=reduction)
        self.layer3 = self._make_layer(
            block, 64, blocks=n_size, stride=2, reduction=reduction)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        self.initialize()

    def initialize(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride, reduction):
        strides = [stride] + [1] * (blocks - 1)
        layers = []
        for stride in strides:
            layers.append(block(self.inplane, planes, stride, reduction))
            self.inplane = planes

        return nn.Sequential(*layers)

    def forward(self, x):
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


def se_resnet20(**kwargs):
    """Constructs a ResNet-18 model.

    """
    model = CifarSEResNet(CifarSEBasicBlock, 3, **kwargs)
    return model


# ---- (port) data: synthetic CIFAR-like images, homura's CIFAR-10 transforms in plain torch -------------------------

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
    """CIFAR-10 stand-in: a class colour plus smooth noise, in [0, 1]; RandomCrop(reflect) + flip when training."""

    def __init__(self, gen, n, colours, train):
        self.labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        noise = F.interpolate(0.35 * torch.randn(n, 3, IMG // 2, IMG // 2, generator=gen), size=(IMG, IMG),
                              mode="bilinear", align_corners=False)
        self.images = (colours[self.labels][:, :, None, None] + noise).clamp(0, 1)
        self.train = train
        self.gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.train:
            x = F.pad(x[None], (1, 1, 1, 1), mode="reflect")[0]
            i, j = (int(v) for v in torch.randint(0, 3, (2,), generator=self.gen))
            x = x[:, i:i + IMG, j:j + IMG]
            if float(torch.rand(1, generator=self.gen)) < 0.5:
                x = x.flip(-1)
        return (x - MEAN) / STD, self.labels[idx]


# ---- cifar.py + homura's SupervisedTrainer ----------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    colours = make_colours(gen)
    train_set = ColourImages(gen, N_TRAIN, colours, train=True)
    test_set = ColourImages(gen, N_TEST, colours, train=False)
    train_loader = DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
                              generator=torch.Generator().manual_seed(seed))
    test_loader = DataLoader(test_set, batch_size=BATCH_SIZE, shuffle=False, num_workers=0)

    model = se_resnet20(num_classes=10, reduction=16)
    params = model.parameters()
    if bug == "fc_left_out_of_optimizer":
        params = [p for n, p in model.named_parameters() if not n.startswith("fc.")]  # (bug) the head never updated
    optimizer = torch.optim.SGD(params, lr=1e-1, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 80, 0.1)
    if bug == "softmax_before_cross_entropy":
        def loss_f(output, target):
            return F.cross_entropy(F.softmax(output, dim=1), target)  # (bug) probabilities taken as logits
    else:
        loss_f = F.cross_entropy

    st = {"it": None}

    def next_batch():
        if st["it"] is None:
            st["it"] = iter(train_loader)
        try:
            return next(st["it"])
        except StopIteration:
            scheduler.step()  # homura: scheduler.step() once per epoch
            st["it"] = iter(train_loader)
            return next(st["it"])

    def train_step():
        model.train()
        data = next_batch()
        # homura.trainers.SupervisedTrainer.iteration
        input, target = data
        output = model(input)
        loss = loss_f(output, target)

        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        correct = n = 0
        with torch.no_grad():
            for input, target in test_loader:
                output = model(input)
                correct += int((output.argmax(dim=1) == target).sum())
                n += len(target)
        model.train(was)
        return correct / n

    batch = next(iter(DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=False)))
    return Program(name="senetpytorch_se_resnet20", model=model, batch=batch, loss_fn=loss_f, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the classifier head filtered out of the optimizer's parameters: it keeps its random init (classic).
    Bug("fc_left_out_of_optimizer", functools.partial(_build, bug="fc_left_out_of_optimizer"), "four_structures",
        ("fc",)),
    # softmax applied before F.cross_entropy, which takes logits (classic).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
    # zero_grad between backward and step: every step applies only the weight decay (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

"""Res2NeXt on CIFAR-100 of 4uiiurz1/pytorch-res2net: the repository's ``CifarRes2Net`` as ``train.py``'s default
``--arch res2next29_6cx24wx6scale_se`` builds it (3x3 stem, three stages of ``Res2NetBottleneck``: a 1x1 conv, the
channels split into ``scales`` groups, every group after the first through its own grouped 3x3 conv with the
previous group's output added first (the hierarchical residual), concatenated, a 1x1 conv, BatchNorm, the SE
channel gate, the shortcut (1x1 conv + BN where the shape changes), ReLU; global average pooling and a linear head;
Kaiming fan-out init), trained by ``train.py``'s ``train`` / ``validate``: ``CrossEntropyLoss``, SGD over the
parameters that require grad (lr 0.1, momentum 0.9, weight decay 5e-4, no Nesterov), ``MultiStepLR`` (milestones 150
/ 225 of 300 epochs, gamma 0.1) stepped at the start of every epoch, top-1 / top-5 ``accuracy`` per batch, each epoch
a train pass then ``validate`` (``eval()``, ``no_grad``); ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``,
``Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))``.

Source: https://github.com/4uiiurz1/pytorch-res2net
Commit: 073efde496798ab8abcc0112df8ef555f6427ba7
Files: train.py, res2net.py, utils.py, README.md
License: MIT (Copyright (c) 2018 Takato Kimura; full text in LICENSES/4uiiurz1-pytorch-res2net.txt)
Domain: image classification (multi-scale residual CNN, Res2NeXt with squeeze-and-excitation)

Deviations from the original:
- sizes: ``res2next29_6cx24wx6scale_se`` (``CifarRes2Net([3, 3, 3], groups=6, width=24, scales=6, se=True)``) ->
  ``CifarRes2Net([1, 1, 1], groups=2, width=2, scales=4, se=True)`` (one block per stage; stage outputs 32 / 64 / 128
  channels instead of 576 / 1152 / 2304); 32x32 images -> 16x16 (``RandomCrop(16, padding=4)``); batch 128 -> 32;
  CIFAR-100's 100 classes -> 10, 50000 / 10000 images -> 512 / 64 synthetic ones; 300 epochs with milestones
  [150, 225] -> 30 with [15, 22];
- data: ``torchvision.datasets.CIFAR100`` (a download) is replaced by synthetic RGB images made from ``seed``: each
  class a colour plus a class-specific stripe orientation over smooth noise, in [0, 1]; the torchvision transforms
  are written out in plain torch (the crops' random state a seeded generator); DataLoader without workers;
- ``accuracy``'s ``correct[:k].view(-1)`` is written ``reshape(-1)`` (current PyTorch refuses the view of the
  transposed, non-contiguous tensor);
- the ImageNet branch of ``main`` and the ImageNet models, the tqdm bars, the pandas log, ``joblib`` / args files
  and checkpoint saving are dropped; ``.cuda()`` and ``cudnn.benchmark`` are dropped (CPU);
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in
  ``main()``: ``validate``, then the next epoch's ``scheduler.step()`` and ``train()``'s ``model.train()``;
  ``eval_fn`` is ``validate``'s top-1 accuracy on a batch; ``task_probe`` a held-out (images, labels) pair;
- the SGD hyper-parameters, milestones and ``gamma`` are ``parse_args``' defaults written as values;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP008, PLR0402  (the original's code style is kept as written)

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

IMG, N_TRAIN, N_TEST, N_CLASSES = 16, 512, 64, 10
EPOCHS, BATCH_SIZE, MILESTONES = 30, 32, '15,22'
LAYERS, GROUPS, WIDTH, SCALES = [1, 1, 1], 2, 2, 4  # [3, 3, 3], 6, 24, 6 in res2next29_6cx24wx6scale_se


# ---- res2net.py ----------------------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1, groups=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, groups=groups, bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class SEModule(nn.Module):
    def __init__(self, channels, reduction=16):
        super(SEModule, self).__init__()
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, channels // reduction, kernel_size=1, padding=0)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(channels // reduction, channels, kernel_size=1, padding=0)
        self.sigmoid = nn.Sigmoid()

    def forward(self, input):
        x = self.avg_pool(input)
        x = self.fc1(x)
        x = self.relu(x)
        x = self.fc2(x)
        x = self.sigmoid(x)
        return input * x


class Res2NetBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, downsample=None, stride=1, scales=4, groups=1, se=False,  norm_layer=None, bug=None):
        super(Res2NetBottleneck, self).__init__()
        if planes % scales != 0:
            raise ValueError('Planes must be divisible by scales')
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        bottleneck_planes = groups * planes
        self.conv1 = conv1x1(inplanes, bottleneck_planes, stride)
        self.bn1 = norm_layer(bottleneck_planes)
        self.conv2 = nn.ModuleList([conv3x3(bottleneck_planes // scales, bottleneck_planes // scales, groups=groups) for _ in range(scales-1)])
        self.bn2 = nn.ModuleList([norm_layer(bottleneck_planes // scales) for _ in range(scales-1)])
        self.conv3 = conv1x1(bottleneck_planes, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.se = SEModule(planes * self.expansion) if se else None
        self.downsample = downsample
        self.stride = stride
        self.scales = scales
        self.bug = bug

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        xs = torch.chunk(out, self.scales, 1)
        ys = []
        for s in range(self.scales):
            if s == 0:
                ys.append(xs[s])
            elif s == 1:
                ys.append(self.relu(self.bn2[s-1](self.conv2[s-1](xs[s]))))
            elif self.bug == "conv2_first_reused":
                # the scale index dropped: every split goes through the first 3x3 conv
                ys.append(self.relu(self.bn2[s-1](self.conv2[0](xs[s] + ys[-1]))))
            else:
                ys.append(self.relu(self.bn2[s-1](self.conv2[s-1](xs[s] + ys[-1]))))
        out = torch.cat(ys, 1)

        out = self.conv3(out)
        out = self.bn3(out)

        if self.se is not None:
            out = self.se(out)

        if self.downsample is not None:
            identity = self.downsample(identity)

        out += identity
        out = self.relu(out)

        return out


class CifarRes2Net(nn.Module):
    def __init__(self, layers, num_classes=100, zero_init_residual=False,
                 groups=1, width=64, scales=4, se=False, norm_layer=None, bug=None):
        super(CifarRes2Net, self).__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self.bug = bug

        planes = [int(width * scales * 2 ** i) for i in range(3)]
        self.inplanes = planes[0]
        self.conv1 = conv3x3(3, planes[0])
        self.bn1 = norm_layer(planes[0])
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(Res2NetBottleneck, planes[0], layers[0], scales=scales, groups=groups, se=se, norm_layer=norm_layer)
        self.layer2 = self._make_layer(Res2NetBottleneck, planes[1], layers[1], stride=2, scales=scales, groups=groups, se=se, norm_layer=norm_layer)
        self.layer3 = self._make_layer(Res2NetBottleneck, planes[2], layers[2], stride=2, scales=scales, groups=groups, se=se, norm_layer=norm_layer)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(planes[2] * Res2NetBottleneck.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

        # Zero-initialize the last BN in each residual branch,
        # so that the residual branch starts with zeros, and each residual block behaves like an identity.
        # This improves the model by 0.2~0.3% according to https://arxiv.org/abs/1706.02677
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Res2NetBottleneck):
                    nn.init.constant_(m.bn3.weight, 0)

    def _make_layer(self, block, planes, blocks, stride=1, scales=4, groups=1, se=False, norm_layer=None):
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                norm_layer(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, downsample, stride=stride, scales=scales, groups=groups, se=se, norm_layer=norm_layer, bug=self.bug))
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, scales=scales, groups=groups, se=se, norm_layer=norm_layer, bug=self.bug))

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


def res2next29_6cx24wx6scale_se(**kwargs):
    """Constructs a Res2NeXt-29, 6cx24wx6scale-SE model (at the port's sizes: see the module docstring).
    """
    model = CifarRes2Net(LAYERS, groups=GROUPS, width=WIDTH, scales=SCALES, se=True, **kwargs)
    return model


# ---- utils.py ------------------------------------------------------------------------------------------------

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
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


# ---- synthetic CIFAR-10 (torchvision's download replaced) -------------------------------------------------------

MEAN = np.array([0.4914, 0.4822, 0.4465])
STD = np.array([0.2470, 0.2435, 0.2616])


def make_images(gen, n, colours, angles):
    """(n, 3, IMG, IMG) images in [0, 1]: each class a colour plus a stripe orientation over smooth noise."""
    labels = torch.randint(0, N_CLASSES, (n,), generator=gen)
    yy, xx = torch.meshgrid(torch.arange(IMG, dtype=torch.float32), torch.arange(IMG, dtype=torch.float32),
                            indexing="ij")
    a = angles[labels][:, None, None]
    phase = 2 * np.pi * torch.rand(n, 1, 1, generator=gen)
    stripes = 0.25 * torch.sin(1.2 * (xx * torch.cos(a) + yy * torch.sin(a)) + phase)
    noise = F.interpolate(0.2 * torch.randn(n, 3, IMG // 4, IMG // 4, generator=gen), size=(IMG, IMG),
                          mode="bilinear", align_corners=False)
    images = colours[labels][:, :, None, None] + stripes[:, None] + noise
    return images.clamp(0, 1), labels


def synthetic_cifar(seed):
    gen = torch.Generator().manual_seed(seed)
    colours = 0.2 + 0.6 * torch.rand(N_CLASSES, 3, generator=gen)
    angles = torch.randperm(N_CLASSES, generator=gen).float() * (np.pi / N_CLASSES)
    train = make_images(gen, N_TRAIN, colours, angles)
    test = make_images(gen, N_TEST, colours, angles)
    probe = make_images(gen, N_TEST, colours, angles)
    return train, test, probe


def random_crop_flip(x, rng):
    """``RandomCrop(IMG, padding=4)`` then ``RandomHorizontalFlip()`` on a (3, H, W) tensor."""
    x = F.pad(x, (4, 4, 4, 4))
    i, j = rng.integers(0, 9, 2)
    x = x[:, i:i + IMG, j:j + IMG]
    if rng.random() < 0.5:
        x = x.flip(-1)
    return x


def to_tensor_normalize(x):
    """``ToTensor()`` then ``Normalize(mean, std)``."""
    return (x - torch.tensor(MEAN, dtype=torch.float32)[:, None, None]) / torch.tensor(
        STD, dtype=torch.float32)[:, None, None]


class ImageSet(Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.transform(self.images[idx]), self.labels[idx]


# ---- train.py ------------------------------------------------------------------------------------------------

MEAN, STD = np.array([0.4914, 0.4822, 0.4465]), np.array([0.2023, 0.1994, 0.2010])  # train.py's CIFAR-100 values


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    (train_x, train_y), (test_x, test_y), (probe_x, probe_y) = synthetic_cifar(seed)
    rng = np.random.default_rng(seed + 1)

    criterion = nn.CrossEntropyLoss()

    train_set = ImageSet(train_x, train_y, lambda x: to_tensor_normalize(random_crop_flip(x, rng)))
    train_loader = torch.utils.data.DataLoader(
        train_set,
        batch_size=BATCH_SIZE,
        shuffle=True,
        num_workers=0, generator=torch.Generator().manual_seed(seed + 2))
    test_set = ImageSet(test_x, test_y, to_tensor_normalize)
    test_loader = torch.utils.data.DataLoader(
        test_set,
        batch_size=BATCH_SIZE,
        shuffle=False,
        num_workers=0)

    num_classes = N_CLASSES

    # create model
    model = res2next29_6cx24wx6scale_se(num_classes=num_classes, bug=bug)

    optimizer = optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=1e-1,
            momentum=0.9, weight_decay=5e-4)

    scheduler = lr_scheduler.MultiStepLR(optimizer,
            milestones=[int(e) for e in MILESTONES.split(',')], gamma=0.1)

    def validate():
        losses = AverageMeter()
        acc1s = AverageMeter()
        acc5s = AverageMeter()

        # switch to evaluate mode
        model.eval()

        with torch.no_grad():
            for i, (input, target) in enumerate(test_loader):
                output = model(input)
                loss = criterion(output, target)

                acc1, acc5 = accuracy(output, target, topk=(1, 5))

                losses.update(loss.item(), input.size(0))
                acc1s.update(acc1.item(), input.size(0))
                acc5s.update(acc5.item(), input.size(0))
        return acc1s.avg

    state = {"it": None}
    losses = AverageMeter()
    acc1s = AverageMeter()
    acc5s = AverageMeter()

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main(): validate, then the next epoch
                validate()
            scheduler.step()
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        input, target = next_batch()

        output = model(input)
        loss = criterion(output, target)

        acc1, acc5 = accuracy(output, target, topk=(1, 5))

        losses.update(loss.item(), input.size(0))
        acc1s.update(acc1.item(), input.size(0))
        acc5s.update(acc5.item(), input.size(0))

        # compute gradient and do optimizing step
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        input, target = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            acc1, = accuracy(model(input), target, topk=(1,))
        model.train(was_training)
        return float(acc1) / 100.0

    probe = (torch.stack([to_tensor_normalize(x) for x in probe_x]), probe_y)
    first = next(iter(DataLoader(ImageSet(train_x, train_y, to_tensor_normalize), batch_size=BATCH_SIZE)))
    return Program(name="res2net_cifar", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=probe,
                   task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic index slip in Res2NetBottleneck.forward: ``self.conv2[0]`` for every split after the second instead of
    # ``self.conv2[s-1]``: the later scales reuse the first 3x3 conv and conv2.1, conv2.2 never take part.
    Bug("conv2_first_reused", functools.partial(_build, bug="conv2_first_reused"), "reachability", ("conv2.1",)),
    # classic whole-model step slip: optimizer.zero_grad() moved between backward and step: every step applies only
    # the momentum and the weight decay, never the new gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

"""CIFAR-10 classification with the repository's ``cutout+mixup+cos`` recipe for a pre-activation ResNet
(``experiments/cutout+mixup+cos/preresnet20/config.yaml``): random crop (padding 4) + horizontal flip + Normalize +
Cutout (1 hole, length 8), mixup with alpha 0.4 (``mixup_data`` / ``mixup_criterion``), CrossEntropyLoss, SGD
lr 0.1 momentum 0.9 Nesterov weight decay 1e-4, cosine learning rate set per epoch by ``adjust_learning_rate``,
periodic evaluation.

Source: https://github.com/BIGBALLON/CIFAR-ZOO
Commit: 02753840c43a1929fba93092963919011969f8c2
Files: train.py, utils.py, models/preresnet.py, models/__init__.py, experiments/cutout+mixup+cos/preresnet20/config.yaml
License: MIT (Copyright (c) 2019 Wei Li)
Domain: image classification with a training recipe (mixup, cutout, cosine lr)

Deviations from the original:
- sizes: preresnet20 (depth 20) -> the same ``PreResNet`` class at depth 8 (one BasicBlock per stage); batch_size
  128 -> 32, test_batch 200 -> 64, epochs 250 -> 20 (the cosine ratio's denominator); 32x32 images and the
  augmentation parameters are unchanged;
- data: CIFAR-10 (a torchvision download) is replaced by synthetic 32x32 RGB uint8 images made from ``seed``: ten
  fixed smooth class templates plus per-image noise and brightness, so the class is learnable; torchvision's
  RandomCrop(32, padding=4), RandomHorizontalFlip, ToTensor and Normalize are written out in torch/numpy with the
  same parameters; ``Cutout`` is copied as written;
- torchvision, easydict, yaml, tensorboard, logging and checkpointing are not used: the config is a dict read by
  attribute, ``device`` is "cpu" (no DataParallel), the global numpy generator is seeded from ``seed`` (mixup's
  ``np.random.beta`` and Cutout's positions draw from it);
- one ``train_step`` is one iteration of ``train()``'s loop (``net.train()`` and ``adjust_learning_rate`` run at
  the start of each epoch, the accuracy bookkeeping is kept); ``eval_fn`` is ``test()``'s body on a given batch.
"""
# ruff: noqa: UP004, UP008, PLR0402, RUF059  (the original's code is kept as written)

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

DEPTH = 8


class EasyDict(dict):
    def __getattr__(self, k):
        v = self[k]
        return EasyDict(v) if isinstance(v, dict) else v


CONFIG = {
    "architecture": "preresnet20", "num_classes": 10, "dataset": "cifar10", "use_gpu": False, "input_size": 32,
    "epochs": 20, "batch_size": 32, "test_batch": 64, "eval_freq": 2, "workers": 0,
    "optimize": {"momentum": 0.9, "weight_decay": 0.0001, "nesterov": True},
    "mixup": True, "mixup_alpha": 0.4,
    "augmentation": {"normalize": True, "random_crop": True, "random_horizontal_filp": True, "cutout": True,
                     "holes": 1, "length": 8},
    "lr_scheduler": {"type": "COSINE", "base_lr": 0.1, "lr_epochs": [100, 150, 200], "lr_mults": 0.1,
                     "min_lr": 0.0, "lower_bound": -6.0, "upper_bound": 3.0},
}


# ---- models/preresnet.py ----------------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    "3x3 convolution with padding"
    return nn.Conv2d(
        in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False
    )


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()
        self.bn_1 = nn.BatchNorm2d(inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.conv_1 = conv3x3(inplanes, planes, stride)
        self.bn_2 = nn.BatchNorm2d(planes)
        self.conv_2 = conv3x3(planes, planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.bn_1(x)
        out = self.relu(out)
        out = self.conv_1(out)

        out = self.bn_2(out)
        out = self.relu(out)
        out = self.conv_2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual

        return out


class PreResNet(nn.Module):
    def __init__(self, depth, num_classes=1000, block_name="BasicBlock"):
        super(PreResNet, self).__init__()
        # Model type specifies number of layers for CIFAR-10 model
        if block_name.lower() == "basicblock":
            assert (
                depth - 2
            ) % 6 == 0, "When use basicblock, depth should be 6n+2, e.g. 20, 32, 44, 56, 110, 1202"
            n = (depth - 2) // 6
            block = BasicBlock
        else:
            raise ValueError("block_name shoule be Basicblock or Bottleneck")

        self.inplanes = 16
        self.conv_1 = nn.Conv2d(3, 16, kernel_size=3, padding=1, bias=False)
        self.layer1 = self._make_layer(block, 16, n)
        self.layer2 = self._make_layer(block, 32, n, stride=2)
        self.layer3 = self._make_layer(block, 64, n, stride=2)
        self.bn = nn.BatchNorm2d(64 * block.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AvgPool2d(8)
        self.fc = nn.Linear(64 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight.data)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(
                    self.inplanes,
                    planes * block.expansion,
                    kernel_size=1,
                    stride=stride,
                    bias=False,
                )
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv_1(x)  # 32x32

        x = self.layer1(x)  # 32x32
        x = self.layer2(x)  # 16x16
        x = self.layer3(x)  # 8x8
        x = self.bn(x)
        x = self.relu(x)

        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)

        return x


def preresnet20(num_classes):
    return PreResNet(depth=DEPTH, num_classes=num_classes)


def get_model(config):
    return globals()[config.architecture](config.num_classes)


# ---- utils.py ---------------------------------------------------------------------------------------------------

class Cutout(object):
    def __init__(self, n_holes, length):
        self.n_holes = n_holes
        self.length = length

    def __call__(self, img):
        h = img.size(1)
        w = img.size(2)

        mask = np.ones((h, w), np.float32)

        for n in range(self.n_holes):
            y = np.random.randint(h)
            x = np.random.randint(w)

            y1 = np.clip(y - self.length // 2, 0, h)
            y2 = np.clip(y + self.length // 2, 0, h)
            x1 = np.clip(x - self.length // 2, 0, w)
            x2 = np.clip(x + self.length // 2, 0, w)

            mask[y1:y2, x1:x2] = 0.0

        mask = torch.from_numpy(mask)
        mask = mask.expand_as(img)
        img = img * mask

        return img


class RandomCrop(object):  # torchvision.transforms.RandomCrop(size, padding) on an HWC uint8 array
    def __init__(self, size, padding):
        self.size, self.padding = size, padding

    def __call__(self, img):
        p = self.padding
        img = np.pad(img, ((p, p), (p, p), (0, 0)))
        i, j = np.random.randint(0, img.shape[0] - self.size + 1), np.random.randint(0, img.shape[1] - self.size + 1)
        return img[i:i + self.size, j:j + self.size]


class RandomHorizontalFlip(object):
    def __call__(self, img):
        return img[:, ::-1] if np.random.rand() < 0.5 else img


class ToTensor(object):
    def __call__(self, img):
        return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).float() / 255.0


class Normalize(object):
    def __init__(self, mean, std):
        self.mean, self.std = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]

    def __call__(self, t):
        return (t - self.mean) / self.std


class Compose(object):
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


def data_augmentation(config, is_train=True):
    aug = []
    if is_train:
        # random crop
        if config.augmentation.random_crop:
            aug.append(RandomCrop(config.input_size, padding=4))
        # horizontal filp
        if config.augmentation.random_horizontal_filp:
            aug.append(RandomHorizontalFlip())

    aug.append(ToTensor())
    # normalize  [- mean / std]
    if config.augmentation.normalize:
        if config.dataset == "cifar10":
            aug.append(
                Normalize((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
            )
        else:
            aug.append(
                Normalize((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761))
            )

    if is_train and config.augmentation.cutout:
        # cutout
        aug.append(
            Cutout(n_holes=config.augmentation.holes, length=config.augmentation.length)
        )
    return aug


class SyntheticCIFAR10(torch.utils.data.Dataset):
    """Stands in for torchvision.datasets.CIFAR10: uint8 HWC images, int labels, a transform."""

    def __init__(self, rng, templates, n, transform):
        self.targets = rng.integers(0, 10, size=n)
        noise = rng.normal(0, 25, size=(n, 32, 32, 3))
        bright = rng.uniform(-30, 30, size=(n, 1, 1, 1))
        self.data = np.clip(templates[self.targets] + noise + bright, 0, 255).astype(np.uint8)
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.transform(self.data[i]), int(self.targets[i])


def make_templates(rng):
    yy, xx = np.mgrid[0:32, 0:32] / 31.0
    templates = []
    for _ in range(10):
        fy, fx, ph = rng.uniform(0.5, 2.5), rng.uniform(0.5, 2.5), rng.uniform(0, 2 * np.pi)
        wave = np.sin(2 * np.pi * (fy * yy + fx * xx) + ph)
        colour = rng.uniform(40, 215, size=3)
        templates.append(colour + 60 * wave[..., None] * rng.choice([-1, 1], size=3))
    return np.stack(templates)


def get_data_loader(transform_train, transform_test, config, rng, generator):
    templates = make_templates(rng)
    trainset = SyntheticCIFAR10(rng, templates, 512, transform_train)
    testset = SyntheticCIFAR10(rng, templates, 128, transform_test)

    train_loader = torch.utils.data.DataLoader(
        trainset, batch_size=config.batch_size, shuffle=True, num_workers=config.workers, generator=generator
    )

    test_loader = torch.utils.data.DataLoader(
        testset, batch_size=config.test_batch, shuffle=False, num_workers=config.workers
    )
    return train_loader, test_loader


def mixup_data(x, y, alpha, device, bug=None):
    """Returns mixed inputs, pairs of targets, and lambda"""
    if alpha > 0:
        lam = np.random.beta(alpha, alpha)
    else:
        lam = 1

    batch_size = x.size()[0]
    index = torch.randperm(batch_size).to(device)

    mixed_x = lam * x + (1 - lam) * x[index, :]
    if bug == "targets_b_not_permuted":
        # the second label taken from the unpermuted batch: the mixed-in image's class never reaches the loss
        y_a, y_b = y, y
    else:
        y_a, y_b = y, y[index]
    return mixed_x, y_a, y_b, lam


def mixup_criterion(criterion, pred, y_a, y_b, lam, bug=None):
    if bug == "mixup_loss_unweighted":
        # the two cross-entropies averaged instead of weighted by lam
        return 0.5 * criterion(pred, y_a) + 0.5 * criterion(pred, y_b)
    return lam * criterion(pred, y_a) + (1 - lam) * criterion(pred, y_b)


def get_current_lr(optimizer):
    for param_group in optimizer.param_groups:
        return param_group["lr"]


def adjust_learning_rate(optimizer, epoch, config):
    lr = get_current_lr(optimizer)
    if config.lr_scheduler.type == "STEP":
        if epoch in config.lr_scheduler.lr_epochs:
            lr *= config.lr_scheduler.lr_mults
    elif config.lr_scheduler.type == "COSINE":
        ratio = epoch / config.epochs
        lr = (
            config.lr_scheduler.min_lr
            + (config.lr_scheduler.base_lr - config.lr_scheduler.min_lr)
            * (1.0 + math.cos(math.pi * ratio))
            / 2.0
        )
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    return lr


# ---- train.py ---------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed)
    config = EasyDict(CONFIG)
    device = "cpu"

    net = get_model(config)
    net.to(device)

    # define loss and optimizer
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(
        net.parameters(),
        config.lr_scheduler.base_lr,
        momentum=config.optimize.momentum,
        weight_decay=config.optimize.weight_decay,
        nesterov=config.optimize.nesterov,
    )

    transform_train = Compose(data_augmentation(config))
    transform_test = Compose(data_augmentation(config, is_train=False))
    gen = torch.Generator().manual_seed(seed)
    train_loader, test_loader = get_data_loader(transform_train, transform_test, config, rng, gen)

    stats = {"train_loss": 0.0, "correct": 0.0, "total": 0}

    def batches():
        last_epoch = -1
        for epoch in range(last_epoch + 1, config.epochs):
            adjust_learning_rate(optimizer, epoch, config)
            net.train()
            yield from enumerate(train_loader)

    it = batches()

    def train_step():
        batch_index, (inputs, targets) = next(it)
        inputs, targets = inputs.to(device), targets.to(device)
        if config.mixup:
            inputs, targets_a, targets_b, lam = mixup_data(
                inputs, targets, config.mixup_alpha, device, bug=bug
            )

            outputs = net(inputs)
            loss = mixup_criterion(criterion, outputs, targets_a, targets_b, lam, bug=bug)
        else:
            outputs = net(inputs)
            loss = criterion(outputs, targets)

        # zero the gradient buffers
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        # backward
        loss.backward()
        # update weight
        optimizer.step()

        # count the loss and acc
        stats["train_loss"] += loss.item()
        _, predicted = outputs.max(1)
        stats["total"] += targets.size(0)
        if config.mixup:
            stats["correct"] += (
                lam * predicted.eq(targets_a).sum().item()
                + (1 - lam) * predicted.eq(targets_b).sum().item()
            )
        else:
            stats["correct"] += predicted.eq(targets).sum().item()
        return loss.detach()

    def eval_fn(net, batch):
        net.eval()
        inputs, targets = batch
        with torch.no_grad():
            outputs = net(inputs)
            loss = criterion(outputs, targets)
            _, predicted = outputs.max(1)
            correct = predicted.eq(targets).sum().item()
        net.train()
        return {"test_loss": float(loss), "test_acc": correct / targets.size(0)}

    first = next(iter(test_loader))
    return Program(name="cifarzoo_mixup_cutout", model=net, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader,
                   task="classification")


build = functools.partial(_build)

BUGS = [
    # classic mixup slip: y_b = y instead of y[index]; the mixed-in image's class never appears in the targets
    Bug("targets_b_not_permuted", functools.partial(_build, bug="targets_b_not_permuted"), "learning_ledger",
        ("TASK",)),
    # classic: mixup_criterion averages the two cross-entropies 0.5/0.5 instead of weighting them by lam
    Bug("mixup_loss_unweighted", functools.partial(_build, bug="mixup_loss_unweighted"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic whole-model step slip: optimizer.zero_grad() left out, gradients pile up across iterations
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]

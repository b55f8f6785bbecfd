"""ResNeXt on CIFAR-10 of hysts/pytorch_resnext: the repository's ``resnext.Network`` (3x3 stem conv-BN-ReLU, three
stages of ResNeXt bottleneck blocks: 1x1 conv-BN-ReLU, grouped 3x3 conv (``groups=cardinality``, the stride here)
-BN-ReLU, 1x1 conv-BN, a 1x1 conv-BN shortcut where the width changes, ReLU after the addition; global average
pooling, a linear head; Kaiming fan-out init), trained by ``main.py`` as the README runs it (``--depth 29
--cardinality 4 --base_channels 64``, the other arguments at their defaults): ``nn.CrossEntropyLoss``, SGD (lr 0.1,
momentum 0.9, weight decay 5e-4, Nesterov), ``MultiStepLR`` (milestones 150 / 225 of 300 epochs, gamma 0.1) stepped
at the start of every epoch, ``test`` (``eval()``, forward under ``no_grad``) before training and after every epoch;
``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, ``ToTensor``, ``Normalize`` with the CIFAR-10 statistics.

Source: https://github.com/hysts/pytorch_resnext
Commit: f1e2a2052172852a109161a42c4cf9a7d9ab1d37
Files: main.py, resnext.py, dataloader.py, README.md
License: MIT (Copyright (c) 2017 hysts; full text in LICENSES/hysts-pytorch_resnext.txt)
Domain: image classification (ResNeXt, grouped convolutions)

Kept as written: ``resnext.py`` (``initialize_weights``, ``BottleneckBlock``, ``Network``), ``main.py``'s ``train``
loop body (``optimizer.zero_grad()``, forward, criterion, backward, step, the accuracy bookkeeping), ``test``, the
optimizer and scheduler of ``main`` and its epoch order (``scheduler.step()``, ``train``, ``test``).

Deviations from the original:
- sizes: ``--depth 29 --cardinality 4 --base_channels 64`` -> depth 11 (one block per stage), cardinality 4, base
  channels 4; 32x32 images -> 16x16 (``RandomCrop(16, padding=4)``; ``input_shape`` follows); batch 128 -> 32;
  50000 / 10000 CIFAR-10 images -> 512 / 64 synthetic ones; 300 epochs with milestones [150, 225] -> 30 with
  [15, 22];
- ``nn.CrossEntropyLoss(size_average=True)`` (a removed argument) is written ``reduction='mean'``, its meaning;
- data: ``torchvision.datasets.CIFAR10`` (a download) is replaced by synthetic RGB images made from ``seed``: each
  class a colour plus a class-specific stripe orientation over smooth noise, in [0, 1]; the torchvision transforms
  are written out in plain torch (the crops' random state a seeded generator); DataLoader without workers or
  pinning;
- ``parse_args`` is replaced by the config dicts it builds (the README's command); ``load_model``'s importlib lookup
  by the class; logging, tensorboard, the config json and checkpoint saving are dropped; ``.cuda()`` is dropped;
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in
  ``main()``: ``test``, then the next epoch's ``scheduler.step()`` and ``train()``'s ``model.train()``; the ``test``
  before training runs in ``build``; ``eval_fn`` is ``test``'s accuracy on a batch; ``task_probe`` a held-out
  (images, labels) pair;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP004, UP008, UP032, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG, N_TRAIN, N_TEST, N_CLASSES = 16, 512, 64, 10
DEPTH, BASE_CHANNELS, CARDINALITY, EPOCHS, BATCH_SIZE, MILESTONES = 11, 4, 4, 30, 32, [15, 22]


# ---- resnext.py ----------------------------------------------------------------------------------------------

def initialize_weights(m):
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight.data, mode='fan_out')
    elif isinstance(m, nn.BatchNorm2d):
        m.weight.data.fill_(1)
        m.bias.data.zero_()
    elif isinstance(m, nn.Linear):
        m.bias.data.zero_()


class BottleneckBlock(nn.Module):
    expansion = 4

    def __init__(self, in_channels, out_channels, stride, cardinality):
        super(BottleneckBlock, self).__init__()

        bottleneck_channels = cardinality * out_channels // self.expansion

        self.conv1 = nn.Conv2d(
            in_channels,
            bottleneck_channels,
            kernel_size=1,
            stride=1,
            padding=0,
            bias=False)
        self.bn1 = nn.BatchNorm2d(bottleneck_channels)

        self.conv2 = nn.Conv2d(
            bottleneck_channels,
            bottleneck_channels,
            kernel_size=3,
            stride=stride,  # downsample with 3x3 conv
            padding=1,
            groups=cardinality,
            bias=False)
        self.bn2 = nn.BatchNorm2d(bottleneck_channels)

        self.conv3 = nn.Conv2d(
            bottleneck_channels,
            out_channels,
            kernel_size=1,
            stride=1,
            padding=0,
            bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)

        self.shortcut = nn.Sequential()  # identity
        if in_channels != out_channels:
            self.shortcut.add_module(
                'conv',
                nn.Conv2d(
                    in_channels,
                    out_channels,
                    kernel_size=1,
                    stride=stride,  # downsample
                    padding=0,
                    bias=False))
            self.shortcut.add_module('bn', nn.BatchNorm2d(out_channels))  # BN

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = F.relu(self.bn2(self.conv2(y)), inplace=True)
        y = self.bn3(self.conv3(y))  # not apply ReLU
        y += self.shortcut(x)
        y = F.relu(y, inplace=True)  # apply ReLU after addition
        return y


class Network(nn.Module):
    def __init__(self, config):
        super(Network, self).__init__()

        input_shape = config['input_shape']
        n_classes = config['n_classes']

        base_channels = config['base_channels']
        depth = config['depth']
        self.cardinality = config['cardinality']

        n_blocks_per_stage = (depth - 2) // 9
        assert n_blocks_per_stage * 9 + 2 == depth
        block = BottleneckBlock

        n_channels = [
            base_channels, base_channels * block.expansion,
            base_channels * 2 * block.expansion,
            base_channels * 4 * block.expansion
        ]

        self.conv = nn.Conv2d(
            input_shape[1],
            n_channels[0],
            kernel_size=3,
            stride=1,
            padding=1,
            bias=False)
        self.bn = nn.BatchNorm2d(n_channels[0])

        self.stage1 = self._make_stage(
            n_channels[0], n_channels[1], n_blocks_per_stage, stride=1)
        self.stage2 = self._make_stage(
            n_channels[1], n_channels[2], n_blocks_per_stage, stride=2)
        self.stage3 = self._make_stage(
            n_channels[2], n_channels[3], n_blocks_per_stage, stride=2)

        # compute conv feature size
        with torch.no_grad():
            self.feature_size = self._forward_conv(
                torch.zeros(*input_shape)).view(-1).shape[0]

        self.fc = nn.Linear(self.feature_size, n_classes)

        # initialize weights
        self.apply(initialize_weights)

    def _make_stage(self, in_channels, out_channels, n_blocks, stride):
        stage = nn.Sequential()
        for index in range(n_blocks):
            block_name = 'block{}'.format(index + 1)
            if index == 0:
                stage.add_module(
                    block_name,
                    BottleneckBlock(
                        in_channels,
                        out_channels,
                        stride,  # downsample
                        self.cardinality))
            else:
                stage.add_module(
                    block_name,
                    BottleneckBlock(
                        out_channels,
                        out_channels,
                        1,  # no downsampling
                        self.cardinality))
        return stage

    def _forward_conv(self, x):
        x = F.relu(self.bn(self.conv(x)), inplace=True)
        x = self.stage1(x)
        x = self.stage2(x)
        x = self.stage3(x)
        x = F.adaptive_avg_pool2d(x, output_size=1)
        return x

    def forward(self, x):
        x = self._forward_conv(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)
        return x


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


# ---- main.py -------------------------------------------------------------------------------------------------

class AverageMeter(object):
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, num):
        self.val = val
        self.sum += val * num
        self.count += num
        self.avg = self.sum / self.count


def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    (train_x, train_y), (test_x, test_y), (probe_x, probe_y) = synthetic_cifar(seed)
    rng = np.random.default_rng(seed + 1)

    model_config = OrderedDict([
        ('arch', 'resnext'),
        ('depth', DEPTH),
        ('base_channels', BASE_CHANNELS),
        ('cardinality', CARDINALITY),
        ('input_shape', (1, 3, IMG, IMG)),
        ('n_classes', N_CLASSES),
    ])
    optim_config = OrderedDict([
        ('epochs', EPOCHS),
        ('batch_size', BATCH_SIZE),
        ('base_lr', 0.1),
        ('weight_decay', 5e-4),
        ('momentum', 0.9),
        ('nesterov', True),
        ('milestones', MILESTONES),
        ('lr_decay', 0.1),
    ])

    if bug == "labels_permuted_apart":
        # the training labels shuffled by their own permutation, apart from the images they belong to
        train_y = train_y[torch.randperm(len(train_y), generator=torch.Generator().manual_seed(seed + 3))]

    # data loaders (dataloader.get_loader)
    train_loader = DataLoader(
        ImageSet(train_x, train_y, lambda x: to_tensor_normalize(random_crop_flip(x, rng))),
        batch_size=optim_config['batch_size'], shuffle=True, num_workers=0, drop_last=True,
        generator=torch.Generator().manual_seed(seed + 2))
    test_loader = DataLoader(ImageSet(test_x, test_y, to_tensor_normalize), batch_size=optim_config['batch_size'],
                             num_workers=0, shuffle=False, drop_last=False)

    # model
    model = Network(model_config)

    criterion = nn.CrossEntropyLoss(reduction='mean')

    # optimizer
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=optim_config['base_lr'],
        momentum=optim_config['momentum'],
        weight_decay=optim_config['weight_decay'],
        nesterov=optim_config['nesterov'])
    scheduler = torch.optim.lr_scheduler.MultiStepLR(
        optimizer,
        milestones=optim_config['milestones'],
        gamma=optim_config['lr_decay'])

    def test():
        model.eval()

        loss_meter = AverageMeter()
        correct_meter = AverageMeter()
        for step, (data, targets) in enumerate(test_loader):
            with torch.no_grad():
                outputs = model(data)
            loss = criterion(outputs, targets)

            _, preds = torch.max(outputs, dim=1)

            loss_ = loss.item()
            correct_ = preds.eq(targets).sum().item()
            num = data.size(0)

            loss_meter.update(loss_, num)
            correct_meter.update(correct_, 1)

        accuracy = correct_meter.sum / len(test_loader.dataset)
        return accuracy

    # run test before start training
    test()

    state = {"it": None, "loss_meter": AverageMeter(), "accuracy_meter": AverageMeter()}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main(): test, then the next epoch
                test()
            scheduler.step()
            model.train()
            state["it"] = iter(train_loader)
            state["loss_meter"], state["accuracy_meter"] = AverageMeter(), AverageMeter()
            return next(state["it"])

    def train_step():
        data, targets = next_batch()

        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()

        outputs = model(data)
        loss = criterion(outputs, targets)
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()

        optimizer.step()

        _, preds = torch.max(outputs, dim=1)

        loss_ = loss.item()
        correct_ = preds.eq(targets).sum().item()
        num = data.size(0)

        accuracy = correct_ / num

        state["loss_meter"].update(loss_, num)
        state["accuracy_meter"].update(accuracy, num)
        return loss.detach()

    def eval_fn(model, batch):
        data, targets = batch
        was_training = model.training
        model.eval()
        with torch.no_grad():
            _, preds = torch.max(model(data), dim=1)
        model.train(was_training)
        return float(preds.eq(targets).float().mean())

    probe = (torch.stack([to_tensor_normalize(x) for x in probe_x]), probe_y)
    first = next(iter(DataLoader(ImageSet(train_x, train_y, to_tensor_normalize), batch_size=BATCH_SIZE)))
    return Program(name="hystsresnext_cifar", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=probe,
                   task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic data slip: the training labels shuffled by a permutation of their own, apart from the images (the
    # test set and the held-out probe keep the true pairing).
    Bug("labels_permuted_apart", functools.partial(_build, bug="labels_permuted_apart"), "learning_ledger",
        ("TASK",)),
    # classic whole-model step slip: optimizer.zero_grad() moved between backward() and step(): every update is zero.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

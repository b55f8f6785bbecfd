"""Wide ResNet on CIFAR-10 of hysts/pytorch_wrn: the repository's ``wrn.Network`` (3x3 stem, three stages of
pre-activation BasicBlocks BN-ReLU-conv-(dropout)-BN-ReLU-conv whose first block pre-activates the shortcut too and
takes a 1x1-conv shortcut where the width changes, BN-ReLU, global average pooling, a linear head; Kaiming fan-in
conv init, BatchNorm weights drawn uniform), trained by ``main.py`` as the README runs it (``--depth 28
--widening_factor 10``, the other arguments at their defaults): ``nn.CrossEntropyLoss``, SGD (lr 0.1, momentum 0.9,
weight decay 5e-4, Nesterov), ``MultiStepLR`` (milestones 60 / 120 / 160 of 200 epochs, gamma 0.2) stepped at the
start of every epoch, ``test`` (``eval()``, forward under ``no_grad``) before training and after every epoch;
``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, ``ToTensor``, ``Normalize`` with the CIFAR-10 statistics.

Source: https://github.com/hysts/pytorch_wrn
Commit: da9b5861659c9d0ea415c8fd3b9cdb4738b4e3a2
Files: main.py, wrn.py, dataloader.py, README.md
License: MIT (Copyright (c) 2017 hysts; full text in LICENSES/hysts-pytorch_wrn.txt)
Domain: image classification (Wide ResNet)

Kept as written: ``wrn.py`` (``initialize_weights``, ``BasicBlock``, ``Network``), ``main.py``'s ``train`` loop body
(``optimizer.zero_grad()``, forward, criterion, backward, step, the accuracy bookkeeping), ``test``, the optimizer and
scheduler of ``main`` and its epoch order (``scheduler.step()``, ``train``, ``test``).

Deviations from the original:
- sizes: ``--depth 28 --widening_factor 10`` -> depth 10 (one block per stage), widening factor 2, base channels
  16 -> 8; 32x32 images -> 16x16 (``RandomCrop(16, padding=4)``; ``input_shape`` follows); batch 128 -> 32; 50000 /
  10000 CIFAR-10 images -> 512 / 64 synthetic ones; 200 epochs with milestones [60, 120, 160] -> 30 with
  [9, 18, 24];
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
DEPTH, BASE_CHANNELS, WIDENING_FACTOR, EPOCHS, BATCH_SIZE, MILESTONES = 10, 8, 2, 30, 32, [9, 18, 24]


# ---- wrn.py --------------------------------------------------------------------------------------------------

def initialize_weights(module):
    if isinstance(module, nn.Conv2d):
        nn.init.kaiming_normal_(module.weight.data, mode='fan_in')
    elif isinstance(module, nn.BatchNorm2d):
        module.weight.data.uniform_()
        module.bias.data.zero_()
    elif isinstance(module, nn.Linear):
        module.bias.data.zero_()


class BasicBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride, drop_rate):
        super(BasicBlock, self).__init__()

        self.drop_rate = drop_rate

        self._preactivate_both = (in_channels != out_channels)

        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size=3,
            stride=stride,  # downsample with first conv
            padding=1,
            bias=False)

        self.bn2 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(
            out_channels,
            out_channels,
            kernel_size=3,
            stride=1,
            padding=1,
            bias=False)

        self.shortcut = nn.Sequential()
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

    def forward(self, x):
        if self._preactivate_both:
            x = F.relu(
                self.bn1(x), inplace=True)  # shortcut after preactivation
            y = self.conv1(x)
        else:
            y = F.relu(
                self.bn1(x),
                inplace=True)  # preactivation only for residual path
            y = self.conv1(y)
        if self.drop_rate > 0:
            y = F.dropout(
                y, p=self.drop_rate, training=self.training, inplace=False)

        y = F.relu(self.bn2(y), inplace=True)
        y = self.conv2(y)
        y += self.shortcut(x)
        return y


class Network(nn.Module):
    def __init__(self, config, bug=None):
        super(Network, self).__init__()
        self._bug = bug

        input_shape = config['input_shape']
        n_classes = config['n_classes']

        base_channels = config['base_channels']
        widening_factor = config['widening_factor']
        drop_rate = config['drop_rate']
        depth = config['depth']

        block = BasicBlock
        n_blocks_per_stage = (depth - 4) // 6
        assert n_blocks_per_stage * 6 + 4 == depth

        n_channels = [
            base_channels, base_channels * widening_factor,
            base_channels * 2 * widening_factor,
            base_channels * 4 * widening_factor
        ]

        self.conv = nn.Conv2d(
            input_shape[1],
            n_channels[0],
            kernel_size=3,
            stride=1,
            padding=1,
            bias=False)

        self.stage1 = self._make_stage(
            n_channels[0],
            n_channels[1],
            n_blocks_per_stage,
            block,
            stride=1,
            drop_rate=drop_rate)
        self.stage2 = self._make_stage(
            n_channels[1],
            n_channels[2],
            n_blocks_per_stage,
            block,
            stride=2,
            drop_rate=drop_rate)
        self.stage3 = self._make_stage(
            n_channels[2],
            n_channels[3],
            n_blocks_per_stage,
            block,
            stride=2,
            drop_rate=drop_rate)
        self.bn = nn.BatchNorm2d(n_channels[3])

        # compute conv feature size
        with torch.no_grad():
            self.feature_size = self._forward_conv(
                torch.zeros(*input_shape)).view(-1).shape[0]

        self.fc = nn.Linear(self.feature_size, n_classes)

        # initialize weights
        self.apply(initialize_weights)

    def _make_stage(self, in_channels, out_channels, n_blocks, block, stride,
                    drop_rate):
        stage = nn.Sequential()
        for index in range(n_blocks):
            block_name = 'block{}'.format(index + 1)
            if index == 0:
                stage.add_module(
                    block_name,
                    block(
                        in_channels,
                        out_channels,
                        stride=stride,
                        drop_rate=drop_rate))
            else:
                stage.add_module(
                    block_name,
                    block(
                        out_channels,
                        out_channels,
                        stride=1,
                        drop_rate=drop_rate))
        return stage

    def _forward_conv(self, x):
        x = self.conv(x)
        x = self.stage1(x)
        x = self.stage2(x)
        x = self.stage3(x)
        x = F.relu(self.bn(x), inplace=True)
        x = F.adaptive_avg_pool2d(x, output_size=1)
        return x

    def forward(self, x):
        x = self._forward_conv(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)
        if self._bug == "softmax_in_forward":
            x = F.softmax(x, dim=1)  # probabilities handed to nn.CrossEntropyLoss, which applies its own log-softmax
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
        ('arch', 'wrn'),
        ('depth', DEPTH),
        ('base_channels', BASE_CHANNELS),
        ('widening_factor', WIDENING_FACTOR),
        ('drop_rate', 0),
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
        ('lr_decay', 0.2),
    ])

    # data loaders (dataloader.get_loader)
    train_loader = DataLoader(
        ImageSet(train_x, train_y, lambda x: to_tensor_normalize(random_crop_flip(x, rng))),
        batch_size=optim_config['batch_size'], shuffle=True, num_workers=0, drop_last=True,
        generator=torch.Generator().manual_seed(seed + 2))
    test_loader = DataLoader(ImageSet(test_x, test_y, to_tensor_normalize), batch_size=optim_config['batch_size'],
                             num_workers=0, shuffle=False, drop_last=False)

    # model
    model = Network(model_config, bug=bug)

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
            if bug != "train_mode_not_restored":
                model.train()
            state["it"] = iter(train_loader)
            state["loss_meter"], state["accuracy_meter"] = AverageMeter(), AverageMeter()
            return next(state["it"])

    def train_step():
        data, targets = next_batch()

        optimizer.zero_grad()

        outputs = model(data)
        loss = criterion(outputs, targets)
        loss.backward()

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
    return Program(name="hystswrn_cifar", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=probe,
                   task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic: a softmax added at the end of Network.forward while the criterion stays nn.CrossEntropyLoss, which
    # takes logits: the loss is computed on log(softmax(probabilities)) and its gradient all but vanishes.
    Bug("softmax_in_forward", functools.partial(_build, bug="softmax_in_forward"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: model.train() left out of train(): after the test() run before training the network never leaves
    # eval mode, so every BatchNorm trains on its initial running statistics (mean 0, var 1), never updated.
    # Re-declared after first contact (public-36's fixes) by the mechanism its FAIL names: the model's BatchNorms saw
    # one train-mode forward at build, so every training forward normalizes with statistics still mostly the built
    # ones (step.norm_statistics_never_estimated); first contact declared step.eval_mode_not_restored.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe", (),
        kind="step.norm_statistics_never_estimated"),
]

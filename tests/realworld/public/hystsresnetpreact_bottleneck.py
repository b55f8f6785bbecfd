"""Pre-activation ResNet on CIFAR-10 of hysts/pytorch_resnet_preact: the repository's ``resnet_preact.Network`` with
the bottleneck block of its README's ResNet-preact-164 row (3x3 stem, three stages of pre-activation bottleneck blocks
BN-ReLU-1x1 conv-BN-ReLU-3x3 conv (the stride here)-BN-ReLU-1x1 conv (x4 width), the first block of every stage
pre-activating the shortcut too (``config.py``'s ``preact_stage`` [True, True, True]), a 1x1-conv shortcut where the
width changes; BN-ReLU, global average pooling, a linear head; Kaiming fan-out init), trained by ``train.py`` with
``config.py``'s defaults: ``nn.CrossEntropyLoss(reduction='mean')``, ``get_optimizer``'s SGD (lr 0.1, momentum 0.9,
weight decay 1e-4, Nesterov), ``get_scheduler``'s ``MultiStepLR`` (milestones 80 / 120 of 160 epochs, gamma 0.1)
stepped at the start of every epoch, ``test`` (``eval()``, the loop under ``no_grad``) before training and after
every epoch; ``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, ``ToTensor``, ``Normalize`` with the CIFAR-10
statistics.

Source: https://github.com/hysts/pytorch_resnet_preact
Commit: c76a0825ddc0bc58d239d737815bca05a1df5e8d
Files: train.py, config.py, resnet_preact.py, dataloader.py, README.md
License: MIT (Copyright (c) 2017 hysts; full text in LICENSES/hysts-pytorch_resnet_preact.txt)
Domain: image classification (pre-activation ResNet, bottleneck blocks)

Kept as written: ``resnet_preact.py`` (``initialize_weights``, ``BasicBlock``, ``BottleneckBlock``, ``Network``),
``train.py``'s ``get_optimizer``, ``get_scheduler``, ``train`` loop body (``optimizer.zero_grad()``, forward,
criterion, backward, step, the accuracy bookkeeping), ``test`` and ``main``'s epoch order (``scheduler.step()``,
``train``, ``test``).

Deviations from the original:
- sizes: ``model.block_type bottleneck model.depth 164`` -> depth 11 (one bottleneck block per stage), base channels
  16 -> 8; 32x32 images -> 16x16 (``RandomCrop(16, padding=4)``; ``input_shape`` follows); batch 128 -> 32; 50000 /
  10000 CIFAR-10 images -> 512 / 64 synthetic ones; 160 epochs with milestones [80, 120] -> 30 with [15, 22];
- yacs is not here: ``config.py``'s ``CfgNode`` tree is written as nested ``SimpleNamespace`` objects with the same
  keys and defaults (``merge_from_list`` of the command line replaced by the values above; ``run.device`` 'cpu');
- data: ``torchvision.datasets.CIFAR10`` (a download) is replaced by synthetic RGB images made from ``seed``: each
  class a colour plus a class-specific stripe orientation over smooth noise, in [0, 1]; the torchvision transforms
  are written out in plain torch (the crops' random state a seeded generator); DataLoader without workers;
- ``load_model``'s importlib lookup is replaced by the class; logging, tensorboard, the log json and checkpoint
  saving are dropped;
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in
  ``main()``: ``test``, then the next epoch's ``scheduler.step()`` and ``train()``'s ``model.train()``; the ``test``
  before training runs in ``build``; ``eval_fn`` is ``test``'s accuracy on a batch; ``task_probe`` a held-out
  (images, labels) pair;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
from types import SimpleNamespace

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
DEPTH, BASE_CHANNELS, EPOCHS, BATCH_SIZE, MILESTONES = 11, 8, 30, 32, [15, 22]


# ---- resnet_preact.py ----------------------------------------------------------------------------------------

def initialize_weights(module):
    if isinstance(module, nn.Conv2d):
        nn.init.kaiming_normal_(module.weight.data, mode='fan_out')
    elif isinstance(module, nn.BatchNorm2d):
        module.weight.data.fill_(1)
        module.bias.data.zero_()
    elif isinstance(module, nn.Linear):
        module.bias.data.zero_()


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self,
                 in_channels,
                 out_channels,
                 stride,
                 remove_first_relu,
                 add_last_bn,
                 preact=False):
        super(BasicBlock, self).__init__()

        self._remove_first_relu = remove_first_relu
        self._add_last_bn = add_last_bn
        self._preact = preact

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

        if add_last_bn:
            self.bn3 = nn.BatchNorm2d(out_channels)

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
        if self._preact:
            x = F.relu(
                self.bn1(x), inplace=True)  # shortcut after preactivation
            y = self.conv1(x)
        else:
            # preactivation only for residual path
            y = self.bn1(x)
            if not self._remove_first_relu:
                y = F.relu(y, inplace=True)
            y = self.conv1(y)

        y = F.relu(self.bn2(y), inplace=True)
        y = self.conv2(y)

        if self._add_last_bn:
            y = self.bn3(y)

        y += self.shortcut(x)
        return y


class BottleneckBlock(nn.Module):
    expansion = 4

    def __init__(self,
                 in_channels,
                 out_channels,
                 stride,
                 remove_first_relu,
                 add_last_bn,
                 preact=False):
        super(BottleneckBlock, self).__init__()

        self._remove_first_relu = remove_first_relu
        self._add_last_bn = add_last_bn
        self._preact = preact

        bottleneck_channels = out_channels // self.expansion

        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(
            in_channels,
            bottleneck_channels,
            kernel_size=1,
            stride=1,
            padding=0,
            bias=False)
        self.bn2 = nn.BatchNorm2d(bottleneck_channels)
        self.conv2 = nn.Conv2d(
            bottleneck_channels,
            bottleneck_channels,
            kernel_size=3,
            stride=stride,  # downsample with 3x3 conv
            padding=1,
            bias=False)
        self.bn3 = nn.BatchNorm2d(bottleneck_channels)
        self.conv3 = nn.Conv2d(
            bottleneck_channels,
            out_channels,
            kernel_size=1,
            stride=1,
            padding=0,
            bias=False)

        if add_last_bn:
            self.bn4 = nn.BatchNorm2d(out_channels)

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

    def forward(self, x):
        if self._preact:
            x = F.relu(
                self.bn1(x), inplace=True)  # shortcut after preactivation
            y = self.conv1(x)
        else:
            # preactivation only for residual path
            y = self.bn1(x)
            if not self._remove_first_relu:
                y = F.relu(y, inplace=True)
            y = self.conv1(y)

        y = F.relu(self.bn2(y), inplace=True)
        y = self.conv2(y)
        y = F.relu(self.bn3(y), inplace=True)
        y = self.conv3(y)

        if self._add_last_bn:
            y = self.bn4(y)

        y += self.shortcut(x)
        return y


class Network(nn.Module):
    def __init__(self, config):
        super(Network, self).__init__()

        input_shape = config.model.input_shape
        n_classes = config.model.n_classes

        base_channels = config.model.base_channels
        self._remove_first_relu = config.model.remove_first_relu
        self._add_last_bn = config.model.add_last_bn
        block_type = config.model.block_type
        depth = config.model.depth
        preact_stage = config.model.preact_stage

        assert block_type in ['basic', 'bottleneck']
        if block_type == 'basic':
            block = BasicBlock
            n_blocks_per_stage = (depth - 2) // 6
            assert n_blocks_per_stage * 6 + 2 == depth
        else:
            block = BottleneckBlock
            n_blocks_per_stage = (depth - 2) // 9
            assert n_blocks_per_stage * 9 + 2 == depth

        n_channels = [
            base_channels,
            base_channels * 2 * block.expansion,
            base_channels * 4 * block.expansion,
        ]

        self.conv = nn.Conv2d(
            input_shape[1],
            n_channels[0],
            kernel_size=(3, 3),
            stride=1,
            padding=1,
            bias=False)

        self.stage1 = self._make_stage(
            n_channels[0],
            n_channels[0],
            n_blocks_per_stage,
            block,
            stride=1,
            preact=preact_stage[0])
        self.stage2 = self._make_stage(
            n_channels[0],
            n_channels[1],
            n_blocks_per_stage,
            block,
            stride=2,
            preact=preact_stage[1])
        self.stage3 = self._make_stage(
            n_channels[1],
            n_channels[2],
            n_blocks_per_stage,
            block,
            stride=2,
            preact=preact_stage[2])
        self.bn = nn.BatchNorm2d(n_channels[2])

        # compute conv feature size
        with torch.no_grad():
            self.feature_size = self._forward_conv(
                torch.zeros(*input_shape)).view(-1).shape[0]

        self.fc = nn.Linear(self.feature_size, n_classes)

        # initialize weights
        self.apply(initialize_weights)

    def _make_stage(self, in_channels, out_channels, n_blocks, block, stride,
                    preact):
        stage = nn.Sequential()
        for index in range(n_blocks):
            block_name = f'block{index + 1}'
            if index == 0:
                stage.add_module(
                    block_name,
                    block(
                        in_channels,
                        out_channels,
                        stride=stride,
                        remove_first_relu=self._remove_first_relu,
                        add_last_bn=self._add_last_bn,
                        preact=preact))
            else:
                stage.add_module(
                    block_name,
                    block(
                        out_channels,
                        out_channels,
                        stride=1,
                        remove_first_relu=self._remove_first_relu,
                        add_last_bn=self._add_last_bn,
                        preact=False))
        return stage

    def _forward_conv(self, x):
        x = self.conv(x)
        x = self.stage1(x)
        x = self.stage2(x)
        x = self.stage3(x)
        x = F.relu(
            self.bn(x),
            inplace=True)  # apply BN and ReLU before average pooling
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


# ---- config.py (yacs CfgNode -> SimpleNamespace) ---------------------------------------------------------------

def get_default_config():
    config = SimpleNamespace()
    config.model = SimpleNamespace()
    config.model.name = 'resnet_preact'
    config.model.block_type = 'basic'
    config.model.depth = 20
    config.model.base_channels = 16
    config.model.remove_first_relu = False
    config.model.add_last_bn = False
    config.model.preact_stage = [True, True, True]
    config.model.input_shape = (1, 3, 32, 32)
    config.model.n_classes = 10

    config.run = SimpleNamespace()
    config.run.outdir = ''
    config.run.seed = 0
    config.run.num_workers = 4
    config.run.device = 'cuda'
    config.run.tensorboard = True

    config.train = SimpleNamespace()
    config.train.optimizer = 'sgd'
    config.train.epochs = 160
    config.train.batch_size = 128
    config.train.base_lr = 0.1
    config.train.weight_decay = 1e-4
    config.train.momentum = 0.9
    config.train.nesterov = True

    config.scheduler = SimpleNamespace()
    config.scheduler.name = 'multistep'
    config.scheduler.multistep = SimpleNamespace()
    config.scheduler.multistep.milestones = [80, 120]
    config.scheduler.multistep.lr_decay = 0.1
    config.scheduler.cosine = SimpleNamespace()
    config.scheduler.cosine.lr_min = 0
    config.scheduler.cosine.lr_decay = 0.1
    return config


# ---- train.py ------------------------------------------------------------------------------------------------

def get_optimizer(config, model, bug=None):
    if config.train.optimizer == 'sgd':
        params = model.parameters()
        if bug == "fc_left_out_of_optimizer":
            # the parameter list of a feature-extractor set-up left in: the conv trunk only, the linear head is out
            params = [p for name, p in model.named_parameters() if not name.startswith('fc')]
        optimizer = torch.optim.SGD(
            params,
            lr=config.train.base_lr,
            momentum=config.train.momentum,
            weight_decay=config.train.weight_decay,
            nesterov=config.train.nesterov)
    else:
        raise ValueError()
    return optimizer


def get_scheduler(config, optimizer):
    if config.scheduler.name == 'multistep':
        scheduler = torch.optim.lr_scheduler.MultiStepLR(
            optimizer,
            milestones=config.scheduler.multistep.milestones,
            gamma=config.scheduler.multistep.lr_decay)
    elif config.scheduler.name == 'cosine':
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, config.train.epochs, config.scheduler.cosine.lr_min)
    else:
        raise ValueError()
    return scheduler


class AverageMeter:
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
    config = get_default_config()
    # (port) the command line: model.block_type bottleneck model.depth 164, at the sizes of the docstring
    config.model.block_type = 'bottleneck'
    config.model.depth = DEPTH
    config.model.base_channels = BASE_CHANNELS
    config.model.input_shape = (1, 3, IMG, IMG)
    config.run.seed = seed
    config.run.device = 'cpu'
    config.run.tensorboard = False
    config.train.epochs = EPOCHS
    config.train.batch_size = BATCH_SIZE
    config.scheduler.multistep.milestones = MILESTONES

    # set random seed
    seed = config.run.seed
    np.random.seed(seed)
    torch.manual_seed(seed)
    (train_x, train_y), (test_x, test_y), (probe_x, probe_y) = synthetic_cifar(seed)
    rng = np.random.default_rng(seed + 1)

    # data loaders (dataloader.get_loader)
    train_loader = DataLoader(
        ImageSet(train_x, train_y, lambda x: to_tensor_normalize(random_crop_flip(x, rng))),
        batch_size=config.train.batch_size, shuffle=True, num_workers=0, pin_memory=False, drop_last=True,
        generator=torch.Generator().manual_seed(seed + 2))
    test_loader = DataLoader(ImageSet(test_x, test_y, to_tensor_normalize), batch_size=config.train.batch_size,
                             num_workers=0, shuffle=False, pin_memory=False, drop_last=False)

    # model
    model = Network(config)
    model.to(torch.device(config.run.device))

    if bug == "nll_loss_on_logits":
        criterion = nn.NLLLoss(reduction='mean')  # the network returns logits, not log-probabilities
    else:
        criterion = nn.CrossEntropyLoss(reduction='mean')

    # optimizer
    optimizer = get_optimizer(config, model, bug=bug)
    scheduler = get_scheduler(config, optimizer)

    def test():
        model.eval()
        device = torch.device(config.run.device)

        loss_meter = AverageMeter()
        correct_meter = AverageMeter()
        with torch.no_grad():
            for step, (data, targets) in enumerate(test_loader):
                data = data.to(device)
                targets = targets.to(device)

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

    state = {"it": None, "loss_meter": AverageMeter(), "acc_meter": AverageMeter()}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main(): test, then the next epoch
                test()
            scheduler.step()
            model.train()
            state["it"] = iter(train_loader)
            state["loss_meter"], state["acc_meter"] = AverageMeter(), AverageMeter()
            return next(state["it"])

    def train_step():
        data, targets = next_batch()
        device = torch.device(config.run.device)

        data = data.to(device)
        targets = targets.to(device)

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
        state["acc_meter"].update(accuracy, num)
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
    return Program(name="hystsresnetpreact_bottleneck", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=probe,
                   task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic: nn.NLLLoss on the network's raw logits (the log_softmax never applied): the loss is minus the target
    # logit, unbounded below, and says nothing of the other classes.
    Bug("nll_loss_on_logits", functools.partial(_build, bug="nll_loss_on_logits"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the optimizer built over the conv trunk only (a fine-tuning parameter filter left in): the linear
    # head keeps its random initialization while the features train against it.
    Bug("fc_left_out_of_optimizer", functools.partial(_build, bug="fc_left_out_of_optimizer"), "four_structures",
        ("fc",)),
]

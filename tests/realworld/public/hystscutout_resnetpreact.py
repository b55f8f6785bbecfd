"""Cutout on CIFAR-10 of hysts/pytorch_cutout: the repository's ``resnet_preact.Network`` with ``main.py``'s defaults
(basic blocks, ``remove_first_relu`` and ``add_last_bn`` on, pre-activation shortcut only in the first stage: 3x3
stem, three stages of BasicBlocks BN-conv-BN-ReLU-conv-BN with a 1x1-conv shortcut where the width changes, BN-ReLU,
global average pooling, a linear head; Kaiming fan-out init), trained by ``main.py`` as the README runs it
(``--block_type basic --depth 110 --use_cutout --cutout_size 16 --cutout_prob 1``): the training transform
``RandomCrop(32, padding=4)``, ``RandomHorizontalFlip``, the repository's numpy ``normalize`` (``/ 255.``, mean /
std), ``cutout`` (a ``cutout_size`` square centred anywhere on the image, clipped at the border, set to 0 with
probability ``cutout_prob``) and ``to_tensor`` (HWC -> CHW); the test transform ``ToTensor`` + ``Normalize``;
``nn.CrossEntropyLoss``, SGD (lr 0.1, momentum 0.9, weight decay 1e-4, Nesterov), ``MultiStepLR`` (milestones 80 /
120 of 160 epochs, gamma 0.1) stepped at the start of every epoch, ``test`` (``eval()``, forward under ``no_grad``)
before training and after every epoch.

Source: https://github.com/hysts/pytorch_cutout
Commit: ca4711283c7bc797774d486c6c41e06714350ded
Files: main.py, dataloader.py, resnet_preact.py, README.md
License: MIT (Copyright (c) 2017 hysts; full text in LICENSES/hysts-pytorch_cutout.txt)
Domain: image classification with Cutout (pre-activation ResNet)

Kept as written: ``resnet_preact.py`` (``initialize_weights``, ``BasicBlock``, ``BottleneckBlock``, ``Network``),
``dataloader.py``'s ``to_tensor``, ``normalize``, ``cutout`` and the two transform lists of ``get_loader``,
``main.py``'s ``train`` loop body (``optimizer.zero_grad()``, forward, criterion, backward, step, the accuracy
bookkeeping), ``test``, the optimizer and scheduler of ``main`` and its epoch order (``scheduler.step()``, ``train``,
``test``).

Deviations from the original:
- sizes: ``--depth 110`` -> depth 8 (one block per stage), base channels 16 -> 8; 32x32 images -> 16x16
  (``RandomCrop(16, padding=4)``; ``input_shape`` follows), so ``--cutout_size 16`` -> 8 (half the side, as in the
  README); batch 128 -> 32; 50000 / 10000 CIFAR-10 images -> 512 / 64 synthetic ones; 160 epochs with milestones
  [80, 120] -> 30 with [15, 22];
- ``nn.CrossEntropyLoss(size_average=True)`` (a removed argument) is written ``reduction='mean'``, its meaning;
- data: ``torchvision.datasets.CIFAR10`` (a download) is replaced by synthetic RGB uint8 HWC images made from
  ``seed`` (what the dataset hands to its transforms): each class a colour plus a class-specific stripe orientation
  over smooth noise; torchvision's ``Compose``, ``RandomCrop``, ``RandomHorizontalFlip``, ``ToTensor`` and
  ``Normalize`` are written out in numpy / plain torch (the crops' and flips' random state a seeded generator; the
  repository's ``cutout`` keeps drawing from ``np.random``, seeded as ``main`` seeds it); DataLoader without workers
  or pinning;
- ``parse_args`` is replaced by the config dicts it builds (the README's command); ``load_model``'s importlib lookup
  by the class; logging, tensorboard, the config json and checkpoint saving are dropped; ``.cuda()`` is dropped;
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in
  ``main()``: ``test``, then the next epoch's ``scheduler.step()`` and ``train()``'s ``model.train()``; the ``test``
  before training runs in ``build``; ``eval_fn`` is ``test``'s accuracy on a batch; ``task_probe`` a held-out
  (images, labels) pair through the test transform; the declared ``batch`` is a first batch through the test
  transform;
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
DEPTH, BASE_CHANNELS, CUTOUT_SIZE, EPOCHS, BATCH_SIZE, MILESTONES = 8, 8, 8, 30, 32, [15, 22]


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

        input_shape = config['input_shape']
        n_classes = config['n_classes']

        base_channels = config['base_channels']
        self._remove_first_relu = config['remove_first_relu']
        self._add_last_bn = config['add_last_bn']
        block_type = config['block_type']
        depth = config['depth']
        preact_stage = config['preact_stage']

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
            block_name = 'block{}'.format(index + 1)
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


class ImageSet(Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.transform(self.images[idx]), self.labels[idx]


def to_uint8_hwc(images):
    return (images.permute(0, 2, 3, 1) * 255).round().to(torch.uint8).numpy()


class Compose:
    """``torchvision.transforms.Compose``."""

    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, image):
        for t in self.transforms:
            image = t(image)
        return image


def random_crop(rng, size, padding):
    """``torchvision.transforms.RandomCrop(size, padding=padding)`` on an HWC uint8 array."""
    def _crop(image):
        image = np.pad(image, ((padding, padding), (padding, padding), (0, 0)))
        i, j = rng.integers(0, image.shape[0] - size + 1, 2)
        return image[i:i + size, j:j + size]

    return _crop


def random_horizontal_flip(rng):
    """``torchvision.transforms.RandomHorizontalFlip()`` on an HWC array."""
    def _flip(image):
        return image[:, ::-1] if rng.random() < 0.5 else image

    return _flip


def tv_to_tensor_normalize(mean, std):
    """``torchvision.transforms.ToTensor()`` then ``Normalize(mean, std)``."""
    def _t(image):
        x = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))).float() / 255.
        return (x - torch.tensor(mean, dtype=torch.float32)[:, None, None]) / torch.tensor(
            std, dtype=torch.float32)[:, None, None]

    return _t


# ---- dataloader.py -------------------------------------------------------------------------------------------

def to_tensor():
    def _to_tensor(image):
        if len(image.shape) == 3:
            return torch.from_numpy(
                image.transpose(2, 0, 1).astype(np.float32))
        else:
            return torch.from_numpy(image[None, :, :].astype(np.float32))

    return _to_tensor


def normalize(mean, std, bug=None):
    mean = np.array(mean)
    std = np.array(std)

    def _normalize(image):
        if bug == "train_images_not_scaled":
            image = np.asarray(image).astype(np.float32)  # the / 255. left out: pixels stay in [0, 255]
        else:
            image = np.asarray(image).astype(np.float32) / 255.
        image = (image - mean) / std
        return image

    return _normalize


def cutout(mask_size, p, cutout_inside, mask_color=(0, 0, 0)):
    mask_size_half = mask_size // 2
    offset = 1 if mask_size % 2 == 0 else 0

    def _cutout(image):
        image = np.asarray(image).copy()

        if np.random.random() > p:
            return image

        h, w = image.shape[:2]

        if cutout_inside:
            cxmin, cxmax = mask_size_half, w + offset - mask_size_half
            cymin, cymax = mask_size_half, h + offset - mask_size_half
        else:
            cxmin, cxmax = 0, w + offset
            cymin, cymax = 0, h + offset

        cx = np.random.randint(cxmin, cxmax)
        cy = np.random.randint(cymin, cymax)
        xmin = cx - mask_size_half
        ymin = cy - mask_size_half
        xmax = xmin + mask_size
        ymax = ymin + mask_size
        xmin = max(0, xmin)
        ymin = max(0, ymin)
        xmax = min(w, xmax)
        ymax = min(h, ymax)
        image[ymin:ymax, xmin:xmax] = mask_color
        return image

    return _cutout


def get_transforms(config, rng, bug=None):
    mean = np.array([0.4914, 0.4822, 0.4465])
    std = np.array([0.2470, 0.2435, 0.2616])

    train_transform = Compose([
        random_crop(rng, IMG, padding=4),
        random_horizontal_flip(rng),
        normalize(mean, std, bug=bug),
        cutout(config['cutout_size'],
               config['cutout_prob'],
               config['cutout_inside']),
        to_tensor(),
    ])
    test_transform = Compose([
        tv_to_tensor_normalize(mean, std),
    ])
    return train_transform, test_transform


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
        ('arch', 'resnet_preact'),
        ('block_type', 'basic'),
        ('depth', DEPTH),
        ('base_channels', BASE_CHANNELS),
        ('remove_first_relu', True),
        ('add_last_bn', True),
        ('preact_stage', [True, False, False]),
        ('input_shape', (1, 3, IMG, IMG)),
        ('n_classes', N_CLASSES),
    ])
    optim_config = OrderedDict([
        ('epochs', EPOCHS),
        ('batch_size', BATCH_SIZE),
        ('base_lr', 0.1),
        ('weight_decay', 1e-4),
        ('momentum', 0.9),
        ('nesterov', True),
        ('milestones', MILESTONES),
        ('lr_decay', 0.1),
    ])
    data_config = OrderedDict([
        ('dataset', 'CIFAR10'),
        ('use_cutout', True),
        ('cutout_size', CUTOUT_SIZE),
        ('cutout_prob', 1),
        ('cutout_inside', False),
    ])

    # data loaders (dataloader.get_loader)
    train_transform, test_transform = get_transforms(data_config, rng, bug=bug)
    train_x, test_x, probe_x = to_uint8_hwc(train_x), to_uint8_hwc(test_x), to_uint8_hwc(probe_x)
    train_loader = DataLoader(
        ImageSet(train_x, train_y, train_transform),
        batch_size=optim_config['batch_size'], shuffle=True, num_workers=0, drop_last=True,
        generator=torch.Generator().manual_seed(seed + 2))
    test_loader = DataLoader(ImageSet(test_x, test_y, test_transform), batch_size=optim_config['batch_size'],
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

        if bug != "zero_grad_dropped":
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

    probe = (torch.stack([test_transform(x) for x in probe_x]), probe_y)
    first = next(iter(DataLoader(ImageSet(train_x, train_y, test_transform), batch_size=BATCH_SIZE)))
    return Program(name="hystscutout_resnetpreact", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=probe,
                   task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic: the hand-written numpy normalize of the training transform without its ``/ 255.``: the training
    # images reach the network in [0, 255] (minus the mean, over the std) while the test transform's ToTensor scales
    # them to [0, 1], so the model learns on inputs that never occur at test time. The two separate normalizations
    # are the ones questioned in https://github.com/hysts/pytorch_cutout/issues/1.
    Bug("train_images_not_scaled", functools.partial(_build, bug="train_images_not_scaled"), "learning_ledger",
        ("TASK",)),
    # classic whole-model step slip: optimizer.zero_grad() left out, gradients pile up across batches.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

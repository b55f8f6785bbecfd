"""CutMix on CIFAR-10 of hysts/pytorch_cutmix: the repository's ``resnet_preact`` network (3x3 stem, three stages of
pre-activation BasicBlocks with a 1x1-conv shortcut where the width changes, BN-ReLU, global average pooling and a
linear head; Kaiming fan-out init), trained by ``train.py`` as the README runs it with ``--use_cutmix``: the
``CutMixCollator`` in the training loader (a random permutation of the batch, ``lam`` drawn from
``Beta(alpha, alpha)``, a box of side ``sqrt(1 - lam)`` centred uniformly and clipped at the border, the partner
images pasted into it, targets ``(targets, shuffled_targets, lam)``), ``CutMixCriterion`` (``lam * CE(preds,
targets1) + (1 - lam) * CE(preds, targets2)``), SGD (lr 0.2, momentum 0.9, weight decay 1e-4, Nesterov),
``CosineAnnealingLR(optimizer, epochs, 0)`` stepped at the start of every epoch, ``test`` (``eval()``, ``no_grad``,
plain ``CrossEntropyLoss``) before training and after every epoch; ``RandomCrop(32, padding=4)``,
``RandomHorizontalFlip``, ``Normalize`` with the CIFAR-10 statistics.

Source: https://github.com/hysts/pytorch_cutmix
Commit: bc63fab1aa5d56733d768de98f08db3f4b0984f2
Files: train.py, cutmix.py, dataloader.py, resnet_preact.py, README.md
License: MIT (Copyright (c) 2019 hysts; full text in LICENSES/hysts-pytorch_cutmix.txt)
Domain: image classification (pre-activation ResNet with CutMix)

Deviations from the original:
- sizes: ``--depth 20 --base_channels 64`` -> depth 8 (one block per stage) and base channels 8; 32x32 images ->
  16x16 (``RandomCrop(16, padding=4)``; ``input_shape`` follows); batch 128 -> 32; 50000 / 10000 CIFAR-10 images ->
  512 / 64 synthetic ones; 300 epochs -> 30;
- data: ``torchvision.datasets.CIFAR10`` (a download) is replaced by synthetic RGB images made from ``seed``: each
  class a colour plus a class-specific stripe orientation over smooth noise, in [0, 1]; the torchvision transforms
  are written out in plain torch (numpy's global random state for the crops replaced by a seeded generator);
  DataLoader without workers or pinning;
- ``Network``'s bottleneck branch (``--block_type bottleneck``, not used by the command) is left out;
- logging, tensorboard, the json log, config and checkpoint saving are dropped; ``.to(device)`` is dropped (CPU);
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in
  ``main()``: ``test``, then the next epoch's ``scheduler.step()`` and ``train()``'s ``model.train()``; the ``test``
  before training runs in ``build``; ``eval_fn`` is ``test``'s accuracy on a batch; ``task_probe`` a held-out
  (images, labels) pair; the declared ``batch`` / ``loss_fn`` are a plain (un-mixed) batch and the test criterion;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: F841, UP008, UP032, PLR0402, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys

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
DEPTH, BASE_CHANNELS, EPOCHS, BATCH_SIZE = 8, 8, 30, 32

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


class Network(nn.Module):
    def __init__(self, config):
        super(Network, self).__init__()

        input_shape = config['input_shape']
        n_classes = config['n_classes']

        base_channels = config['base_channels']
        self._remove_first_relu = False
        self._add_last_bn = False
        block_type = config['block_type']
        depth = config['depth']
        preact_stage = [True, True, True]

        assert block_type in ['basic', 'bottleneck']
        block = BasicBlock  # (port) the bottleneck branch is not used by the command ported
        n_blocks_per_stage = (depth - 2) // 6
        assert n_blocks_per_stage * 6 + 2 == depth

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


# ---- cutmix.py -----------------------------------------------------------------------------------------------

def cutmix(batch, alpha, bug=None):
    data, targets = batch

    indices = torch.randperm(data.size(0))
    shuffled_data = data[indices]
    shuffled_targets = targets[indices]
    if bug == "shuffled_targets_not_permuted":
        shuffled_targets = targets  # the permutation applied to the images only

    lam = np.random.beta(alpha, alpha)

    image_h, image_w = data.shape[2:]
    cx = np.random.uniform(0, image_w)
    cy = np.random.uniform(0, image_h)
    w = image_w * np.sqrt(1 - lam)
    h = image_h * np.sqrt(1 - lam)
    x0 = int(np.round(max(cx - w / 2, 0)))
    x1 = int(np.round(min(cx + w / 2, image_w)))
    y0 = int(np.round(max(cy - h / 2, 0)))
    y1 = int(np.round(min(cy + h / 2, image_h)))

    data[:, :, y0:y1, x0:x1] = shuffled_data[:, :, y0:y1, x0:x1]
    targets = (targets, shuffled_targets, lam)

    return data, targets


class CutMixCollator:
    def __init__(self, alpha, bug=None):
        self.alpha = alpha
        self.bug = bug

    def __call__(self, batch):
        batch = torch.utils.data.dataloader.default_collate(batch)
        batch = cutmix(batch, self.alpha, bug=self.bug)
        return batch


class CutMixCriterion:
    def __init__(self, reduction, bug=None):
        self.criterion = nn.CrossEntropyLoss(reduction=reduction)
        self.bug = bug

    def __call__(self, preds, targets):
        targets1, targets2, lam = targets
        if self.bug == "lam_weights_swapped":
            return (1 - lam) * self.criterion(
                preds, targets1) + lam * self.criterion(preds, targets2)
        return lam * self.criterion(
            preds, targets1) + (1 - lam) * self.criterion(preds, targets2)


# ---- train.py ------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    np.random.seed(seed)
    (train_x, train_y), (test_x, test_y), (probe_x, probe_y) = synthetic_cifar(seed)
    rng = np.random.default_rng(seed + 1)

    model_config = {'arch': 'resnet_preact', 'block_type': 'basic', 'depth': DEPTH,
                    'base_channels': BASE_CHANNELS, 'input_shape': (1, 3, IMG, IMG), 'n_classes': N_CLASSES}
    optim_config = {'epochs': EPOCHS, 'batch_size': BATCH_SIZE, 'base_lr': 0.2, 'weight_decay': 1e-4,
                    'momentum': 0.9, 'nesterov': True, 'scheduler': 'cosine', 'milestones': [150, 225],
                    'lr_decay': 0.1}
    data_config = {'dataset': 'CIFAR10', 'use_cutmix': True, 'cutmix_alpha': 1.0}

    # data loaders (dataloader.get_loader)
    if data_config['use_cutmix']:
        collator = CutMixCollator(data_config['cutmix_alpha'], bug=bug)
    else:
        collator = torch.utils.data.dataloader.default_collate
    train_loader = DataLoader(
        ImageSet(train_x, train_y, lambda x: to_tensor_normalize(random_crop_flip(x, rng))),
        batch_size=optim_config['batch_size'], shuffle=True, collate_fn=collator, num_workers=0,
        drop_last=True, generator=torch.Generator().manual_seed(seed + 2))
    test_loader = DataLoader(ImageSet(test_x, test_y, to_tensor_normalize), batch_size=optim_config['batch_size'],
                             num_workers=0, shuffle=False, drop_last=False)

    # model
    model = Network(model_config)

    if data_config['use_cutmix']:
        train_criterion = CutMixCriterion(reduction='mean', bug=bug)
    else:
        train_criterion = nn.CrossEntropyLoss(reduction='mean')
    test_criterion = nn.CrossEntropyLoss(reduction='mean')

    # optimizer
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=optim_config['base_lr'],
        momentum=optim_config['momentum'],
        weight_decay=optim_config['weight_decay'],
        nesterov=optim_config['nesterov'])
    if optim_config['scheduler'] == 'multistep':
        scheduler = torch.optim.lr_scheduler.MultiStepLR(
            optimizer,
            milestones=optim_config['milestones'],
            gamma=optim_config['lr_decay'])
    else:
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, optim_config['epochs'], 0)

    def test():
        model.eval()
        with torch.no_grad():
            for step, (data, targets) in enumerate(test_loader):
                outputs = model(data)
                loss = test_criterion(outputs, targets)
                _, preds = torch.max(outputs, dim=1)

    # run test before start training
    test()

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main(): test, then the next epoch
                test()
            if bug != "cosine_stepped_per_batch":
                scheduler.step()
            model.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        data, targets = next_batch()
        if bug == "cosine_stepped_per_batch":
            scheduler.step()  # the epoch schedule (T_max = epochs) advanced once per batch

        optimizer.zero_grad()

        outputs = model(data)
        loss = train_criterion(outputs, targets)
        loss.backward()

        optimizer.step()

        _, preds = torch.max(outputs, dim=1)
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
    return Program(name="hystscutmix_resnetpreact", model=model, batch=(first[0], first[1]), loss_fn=test_criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task_probe=probe,
                   task="classification", loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # classic CutMix slip: the batch permutation applied to the images but not to their labels, so the pasted
    # partner's class never enters the target (the (1 - lam) term re-weights the image's own label).
    Bug("shuffled_targets_not_permuted", functools.partial(_build, bug="shuffled_targets_not_permuted"),
        "learning_ledger", ("TASK",)),
    # classic: the two label weights swapped in CutMixCriterion: the pasted box's class gets the kept area's weight.
    Bug("lam_weights_swapped", functools.partial(_build, bug="lam_weights_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: CosineAnnealingLR(optimizer, epochs) stepped after every batch instead of every epoch: the rate
    # reaches 0 after `epochs` batches and then cycles, so most steps run at a near-zero or restarted rate.
    Bug("cosine_stepped_per_batch", functools.partial(_build, bug="cosine_stepped_per_batch"), "learning_ledger",
        ("PARAMETER_UPDATE",)),
]

"""Video action recognition with 3D ResNets from kenshohara/3D-ResNets-PyTorch: ``models/resnet.py``'s ``ResNet``
(3D convolutions, a (7, 7, 7) stem with stride (1, 2, 2), max pool, BasicBlock stages with shortcut type B, global
average pool, linear classifier) built by ``generate_model`` from the script's options, trained by ``main.py`` and
``training.py``'s ``train_epoch``: clips of ``sample_duration`` frames from ``TemporalRandomCrop``, the same
``RandomResizedCrop`` and ``RandomHorizontalFlip`` drawn once per clip and applied to every frame, Kinetics mean/std
normalization, ``CrossEntropyLoss``, SGD (lr 0.1, momentum 0.9, dampening 0, weight decay 1e-3) with ``MultiStepLR``
stepped once per epoch after ``val_epoch`` (``eval()``, ``no_grad``, loss and top-1 accuracy).

Source: https://github.com/kenshohara/3D-ResNets-PyTorch
Commit: 540a0ea1abaee379fa3651d4d5afbd2d667a1f49
Files: main.py, training.py, validation.py, opts.py, model.py, models/resnet.py, mean.py, utils.py,
       spatial_transforms.py, temporal_transforms.py, datasets/videodataset.py
License: MIT (Copyright (c) 2017 Kensho Hara)
Domain: video classification (3D CNN)

Deviations from the original:
- sizes: ``--model_depth 10`` (one of ``generate_model``'s depths) and ``--resnet_widen_factor 0.125`` (the script's
  own option: block widths 64/128/256/512 -> 8/16/32/64); ``sample_size`` 112 -> 32, ``sample_duration`` 16 -> 8,
  batch size 128 -> 16; 4 classes instead of Kinetics' 400; the optimizer options and the milestones are the
  defaults of ``opts.py``;
- data: Kinetics videos are replaced by synthetic 12-frame 3x40x40 clips made from ``seed``: horizontal stripes of
  a random colour, period and phase that move up, move down, stand still or flicker (the class), plus noise; the
  frames are tensors in [0, 1] (what ``ToTensor`` gives), so the PIL loader and ``ToTensor`` are left out;
- torchvision is not available: ``RandomResizedCrop(112, (0.25, 1.0), (0.75, 1/0.75))`` (torchvision's
  ``get_params``: 10 tries, then the whole frame, its centre-crop fallback on a square frame) and
  ``RandomHorizontalFlip`` are written out on tensors, with the repository's once-per-clip
  ``randomize_parameters``; ``Normalize`` is the Kinetics mean/std of ``mean.py``;
- the validation clips use a ``Resize`` + ``CenterCrop`` (a bilinear resize of the whole frame) and the centre
  ``sample_duration`` frames (``TemporalEvenCrop`` with ``n_val_samples=1``), on one held-out batch;
- one ``train_step`` is one iteration of ``train_epoch``'s loop; when the loader is exhausted, ``val_epoch`` and
  ``scheduler.step()`` run and the next epoch begins with ``model.train()``, as in ``main_worker``; the loggers,
  tensorboard, checkpoints, distributed training and ``pin_memory`` are left out; no CUDA.
"""
# ruff: noqa: PLR0402  (the original's import style is kept)

from __future__ import annotations

import functools
import pathlib
import random
import sys
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import CrossEntropyLoss
from torch.optim import SGD, lr_scheduler

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _resnets3d_video_lib import (
    KINETICS_MEAN,
    KINETICS_STD,
    N_CLASSES,
    SAMPLE_DURATION,
    SAMPLE_SIZE,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    TemporalRandomCrop,
    VideoDataset,
    make_clips,
    val_clips,
)

BATCH_SIZE = 16
LEARNING_RATE, MOMENTUM, DAMPENING, WEIGHT_DECAY = 0.1, 0.9, 0.0, 1e-3
MULTISTEP_MILESTONES = [50, 100, 150]


# ---- models/resnet.py ----------------------------------------------------------------------------------------

def get_inplanes():
    return [64, 128, 256, 512]


def conv3x3x3(in_planes, out_planes, stride=1):
    return nn.Conv3d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1x1(in_planes, out_planes, stride=1):
    return nn.Conv3d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1, downsample=None):
        super().__init__()

        self.conv1 = conv3x3x3(in_planes, planes, stride)
        self.bn1 = nn.BatchNorm3d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3x3(planes, planes)
        self.bn2 = nn.BatchNorm3d(planes)
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


class ResNet(nn.Module):

    def __init__(self, block, layers, block_inplanes, n_input_channels=3, conv1_t_size=7, conv1_t_stride=1,
                 no_max_pool=False, shortcut_type='B', widen_factor=1.0, n_classes=400):
        super().__init__()

        block_inplanes = [int(x * widen_factor) for x in block_inplanes]

        self.in_planes = block_inplanes[0]
        self.no_max_pool = no_max_pool

        self.conv1 = nn.Conv3d(n_input_channels, self.in_planes, kernel_size=(conv1_t_size, 7, 7),
                               stride=(conv1_t_stride, 2, 2), padding=(conv1_t_size // 2, 3, 3), bias=False)
        self.bn1 = nn.BatchNorm3d(self.in_planes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool3d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, block_inplanes[0], layers[0], shortcut_type)
        self.layer2 = self._make_layer(block, block_inplanes[1], layers[1], shortcut_type, stride=2)
        self.layer3 = self._make_layer(block, block_inplanes[2], layers[2], shortcut_type, stride=2)
        self.layer4 = self._make_layer(block, block_inplanes[3], layers[3], shortcut_type, stride=2)

        self.avgpool = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.fc = nn.Linear(block_inplanes[3] * block.expansion, n_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, nn.BatchNorm3d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _downsample_basic_block(self, x, planes, stride):
        out = F.avg_pool3d(x, kernel_size=1, stride=stride)
        zero_pads = torch.zeros(out.size(0), planes - out.size(1), out.size(2), out.size(3), out.size(4))
        out = torch.cat([out.data, zero_pads], dim=1)
        return out

    def _make_layer(self, block, planes, blocks, shortcut_type, stride=1):
        downsample = None
        if stride != 1 or self.in_planes != planes * block.expansion:
            if shortcut_type == 'A':
                downsample = partial(self._downsample_basic_block, planes=planes * block.expansion, stride=stride)
            else:
                downsample = nn.Sequential(conv1x1x1(self.in_planes, planes * block.expansion, stride),
                                           nn.BatchNorm3d(planes * block.expansion))

        layers = []
        layers.append(block(in_planes=self.in_planes, planes=planes, stride=stride, downsample=downsample))
        self.in_planes = planes * block.expansion
        for _i in range(1, blocks):
            layers.append(block(self.in_planes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        if not self.no_max_pool:
            x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)

        x = x.view(x.size(0), -1)
        x = self.fc(x)

        return x


def generate_model(model_depth, **kwargs):
    assert model_depth in [10, 18, 34]
    if model_depth == 10:
        model = ResNet(BasicBlock, [1, 1, 1, 1], get_inplanes(), **kwargs)
    elif model_depth == 18:
        model = ResNet(BasicBlock, [2, 2, 2, 2], get_inplanes(), **kwargs)
    elif model_depth == 34:
        model = ResNet(BasicBlock, [3, 4, 6, 3], get_inplanes(), **kwargs)
    return model


# ---- model.py ------------------------------------------------------------------------------------------------

def get_module_name(name):
    name = name.split('.')
    if name[0] == 'module':
        i = 1
    else:
        i = 0
    if name[i] == 'features':
        i += 1

    return name[i]


def get_fine_tuning_parameters(model, ft_begin_module):
    if not ft_begin_module:
        return model.parameters()

    parameters = []
    add_flag = False
    for k, v in model.named_parameters():
        if ft_begin_module == get_module_name(k):
            add_flag = True

        if add_flag:
            parameters.append({'params': v})

    return parameters




# ---- utils.py / validation.py / training.py / main.py --------------------------------------------------------

def calculate_accuracy(outputs, targets):
    with torch.no_grad():
        batch_size = targets.size(0)

        _, pred = outputs.topk(1, 1, largest=True, sorted=True)
        pred = pred.t()
        correct = pred.eq(targets.view(1, -1))
        n_correct_elems = correct.float().sum().item()

        return n_correct_elems / batch_size


def make_data(seed):
    gen = torch.Generator().manual_seed(seed)
    train_clips, train_labels = make_clips(gen, 256)
    val_x, val_y = make_clips(gen, 64)
    val_batch = (val_clips(val_x), val_y)

    spatial_transform = Compose([RandomResizedCrop(SAMPLE_SIZE, (0.25, 1.0), (0.75, 1.0 / 0.75)),
                                 RandomHorizontalFlip(), Normalize(KINETICS_MEAN, KINETICS_STD)])
    temporal_transform = TemporalRandomCrop(SAMPLE_DURATION)
    train_data = VideoDataset(train_clips, train_labels, spatial_transform, temporal_transform)
    train_loader = torch.utils.data.DataLoader(train_data, batch_size=BATCH_SIZE, shuffle=True, num_workers=0)

    return train_data, train_loader, val_batch


def _build(seed, bug=None):
    random.seed(seed)
    torch.manual_seed(seed)
    train_data, train_loader, val_batch = make_data(seed)

    model = generate_model(model_depth=10, n_classes=N_CLASSES, n_input_channels=3, shortcut_type='B',
                           conv1_t_size=7, conv1_t_stride=1, no_max_pool=False, widen_factor=0.125)
    parameters = get_fine_tuning_parameters(model, 'fc' if bug == "ft_parameters_without_pretrain" else None)
    criterion = CrossEntropyLoss()
    optimizer = SGD(parameters, lr=LEARNING_RATE, momentum=MOMENTUM, dampening=DAMPENING,
                    weight_decay=WEIGHT_DECAY, nesterov=False)
    scheduler = lr_scheduler.MultiStepLR(optimizer, MULTISTEP_MILESTONES)

    def val_epoch(model, batch):
        if bug != "val_without_eval_mode":
            model.eval()
        inputs, targets = batch
        with torch.no_grad():
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            acc = calculate_accuracy(outputs, targets)
        return {"loss": loss.item(), "acc": acc}

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the epoch ended: val_epoch, then scheduler.step() (multistep)
                val_epoch(model, val_batch)
                scheduler.step()
            model.train()  # train_epoch's first line
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        inputs, targets = next_batch()
        outputs = model(inputs)
        loss = criterion(outputs, targets)
        calculate_accuracy(outputs, targets)

        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return loss.detach()

    batch = next(iter(torch.utils.data.DataLoader(train_data, batch_size=BATCH_SIZE, shuffle=False)))
    return Program(name="resnets3d_video", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=val_epoch, loader=train_loader, task="classification")


build = functools.partial(_build)

BUGS = [
    # optimizer.zero_grad() moved between loss.backward() and optimizer.step() (classic): every step applies a zero
    # gradient; only the weight decay and the momentum's remainder move the weights.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
    # classic: the fine-tuning parameter selection (`--ft_begin_module fc`, meant for a loaded `--pretrain_path`)
    # used on a model trained from scratch: the optimizer holds the classifier only; the random 3D convolutions
    # never move.
    Bug("ft_parameters_without_pretrain", functools.partial(_build, bug="ft_parameters_without_pretrain"),
        "four_structures", ("conv1.weight",)),
    # classic: val_epoch without model.eval(): the BatchNorm layers normalize each validation batch by its own
    # statistics and overwrite their running estimates with validation batches.
    Bug("val_without_eval_mode", functools.partial(_build, bug="val_without_eval_mode"), "six_claims",
        ("EVALUATION",)),
]

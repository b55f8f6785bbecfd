"""VDSR single-image super-resolution (Kim et al. 2016) as trained by twtygqyy/pytorch-vdsr: a stack of bias-free
3x3 conv + ReLU blocks on the bicubic-upscaled luminance patch, a global residual (the net predicts the missing
detail and adds the input back), ``MSELoss`` summed over the batch (``size_average=False``), SGD lr 0.1 momentum 0.9
weight decay 1e-4 with the lr divided by 10 every ``--step`` epochs, and ``clip_grad_norm`` 0.4 before each step.

Source: https://github.com/twtygqyy/pytorch-vdsr
Commit: 514b021044018baf909e79f48392783daa592888
Files: main_vdsr.py, vdsr.py, dataset.py (data/generate_train.m describes how the patches are made)
License: MIT (Copyright (c) 2017- Jiu XU, Rakuten, Inc, Rakuten Institute of Technology; full text in
LICENSES/twtygqyy-pytorch-vdsr.txt)
Domain: image-to-image, super-resolution (residual learning on bicubic-upscaled inputs)

Deviations from the original:
- sizes: conv width 64 -> 16, residual blocks 18 -> 6, batchSize 128 -> 16, patches 41x41 -> 24x24 (lr, momentum,
  weight decay, clip 0.4, the lr schedule's step of 10 epochs unchanged); an epoch is 4 batches;
- data: ``data/train.h5`` (291 images' Y channel cut into 41x41 patches, bicubic x2/x3/x4 down-and-up, made in
  MATLAB) is replaced by synthetic patches made from ``seed``: smooth random textures (blurred noise plus oriented
  sinusoids) as the label, and the same patch downscaled x2 and upscaled back with bicubic ``F.interpolate`` as the
  input; the dataset class keeps ``DatasetFromHdf5``'s ``__getitem__`` (``data``/``label`` arrays, N x 1 x H x W);
- ``nn.MSELoss(size_average=False)`` is written ``reduction="sum"`` (the same loss: ``size_average`` was removed
  from PyTorch); ``nn.utils.clip_grad_norm`` is ``clip_grad_norm_``; ``Variable`` wrappers, CUDA, the random
  run seed, checkpoints, resume/pretrained loading and printing are dropped;
- one ``train_step`` is one iteration of ``train``'s batch loop; at each epoch start ``adjust_learning_rate`` sets the
  lr as ``train`` does;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import functools
import pathlib
import sys
from math import sqrt

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

WIDTH = 16
DEPTH = 6


class _Opt:
    batchSize = 16
    nEpochs = 50
    lr = 0.1
    step = 10
    clip = 0.4
    momentum = 0.9
    weight_decay = 1e-4
    start_epoch = 1


opt = _Opt()


# ---- vdsr.py ---------------------------------------------------------------------------------------------------

class Conv_ReLU_Block(nn.Module):
    def __init__(self):
        super(Conv_ReLU_Block, self).__init__()
        self.conv = nn.Conv2d(in_channels=WIDTH, out_channels=WIDTH, kernel_size=3, stride=1, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.conv(x))

class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.residual_layer = self.make_layer(Conv_ReLU_Block, DEPTH)
        self.input = nn.Conv2d(in_channels=1, out_channels=WIDTH, kernel_size=3, stride=1, padding=1, bias=False)
        self.output = nn.Conv2d(in_channels=WIDTH, out_channels=1, kernel_size=3, stride=1, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, sqrt(2. / n))

    def make_layer(self, block, num_of_layer):
        layers = []
        for _ in range(num_of_layer):
            layers.append(block())
        return nn.Sequential(*layers)

    def forward(self, x):
        residual = x
        out = self.relu(self.input(x))
        out = self.residual_layer(out)
        out = self.output(out)
        out = torch.add(out,residual)
        return out


# ---- dataset.py (the h5 arrays replaced by synthetic ones) -------------------------------------------------------

def make_patches(seed, n=64, size=24):
    """Label: smooth random textures in [0, 1]; data: the label bicubic-downscaled x2 and upscaled back."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.rand(n, 1, size // 4, size // 4, generator=gen)
    base = F.interpolate(noise, size=(size, size), mode="bicubic", align_corners=False)
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    theta = torch.rand(n, 1, 1, 1, generator=gen) * np.pi
    freq = 0.6 + 0.8 * torch.rand(n, 1, 1, 1, generator=gen)
    stripes = 0.5 + 0.5 * torch.sin(freq * (xx * torch.cos(theta) + yy * torch.sin(theta)))
    label = (0.5 * base + 0.5 * stripes).clamp(0, 1)
    low = F.interpolate(label, scale_factor=0.5, mode="bicubic", align_corners=False)
    data_ = F.interpolate(low, size=(size, size), mode="bicubic", align_corners=False).clamp(0, 1)
    return data_.numpy(), label.numpy()


class DatasetFromArrays(data.Dataset):
    def __init__(self, seed, bug=None):
        super(DatasetFromArrays, self).__init__()
        self.data, self.target = make_patches(seed)
        self.bug = bug

    def __getitem__(self, index):
        if self.bug == "input_and_label_swapped":
            # the two h5 keys read the wrong way round: the net maps the sharp patch to the blurred one
            return torch.from_numpy(self.target[index,:,:,:]).float(), torch.from_numpy(self.data[index,:,:,:]).float()
        return torch.from_numpy(self.data[index,:,:,:]).float(), torch.from_numpy(self.target[index,:,:,:]).float()

    def __len__(self):
        return self.data.shape[0]


# ---- main_vdsr.py ----------------------------------------------------------------------------------------------

def adjust_learning_rate(optimizer, epoch):
    """Sets the learning rate to the initial LR decayed by 10 every 10 epochs"""
    lr = opt.lr * (0.1 ** (epoch // opt.step))
    return lr


def _build(seed, bug=None):
    torch.manual_seed(seed)

    train_set = DatasetFromArrays(seed, bug=bug)
    training_data_loader = DataLoader(dataset=train_set, num_workers=0, batch_size=opt.batchSize, shuffle=True)

    model = Net()
    criterion = nn.MSELoss(reduction="sum")  # nn.MSELoss(size_average=False)

    optimizer = optim.SGD(model.parameters(), lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay)

    state = {"epoch": opt.start_epoch, "it": None}

    def next_batch():
        if state["it"] is None:
            lr = adjust_learning_rate(optimizer, state["epoch"]-1)
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr
            model.train()
            state["it"] = iter(training_data_loader)
        try:
            return next(state["it"])
        except StopIteration:
            state["epoch"] += 1
            state["it"] = None
            return next_batch()

    def train_step():
        batch = next_batch()
        input, target = batch[0], batch[1]

        loss = criterion(model(input), target)
        optimizer.zero_grad()
        loss.backward()
        if bug == "clip_after_step":
            optimizer.step()
            nn.utils.clip_grad_norm_(model.parameters(),opt.clip)
        else:
            nn.utils.clip_grad_norm_(model.parameters(),opt.clip)
            optimizer.step()
        return loss.detach()

    first = next(iter(DataLoader(dataset=train_set, batch_size=opt.batchSize, shuffle=False)))
    return Program(name="vdsr_sr", model=model, batch=(first[0], first[1]), loss_fn=lambda out, t: criterion(out, t),
                   optimizer=optimizer, train_step=train_step, loader=training_data_loader)


build = functools.partial(_build)

BUGS = [
    # the dataset's two arrays returned the wrong way round (classic input/label swap): the net learns to blur.
    Bug("input_and_label_swapped", functools.partial(_build, bug="input_and_label_swapped"), "learning_ledger",
        ("TASK",)),
    # the gradient clipped after optimizer.step() (classic): the step applies the unclipped gradient of a summed
    # MSE at lr 0.1, and the clipping only rescales a gradient that the next zero_grad throws away.
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]

"""SRResNet x4 single-image super-resolution (Ledig et al. 2017) as trained by twtygqyy/pytorch-SRResNet: a 9x9 conv
input layer, residual blocks of conv + InstanceNorm + LeakyReLU, a mid conv with a long skip, two conv +
``PixelShuffle(2)`` upsampling stages and a 9x9 output conv, trained on RGB patches by ``MSELoss`` summed over the
batch (``size_average=False``) with Adam lr 1e-4, the lr divided by 10 every ``--step`` epochs.

Source: https://github.com/twtygqyy/pytorch-SRResNet
Commit: d715729c8805f59dccd4a89acb7af11cb7b1534a
Files: main_srresnet.py, srresnet.py (``_NetG``), dataset.py (data/generate_train_srresnet.m describes the patches)
License: MIT (Copyright (c) 2017- Jiu XU, Rakuten, Inc, Rakuten Institute of Technology; full text in
LICENSES/twtygqyy-pytorch-SRResNet.txt)
Domain: vision, super-resolution (SRResNet generator, MSE on x4 upscaled RGB patches)

Deviations from the original:
- sizes: conv width 64 -> 16 (the upsampling convs 256 -> 64 channels, ``4 * width`` for ``PixelShuffle(2)``), 16
  residual blocks -> 3, batchSize 16 -> 8, label patches 96x96 -> 24x24 (inputs 24x24 -> 6x6); Adam's lr 1e-4 ->
  1e-3 so that the 30 steps of the self-check show the loss falling (the original runs 500 epochs); the lr schedule's
  step of 200 epochs is kept; an epoch is 4 batches;
- data: the h5 file of x4 patch pairs (made in MATLAB from DIV2K-like images) is replaced by synthetic RGB patches
  made from ``seed``: smooth random colour textures (blurred noise plus oriented sinusoids) as the label, and the
  same patch downscaled x4 with bicubic ``F.interpolate`` as the input; the dataset class keeps
  ``DatasetFromHdf5``'s ``__getitem__`` (``data``/``target`` arrays, N x 3 x H x W); the DataLoader shuffles with a
  ``torch.Generator(seed)``;
- ``nn.MSELoss(size_average=False)`` is written ``reduction="sum"`` (the same loss: ``size_average`` was removed
  from PyTorch); the ``--vgg_loss`` content loss (off by default; it needs torchvision's pretrained VGG19) is left
  out; ``Variable`` wrappers, CUDA, the random run seed, checkpoints, resume/pretrained loading and printing are
  dropped; ``_NetD`` (unused by this script) is not copied;
- one ``train_step`` is one iteration of ``train``'s batch loop; at each epoch start ``adjust_learning_rate`` sets the
  lr as ``train`` does;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import functools
import math
import pathlib
import sys

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

WIDTH = 16  # 64 in the original
BLOCKS = 3  # 16 in the original
SIZE = 24   # label patch (96 in the original)


class _Opt:
    batchSize = 8
    nEpochs = 500
    lr = 1e-3  # 1e-4 in the original
    step = 200
    start_epoch = 1


opt = _Opt()


# ---- srresnet.py -----------------------------------------------------------------------------------------------

class _Residual_Block(nn.Module):
    def __init__(self):
        super(_Residual_Block, self).__init__()

        self.conv1 = nn.Conv2d(in_channels=WIDTH, out_channels=WIDTH, kernel_size=3, stride=1, padding=1, bias=False)
        self.in1 = nn.InstanceNorm2d(WIDTH, affine=True)
        self.relu = nn.LeakyReLU(0.2, inplace=True)
        self.conv2 = nn.Conv2d(in_channels=WIDTH, out_channels=WIDTH, kernel_size=3, stride=1, padding=1, bias=False)
        self.in2 = nn.InstanceNorm2d(WIDTH, affine=True)

    def forward(self, x):
        identity_data = x
        output = self.relu(self.in1(self.conv1(x)))
        output = self.in2(self.conv2(output))
        output = torch.add(output,identity_data)
        return output

class _NetG(nn.Module):
    def __init__(self):
        super(_NetG, self).__init__()

        self.conv_input = nn.Conv2d(in_channels=3, out_channels=WIDTH, kernel_size=9, stride=1, padding=4, bias=False)
        self.relu = nn.LeakyReLU(0.2, inplace=True)

        self.residual = self.make_layer(_Residual_Block, BLOCKS)

        self.conv_mid = nn.Conv2d(in_channels=WIDTH, out_channels=WIDTH, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn_mid = nn.InstanceNorm2d(WIDTH, affine=True)

        self.upscale4x = nn.Sequential(
            nn.Conv2d(in_channels=WIDTH, out_channels=4 * WIDTH, kernel_size=3, stride=1, padding=1, bias=False),
            nn.PixelShuffle(2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(in_channels=WIDTH, out_channels=4 * WIDTH, kernel_size=3, stride=1, padding=1, bias=False),
            nn.PixelShuffle(2),
            nn.LeakyReLU(0.2, inplace=True),
        )

        self.conv_output = nn.Conv2d(in_channels=WIDTH, out_channels=3, kernel_size=9, stride=1, padding=4, bias=False)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
                if m.bias is not None:
                    m.bias.data.zero_()

    def make_layer(self, block, num_of_layer):
        layers = []
        for _ in range(num_of_layer):
            layers.append(block())
        return nn.Sequential(*layers)

    def forward(self, x):
        out = self.relu(self.conv_input(x))
        residual = out
        out = self.residual(out)
        out = self.bn_mid(self.conv_mid(out))
        out = torch.add(out,residual)
        out = self.upscale4x(out)
        out = self.conv_output(out)
        return out


# ---- dataset.py (the h5 arrays replaced by synthetic ones) -------------------------------------------------------

def make_patches(seed, n=32, size=SIZE):
    """Label: smooth random RGB textures in [0, 1]; data: the label bicubic-downscaled x4."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.rand(n, 3, size // 6, size // 6, generator=gen)
    base = F.interpolate(noise, size=(size, size), mode="bicubic", align_corners=False)
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    theta = torch.rand(n, 1, 1, 1, generator=gen) * np.pi
    freq = 0.3 + 0.4 * torch.rand(n, 1, 1, 1, generator=gen)
    tint = 0.5 + 0.5 * torch.rand(n, 3, 1, 1, generator=gen)
    stripes = tint * (0.5 + 0.5 * torch.sin(freq * (xx * torch.cos(theta) + yy * torch.sin(theta))))
    label = (0.5 * base + 0.5 * stripes).clamp(0, 1)
    data_ = F.interpolate(label, scale_factor=0.25, mode="bicubic", align_corners=False).clamp(0, 1)
    return data_.numpy(), label.numpy()


class DatasetFromArrays(data.Dataset):
    def __init__(self, seed, bug=None):
        super(DatasetFromArrays, self).__init__()
        self.data, self.target = make_patches(seed)
        self.bug = bug

    def __getitem__(self, index):
        if self.bug == "target_off_by_one":
            # each low-resolution patch paired with the next patch's label (an off-by-one index into the label array)
            j = (index + 1) % self.data.shape[0]
            return torch.from_numpy(self.data[index,:,:,:]).float(), torch.from_numpy(self.target[j,:,:,:]).float()
        return torch.from_numpy(self.data[index,:,:,:]).float(), torch.from_numpy(self.target[index,:,:,:]).float()

    def __len__(self):
        return self.data.shape[0]


# ---- main_srresnet.py ------------------------------------------------------------------------------------------

def adjust_learning_rate(optimizer, epoch):
    """Sets the learning rate to the initial LR decayed by 10"""
    lr = opt.lr * (0.1 ** (epoch // opt.step))
    return lr


def _build(seed, bug=None):
    torch.manual_seed(seed)

    train_set = DatasetFromArrays(seed, bug=bug)
    training_data_loader = DataLoader(dataset=train_set, num_workers=0, batch_size=opt.batchSize, shuffle=True,
                                      generator=torch.Generator().manual_seed(seed))

    model = _NetG()
    criterion = nn.MSELoss(reduction="sum")  # nn.MSELoss(size_average=False)

    optimizer = optim.Adam(model.parameters(), lr=opt.lr)

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

        output = model(input)
        loss = criterion(output, target)

        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()

            loss.backward()

        optimizer.step()
        return loss.detach()

    first = next(iter(DataLoader(dataset=train_set, batch_size=opt.batchSize, shuffle=False)))
    return Program(name="srresnet_x4", model=model, batch=(first[0], first[1]), loss_fn=lambda out, t: criterion(out, t),
                   optimizer=optimizer, train_step=train_step, loader=training_data_loader)


build = functools.partial(_build)

BUGS = [
    # each input patch paired with its neighbour's label (classic off-by-one in the dataset): the x4 target no longer
    # follows from the low-resolution input.
    Bug("target_off_by_one", functools.partial(_build, bug="target_off_by_one"), "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() moved after loss.backward() (classic): every step applies a zero gradient. Every
    # parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

"""LapSRN x4 super-resolution from twtygqyy/pytorch-LapSRN: ``lapsrn.py``'s ``Net`` (a Laplacian pyramid: a feature
branch of two 10-convolution LeakyReLU blocks, each ending in a stride-2 transposed convolution, and an image branch
of bilinear-initialized transposed convolutions; each level adds the predicted residual to the upsampled image) and
``L1_Charbonnier_loss`` (summed ``sqrt(diff^2 + 1e-6)``), trained by ``main_lapsrn.py``: the x2 and x4 losses
against the label pyramid, ``loss_x2.backward(retain_graph=True)`` then ``loss_x4.backward()`` after one
``zero_grad``, Adam (lr 1e-4) with the script's step decay (x0.1 every ``--step`` epochs, set at each epoch).

Source: https://github.com/twtygqyy/pytorch-LapSRN
Commit: 1b7737abe6ccaef2d14b673d301edbace3414c02
Files: main_lapsrn.py, lapsrn.py, dataset.py, data/generate_train_lap_pry.m
License: MIT (Copyright (c) 2017- Jiu XU)
Domain: single-image super-resolution (x4, Laplacian pyramid)

Deviations from the original:
- sizes: feature width 64 -> 16 in every convolution (10 convolutions per block kept), batch size 64 -> 16, HR
  patches 128x128 -> 48x48 (inputs 32x32 -> 12x12);
- data: the HDF5 pyramid ``lap_pry_x4_small.h5`` (made by ``generate_train_lap_pry.m`` from luminance patches with
  MATLAB's bicubic ``imresize``) is replaced by synthetic luminance patches in [0, 1] made from ``seed`` (blurred
  rectangles and discs on a smooth gradient) with ``label_x2`` and the input made by antialiased bicubic
  downsampling by 2 and 4; ``DatasetFromHdf5`` reads in-memory arrays instead of h5py datasets;
- the random seed is drawn from ``seed`` (the script draws ``random.randint(1, 10000)``); no CUDA; ``Variable`` is a
  plain tensor and ``loss.data[0]`` is ``loss.item()``;
- one ``train_step`` is one iteration of ``train``'s loop; the epoch's learning rate is set when an epoch begins, as
  ``train`` does; checkpoints and printing are left out; ``eval_fn`` is the x4 PSNR of a given batch under ``eval()`` and
  ``no_grad`` (the repository's ``eval.py`` measures PSNR on test images; the training script has no validation);
- the Program's batch is ``(data, label_x4)``, the input and the target ``loss_fn`` scores (the x4 output); at first
  contact (public-32) it was declared ``(data, label_x2, label_x4)``, which firstdiv refuses for a one-input model
  ("pass (inputs, targets)"): re-declared as that message says, as a user would.
"""
# ruff: noqa: UP008, PLR0402  (the original's code style is kept)

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

WIDTH, BATCH_SIZE, HR_SIZE = 16, 16, 48
LR, STEP, N_EPOCHS = 1e-4, 100, 100


# ---- lapsrn.py -----------------------------------------------------------------------------------------------

def get_upsample_filter(size):
    """Make a 2D bilinear kernel suitable for upsampling"""
    factor = (size + 1) // 2
    if size % 2 == 1:
        center = factor - 1
    else:
        center = factor - 0.5
    og = np.ogrid[:size, :size]
    filter = (1 - abs(og[0] - center) / factor) * \
             (1 - abs(og[1] - center) / factor)
    return torch.from_numpy(filter).float()


class _Conv_Block(nn.Module):
    def __init__(self):
        super(_Conv_Block, self).__init__()

        layers = []
        for _ in range(10):  # ten Conv2d(64, 64, 3, padding=1, bias=False) + LeakyReLU(0.2), written out upstream
            layers += [nn.Conv2d(in_channels=WIDTH, out_channels=WIDTH, kernel_size=3, stride=1, padding=1,
                                 bias=False),
                       nn.LeakyReLU(0.2, inplace=True)]
        layers += [nn.ConvTranspose2d(in_channels=WIDTH, out_channels=WIDTH, kernel_size=4, stride=2, padding=1,
                                      bias=False),
                   nn.LeakyReLU(0.2, inplace=True)]
        self.cov_block = nn.Sequential(*layers)

    def forward(self, x):
        output = self.cov_block(x)
        return output


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()

        self.conv_input = nn.Conv2d(in_channels=1, out_channels=WIDTH, kernel_size=3, stride=1, padding=1, bias=False)
        self.relu = nn.LeakyReLU(0.2, inplace=True)

        self.convt_I1 = nn.ConvTranspose2d(in_channels=1, out_channels=1, kernel_size=4, stride=2, padding=1,
                                           bias=False)
        self.convt_R1 = nn.Conv2d(in_channels=WIDTH, out_channels=1, kernel_size=3, stride=1, padding=1, bias=False)
        self.convt_F1 = self.make_layer(_Conv_Block)

        self.convt_I2 = nn.ConvTranspose2d(in_channels=1, out_channels=1, kernel_size=4, stride=2, padding=1,
                                           bias=False)
        self.convt_R2 = nn.Conv2d(in_channels=WIDTH, out_channels=1, kernel_size=3, stride=1, padding=1, bias=False)
        self.convt_F2 = self.make_layer(_Conv_Block)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
                if m.bias is not None:
                    m.bias.data.zero_()
            if isinstance(m, nn.ConvTranspose2d):
                c1, c2, h, w = m.weight.data.size()
                weight = get_upsample_filter(h)
                m.weight.data = weight.view(1, 1, h, w).repeat(c1, c2, 1, 1)
                if m.bias is not None:
                    m.bias.data.zero_()

    def make_layer(self, block):
        layers = []
        layers.append(block())
        return nn.Sequential(*layers)

    def forward(self, x):
        out = self.relu(self.conv_input(x))

        convt_F1 = self.convt_F1(out)
        convt_I1 = self.convt_I1(x)
        convt_R1 = self.convt_R1(convt_F1)
        HR_2x = convt_I1 + convt_R1

        convt_F2 = self.convt_F2(convt_F1)
        convt_I2 = self.convt_I2(HR_2x)
        convt_R2 = self.convt_R2(convt_F2)
        HR_4x = convt_I2 + convt_R2

        return HR_2x, HR_4x


class L1_Charbonnier_loss(nn.Module):
    """L1 Charbonnierloss."""
    def __init__(self, bug=None):
        super(L1_Charbonnier_loss, self).__init__()
        self.eps = 1e-6
        self.bug = bug

    def forward(self, X, Y):
        diff = torch.add(X, Y) if self.bug == "charbonnier_sign_flipped" else torch.add(X, -Y)
        error = torch.sqrt(diff * diff + self.eps)
        loss = torch.sum(error)
        return loss


# ---- dataset.py / data/generate_train_lap_pry.m (synthetic patches) ------------------------------------------

def make_pyramid(gen, n):
    """Luminance HR patches in [0, 1] (blurred shapes on a gradient) and their x2 / x4 bicubic downsamplings."""
    yy, xx = torch.meshgrid(torch.linspace(0, 1, HR_SIZE), torch.linspace(0, 1, HR_SIZE), indexing='ij')
    hr = []
    for _ in range(n):
        a, b, c = (torch.rand(3, generator=gen) - 0.5).tolist()
        img = 0.5 + 0.3 * (a * xx + b * yy) + 0.1 * c
        for _k in range(4):
            cy, cx, r = (torch.rand(3, generator=gen) * torch.tensor([1.0, 1.0, 0.25]) + torch.tensor(
                [0.0, 0.0, 0.08])).tolist()
            v = float(torch.rand(1, generator=gen)) - 0.5
            if torch.rand(1, generator=gen) < 0.5:
                img = img + v * (((yy - cy).abs() < r) & ((xx - cx).abs() < r)).float()
            else:
                img = img + v * (((yy - cy) ** 2 + (xx - cx) ** 2) < r * r).float()
        hr.append(img)
    hr = torch.stack(hr)[:, None]
    hr = F.avg_pool2d(F.pad(hr, (1, 1, 1, 1), mode='replicate'), 3, 1).clamp(0, 1)  # a slight blur
    x2 = F.interpolate(hr, scale_factor=0.5, mode='bicubic', antialias=True, align_corners=False).clamp(0, 1)
    x1 = F.interpolate(hr, scale_factor=0.25, mode='bicubic', antialias=True, align_corners=False).clamp(0, 1)
    return x1, x2, hr


class DatasetFromHdf5(data.Dataset):
    def __init__(self, arrays, bug=None):
        super(DatasetFromHdf5, self).__init__()
        self.data, self.label_x2, self.label_x4 = arrays
        self.bug = bug

    def __getitem__(self, index):
        if self.bug == "x4_labels_off_by_one":  # the x4 labels one patch behind the inputs and x2 labels
            return self.data[index].float(), self.label_x2[index].float(), self.label_x4[(index + 1) % len(self)].float()
        return self.data[index, :, :, :].float(), self.label_x2[index, :, :, :].float(), \
            self.label_x4[index, :, :, :].float()

    def __len__(self):
        return self.data.shape[0]


# ---- main_lapsrn.py ------------------------------------------------------------------------------------------

def adjust_learning_rate(optimizer, epoch):
    """Sets the learning rate to the initial LR decayed by 10 every 10 epochs"""
    lr = LR * (0.1 ** (epoch // STEP))
    return lr


def psnr_x4(model, batch):
    """PSNR of the x4 output on a batch (eval.py's measure, on [0, 1] luminance)."""
    model.eval()
    with torch.no_grad():
        _, hr_4x = model(batch[0])
    model.train()
    mse = F.mse_loss(hr_4x.clamp(0, 1), batch[2]).item()
    return 10 * math.log10(1.0 / max(mse, 1e-10))


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_set = DatasetFromHdf5(make_pyramid(gen, 128), bug=bug)
    training_data_loader = DataLoader(dataset=train_set, num_workers=0, batch_size=BATCH_SIZE, shuffle=True)

    model = Net()
    criterion = L1_Charbonnier_loss(bug=bug)
    optimizer = optim.Adam(model.parameters(), lr=LR)
    state = {'it': None, 'epoch': 0}

    def next_batch():
        try:
            return next(state['it'])
        except (StopIteration, TypeError):  # a new epoch: train()'s lr setting and model.train()
            state['epoch'] += 1
            lr = adjust_learning_rate(optimizer, state['epoch'] - 1)
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr
            model.train()
            state['it'] = iter(training_data_loader)
            return next(state['it'])

    def train_step():
        batch = next_batch()
        input, label_x2, label_x4 = batch[0], batch[1], batch[2]

        HR_2x, HR_4x = model(input)

        loss_x2 = criterion(HR_2x, label_x2)
        loss_x4 = criterion(HR_4x, label_x4)
        loss = loss_x2 + loss_x4

        optimizer.zero_grad()

        loss_x2.backward(retain_graph=True)

        if bug == "zero_grad_between_backwards":
            optimizer.zero_grad()

        loss_x4.backward()

        optimizer.step()
        return loss.detach()

    batch = tuple(t[:BATCH_SIZE] for t in (train_set.data, train_set.label_x4))
    return Program(name="lapsrn_x4", model=model, batch=batch,
                   loss_fn=lambda out, target: criterion(out[1], target), optimizer=optimizer,
                   train_step=train_step, eval_fn=psnr_x4, loader=training_data_loader)


build = functools.partial(_build)

BUGS = [
    # classic: optimizer.zero_grad() between loss_x2.backward(retain_graph=True) and loss_x4.backward(): the x2
    # level's gradient is wiped before the step, so only the x4 loss trains the model.
    Bug("zero_grad_between_backwards", functools.partial(_build, bug="zero_grad_between_backwards"), "step_probe",
        (), kind="step.gradient_discarded"),  # a whole-model slip: declared by its mechanism (README rule 6)
    # classic: the x4 labels one patch off against the inputs (the pyramid's arrays written in different orders).
    Bug("x4_labels_off_by_one", functools.partial(_build, bug="x4_labels_off_by_one"), "learning_ledger", ("TASK",)),
    # classic sign slip in the loss: torch.add(X, Y) for torch.add(X, -Y), so the Charbonnier penalty pulls every
    # output towards the negated label.
    Bug("charbonnier_sign_flipped", functools.partial(_build, bug="charbonnier_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
]

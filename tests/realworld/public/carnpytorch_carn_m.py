# ruff: noqa: UP008, PLR0402, FURB163
"""CARN-M (the mobile Cascading Residual Network) from nmhkahn/CARN-pytorch: ``carn_m.Net`` (frozen MeanShift in and
out, an entry conv, three cascading ``Block``s that each reuse one grouped ``EResidualBlock`` three times with
1x1 ``BasicBlock`` fusions over the concatenated features, a cascade of 1x1 fusions around the blocks, a grouped
conv + PixelShuffle upsampler, an exit conv), trained by ``Solver.fit``: L1 loss on random paired HR/LR crops with
flips and 90-degree rotations, Adam over the parameters that require grad, ``clip_grad_norm`` at 10 between the
backward and the step, the learning rate halved every ``decay`` steps and written into the param groups.

Source: https://github.com/nmhkahn/CARN-pytorch
Commit: 40d3514f81cccd680d846cd5ab07af35f2c8e0e2
Files: ``carn/solver.py`` (``Solver.__init__``, ``fit``, ``decay_learning_rate``), ``carn/train.py`` (the argument
defaults), ``carn/model/carn_m.py`` (``Block``, ``Net``), ``carn/model/ops.py`` (``MeanShift``, ``BasicBlock``,
``EResidualBlock``, ``UpsampleBlock``, ``_UpsampleBlock``), ``carn/dataset.py`` (``random_crop``,
``random_flip_and_rotate``, ``TrainDataset``), README (the CARN-M training command: ``--group 4``, L1 loss)
License: MIT (Copyright (c) 2018 Namhyuk Ahn; full text in LICENSES/nmhkahn-CARN-pytorch.txt)
Domain: vision, super-resolution (CARN-M x2: cascading grouped residual blocks, pixel shuffle, L1, Adam, clipping)

Kept as written: ``MeanShift`` (identity 1x1 conv with the DIV2K mean as bias, frozen), ``BasicBlock``,
``EResidualBlock`` (grouped 3x3, 3x3, then 1x1), ``UpsampleBlock`` / ``_UpsampleBlock``, ``Block`` (the one
``b1`` applied three times, as written), ``Net`` (64 channels), ``init_weights`` (a no-op, so PyTorch's default
init); ``nn.L1Loss`` (``--loss_fn L1``), ``optim.Adam(filter(lambda p: p.requires_grad, ...), lr 1e-4)``, the
loop body of ``fit`` (``refiner.train()``, ``hr, lr = inputs[-1]``, forward with ``scale``, ``zero_grad``, backward,
``nn.utils.clip_grad_norm(..., cfg.clip)`` with ``clip`` 10, step, ``decay_learning_rate`` into every param group),
``random_crop`` (LR window at (x, y), HR window at (x*scale, y*scale)) and ``random_flip_and_rotate``.

Deviations from the original:
- DIV2K's h5 file is not here: HR images are synthetic, made from ``seed`` (smooth colour fields plus a few
  sharp-edged rectangles, 64x64, in [0, 1]) and their LR copies are the bicubic x2 downscale (antialiased
  ``F.interpolate``), as div2h5.py stores DIV2K's bicubic LR images; 256 training images; the numpy HWC arrays and
  ``ToTensor`` are kept.
- ``--scale 2`` (train.py's default; the README's CARN-M command trains multi-scale with ``--scale 0``), ``--group
  4`` as the README's CARN-M command; sizes for 2 CPU cores: ``patch_size`` 64 -> 8 (LR), ``batch_size`` 64 -> 8;
  ``lr`` 1e-4 -> 1e-3 so that 30 steps show learning; ``decay`` 150000 kept (no decay inside the run); no
  ``DataParallel`` (one CPU device), ``num_workers`` 0 with a seeded generator, python's ``random`` seeded.
- the tensorboard writer, checkpoints and the Urban100 PSNR evaluation are dropped: ``eval_fn`` is the L1 loss on
  held-out LR/HR crops under ``eval()``; ``train_step`` is one iteration of ``fit``'s loop, returning the loss.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as _Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class cfg:  # (port) train.py's arguments, sizes as listed in the docstring
    scale = 2
    group = 4
    patch_size = 8  # (port) 64
    batch_size = 8  # (port) 64
    max_steps = 200000
    decay = 150000
    lr = 0.001  # (port) 0.0001
    clip = 10.0
    loss_fn = "L1"


HR_SIZE, N_TRAIN, N_VAL = 64, 256, 32


# ---- carn/model/ops.py -----------------------------------------------------------------------------------------

def init_weights(modules):
    pass


class MeanShift(nn.Module):
    def __init__(self, mean_rgb, sub):
        super(MeanShift, self).__init__()

        sign = -1 if sub else 1
        r = mean_rgb[0] * sign
        g = mean_rgb[1] * sign
        b = mean_rgb[2] * sign

        self.shifter = nn.Conv2d(3, 3, 1, 1, 0)
        self.shifter.weight.data = torch.eye(3).view(3, 3, 1, 1)
        self.shifter.bias.data   = torch.Tensor([r, g, b])

        # Freeze the mean shift layer
        for params in self.shifter.parameters():
            params.requires_grad = False

    def forward(self, x):
        x = self.shifter(x)
        return x


class BasicBlock(nn.Module):
    def __init__(self,
                 in_channels, out_channels,
                 ksize=3, stride=1, pad=1):
        super(BasicBlock, self).__init__()

        self.body = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, ksize, stride, pad),
            nn.ReLU(inplace=True)
        )

        init_weights(self.modules)

    def forward(self, x):
        out = self.body(x)
        return out


class EResidualBlock(nn.Module):
    def __init__(self,
                 in_channels, out_channels,
                 group=1):
        super(EResidualBlock, self).__init__()

        self.body = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, 1, 1, groups=group),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, 1, 1, groups=group),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 1, 1, 0),
        )

        init_weights(self.modules)

    def forward(self, x):
        out = self.body(x)
        out = F.relu(out + x)
        return out


class UpsampleBlock(nn.Module):
    def __init__(self,
                 n_channels, scale, multi_scale,
                 group=1):
        super(UpsampleBlock, self).__init__()

        if multi_scale:
            self.up2 = _UpsampleBlock(n_channels, scale=2, group=group)
            self.up3 = _UpsampleBlock(n_channels, scale=3, group=group)
            self.up4 = _UpsampleBlock(n_channels, scale=4, group=group)
        else:
            self.up =  _UpsampleBlock(n_channels, scale=scale, group=group)

        self.multi_scale = multi_scale

    def forward(self, x, scale):
        if self.multi_scale:
            if scale == 2:
                return self.up2(x)
            elif scale == 3:
                return self.up3(x)
            elif scale == 4:
                return self.up4(x)
        else:
            return self.up(x)


class _UpsampleBlock(nn.Module):
    def __init__(self,
                 n_channels, scale,
                 group=1):
        super(_UpsampleBlock, self).__init__()

        modules = []
        if scale == 2 or scale == 4 or scale == 8:
            for _ in range(int(math.log(scale, 2))):
                modules += [nn.Conv2d(n_channels, 4*n_channels, 3, 1, 1, groups=group), nn.ReLU(inplace=True)]
                modules += [nn.PixelShuffle(2)]
        elif scale == 3:
            modules += [nn.Conv2d(n_channels, 9*n_channels, 3, 1, 1, groups=group), nn.ReLU(inplace=True)]
            modules += [nn.PixelShuffle(3)]

        self.body = nn.Sequential(*modules)
        init_weights(self.modules)

    def forward(self, x):
        out = self.body(x)
        return out


# ---- carn/model/carn_m.py --------------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self,
                 in_channels, out_channels,
                 group=1):
        super(Block, self).__init__()

        self.b1 = EResidualBlock(64, 64, group=group)
        self.c1 = BasicBlock(64*2, 64, 1, 1, 0)
        self.c2 = BasicBlock(64*3, 64, 1, 1, 0)
        self.c3 = BasicBlock(64*4, 64, 1, 1, 0)

    def forward(self, x):
        c0 = o0 = x

        b1 = self.b1(o0)
        c1 = torch.cat([c0, b1], dim=1)
        o1 = self.c1(c1)

        b2 = self.b1(o1)
        c2 = torch.cat([c1, b2], dim=1)
        o2 = self.c2(c2)

        b3 = self.b1(o2)
        c3 = torch.cat([c2, b3], dim=1)
        o3 = self.c3(c3)

        return o3


class Net(nn.Module):
    def __init__(self, **kwargs):
        super(Net, self).__init__()

        scale = kwargs.get("scale")
        multi_scale = kwargs.get("multi_scale")
        group = kwargs.get("group", 1)

        self.sub_mean = MeanShift((0.4488, 0.4371, 0.4040), sub=True)
        self.add_mean = MeanShift((0.4488, 0.4371, 0.4040), sub=False)

        self.entry = nn.Conv2d(3, 64, 3, 1, 1)

        self.b1 = Block(64, 64, group=group)
        self.b2 = Block(64, 64, group=group)
        self.b3 = Block(64, 64, group=group)
        self.c1 = BasicBlock(64*2, 64, 1, 1, 0)
        self.c2 = BasicBlock(64*3, 64, 1, 1, 0)
        self.c3 = BasicBlock(64*4, 64, 1, 1, 0)

        self.upsample = UpsampleBlock(64, scale=scale,
                                      multi_scale=multi_scale,
                                      group=group)
        self.exit = nn.Conv2d(64, 3, 3, 1, 1)

    def forward(self, x, scale):
        x = self.sub_mean(x)
        x = self.entry(x)
        c0 = o0 = x

        b1 = self.b1(o0)
        c1 = torch.cat([c0, b1], dim=1)
        o1 = self.c1(c1)

        b2 = self.b2(o1)
        c2 = torch.cat([c1, b2], dim=1)
        o2 = self.c2(c2)

        b3 = self.b3(o2)
        c3 = torch.cat([c2, b3], dim=1)
        o3 = self.c3(c3)

        out = self.upsample(o3, scale=scale)

        out = self.exit(out)
        out = self.add_mean(out)

        return out


# ---- carn/dataset.py -------------------------------------------------------------------------------------------

def random_crop(hr, lr, size, scale, bug=None):
    h, w = lr.shape[:-1]
    x = random.randint(0, w-size)
    y = random.randint(0, h-size)

    hsize = size*scale
    hx, hy = x*scale, y*scale
    if bug == "hr_corner_not_scaled":
        hx, hy = x, y  # (bug) the HR window starts at the LR corner

    crop_lr = lr[y:y+size, x:x+size].copy()
    crop_hr = hr[hy:hy+hsize, hx:hx+hsize].copy()

    return crop_hr, crop_lr


def random_flip_and_rotate(im1, im2):
    if random.random() < 0.5:
        im1 = np.flipud(im1)
        im2 = np.flipud(im2)

    if random.random() < 0.5:
        im1 = np.fliplr(im1)
        im2 = np.fliplr(im2)

    angle = random.choice([0, 1, 2, 3])
    im1 = np.rot90(im1, angle)
    im2 = np.rot90(im2, angle)

    # have to copy before be called by transform function
    return im1.copy(), im2.copy()


def to_tensor(im):
    """(port) transforms.ToTensor() on a float HWC array: CHW, values unchanged."""
    return torch.from_numpy(np.ascontiguousarray(im.transpose(2, 0, 1))).float()


class TrainDataset(_Dataset):
    def __init__(self, hr, lr, size, scale, bug=None):  # (port) arrays instead of the h5 file
        super(TrainDataset, self).__init__()

        self.size = size
        self.bug = bug
        self.hr = hr
        self.scale = [scale]
        self.lr = [lr]

        self.transform = to_tensor

    def __getitem__(self, index):
        size = self.size

        item = [(self.hr[index], self.lr[i][index]) for i, _ in enumerate(self.lr)]
        item = [random_crop(hr, lr, size, self.scale[i], bug=self.bug) for i, (hr, lr) in enumerate(item)]
        item = [random_flip_and_rotate(hr, lr) for hr, lr in item]

        return [(self.transform(hr), self.transform(lr)) for hr, lr in item]

    def __len__(self):
        return len(self.hr)


# ---- (port) synthetic DIV2K stand-in ---------------------------------------------------------------------------

def _images(gen, n):
    smooth = F.interpolate(torch.rand(n, 3, 4, 4, generator=gen), size=(HR_SIZE, HR_SIZE), mode="bicubic",
                           align_corners=False)
    hr = smooth.clone()
    for i in range(n):
        for _ in range(4):
            y0, x0 = (int(v) for v in torch.randint(0, HR_SIZE - 8, (2,), generator=gen))
            hh, ww = (int(v) for v in torch.randint(4, 24, (2,), generator=gen))
            hr[i, :, y0:y0 + hh, x0:x0 + ww] = torch.rand(3, 1, 1, generator=gen)
    hr = hr.clamp(0, 1)
    lr = F.interpolate(hr, scale_factor=0.5, mode="bicubic", align_corners=False, antialias=True).clamp(0, 1)
    return [a.permute(1, 2, 0).numpy() for a in hr], [a.permute(1, 2, 0).numpy() for a in lr]


# ---- carn/solver.py --------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    random.seed(seed)
    gen = torch.Generator().manual_seed(seed)
    hr_imgs, lr_imgs = _images(gen, N_TRAIN + N_VAL)

    refiner = Net(scale=cfg.scale, group=cfg.group)
    if cfg.loss_fn in ["MSE"]:
        loss_fn = nn.MSELoss()
    elif cfg.loss_fn in ["L1"]:
        loss_fn = nn.L1Loss()
    elif cfg.loss_fn in ["SmoothL1"]:
        loss_fn = nn.SmoothL1Loss()

    optimizer = optim.Adam(
        filter(lambda p: p.requires_grad, refiner.parameters()),
        cfg.lr)

    train_data = TrainDataset(hr_imgs[:N_TRAIN], lr_imgs[:N_TRAIN], scale=cfg.scale, size=cfg.patch_size, bug=bug)
    train_loader = DataLoader(train_data,
                              batch_size=cfg.batch_size,
                              num_workers=0,
                              shuffle=True, drop_last=True,
                              generator=torch.Generator().manual_seed(seed))
    st = {"it": iter(train_loader), "step": 0}

    def decay_learning_rate():
        lr = cfg.lr * (0.5 ** (st["step"] // cfg.decay))
        return lr

    def train_step():
        try:
            inputs = next(st["it"])
        except StopIteration:
            st["it"] = iter(train_loader)
            inputs = next(st["it"])
        refiner.train()

        scale = cfg.scale
        hr, lr = inputs[-1][0], inputs[-1][1]

        sr = refiner(lr, scale)
        loss = loss_fn(sr, hr)

        if bug == "clip_after_step":
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            nn.utils.clip_grad_norm_(refiner.parameters(), cfg.clip)
        else:
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(refiner.parameters(), cfg.clip)  # (port) clip_grad_norm, deprecated alias
            optimizer.step()

        learning_rate = decay_learning_rate()
        for param_group in optimizer.param_groups:
            param_group["lr"] = learning_rate

        st["step"] += 1
        return loss.item()

    # (port) held-out crops for eval_fn, cut once
    random_state = random.getstate()
    val = TrainDataset(hr_imgs[N_TRAIN:], lr_imgs[N_TRAIN:], scale=cfg.scale, size=cfg.patch_size)
    val_items = [val[i][-1] for i in range(len(val))]
    random.setstate(random_state)
    val_hr = torch.stack([h for h, _ in val_items])
    val_lr = torch.stack([lr for _, lr in val_items])

    def eval_fn(model, _batch=None):
        was = model.training
        model.eval()
        with torch.no_grad():
            out = float(loss_fn(model(val_lr, cfg.scale), val_hr))
        model.train(was)
        return out

    state = random.getstate()
    first = next(iter(DataLoader(train_data, batch_size=cfg.batch_size, shuffle=False)))
    random.setstate(state)
    batch = ((first[-1][1], cfg.scale), first[-1][0])  # refiner(lr, scale) against hr

    return Program(name="carnpytorch_carn_m", model=refiner, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the HR window cut at the LR crop's corner instead of (x*scale, y*scale): the target is a different part of
    # the image than the input shows (classic paired-crop slip).
    Bug("hr_corner_not_scaled", functools.partial(_build, bug="hr_corner_not_scaled"), "learning_ledger",
        ("TASK",)),
    # clip_grad_norm moved after optimizer.step(): the clipping no longer bounds the update (classic).
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

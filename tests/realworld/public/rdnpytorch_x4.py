# ruff: noqa: UP008, UP004, PLR0402
"""RDN (Residual Dense Network, Zhang et al. 2018) for x4 single-image super-resolution, from yjn870/RDN-pytorch:
shallow features, residual dense blocks (dense 3x3 layers, 1x1 local fusion, local residual), global feature fusion
with a global residual, sub-pixel (PixelShuffle) upsampling, L1 loss, Adam with a step decay at 80% of the epochs,
random aligned LR/HR crops with flips and 90-degree rotations, PSNR on the Y channel with a ``scale`` border.

Source: https://github.com/yjn870/RDN-pytorch
Commit: f2641c0817f9e1f72acd961e3ebf42c89778a054
Files: ``train.py``, ``models.py``, ``datasets.py``, ``utils.py``, ``prepare.py``, ``README.md`` (the x4 command)
License: MIT (Copyright (c) 2021 JaeYun Yeo; full text in LICENSES/yjn870-RDN-pytorch.txt)
Domain: vision, super-resolution (x4, RGB)

Kept as written: ``models.py`` (``DenseLayer``, ``RDB``, ``RDN`` with its x4 upscale of two conv + PixelShuffle(2)
stages), ``TrainDataset``'s ``random_crop`` / ``random_horizontal_flip`` / ``random_vertical_flip`` /
``random_rotate_90`` and ``/ 255`` CHW conversion, ``EvalDataset``'s conversion, ``utils.py``'s
``convert_rgb_to_y``, ``denormalize``, ``calc_psnr``, ``AverageMeter``; ``train.py``'s ``L1Loss``,
``Adam(model.parameters(), lr)``, the per-epoch lr ``lr * 0.1 ** (epoch // int(num_epochs * 0.8))``, the loop body
(forward, loss, meter update, zero_grad, backward, step) and the evaluation (eval mode, no_grad, Y channel of the
denormalized prediction and label, ``scale`` pixels cut from each border, mean PSNR).

Deviations from the original:
- sizes for 2 CPU cores: ``num_features`` 64 -> 16, ``growth_rate`` 64 -> 16, ``num_blocks`` 16 -> 3,
  ``num_layers`` 8 -> 3, ``patch_size`` 32 -> 8 (HR crops 32), batch 16 kept; lr 1e-4 -> 1e-3 so that 30 steps show
  the loss falling; ``num_epochs`` 800 -> 10 (so the decay arithmetic stays defined: the lr drops at epoch 8, after the 30 steps
  of the self-check);
- data: DIV2K and Set5 (and the h5 files ``prepare.py`` writes) are not here: the HR images are synthetic 64x64
  RGB images made from ``seed`` (smooth colour fields, a few sharp rectangles and stripes), the LR images their x4
  bicubic downsampling (``F.interpolate(..., mode='bicubic', antialias=True)`` in place of PIL's BICUBIC resize),
  kept as uint8 HWC arrays in memory as the h5 groups would hold them; 64 training images, 3 evaluation images;
  Python's ``random`` is seeded from ``seed`` and the loader shuffles with a ``torch.Generator(seed)``;
- tqdm, checkpoints, the best-weights copy and the prints are dropped; CPU only, no workers;
- one ``train_step`` is one batch of the epoch loop (the epoch's lr written when an epoch starts); ``eval_fn`` is
  the per-epoch evaluation (mean PSNR, higher is better), switching back to train mode as the next epoch does;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim
from torch import nn
from torch.utils.data import Dataset
from torch.utils.data.dataloader import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

HR_SIZE = 64


# models.py
class DenseLayer(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(DenseLayer, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=3 // 2)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return torch.cat([x, self.relu(self.conv(x))], 1)


class RDB(nn.Module):
    def __init__(self, in_channels, growth_rate, num_layers):
        super(RDB, self).__init__()
        self.layers = nn.Sequential(*[DenseLayer(in_channels + growth_rate * i, growth_rate) for i in range(num_layers)])

        # local feature fusion
        self.lff = nn.Conv2d(in_channels + growth_rate * num_layers, growth_rate, kernel_size=1)

    def forward(self, x):
        return x + self.lff(self.layers(x))  # local residual learning


class RDN(nn.Module):
    def __init__(self, scale_factor, num_channels, num_features, growth_rate, num_blocks, num_layers):
        super(RDN, self).__init__()
        self.G0 = num_features
        self.G = growth_rate
        self.D = num_blocks
        self.C = num_layers

        # shallow feature extraction
        self.sfe1 = nn.Conv2d(num_channels, num_features, kernel_size=3, padding=3 // 2)
        self.sfe2 = nn.Conv2d(num_features, num_features, kernel_size=3, padding=3 // 2)

        # residual dense blocks
        self.rdbs = nn.ModuleList([RDB(self.G0, self.G, self.C)])
        for _ in range(self.D - 1):
            self.rdbs.append(RDB(self.G, self.G, self.C))

        # global feature fusion
        self.gff = nn.Sequential(
            nn.Conv2d(self.G * self.D, self.G0, kernel_size=1),
            nn.Conv2d(self.G0, self.G0, kernel_size=3, padding=3 // 2)
        )

        # up-sampling
        assert 2 <= scale_factor <= 4
        if scale_factor == 2 or scale_factor == 4:
            self.upscale = []
            for _ in range(scale_factor // 2):
                self.upscale.extend([nn.Conv2d(self.G0, self.G0 * (2 ** 2), kernel_size=3, padding=3 // 2),
                                     nn.PixelShuffle(2)])
            self.upscale = nn.Sequential(*self.upscale)
        else:
            self.upscale = nn.Sequential(
                nn.Conv2d(self.G0, self.G0 * (scale_factor ** 2), kernel_size=3, padding=3 // 2),
                nn.PixelShuffle(scale_factor)
            )

        self.output = nn.Conv2d(self.G0, num_channels, kernel_size=3, padding=3 // 2)

    def forward(self, x):
        sfe1 = self.sfe1(x)
        sfe2 = self.sfe2(sfe1)

        x = sfe2
        local_features = []
        for i in range(self.D):
            x = self.rdbs[i](x)
            local_features.append(x)

        x = self.gff(torch.cat(local_features, 1)) + sfe1  # global residual learning
        x = self.upscale(x)
        x = self.output(x)
        return x


# utils.py
def convert_rgb_to_y(img, dim_order='hwc'):
    if dim_order == 'hwc':
        return 16. + (64.738 * img[..., 0] + 129.057 * img[..., 1] + 25.064 * img[..., 2]) / 256.
    else:
        return 16. + (64.738 * img[0] + 129.057 * img[1] + 25.064 * img[2]) / 256.


def denormalize(img):
    img = img.mul(255.0).clamp(0.0, 255.0)
    return img


def calc_psnr(img1, img2, max=255.0):
    return 10. * ((max ** 2) / ((img1 - img2) ** 2).mean()).log10()


class AverageMeter(object):
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


# (port) synthetic HR images and their bicubic LR versions, as prepare.py would store them (uint8, HWC)
def synthetic_pairs(seed, n, scale):
    gen = torch.Generator().manual_seed(seed)
    lrs, hrs = [], []
    yy, xx = torch.meshgrid(torch.arange(HR_SIZE), torch.arange(HR_SIZE), indexing='ij')
    for _ in range(n):
        coarse = torch.rand(1, 3, 4, 4, generator=gen)
        img = 0.6 * F.interpolate(coarse, size=(HR_SIZE, HR_SIZE), mode='bicubic', align_corners=False)[0]
        for _ in range(3):
            y0, x0 = torch.randint(0, HR_SIZE - 16, (2,), generator=gen).tolist()
            h, w = torch.randint(8, 24, (2,), generator=gen).tolist()
            img[:, y0:y0 + h, x0:x0 + w] = torch.rand(3, 1, 1, generator=gen)
        period = int(torch.randint(3, 8, (), generator=gen))
        stripes = ((xx + yy) // period % 2).float()
        img = img + 0.25 * stripes * (yy > HR_SIZE // 2).float()
        hr = img.clamp(0, 1).unsqueeze(0)
        lr = F.interpolate(hr, scale_factor=1 / scale, mode='bicubic', align_corners=False, antialias=True)
        hrs.append((hr[0].permute(1, 2, 0) * 255).round().byte().numpy())
        lrs.append((lr[0].clamp(0, 1).permute(1, 2, 0) * 255).round().byte().numpy())
    return lrs, hrs


# datasets.py
class TrainDataset(Dataset):
    def __init__(self, h5_file, patch_size, scale, bug=None):
        super(TrainDataset, self).__init__()
        self.h5_file = h5_file  # (port) the (lr, hr) lists themselves
        self.patch_size = patch_size
        self.scale = scale
        self.bug = bug

    @staticmethod
    def random_crop(lr, hr, size, scale):
        lr_left = random.randint(0, lr.shape[1] - size)
        lr_right = lr_left + size
        lr_top = random.randint(0, lr.shape[0] - size)
        lr_bottom = lr_top + size
        hr_left = lr_left * scale
        hr_right = lr_right * scale
        hr_top = lr_top * scale
        hr_bottom = lr_bottom * scale
        lr = lr[lr_top:lr_bottom, lr_left:lr_right]
        hr = hr[hr_top:hr_bottom, hr_left:hr_right]
        return lr, hr

    @staticmethod
    def random_horizontal_flip(lr, hr, bug=None):
        if random.random() < 0.5:
            lr = lr[:, ::-1, :].copy()
            if bug != "hflip_lr_only":
                hr = hr[:, ::-1, :].copy()
        return lr, hr

    @staticmethod
    def random_vertical_flip(lr, hr):
        if random.random() < 0.5:
            lr = lr[::-1, :, :].copy()
            hr = hr[::-1, :, :].copy()
        return lr, hr

    @staticmethod
    def random_rotate_90(lr, hr):
        if random.random() < 0.5:
            lr = np.rot90(lr, axes=(1, 0)).copy()
            hr = np.rot90(hr, axes=(1, 0)).copy()
        return lr, hr

    def __getitem__(self, idx):
        f = self.h5_file
        lr = f['lr'][idx]
        hr = f['hr'][idx]
        lr, hr = self.random_crop(lr, hr, self.patch_size, self.scale)
        lr, hr = self.random_horizontal_flip(lr, hr, self.bug)
        lr, hr = self.random_vertical_flip(lr, hr)
        lr, hr = self.random_rotate_90(lr, hr)
        lr = lr.astype(np.float32).transpose([2, 0, 1]) / 255.0
        hr = hr.astype(np.float32).transpose([2, 0, 1]) / 255.0
        return lr, hr

    def __len__(self):
        return len(self.h5_file['lr'])


class EvalDataset(Dataset):
    def __init__(self, h5_file):
        super(EvalDataset, self).__init__()
        self.h5_file = h5_file

    def __getitem__(self, idx):
        f = self.h5_file
        lr = f['lr'][idx].astype(np.float32).transpose([2, 0, 1]) / 255.0
        hr = f['hr'][idx].astype(np.float32).transpose([2, 0, 1]) / 255.0
        return lr, hr

    def __len__(self):
        return len(self.h5_file['lr'])


class Args:
    num_features = 16  # (port) 64
    growth_rate = 16  # (port) 64
    num_blocks = 3  # (port) 16
    num_layers = 3  # (port) 8
    scale = 4
    patch_size = 8  # (port) 32
    lr = 1e-3  # (port) 1e-4
    batch_size = 16
    num_epochs = 10  # (port) 800
    num_workers = 0


def _build(seed, bug=None):
    args = Args()
    device = torch.device('cpu')
    random.seed(seed)
    torch.manual_seed(seed)

    model = RDN(scale_factor=args.scale,
                num_channels=3,
                num_features=args.num_features,
                growth_rate=args.growth_rate,
                num_blocks=args.num_blocks,
                num_layers=args.num_layers).to(device)

    criterion = nn.L1Loss()
    optimizer = optim.Adam(model.parameters(), lr=args.lr)

    lrs, hrs = synthetic_pairs(seed, 64, args.scale)
    train_dataset = TrainDataset({'lr': lrs, 'hr': hrs}, patch_size=args.patch_size, scale=args.scale, bug=bug)
    train_dataloader = DataLoader(dataset=train_dataset,
                                  batch_size=args.batch_size,
                                  shuffle=True,
                                  num_workers=args.num_workers,
                                  generator=torch.Generator().manual_seed(seed))
    elrs, ehrs = synthetic_pairs(seed + 1000, 3, args.scale)
    eval_dataset = EvalDataset({'lr': elrs, 'hr': ehrs})
    eval_dataloader = DataLoader(dataset=eval_dataset, batch_size=1)

    state = {"epoch": -1, "it": iter(())}

    def start_epoch():
        state["epoch"] += 1
        epoch = state["epoch"]
        for param_group in optimizer.param_groups:
            param_group['lr'] = args.lr * (0.1 ** (epoch // int(args.num_epochs * 0.8)))

        model.train()
        state["epoch_losses"] = AverageMeter()
        state["it"] = iter(train_dataloader)

    def train_step():
        try:
            data = next(state["it"])
        except StopIteration:
            start_epoch()
            data = next(state["it"])
        inputs, labels = data

        inputs = inputs.to(device)
        labels = labels.to(device)

        preds = model(inputs)

        loss = criterion(preds, labels)

        state["epoch_losses"].update(loss.item(), len(inputs))

        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        return loss.detach()

    def eval_fn(m, batch):
        model.eval()
        epoch_psnr = AverageMeter()

        for data in eval_dataloader:
            inputs, labels = data

            inputs = inputs.to(device)
            labels = labels.to(device)

            with torch.no_grad():
                preds = model(inputs)

            preds = convert_rgb_to_y(denormalize(preds.squeeze(0)), dim_order='chw')
            labels = convert_rgb_to_y(denormalize(labels.squeeze(0)), dim_order='chw')

            preds = preds[args.scale:-args.scale, args.scale:-args.scale]
            labels = labels[args.scale:-args.scale, args.scale:-args.scale]

            epoch_psnr.update(calc_psnr(preds, labels), len(inputs))
        model.train()
        return float(epoch_psnr.avg)

    # the Program's batch: the first batch_size training pairs, as the loader crops them (own random state)
    rstate = random.getstate()
    pairs = [train_dataset[i] for i in range(args.batch_size)]
    random.setstate(rstate)
    batch = (torch.from_numpy(np.stack([p[0] for p in pairs])), torch.from_numpy(np.stack([p[1] for p in pairs])))

    return Program(name="rdnpytorch_x4", model=model, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the horizontal flip applied to the LR crop only: half the pairs are mirror images of each other (classic
    # paired-augmentation slip).
    Bug("hflip_lr_only", functools.partial(_build, bug="hflip_lr_only"), "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() between backward and step: every step applies a zero gradient (classic).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

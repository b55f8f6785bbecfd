"""U-Net (Ronneberger et al.) for binary segmentation as trained by the repository's ``pytorch_run.py``: the
``U_Net`` of ``Models.py`` (double conv-BN-ReLU blocks, max-pool encoder, upsample + conv decoder with concatenated
skips, 1x1 output logits), ``calc_loss`` of ``losses.py`` (0.5 * BCE-with-logits + 0.5 * soft Dice on the sigmoid),
Adam at lr 1e-3 with a ``CosineAnnealingLR`` stepped by epoch index (``scheduler.step(i)``), batch 4, a 15% validation
split by ``SubsetRandomSampler``, and the dataset's paired random transforms (image and mask rotated alike by
re-seeding ``random`` and ``torch`` with one seed before each of the two transform pipelines).

Source: https://github.com/bigmb/Unet-Segmentation-Pytorch-Nest-of-Unets
Commit: f63262de13dc7a31f426e3ac6cd22eafdbd60131
Files: pytorch_run.py, Models.py (``conv_block``, ``up_conv``, ``U_Net``), losses.py (``dice_loss``, ``calc_loss``),
Data_Loader.py (``Images_Dataset_folder``), Metrics.py (``dice_coeff``)
License: MIT (Copyright (c) 2019 Malav Bateriwala; full text in
LICENSES/bigmb-Unet-Segmentation-Pytorch-Nest-of-Unets.txt)
Domain: semantic segmentation (binary U-Net, BCE + Dice, paired image/mask augmentation)

Kept as written: ``conv_block``, ``up_conv``, ``U_Net`` (no final sigmoid), ``dice_loss``, ``calc_loss``, the
dataset's ``__getitem__`` (a numpy seed, then ``random.seed`` + ``torch.manual_seed`` before the image pipeline and
again before the mask pipeline), ``batch_size = 4``, ``valid_size = 0.15``, ``epoch = 15``, the shuffled index split
with ``random_seed = random.randint(1, 100)``, ``SubsetRandomSampler`` loaders, ``Adam(lr=0.001)``,
``CosineAnnealingLR(opt, int(1e10), eta_min=1e-5)`` with ``scheduler.step(i)`` and ``get_lr()`` at each epoch's start,
the loop body (``model_test.train()`` per epoch, zero_grad, forward, ``calc_loss``, backward, step) and the
validation pass (``model_test.eval()``, the bare ``torch.no_grad()`` statement, ``calc_loss`` summed per example).

Deviations from the original:
- the image folders are not here: synthetic 40x40 RGB images made from ``seed`` (a noisy textured background with
  2-3 discs of a brighter random colour; the mask is the discs), 40 pairs; the PIL images become [H, W, C] uint8
  arrays and the transforms are written out in plain torch: ``CenterCrop(96) -> CenterCrop(32)``,
  ``RandomRotation((-10, 10))`` (the angle drawn from torch's global generator as torchvision does, nearest
  interpolation, fill 0), ``ColorJitter(0.4, 0.4, 0.4)`` (brightness, contrast, saturation in that fixed order),
  ``ToTensor``, ``Normalize(0.5, 0.5)``; for the mask ``Grayscale`` + ``ToTensor``;
- sizes for 2 CPU cores: the hard-coded ``n1 = 64`` -> 4 (filters 4..64), 32x32 crops;
  ``num_workers 4 -> 0``; no GPU (``device`` is the CPU);
- ``torchsummary``, the output folders, ``input_images``, the per-epoch prediction images, ``plt.imsave``,
  ``LayerActivations`` / ``plot_kernels``, the checkpoint saving / early-stopping bookkeeping and the test-folder
  evaluation are left out; ``Metrics.dice_coeff``'s ``np.bool`` (removed from numpy) becomes ``bool``;
- the epoch loop is unrolled: one ``train_step`` is one batch (``scheduler.step(i)`` and ``model_test.train()`` at an
  epoch's start, the validation pass at its end; past the 15 epochs the index stays 14); ``eval_fn`` is
  ``dice_coeff`` of the thresholded sigmoid prediction against the mask on a given batch, in eval mode;
- blank lines inside ``U_Net.forward``, ``dice_loss``, ``calc_loss``, ``dice_coeff`` and their multi-line docstrings
  are condensed (to keep the module short); the code lines are unchanged;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402  (the original's code style is kept as written)

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
import torch.utils.data
from torch.utils.data.sampler import SubsetRandomSampler

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

N_PAIRS, RAW, CROP, N1 = 40, 40, 32, 4  # (port) synthetic data and sizes


# ---- Models.py ---------------------------------------------------------------------------------------------------

class conv_block(nn.Module):
    """Convolution Block"""
    def __init__(self, in_ch, out_ch):
        super(conv_block, self).__init__()

        self.conv = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=1, padding=1, bias=True),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_ch, out_ch, kernel_size=3, stride=1, padding=1, bias=True),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True))

    def forward(self, x):
        x = self.conv(x)
        return x


class up_conv(nn.Module):
    """Up Convolution Block"""
    def __init__(self, in_ch, out_ch):
        super(up_conv, self).__init__()
        self.up = nn.Sequential(
            nn.Upsample(scale_factor=2),
            nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=1, padding=1, bias=True),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True)
        )

    def forward(self, x):
        x = self.up(x)
        return x


class U_Net(nn.Module):
    """
    UNet - Basic Implementation
    Paper : https://arxiv.org/abs/1505.04597
    """
    def __init__(self, in_ch=3, out_ch=1, bug=None):
        super(U_Net, self).__init__()
        self.bug = bug

        n1 = N1  # (port) 64
        filters = [n1, n1 * 2, n1 * 4, n1 * 8, n1 * 16]

        self.Maxpool1 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.Maxpool2 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.Maxpool3 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.Maxpool4 = nn.MaxPool2d(kernel_size=2, stride=2)

        self.Conv1 = conv_block(in_ch, filters[0])
        self.Conv2 = conv_block(filters[0], filters[1])
        self.Conv3 = conv_block(filters[1], filters[2])
        self.Conv4 = conv_block(filters[2], filters[3])
        self.Conv5 = conv_block(filters[3], filters[4])

        self.Up5 = up_conv(filters[4], filters[3])
        self.Up_conv5 = conv_block(filters[4], filters[3])

        self.Up4 = up_conv(filters[3], filters[2])
        self.Up_conv4 = conv_block(filters[3], filters[2])

        self.Up3 = up_conv(filters[2], filters[1])
        self.Up_conv3 = conv_block(filters[2], filters[1])

        self.Up2 = up_conv(filters[1], filters[0])
        self.Up_conv2 = conv_block(filters[1], filters[0])

        self.Conv = nn.Conv2d(filters[0], out_ch, kernel_size=1, stride=1, padding=0)

        self.active = torch.nn.Sigmoid()  # (port) commented out upstream; switched on by a bug variant

    def forward(self, x):
        e1 = self.Conv1(x)
        e2 = self.Maxpool1(e1)
        e2 = self.Conv2(e2)
        e3 = self.Maxpool2(e2)
        e3 = self.Conv3(e3)
        e4 = self.Maxpool3(e3)
        e4 = self.Conv4(e4)
        e5 = self.Maxpool4(e4)
        e5 = self.Conv5(e5)
        d5 = self.Up5(e5)
        d5 = torch.cat((e4, d5), dim=1)
        d5 = self.Up_conv5(d5)
        d4 = self.Up4(d5)
        d4 = torch.cat((e3, d4), dim=1)
        d4 = self.Up_conv4(d4)
        d3 = self.Up3(d4)
        d3 = torch.cat((e2, d3), dim=1)
        d3 = self.Up_conv3(d3)
        d2 = self.Up2(d3)
        d2 = torch.cat((e1, d2), dim=1)
        d2 = self.Up_conv2(d2)
        out = self.Conv(d2)
        if self.bug == "sigmoid_in_forward":
            out = self.active(out)
        return out


# ---- losses.py ---------------------------------------------------------------------------------------------------

def dice_loss(prediction, target):
    """Calculating the dice loss (docstring: args prediction, target; output dice_loss)"""
    smooth = 1.0
    i_flat = prediction.view(-1)
    t_flat = target.view(-1)
    intersection = (i_flat * t_flat).sum()

    return 1 - ((2. * intersection + smooth) / (i_flat.sum() + t_flat.sum() + smooth))


def calc_loss(prediction, target, bce_weight=0.5):
    """Calculating the loss and metrics (docstring: args prediction, target, bce_weight = 0.5; output loss)"""
    bce = F.binary_cross_entropy_with_logits(prediction, target)
    prediction = F.sigmoid(prediction)
    dice = dice_loss(prediction, target)
    loss = bce * bce_weight + dice * (1 - bce_weight)
    return loss


# ---- Metrics.py --------------------------------------------------------------------------------------------------

def dice_coeff(im1, im2, empty_score=1.0):
    """Calculates the dice coefficient for the images"""
    im1 = np.asarray(im1).astype(bool)  # (port) np.bool
    im2 = np.asarray(im2).astype(bool)
    if im1.shape != im2.shape:
        raise ValueError("Shape mismatch: im1 and im2 must have the same shape.")
    im1 = im1 > 0.5
    im2 = im2 > 0.5
    im_sum = im1.sum() + im2.sum()
    if im_sum == 0:
        return empty_score
    # Compute Dice coefficient
    intersection = np.logical_and(im1, im2)
    return 2. * intersection.sum() / im_sum


# ---- (port) torchvision's transforms written out on [C, H, W] float tensors in [0, 1] ----------------------------

def _center_crop(img, size):
    top, left = (img.shape[1] - size) // 2, (img.shape[2] - size) // 2
    return img[:, top:top + size, left:left + size]


def _random_rotation(img, degrees):
    angle = float(torch.empty(1).uniform_(float(degrees[0]), float(degrees[1])).item())  # as torchvision draws it
    a = math.radians(angle)
    theta = torch.tensor([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0]])[None]
    grid = F.affine_grid(theta, [1, *img.shape], align_corners=False)
    return F.grid_sample(img[None], grid, mode="nearest", padding_mode="zeros", align_corners=False)[0]


def _color_jitter(img, b, c, s):
    fb, fc, fs = (float(torch.empty(1).uniform_(1 - v, 1 + v)) for v in (b, c, s))
    img = (img * fb).clamp(0, 1)
    gray = 0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2]
    img = ((img - gray.mean()) * fc + gray.mean()).clamp(0, 1)
    gray = (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None]
    return ((img - gray) * fs + gray).clamp(0, 1)


def _tx(i1):
    img = _random_rotation(_center_crop(i1, CROP), (-10, 10))
    img = _color_jitter(img, 0.4, 0.4, 0.4)
    return (img - 0.5) / 0.5  # Normalize(mean=[0.5] * 3, std=[0.5] * 3)


def _lx(l1):
    return _random_rotation(_center_crop(l1, CROP), (-10, 10))[:1]  # Grayscale of a 0/1 mask


def _synthetic_pairs(seed):
    """(port) Textured backgrounds with 2-3 bright discs; the mask is the discs."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:RAW, 0:RAW]
    images, labels = [], []
    for _ in range(N_PAIRS):
        mask = np.zeros((RAW, RAW), dtype=bool)
        for _ in range(rng.randint(2, 4)):
            cy, cx, r = rng.uniform(8, RAW - 8), rng.uniform(8, RAW - 8), rng.uniform(3, 7)
            mask |= (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        img = rng.uniform(0.0, 0.45, (RAW, RAW, 3))
        img[mask] = rng.uniform(0.5, 1.0, 3) * 0.6 + 0.4 * rng.uniform(0.3, 1.0, (int(mask.sum()), 3))
        images.append(torch.tensor(img, dtype=torch.float32).permute(2, 0, 1))
        labels.append(torch.tensor(mask, dtype=torch.float32)[None].repeat(3, 1, 1))
    return images, labels


# ---- Data_Loader.py ----------------------------------------------------------------------------------------------

class Images_Dataset_folder(torch.utils.data.Dataset):
    def __init__(self, images, labels, bug=None):
        self.images, self.labels = images, labels  # (port) instead of the sorted folder listings
        self.tx, self.lx, self.bug = _tx, _lx, bug

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        i1 = self.images[i]
        l1 = self.labels[i]

        seed=np.random.randint(0,2**32) # make a seed with numpy generator

        # apply this seed to img tranfsorms
        random.seed(seed)
        torch.manual_seed(seed)
        img = self.tx(i1)

        # apply this seed to target/label tranfsorms
        if self.bug != "mask_transform_not_reseeded":
            random.seed(seed)
            torch.manual_seed(seed)
        label = self.lx(l1)

        return img, label


# ---- pytorch_run.py ----------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = torch.device("cpu")
    batch_size = 4
    valid_size = 0.15
    epoch = 15
    random_seed = random.randint(1, 100)
    shuffle = True
    num_workers = 0  # (port) 4

    model_test = U_Net(3, 1, bug=bug)
    model_test.to(device)
    Training_Data = Images_Dataset_folder(*_synthetic_pairs(seed), bug=bug)

    num_train = len(Training_Data)
    indices = list(range(num_train))
    split = int(np.floor(valid_size * num_train))
    if shuffle:
        np.random.seed(random_seed)
        np.random.shuffle(indices)
    train_idx, valid_idx = indices[split:], indices[:split]
    train_sampler = SubsetRandomSampler(train_idx)
    valid_sampler = SubsetRandomSampler(valid_idx)
    train_loader = torch.utils.data.DataLoader(Training_Data, batch_size=batch_size, sampler=train_sampler,
                                               num_workers=num_workers)
    valid_loader = torch.utils.data.DataLoader(Training_Data, batch_size=batch_size, sampler=valid_sampler,
                                               num_workers=num_workers)

    initial_lr = 0.001
    opt = torch.optim.Adam(model_test.parameters(), lr=initial_lr) # try SGD
    MAX_STEP = int(1e10)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, MAX_STEP, eta_min=1e-5)
    st = {"i": 0, "it": None, "valid_loss": None}
    if bug == "train_mode_set_once":
        model_test.train()

    def train_step():
        if st["it"] is None:  # an epoch starts
            scheduler.step(st["i"])
            scheduler.get_lr()
            if bug != "train_mode_set_once":
                model_test.train()
            st["it"] = iter(train_loader)
        try:
            x, y = next(st["it"])
        except StopIteration:  # the epoch ends: validation, then the next epoch
            st["valid_loss"] = validate()
            st["i"], st["it"] = min(st["i"] + 1, epoch - 1), None  # (port) past epoch 15: the last index again
            return train_step()
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        y_pred = model_test(x)
        lossT = calc_loss(y_pred, y)     # Dice_loss Used
        lossT.backward()
        opt.step()
        return lossT.item()

    def validate():
        valid_loss = 0.0
        model_test.eval()
        torch.no_grad() #to increase the validation process uses less memory
        for x1, y1 in valid_loader:
            x1, y1 = x1.to(device), y1.to(device)
            y_pred1 = model_test(x1)
            lossL = calc_loss(y_pred1, y1)     # Dice_loss Used
            valid_loss += lossL.item() * x1.size(0)
        return valid_loss / len(valid_idx)

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            pred = F.sigmoid(model(batch[0])).numpy()
        model.train(was)
        return float(dice_coeff(pred > 0.5, batch[1].numpy()))

    batch = next(iter(valid_loader))
    return Program(name="nestofunets_unet", model=model_test, batch=batch, loss_fn=calc_loss, optimizer=opt,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic paired-augmentation slip: the re-seeding before the mask pipeline left out, so the mask is rotated by
    # another random angle than its image (the very misalignment the dataset's seed-sharing lines exist to avoid).
    Bug("mask_transform_not_reseeded", functools.partial(_build, bug="mask_transform_not_reseeded"),
        "learning_ledger", ("TASK",)),
    # classic: the sigmoid commented out in U_Net.forward switched back on while calc_loss still applies
    # binary_cross_entropy_with_logits and its own sigmoid: the loss sees probabilities squashed into (0.5, 0.73).
    Bug("sigmoid_in_forward", functools.partial(_build, bug="sigmoid_in_forward"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: model_test.train() called once before the epoch loop instead of at each epoch's start, so after the
    # first validation pass every later epoch trains in eval mode (BatchNorm on running statistics).
    Bug("train_mode_set_once", functools.partial(_build, bug="train_mode_set_once"), "step_probe",
        ("Conv1.conv.1",)),
]

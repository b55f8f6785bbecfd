"""U-Net segmentation of usuyama/pytorch-unet: the repository's ``UNet`` (double 3x3 conv blocks, max-pool down,
bilinear upsample + skip concatenation up, 1x1 head, 6 output channels), trained by the notebook's ``train_model`` on
the repository's own synthetic shapes (``simulation.generate_random_data``: one input image, 6 target masks) with
``calc_loss`` = 0.5 * ``binary_cross_entropy_with_logits`` + 0.5 * ``dice_loss(sigmoid(pred))``, Adam lr 1e-4 and
StepLR(step_size=25, gamma=0.1) stepped at the start of each training phase (as written).

Source: https://github.com/usuyama/pytorch-unet
Commit: a0ec1374e06ca9161c21781302328b074f19391b
Files: pytorch_unet.py, loss.py, simulation.py, pytorch_unet.ipynb (SimDataset, calc_loss, train_model, optimizer)
License: MIT (Copyright (c) 2018 Naoto Usuyama)
Domain: semantic segmentation (multi-label masks, BCE + dice)

Deviations from the original:
- sizes: UNet widths 64/128/256/512 -> 8/16/32/64, images 192x192 -> 48x48, 2000 training images -> 100 (validation
  200 -> 20), batch 25 -> 10;
- ``simulation.py`` draws from the global ``random`` module; here from a ``random.Random(seed)`` instance (same calls);
- torchvision is not available: ``transforms.ToTensor()`` is written out (HWC uint8 -> CHW float in [0, 1]);
- one ``train_step`` is one batch of the notebook's training phase (``optimizer.zero_grad()``, forward and
  ``calc_loss`` under ``torch.set_grad_enabled(True)``, backward, ``optimizer.step()``); the phase's
  ``scheduler.step()`` and ``model.train()`` run when a new epoch starts; ``eval_fn`` is the validation phase's
  loss on a batch (``model.eval()``, no gradients); printing, timing and best-weights copying are left out.
"""
# ruff: noqa: PIE808, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IMG, N_TRAIN, N_VAL, BATCH_SIZE, NUM_CLASS = 48, 100, 20, 10, 6


# ---- pytorch_unet.py -----------------------------------------------------------------------------------------

def double_conv(in_channels, out_channels):
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(out_channels, out_channels, 3, padding=1),
        nn.ReLU(inplace=True)
    )


class UNet(nn.Module):

    def __init__(self, n_class):
        super().__init__()

        self.dconv_down1 = double_conv(3, 8)
        self.dconv_down2 = double_conv(8, 16)
        self.dconv_down3 = double_conv(16, 32)
        self.dconv_down4 = double_conv(32, 64)

        self.maxpool = nn.MaxPool2d(2)
        self.upsample = nn.Upsample(scale_factor=2, mode='bilinear', align_corners=True)

        self.dconv_up3 = double_conv(32 + 64, 32)
        self.dconv_up2 = double_conv(16 + 32, 16)
        self.dconv_up1 = double_conv(16 + 8, 8)

        self.conv_last = nn.Conv2d(8, n_class, 1)

    def forward(self, x):
        conv1 = self.dconv_down1(x)
        x = self.maxpool(conv1)

        conv2 = self.dconv_down2(x)
        x = self.maxpool(conv2)

        conv3 = self.dconv_down3(x)
        x = self.maxpool(conv3)

        x = self.dconv_down4(x)

        x = self.upsample(x)
        x = torch.cat([x, conv3], dim=1)

        x = self.dconv_up3(x)
        x = self.upsample(x)
        x = torch.cat([x, conv2], dim=1)

        x = self.dconv_up2(x)
        x = self.upsample(x)
        x = torch.cat([x, conv1], dim=1)

        x = self.dconv_up1(x)

        out = self.conv_last(x)

        return out


# ---- loss.py -------------------------------------------------------------------------------------------------

def dice_loss(pred, target, smooth = 1.):
    pred = pred.contiguous()
    target = target.contiguous()

    intersection = (pred * target).sum(dim=2).sum(dim=2)

    loss = (1 - ((2. * intersection + smooth) / (pred.sum(dim=2).sum(dim=2) + target.sum(dim=2).sum(dim=2) + smooth)))

    return loss.mean()


# ---- simulation.py (random -> a random.Random instance) ------------------------------------------------------

def generate_random_data(rng, height, width, count):
    x, y = zip(*[generate_img_and_mask(rng, height, width) for i in range(0, count)])

    X = np.asarray(x) * 255
    X = X.repeat(3, axis=1).transpose([0, 2, 3, 1]).astype(np.uint8)
    Y = np.asarray(y)

    return X, Y


def generate_img_and_mask(rng, height, width):
    shape = (height, width)

    triangle_location = get_random_location(rng, *shape)
    circle_location1 = get_random_location(rng, *shape, zoom=0.7)
    circle_location2 = get_random_location(rng, *shape, zoom=0.5)
    mesh_location = get_random_location(rng, *shape)
    square_location = get_random_location(rng, *shape, zoom=0.8)
    plus_location = get_random_location(rng, *shape, zoom=1.2)

    # Create input image
    arr = np.zeros(shape, dtype=bool)
    arr = add_triangle(arr, *triangle_location)
    arr = add_circle(arr, *circle_location1)
    arr = add_circle(arr, *circle_location2, fill=True)
    arr = add_mesh_square(arr, *mesh_location)
    arr = add_filled_square(arr, *square_location)
    arr = add_plus(arr, *plus_location)
    arr = np.reshape(arr, (1, height, width)).astype(np.float32)

    # Create target masks
    masks = np.asarray([
        add_filled_square(np.zeros(shape, dtype=bool), *square_location),
        add_circle(np.zeros(shape, dtype=bool), *circle_location2, fill=True),
        add_triangle(np.zeros(shape, dtype=bool), *triangle_location),
        add_circle(np.zeros(shape, dtype=bool), *circle_location1),
        add_filled_square(np.zeros(shape, dtype=bool), *mesh_location),
        # add_mesh_square(np.zeros(shape, dtype=bool), *mesh_location),
        add_plus(np.zeros(shape, dtype=bool), *plus_location)
    ]).astype(np.float32)

    return arr, masks


def add_filled_square(arr, x, y, size):
    s = int(size / 2)

    xx, yy = np.mgrid[:arr.shape[0], :arr.shape[1]]

    return np.logical_or(arr, logical_and([xx > x - s, xx < x + s, yy > y - s, yy < y + s]))


def logical_and(arrays):
    new_array = np.ones(arrays[0].shape, dtype=bool)
    for a in arrays:
        new_array = np.logical_and(new_array, a)

    return new_array


def add_mesh_square(arr, x, y, size):
    s = int(size / 2)

    xx, yy = np.mgrid[:arr.shape[0], :arr.shape[1]]

    return np.logical_or(arr, logical_and([xx > x - s, xx < x + s, xx % 2 == 1, yy > y - s, yy < y + s, yy % 2 == 1]))


def add_triangle(arr, x, y, size):
    s = int(size / 2)

    triangle = np.tril(np.ones((size, size), dtype=bool))

    arr[x-s:x-s+triangle.shape[0],y-s:y-s+triangle.shape[1]] = triangle

    return arr


def add_circle(arr, x, y, size, fill=False):
    xx, yy = np.mgrid[:arr.shape[0], :arr.shape[1]]
    circle = np.sqrt((xx - x) ** 2 + (yy - y) ** 2)
    new_arr = np.logical_or(arr, np.logical_and(circle < size, circle >= size * 0.7 if not fill else True))

    return new_arr


def add_plus(arr, x, y, size):
    s = int(size / 2)
    arr[x-1:x+1,y-s:y+s] = True
    arr[x-s:x+s,y-1:y+1] = True

    return arr


def get_random_location(rng, width, height, zoom=1.0):
    x = int(width * rng.uniform(0.1, 0.9))
    y = int(height * rng.uniform(0.1, 0.9))

    size = int(min(width, height) * rng.uniform(0.06, 0.12) * zoom)

    return (x, y, size)


# ---- pytorch_unet.ipynb --------------------------------------------------------------------------------------

def to_tensor(pic):
    """transforms.ToTensor() on an HWC uint8 array: CHW float32 in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(pic.transpose((2, 0, 1)))).float().div(255)


class SimDataset(Dataset):
    def __init__(self, rng, count, transform=None):
        self.input_images, self.target_masks = generate_random_data(rng, IMG, IMG, count=count)
        self.transform = transform

    def __len__(self):
        return len(self.input_images)

    def __getitem__(self, idx):
        image = self.input_images[idx]
        mask = self.target_masks[idx]
        if self.transform:
            image = self.transform(image)

        return [image, mask]


def calc_loss(pred, target, metrics, bce_weight=0.5, bug=None):
    if bug == "sigmoid_before_bce_logits":
        pred = F.sigmoid(pred)
    bce = F.binary_cross_entropy_with_logits(pred, target)

    if bug != "sigmoid_before_bce_logits":
        pred = F.sigmoid(pred)
    dice = dice_loss(pred, target)

    loss = bce * bce_weight + dice * (1 - bce_weight)

    metrics['bce'] += bce.data.cpu().numpy() * target.size(0)
    metrics['dice'] += dice.data.cpu().numpy() * target.size(0)
    metrics['loss'] += loss.data.cpu().numpy() * target.size(0)

    return loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    train_set = SimDataset(rng, N_TRAIN, transform=to_tensor)
    val_set = SimDataset(rng, N_VAL, transform=to_tensor)
    dataloaders = {
        'train': DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
                            generator=torch.Generator().manual_seed(seed)),
        'val': DataLoader(val_set, batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
                          generator=torch.Generator().manual_seed(seed + 1)),
    }

    model = UNet(NUM_CLASS)

    # Observe that all parameters are being optimized
    optimizer_ft = optim.Adam(model.parameters(), lr=1e-4)
    exp_lr_scheduler = lr_scheduler.StepLR(optimizer_ft, step_size=25, gamma=0.1)

    state = {"it": None, "metrics": defaultdict(float)}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):  # the training phase of a new epoch
            exp_lr_scheduler.step()
            model.train()  # Set model to training mode
            state["it"], state["metrics"] = iter(dataloaders['train']), defaultdict(float)
            return next(state["it"])

    def train_step():
        inputs, labels = next_batch()

        # zero the parameter gradients
        if bug != "no_zero_grad":
            optimizer_ft.zero_grad()

        # forward
        # track history if only in train
        with torch.set_grad_enabled(True):
            outputs = model(inputs)
            loss = calc_loss(outputs, labels, state["metrics"], bug=bug)

            # backward + optimize only if in training phase
            loss.backward()
            optimizer_ft.step()
        return loss.detach()

    def eval_fn(model, batch):
        inputs, labels = batch
        model.eval()   # Set model to evaluate mode
        with torch.set_grad_enabled(False):
            outputs = model(inputs)
            loss = calc_loss(outputs, labels, defaultdict(float), bug=bug)
        return float(loss)

    first = next(iter(DataLoader(train_set, batch_size=BATCH_SIZE)))
    return Program(name="usuyama_unet", model=model, batch=(first[0], first[1]),
                   loss_fn=lambda outputs, targets: calc_loss(outputs, targets, defaultdict(float), bug=bug),
                   optimizer=optimizer_ft, train_step=train_step, eval_fn=eval_fn, loader=dataloaders['train'])


build = functools.partial(_build)

BUGS = [
    # F.sigmoid moved above binary_cross_entropy_with_logits: BCE gets probabilities as logits (a double sigmoid).
    Bug("sigmoid_before_bce_logits", functools.partial(_build, bug="sigmoid_before_bce_logits"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped: every step adds this batch's gradient to all the previous ones.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", ("dconv_down1.0.weight",)),
]

"""Carvana UNET of aladdinpersson/Machine-Learning-Collection: ``semantic_segmentation_unet/model.py``'s ``UNET``
(four down ``DoubleConv`` stages of conv-BN-ReLU twice with max pooling, a bottleneck, four ``ConvTranspose2d`` up
steps each concatenated with its skip connection (resized when the shapes differ) and a ``DoubleConv``, a 1x1 final
conv to one logit per pixel), trained by ``train.py``'s ``train_fn``: ``BCEWithLogitsLoss`` on the mask,
Adam(lr 1e-4), ``torch.cuda.amp.autocast`` + ``GradScaler`` (both disable themselves without CUDA, as here),
``zero_grad`` / ``scaler.scale(loss).backward()`` / ``scaler.step`` / ``scaler.update`` per batch;
``utils.check_accuracy`` (``eval()``, pixel accuracy and dice of the thresholded sigmoid, then ``model.train()``)
after each epoch. ``dataset.py``'s ``CarvanaDataset`` maps mask value 255 to 1 and applies one albumentations
``Compose`` to image and mask together (Resize, Rotate(limit 35, p 1), HorizontalFlip(0.5), VerticalFlip(0.1),
Normalize(mean 0, std 1, max 255), ToTensorV2).

Source: https://github.com/aladdinpersson/Machine-Learning-Collection
Commit: 65b8c8049560b19ace11ef754cb4dbe5aa415296
Files: ML/Pytorch/image_segmentation/semantic_segmentation_unet/train.py, model.py, dataset.py, utils.py
License: MIT (Copyright (c) 2020 Aladdin Persson; LICENSES/aladdinpersson-Machine-Learning-Collection.txt: the
repository snapshot was too large to fetch, so the text is the standard MIT text with the copyright line that copies
of this repository's code quote)
Domain: semantic segmentation (binary, UNet with transposed-conv decoder)

Deviations from the original:
- sizes: ``features`` [64, 128, 256, 512] -> [8, 16, 32, 64]; ``IMAGE_HEIGHT`` x ``IMAGE_WIDTH`` 160 x 240 ->
  32 x 48; ``BATCH_SIZE`` 16 -> 8; 160 training images, 16 validation images;
- ``LOAD_MODEL = True`` would load ``my_checkpoint.pth.tar`` that a first run saved: the port starts from fresh
  weights (the first run), and ``save_checkpoint`` / ``save_predictions_as_imgs`` (files) and the tqdm loop and
  prints are dropped; ``check_accuracy`` returns its dice instead of printing it;
- data: the Carvana images and GIF masks are replaced by synthetic cars made from ``seed``: a coloured ellipse with
  a darker band (the car) on a smooth noisy background, the mask 255 inside the ellipse, as ``convert("L")`` gives;
  albumentations is not available, so the transforms are written out in plain torch on both image and mask:
  Resize is a no-op (the images are made at that size), Rotate by a uniform angle in [-35, 35] degrees with
  ``grid_sample`` (bilinear for the image, nearest for the mask, reflection padding for ``BORDER_REFLECT_101``),
  the flips, Normalize (divide by 255) and ToTensorV2 (HWC -> CHW); DataLoader without workers or pinned memory;
- one ``train_step`` is one batch of ``train_fn``; when the loader is exhausted the epoch ends as in ``main``:
  ``check_accuracy`` on the validation loader (which puts the model back in train mode); ``eval_fn`` is
  ``check_accuracy``'s dice on a batch.
"""
# ruff: noqa: UP008, B006, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# Hyperparameters etc.
LEARNING_RATE = 1e-4
DEVICE = "cpu"
BATCH_SIZE = 8
NUM_EPOCHS = 3
IMAGE_HEIGHT = 32  # 160 in train.py (1280 originally)
IMAGE_WIDTH = 48  # 240 in train.py (1918 originally)
FEATURES = [8, 16, 32, 64]
N_TRAIN, N_VAL = 160, 16


# ---- model.py ------------------------------------------------------------------------------------------------

class TF:
    """torchvision.transforms.functional.resize on a tensor (bilinear, the default), written out."""

    @staticmethod
    def resize(x, size):
        return F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False, antialias=True)


class DoubleConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(DoubleConv, self).__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, 1, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.conv(x)

class UNET(nn.Module):
    def __init__(
            self, in_channels=3, out_channels=1, features=[64, 128, 256, 512],
    ):
        super(UNET, self).__init__()
        self.ups = nn.ModuleList()
        self.downs = nn.ModuleList()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)

        # Down part of UNET
        for feature in features:
            self.downs.append(DoubleConv(in_channels, feature))
            in_channels = feature

        # Up part of UNET
        for feature in reversed(features):
            self.ups.append(
                nn.ConvTranspose2d(
                    feature*2, feature, kernel_size=2, stride=2,
                )
            )
            self.ups.append(DoubleConv(feature*2, feature))

        self.bottleneck = DoubleConv(features[-1], features[-1]*2)
        self.final_conv = nn.Conv2d(features[0], out_channels, kernel_size=1)

    def forward(self, x):
        skip_connections = []

        for down in self.downs:
            x = down(x)
            skip_connections.append(x)
            x = self.pool(x)

        x = self.bottleneck(x)
        skip_connections = skip_connections[::-1]

        for idx in range(0, len(self.ups), 2):
            x = self.ups[idx](x)
            skip_connection = skip_connections[idx//2]

            if x.shape != skip_connection.shape:
                x = TF.resize(x, size=skip_connection.shape[2:])

            concat_skip = torch.cat((skip_connection, x), dim=1)
            x = self.ups[idx+1](concat_skip)

        return self.final_conv(x)


# ---- data: synthetic cars, and the albumentations pipelines in plain torch -----------------------------------

def synthetic_cars(gen, n):
    """uint8-range HWC RGB images and L-mode masks (0 or 255) as numpy arrays, as ``np.array(Image.open(...))``."""
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, IMAGE_HEIGHT), torch.linspace(-1, 1, IMAGE_WIDTH), indexing="ij")
    images, masks = [], []
    for _ in range(n):
        cy, cx = (float(v) for v in (torch.rand(2, generator=gen) - 0.5) * 0.6)
        ry, rx = (float(v) for v in torch.rand(2, generator=gen) * 0.25 + torch.tensor([0.3, 0.35]))
        inside = (((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2) <= 1.0
        colour = torch.rand(3, generator=gen) * 0.5 + 0.4
        background = 0.3 + 0.15 * F.interpolate(torch.randn(1, 3, 4, 6, generator=gen), size=(IMAGE_HEIGHT, IMAGE_WIDTH),
                                                 mode="bilinear", align_corners=False)[0]
        band = ((yy - cy).abs() < 0.08 * ry / 0.3).float()
        car = colour[:, None, None] * (1.0 - 0.4 * band)
        img = torch.where(inside[None], car, background) + 0.04 * torch.randn(3, IMAGE_HEIGHT, IMAGE_WIDTH, generator=gen)
        images.append((img.clamp(0, 1) * 255).round().permute(1, 2, 0).numpy().astype(np.uint8))
        masks.append(np.where(inside.numpy(), 255, 0).astype(np.float32))
    return images, masks


def _rotate(x, angle_deg, mode):
    theta = math.radians(angle_deg)
    c, s = math.cos(theta), math.sin(theta)
    h, w = x.shape[-2:]
    mat = torch.tensor([[c, -s * h / w, 0.0], [s * w / h, c, 0.0]], dtype=torch.float32)[None]
    grid = F.affine_grid(mat, [1, x.shape[0], h, w], align_corners=False)
    return F.grid_sample(x[None], grid, mode=mode, padding_mode="reflection", align_corners=False)[0]


class Compose:
    """The albumentations ``A.Compose`` of ``train.py`` (``train=True``) or its ``val_transforms``, on
    ``image=`` (HWC uint8) and ``mask=`` (HW float) together."""

    def __init__(self, train, gen):
        self.train = train
        self.gen = gen

    def __call__(self, image, mask):
        image = torch.from_numpy(image).float().permute(2, 0, 1)  # ToTensorV2 moves HWC -> CHW at the end
        mask = torch.from_numpy(mask)[None]
        if self.train:
            angle = float(torch.empty(1).uniform_(-35, 35, generator=self.gen))  # A.Rotate(limit=35, p=1.0)
            image, mask = _rotate(image, angle, "bilinear"), _rotate(mask, angle, "nearest")
            if float(torch.rand(1, generator=self.gen)) < 0.5:  # A.HorizontalFlip(p=0.5)
                image, mask = image.flip(-1), mask.flip(-1)
            if float(torch.rand(1, generator=self.gen)) < 0.1:  # A.VerticalFlip(p=0.1)
                image, mask = image.flip(-2), mask.flip(-2)
        image = (image / 255.0 - 0.0) / 1.0  # A.Normalize(mean=0, std=1, max_pixel_value=255.0)
        return {"image": image, "mask": mask[0]}


# ---- dataset.py ----------------------------------------------------------------------------------------------

class CarvanaDataset(Dataset):
    def __init__(self, images, masks, transform=None, bug=None):
        self.images = images  # the decoded files stand in for ``os.listdir(image_dir)`` + ``Image.open``
        self.masks = masks
        self.transform = transform
        self.bug = bug

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        image = np.array(self.images[index])
        if self.bug == "masks_listed_separately":
            # a second os.listdir(mask_dir) indexed by the image's position: the two listings' orders differ
            mask = np.array(self.masks[(index * 7 + 3) % len(self.masks)], dtype=np.float32)
        else:
            mask = np.array(self.masks[index], dtype=np.float32)
        mask[mask == 255.0] = 1.0

        if self.transform is not None:
            if self.bug == "augment_image_only":
                augmentations = self.transform(image=image, mask=mask)
                image = augmentations["image"]
                mask = torch.from_numpy(mask)
            else:
                augmentations = self.transform(image=image, mask=mask)
                image = augmentations["image"]
                mask = augmentations["mask"]

        return image, mask


# ---- utils.py + train.py -------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_images, train_masks = synthetic_cars(gen, N_TRAIN)
    val_images, val_masks = synthetic_cars(gen, N_VAL)
    aug_gen = torch.Generator().manual_seed(seed + 1)
    train_ds = CarvanaDataset(train_images, train_masks, transform=Compose(True, aug_gen), bug=bug)
    val_ds = CarvanaDataset(val_images, val_masks, transform=Compose(False, aug_gen))
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))
    val_loader = DataLoader(val_ds, batch_size=BATCH_SIZE, shuffle=False)

    model = UNET(in_channels=3, out_channels=1, features=FEATURES).to(DEVICE)
    loss_fn = nn.BCEWithLogitsLoss()
    optimizer = optim.Adam(model.parameters(), lr=LEARNING_RATE)

    def check_accuracy(loader, model, device="cuda"):
        num_correct = 0
        num_pixels = 0
        dice_score = 0
        model.eval()

        with torch.no_grad():
            for x, y in loader:
                x = x.to(device)
                y = y.to(device).unsqueeze(1)
                preds = torch.sigmoid(model(x))
                preds = (preds > 0.5).float()
                num_correct += (preds == y).sum()
                num_pixels += torch.numel(preds)
                dice_score += (2 * (preds * y).sum()) / (
                    (preds + y).sum() + 1e-8
                )

        if bug != "check_accuracy_leaves_eval":
            model.train()
        return float(dice_score / len(loader))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available ... Disabling" (the CPU run of the script)
        scaler = torch.cuda.amp.GradScaler()

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main(): check accuracy
                check_accuracy(val_loader, model, device=DEVICE)
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        data, targets = next_batch()
        data = data.to(device=DEVICE)
        targets = targets.float().unsqueeze(1).to(device=DEVICE)

        # forward
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.cuda.amp.autocast():
                predictions = model(data)
                loss = loss_fn(predictions, targets)

        # backward
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    def eval_fn(model, batch):
        x, y = batch
        return check_accuracy([(x, y)], model, device=DEVICE)

    first = next(iter(DataLoader(train_ds, batch_size=BATCH_SIZE)))
    return Program(name="aladdinml_unet", model=model, batch=(first[0], first[1].float().unsqueeze(1)),
                   loss_fn=loss_fn, optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=train_loader)


build = functools.partial(_build)

BUGS = [
    # masks listed by their own os.listdir and paired by position with the images: each image gets another car's
    # mask, so the target no longer follows from the input.
    Bug("masks_listed_separately", functools.partial(_build, bug="masks_listed_separately"), "learning_ledger",
        ("TASK",)),
    # the augmentation's output mask discarded: the image is rotated and flipped, the target mask is not.
    Bug("augment_image_only", functools.partial(_build, bug="augment_image_only"), "learning_ledger", ("TASK",)),
    # check_accuracy without its closing model.train(): after the first epoch the BatchNorm layers train on their
    # running statistics.
    Bug("check_accuracy_leaves_eval", functools.partial(_build, bug="check_accuracy_leaves_eval"), "step_probe", (),
        kind="step.eval_mode_not_restored"),
]

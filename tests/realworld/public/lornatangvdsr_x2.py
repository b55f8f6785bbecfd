"""VDSR (Kim, Lee & Lee, "Accurate Image Super-Resolution Using Very Deep Convolutional Networks") from
Lornatang/VDSR-PyTorch: a 20-layer plain CNN (conv + ReLU, 18 ConvReLU trunk blocks, conv to one channel, no biases,
He-style normal init) predicting the residual added to the bicubic-upscaled Y channel; the summed MSE against the HR
patch, SGD (lr 0.1, momentum 0.9, weight decay 1e-4) under StepLR (epochs // 4, gamma 0.1), the adjustable gradient
clipping of the paper (``clip_grad_norm_`` at ``clip_gradient / lr``) between the GradScaler's unscale and step;
validation by PSNR.

Source: https://github.com/Lornatang/VDSR-PyTorch
Commit: a573e5c1e3d6d0a072cf3602022ab4954743a273
Files: train.py, model.py, config.py, dataset.py, imgproc.py, scripts/prepare_dataset.py
License: Apache-2.0 (Copyright 2021 Dakewe Biotech Corporation; full text in LICENSES/Lornatang-VDSR-PyTorch.txt)
Domain: vision, super-resolution (x2, residual learning on the Y channel)

Kept as written: ``ConvReLU``, ``VDSR`` (``_forward_impl``'s ``torch.add(out, identity)``, ``_initialize_weights``),
``define_loss`` (``psnr_criterion`` mean MSE, ``pixel_criterion`` summed MSE), ``define_optimizer``,
``define_scheduler``, ``train``'s loop body (``model.zero_grad()``, the autocast forward, ``scaler.scale(loss)
.backward()``, ``scaler.unscale_``, ``clip_grad_norm_(max_norm=clip_gradient / lr)``, ``scaler.step``,
``scaler.update``, the PSNR), ``validate``'s PSNR, config's hyperparameters (upscale 2, SGD 0.1/0.9/1e-4, nesterov
False, clip_gradient 0.01), ``TrainValidImageDataset.__getitem__``'s augmentation chain (random crop of the same
window in LR and HR, rotation by 0/90/180/270, horizontal and vertical flips; a centre crop for validation).

Deviations from the original:
- sizes for 2 CPU cores: the trunk's 64 channels -> 16 (the 18 blocks kept), image_size 41 -> 20, batch_size
  16 -> 8; epochs 80 -> 8 (so StepLR's step_size ``epochs // 4`` is 2 epochs);
- data: TB291/Set5 are replaced by synthetic 32x32 "photos" made from ``seed`` (smooth colour gradients with
  sharp-edged discs and bars, as in ``lornatangfsrcnn_x2``): 64 training and 4 validation images;
  ``scripts/prepare_dataset.py``'s LR images (``imresize(hr, 1 / scale)`` then ``imresize(lr, scale)``, MATLAB-style
  bicubic) are made in ``__getitem__`` with ``F.interpolate(mode="bicubic", antialias=True)`` for the downscale;
  ``bgr2ycbcr(use_y_channel=True)`` is its Y row; ``cv2.warpAffine`` by a multiple of 90 degrees about the centre of a
  square patch is ``torch.rot90``, ``cv2.flip`` is ``torch.flip``; the crop/rotation/flip draws come from a
  ``random.Random(seed)``; the DataLoader shuffles with a ``torch.Generator(seed)``, no workers, and the
  ``CUDAPrefetcher`` is the DataLoader's iterator;
- CUDA: ``amp.autocast()`` and ``amp.GradScaler()`` are CUDA-only; they run here as ``torch.autocast("cpu",
  enabled=False)`` and ``torch.amp.GradScaler("cpu", enabled=False)`` (the calls kept, both pass-throughs, as AMP is
  on a machine without CUDA);
- the test set (Set5, batch 1), tensorboard, the checkpoints, resume and the meters' prints are dropped;
- one ``train_step`` is one iteration of ``train``'s ``while batch_data is not None`` loop; at the end of an epoch
  ``validate`` and ``scheduler.step()`` run as in ``main``; ``eval_fn`` is ``validate``'s PSNR on a batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008

from __future__ import annotations

import functools
import pathlib
import random
import sys
from math import sqrt

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# config.py
upscale_factor = 2
image_size = 20  # (port) 41
batch_size = 8  # (port) 16
epochs = 8  # (port) 80
model_lr = 0.1
model_momentum = 0.9
model_weight_decay = 1e-4
model_nesterov = False
lr_scheduler_step_size = epochs // 4
lr_scheduler_gamma = 0.1
clip_gradient = 0.01
CHANNELS = 16  # (port) 64


# model.py
class ConvReLU(nn.Module):
    def __init__(self, channels: int) -> None:
        super(ConvReLU, self).__init__()
        self.conv = nn.Conv2d(channels, channels, (3, 3), (1, 1), (1, 1), bias=False)
        self.relu = nn.ReLU(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        out = self.relu(out)

        return out


class VDSR(nn.Module):
    def __init__(self) -> None:
        super(VDSR, self).__init__()
        # Input layer
        self.conv1 = nn.Sequential(
            nn.Conv2d(1, CHANNELS, (3, 3), (1, 1), (1, 1), bias=False),
            nn.ReLU(True),
        )

        # Features trunk blocks
        trunk = []
        for _ in range(18):
            trunk.append(ConvReLU(CHANNELS))
        self.trunk = nn.Sequential(*trunk)

        # Output layer
        self.conv2 = nn.Conv2d(CHANNELS, 1, (3, 3), (1, 1), (1, 1), bias=False)

        # Initialize model weights
        self._initialize_weights()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward_impl(x)

    # Support torch.script function
    def _forward_impl(self, x: torch.Tensor) -> torch.Tensor:
        identity = x

        out = self.conv1(x)
        out = self.trunk(out)
        out = self.conv2(out)

        out = torch.add(out, identity)

        return out

    def _initialize_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                module.weight.data.normal_(0.0, sqrt(2 / (module.kernel_size[0] * module.kernel_size[1] * module.out_channels)))


# imgproc.py (HWC tensors)
def imresize(image: torch.Tensor, scale: float) -> torch.Tensor:
    # (port) MATLAB-style bicubic imresize
    x = image.permute(2, 0, 1).unsqueeze(0)
    x = F.interpolate(x, scale_factor=scale, mode="bicubic", antialias=scale < 1, align_corners=False)
    return x.squeeze(0).permute(1, 2, 0).clamp(0, 1)


def bgr2ycbcr_y(image: torch.Tensor) -> torch.Tensor:
    # bgr2ycbcr(image, use_y_channel=True)
    image = image @ torch.tensor([24.966, 128.553, 65.481]) + 16.0
    image /= 255.
    return image


def center_crop(lr_image, hr_image, image_size: int):
    image_height, image_width = lr_image.shape[:2]

    # Just need to find the top and left coordinates of the image
    top = (image_height - image_size) // 2
    left = (image_width - image_size) // 2

    # Crop image patch
    patch_lr_image = lr_image[top:top + image_size, left:left + image_size, ...]
    patch_hr_image = hr_image[top:top + image_size, left:left + image_size, ...]

    return patch_lr_image, patch_hr_image


def random_crop(lr_image, hr_image, image_size: int, rng: random.Random):
    image_height, image_width = lr_image.shape[:2]

    # Just need to find the top and left coordinates of the image
    top = rng.randint(0, image_height - image_size)
    left = rng.randint(0, image_width - image_size)

    # Crop image patch
    patch_lr_image = lr_image[top:top + image_size, left:left + image_size, ...]
    patch_hr_image = hr_image[top:top + image_size, left:left + image_size, ...]

    return patch_lr_image, patch_hr_image


def random_rotate(lr_image, hr_image, angles: list, rng: random.Random):
    # Random select specific angle
    angle = rng.choice(angles)
    # (port) cv2.warpAffine by a multiple of 90 degrees about the centre of a square patch
    rotated_lr_image = torch.rot90(lr_image, angle // 90, dims=(0, 1))
    rotated_hr_image = torch.rot90(hr_image, angle // 90, dims=(0, 1))

    return rotated_lr_image, rotated_hr_image


def random_horizontally_flip(lr_image, hr_image, rng: random.Random, p=0.5):
    if rng.random() < p:
        lr_image = torch.flip(lr_image, dims=(1,))
        hr_image = torch.flip(hr_image, dims=(1,))

    return lr_image, hr_image


def random_vertically_flip(lr_image, hr_image, rng: random.Random, p=0.5):
    if rng.random() < p:
        lr_image = torch.flip(lr_image, dims=(0,))
        hr_image = torch.flip(hr_image, dims=(0,))

    return lr_image, hr_image


def _synthetic_photos(seed: int, n: int, size: int = 32) -> list[torch.Tensor]:
    """(port) Smooth colour gradients with a few sharp-edged discs and bars: HWC BGR images in [0, 1]."""
    gen = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    out = []
    for _ in range(n):
        a = torch.rand(3, 3, generator=gen)
        img = (a[:, 0, None, None] * 0.5 + a[:, 1, None, None] * 0.3 * xx + a[:, 2, None, None] * 0.2 * yy)
        for _ in range(4):
            colour = torch.rand(3, generator=gen)
            cy, cx = torch.rand(2, generator=gen).tolist()
            r = 0.08 + 0.15 * float(torch.rand((), generator=gen))
            if float(torch.rand((), generator=gen)) < 0.5:
                mask = ((yy - cy) ** 2 + (xx - cx) ** 2) < r ** 2
            else:
                mask = ((yy - cy).abs() < r / 3) & ((xx - cx).abs() < r * 2)
            img = torch.where(mask, colour[:, None, None], img)
        out.append(img.permute(1, 2, 0).clamp(0, 1).contiguous())
    return out


# dataset.py
class TrainValidImageDataset(Dataset):
    def __init__(self, images, image_size: int, mode: str, seed: int) -> None:
        super(TrainValidImageDataset, self).__init__()
        # (port) scripts/prepare_dataset.py: lr = imresize(imresize(hr, 1 / scale), scale), Y channels in memory
        self.hr_datasets = [bgr2ycbcr_y(hr) for hr in images]
        self.lr_datasets = [bgr2ycbcr_y(imresize(imresize(hr, 1 / upscale_factor), upscale_factor)) for hr in images]
        self.image_size = image_size
        self.mode = mode
        self.rng = random.Random(seed)

    def __getitem__(self, batch_index: int):
        lr_y_image = self.lr_datasets[batch_index]
        hr_y_image = self.hr_datasets[batch_index]

        if self.mode == "Train":
            lr_y_image, hr_y_image = random_crop(lr_y_image, hr_y_image, self.image_size, self.rng)
            lr_y_image, hr_y_image = random_rotate(lr_y_image, hr_y_image, [0, 90, 180, 270], self.rng)
            lr_y_image, hr_y_image = random_horizontally_flip(lr_y_image, hr_y_image, self.rng, p=0.5)
            lr_y_image, hr_y_image = random_vertically_flip(lr_y_image, hr_y_image, self.rng, p=0.5)
        elif self.mode == "Valid":
            lr_y_image, hr_y_image = center_crop(lr_y_image, hr_y_image, self.image_size)
        else:
            raise ValueError("Unsupported data processing model, please use `Train` or `Valid`.")

        # image2tensor(range_norm=False, half=False)
        lr_y_tensor = lr_y_image.unsqueeze(0).float().contiguous()
        hr_y_tensor = hr_y_image.unsqueeze(0).float().contiguous()

        return {"lr": lr_y_tensor, "hr": hr_y_tensor}

    def __len__(self) -> int:
        return len(self.lr_datasets)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_datasets = TrainValidImageDataset(_synthetic_photos(seed, 64), image_size, "Train", seed)
    valid_datasets = TrainValidImageDataset(_synthetic_photos(seed + 1000, 4), image_size, "Valid", seed + 1)
    train_dataloader = DataLoader(train_datasets, batch_size=batch_size, shuffle=True, num_workers=0,
                                  drop_last=True, generator=torch.Generator().manual_seed(seed))
    valid_dataloader = DataLoader(valid_datasets, batch_size=batch_size, shuffle=False, num_workers=0,
                                  drop_last=False)

    model = VDSR()
    psnr_criterion = nn.MSELoss()
    pixel_criterion = nn.MSELoss(reduction="sum")
    optimizer = optim.SGD(model.parameters(),
                          lr=model_lr,
                          momentum=model_momentum,
                          weight_decay=model_weight_decay,
                          nesterov=model_nesterov)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=lr_scheduler_step_size, gamma=lr_scheduler_gamma)
    scaler = torch.amp.GradScaler("cpu", enabled=False)  # (port) amp.GradScaler() is CUDA-only

    def validate(model):
        model.eval()
        psnres = []
        with torch.no_grad():
            for batch_data in valid_dataloader:
                lr = batch_data["lr"]
                hr = batch_data["hr"]
                with torch.autocast("cpu", enabled=False):
                    sr = model(lr)
                psnr = 10. * torch.log10(1. / psnr_criterion(sr, hr))
                psnres.append(psnr.item())
        return sum(psnres) / len(psnres)

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in main()
                validate(model)
                scheduler.step()
            model.train()
            state["it"] = iter(train_dataloader)
            return next(state["it"])

    def train_step():
        batch_data = next_batch()
        lr = batch_data["lr"]
        hr = batch_data["hr"]

        model.zero_grad()

        with torch.autocast("cpu", enabled=False):
            sr = model(lr)
            if bug == "loss_against_lr_input":
                loss = pixel_criterion(sr, lr)
            else:
                loss = pixel_criterion(sr, hr)

        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        if bug == "clip_after_step":
            scaler.step(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip_gradient / optimizer.param_groups[0]["lr"],
                                           norm_type=2.0)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip_gradient / optimizer.param_groups[0]["lr"],
                                           norm_type=2.0)
            scaler.step(optimizer)
        scaler.update()

        psnr = 10. * torch.log10(1. / psnr_criterion(sr, hr))
        del psnr
        return loss.detach()

    def eval_fn(model, batch):
        lr, hr = batch
        model.eval()
        with torch.no_grad():
            psnr = 10. * torch.log10(1. / psnr_criterion(model(lr), hr))
        model.train()
        return float(psnr)

    first = next(iter(DataLoader(train_datasets, batch_size=batch_size, shuffle=False)))
    return Program(name="lornatangvdsr_x2", model=model, batch=(first["lr"], first["hr"]), loss_fn=pixel_criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the loss taken against the network's own input (the bicubic-upscaled LR patch) instead of the HR
    # patch: the residual learns to be zero, the super-resolution never happens.
    Bug("loss_against_lr_input", functools.partial(_build, bug="loss_against_lr_input"), "learning_ledger",
        ("TASK",)),
    # classic: the adjustable gradient clipping moved after scaler.step: the update uses the unclipped gradient
    # (at lr 0.1 on the summed MSE) and the clip only rescales a gradient that is about to be zeroed.
    Bug("clip_after_step", functools.partial(_build, bug="clip_after_step"), "step_probe", (),
        kind="step.clip_after_step"),
]

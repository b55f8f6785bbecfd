"""FSRCNN x2 super-resolution from Lornatang/FSRCNN-PyTorch: the hourglass network of Dong et al. (5x5 feature
extraction to 56 channels, 1x1 shrinking to 12, four 3x3 mapping layers, 1x1 expanding to 56, PReLU after each, a
9x9 stride-2 transposed convolution to the HR grid at std 0.001) on the Y channel of the low-resolution crop itself
(no bicubic pre-upsampling), MSE to the paired HR crop, SGD (momentum 0.9, weight decay 1e-4) with the
deconvolution at a tenth of the learning rate; PSNR on the validation crops.

Source: https://github.com/Lornatang/FSRCNN-PyTorch
Commit: e6f8d53775d93249292fb80eed0af940aa7710c5
Files: train.py, model.py, config.py, dataset.py, imgproc.py
License: Apache-2.0 (Copyright 2021 Dakewe Biotech Corporation; full text in LICENSES/Lornatang-FSRCNN-PyTorch.txt)
Domain: vision, image restoration (single-image super-resolution, FSRCNN)

Kept as written: ``FSRCNN`` (all layers, sizes and ``_initialize_weights``), ``define_loss`` (two ``nn.MSELoss``),
``define_optimizer`` (five parameter groups, the deconvolution's lr ``model_lr * 0.1``, momentum 0.9, weight decay
1e-4, no Nesterov), ``train``'s loop body (``model.zero_grad()``, forward, MSE, backward, step, the PSNR of the
batch), ``config.py``'s ``upscale_factor`` 2, ``image_size`` 20 and ``batch_size`` 16, ``TrainValidImageDataset``'s
pipeline (the LR image made from the whole HR image, ``random_crop`` of the paired patches with the LR corner at
``hr_top // upscale_factor``, ``random_rotate`` by one of 0/90/180/270 degrees, the Y channel by ``bgr2ycbcr``'s
MATLAB coefficients; ``center_crop`` for "Valid").

Deviations from the original:
- data: the T91 image folders (read with cv2) are replaced by synthetic 32x32 BGR "photographs" made from ``seed``
  (smooth colour gradients with sharp-edged discs and bars, in [0, 1]): 64 training and 4 validation images;
  ``imgproc.imresize`` (MATLAB-style bicubic in numpy) is ``F.interpolate(mode="bicubic", antialias=True)``,
  clamped to [0, 1]; ``random_rotate``'s ``cv2.warpAffine`` by a multiple of 90 degrees on square patches is
  ``torch.rot90``; Python's ``random`` is a ``random.Random(seed)`` held by the dataset;
- ``model_lr`` 1e-3 -> 1e-2 so that 30 steps of the self-check show the loss falling (the original runs 3000
  epochs); everything else in the optimizer as written;
- CUDA, the ``CUDAPrefetcher``, mixed precision (``amp.autocast`` and ``GradScaler``: both CUDA-only, so on the CPU
  the step is the plain ``loss.backward(); optimizer.step()``), tensorboard, the meters, the Set5 test pass,
  resuming and the checkpoints are dropped;
- one ``train_step`` is one iteration of ``train``'s ``while`` loop (the next epoch starts when the loader runs
  out); ``eval_fn`` is ``validate``'s mean PSNR (``10 * log10(1 / mse)``) over the validation crops;
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
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# config.py
upscale_factor = 2
image_size = 20
batch_size = 16
model_lr = 1e-2  # (port) 1e-3
model_momentum = 0.9
model_weight_decay = 1e-4
model_nesterov = False


# model.py
class FSRCNN(nn.Module):
    """

    Args:
        upscale_factor (int): Image magnification factor.
    """

    def __init__(self, upscale_factor: int) -> None:
        super(FSRCNN, self).__init__()
        # Feature extraction layer.
        self.feature_extraction = nn.Sequential(
            nn.Conv2d(1, 56, (5, 5), (1, 1), (2, 2)),
            nn.PReLU(56)
        )

        # Shrinking layer.
        self.shrink = nn.Sequential(
            nn.Conv2d(56, 12, (1, 1), (1, 1), (0, 0)),
            nn.PReLU(12)
        )

        # Mapping layer.
        self.map = nn.Sequential(
            nn.Conv2d(12, 12, (3, 3), (1, 1), (1, 1)),
            nn.PReLU(12),
            nn.Conv2d(12, 12, (3, 3), (1, 1), (1, 1)),
            nn.PReLU(12),
            nn.Conv2d(12, 12, (3, 3), (1, 1), (1, 1)),
            nn.PReLU(12),
            nn.Conv2d(12, 12, (3, 3), (1, 1), (1, 1)),
            nn.PReLU(12)
        )

        # Expanding layer.
        self.expand = nn.Sequential(
            nn.Conv2d(12, 56, (1, 1), (1, 1), (0, 0)),
            nn.PReLU(56)
        )

        # Deconvolution layer.
        self.deconv = nn.ConvTranspose2d(56, 1, (9, 9), (upscale_factor, upscale_factor), (4, 4), (upscale_factor - 1, upscale_factor - 1))

        # Initialize model weights.
        self._initialize_weights()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward_impl(x)

    # Support torch.script function.
    def _forward_impl(self, x: torch.Tensor) -> torch.Tensor:
        out = self.feature_extraction(x)
        out = self.shrink(out)
        out = self.map(out)
        out = self.expand(out)
        out = self.deconv(out)

        return out

    # The filter weight of each layer is a Gaussian distribution with zero mean and standard deviation initialized by random extraction 0.001 (deviation is 0).
    def _initialize_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight.data, mean=0.0, std=sqrt(2 / (m.out_channels * m.weight.data[0][0].numel())))
                nn.init.zeros_(m.bias.data)

        nn.init.normal_(self.deconv.weight.data, mean=0.0, std=0.001)
        nn.init.zeros_(self.deconv.bias.data)


# imgproc.py (tensor versions of the numpy helpers the dataset uses; images HWC BGR in [0, 1])
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


def random_crop(lr_image, hr_image, hr_image_size: int, upscale_factor: int, rng: random.Random, bug=None):
    hr_image_height, hr_image_width = hr_image.shape[:2]

    # Just need to find the top and left coordinates of the image
    hr_top = rng.randint(0, hr_image_height - hr_image_size)
    hr_left = rng.randint(0, hr_image_width - hr_image_size)

    # Define the LR image position
    if bug == "lr_corner_not_scaled":
        lr_top = min(hr_top, lr_image.shape[0] - hr_image_size // upscale_factor)
        lr_left = min(hr_left, lr_image.shape[1] - hr_image_size // upscale_factor)
    else:
        lr_top = hr_top // upscale_factor
        lr_left = hr_left // upscale_factor
    lr_image_size = hr_image_size // upscale_factor

    # Crop image patch
    patch_lr_image = lr_image[lr_top:lr_top + lr_image_size, lr_left:lr_left + lr_image_size, ...]
    patch_hr_image = hr_image[hr_top:hr_top + hr_image_size, hr_left:hr_left + hr_image_size, ...]

    return patch_lr_image, patch_hr_image


def center_crop(lr_image, hr_image, hr_image_size: int, upscale_factor: int):
    hr_image_height, hr_image_width = hr_image.shape[:2]

    # Just need to find the top and left coordinates of the image
    hr_top = (hr_image_height - hr_image_size) // 2
    hr_left = (hr_image_width - hr_image_size) // 2

    # Define the LR image position
    lr_top = hr_top // upscale_factor
    lr_left = hr_left // upscale_factor
    lr_image_size = hr_image_size // upscale_factor

    # Crop image patch
    patch_lr_image = lr_image[lr_top:lr_top + lr_image_size, lr_left:lr_left + lr_image_size, ...]
    patch_hr_image = hr_image[hr_top:hr_top + hr_image_size, hr_left:hr_left + hr_image_size, ...]

    return patch_lr_image, patch_hr_image


def random_rotate(lr_image, hr_image, angles: list, rng: random.Random):
    # Random select specific angle
    angle = rng.choice(angles)
    # (port) cv2.warpAffine by a multiple of 90 degrees about the centre of a square patch
    rotated_lr_image = torch.rot90(lr_image, angle // 90, dims=(0, 1))
    rotated_hr_image = torch.rot90(hr_image, angle // 90, dims=(0, 1))

    return rotated_lr_image, rotated_hr_image


def _synthetic_photos(seed: int, n: int, size: int = 32) -> list[torch.Tensor]:
    """Smooth colour gradients with a few sharp-edged discs and bars: HWC BGR images in [0, 1]."""
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
    def __init__(self, images, image_size: int, upscale_factor: int, mode: str, seed: int, bug=None) -> None:
        super(TrainValidImageDataset, self).__init__()
        self.images = images
        # Specify the high-resolution image size, with equal length and width
        self.image_size = image_size
        # How many times the high-resolution image is the low-resolution image
        self.upscale_factor = upscale_factor
        # Load training dataset or test dataset
        self.mode = mode
        self.rng = random.Random(seed)
        self.bug = bug

    def __getitem__(self, batch_index: int):
        # Read a batch of image data
        hr_image = self.images[batch_index]
        # Use high-resolution image to make low-resolution image
        lr_image = imresize(hr_image, 1 / self.upscale_factor)

        if self.mode == "Train":
            # Data augment
            lr_image, hr_image = random_crop(lr_image, hr_image, self.image_size, self.upscale_factor, self.rng,
                                             bug=self.bug)
            lr_image, hr_image = random_rotate(lr_image, hr_image, [0, 90, 180, 270], self.rng)
        elif self.mode == "Valid":
            lr_image, hr_image = center_crop(lr_image, hr_image, self.image_size, self.upscale_factor)
        else:
            raise ValueError("Unsupported data processing model, please use `Train` or `Valid`.")

        # Only extract the image data of the Y channel
        lr_y_image = bgr2ycbcr_y(lr_image)
        hr_y_image = bgr2ycbcr_y(hr_image)

        # Convert image data into Tensor stream format (PyTorch).
        # Note: The range of input and output is between [0, 1]
        lr_y_tensor = lr_y_image.unsqueeze(0).float().contiguous()
        hr_y_tensor = hr_y_image.unsqueeze(0).float().contiguous()

        return {"lr": lr_y_tensor, "hr": hr_y_tensor}

    def __len__(self) -> int:
        return len(self.images)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_datasets = TrainValidImageDataset(_synthetic_photos(seed, 64), image_size, upscale_factor, "Train", seed,
                                            bug=bug)
    valid_datasets = TrainValidImageDataset(_synthetic_photos(seed + 1000, 4), image_size, upscale_factor, "Valid",
                                            seed + 1)
    train_dataloader = DataLoader(train_datasets, batch_size=batch_size, shuffle=True, num_workers=0,
                                  drop_last=True, generator=torch.Generator().manual_seed(seed))
    valid_dataloader = DataLoader(valid_datasets, batch_size=batch_size, shuffle=False, num_workers=0,
                                  drop_last=False)

    model = FSRCNN(upscale_factor)
    psnr_criterion = nn.MSELoss()
    pixel_criterion = nn.MSELoss()
    if bug == "deconv_group_dropped":
        groups = [{"params": model.feature_extraction.parameters()},
                  {"params": model.shrink.parameters()},
                  {"params": model.map.parameters()},
                  {"params": model.expand.parameters()}]
    else:
        groups = [{"params": model.feature_extraction.parameters()},
                  {"params": model.shrink.parameters()},
                  {"params": model.map.parameters()},
                  {"params": model.expand.parameters()},
                  {"params": model.deconv.parameters(), "lr": model_lr * 0.1}]
    optimizer = optim.SGD(groups,
                          lr=model_lr,
                          momentum=model_momentum,
                          weight_decay=model_weight_decay,
                          nesterov=model_nesterov)

    state = {"it": iter(train_dataloader)}

    def train_step():
        try:
            batch_data = next(state["it"])
        except StopIteration:
            state["it"] = iter(train_dataloader)
            batch_data = next(state["it"])
        # Put the generator in training mode
        model.train()

        lr = batch_data["lr"]
        hr = batch_data["hr"]

        # Initialize the generator gradient
        if bug != "no_zero_grad":
            model.zero_grad()

        sr = model(lr)
        loss = pixel_criterion(sr, hr)

        loss.backward()
        # Update generator weight
        optimizer.step()

        # measure accuracy and record loss
        psnr = 10. * torch.log10(1. / psnr_criterion(sr, hr))
        del psnr
        return loss.detach()

    def validate(model):
        # Put the model in verification mode
        model.eval()
        psnres = []
        with torch.no_grad():
            for batch_data in valid_dataloader:
                lr = batch_data["lr"]
                hr = batch_data["hr"]
                sr = model(lr)
                psnr = 10. * torch.log10(1. / psnr_criterion(sr, hr))
                psnres.append(float(psnr))
        model.train()
        return sum(psnres) / len(psnres)

    first = next(iter(DataLoader(train_datasets, batch_size=batch_size, shuffle=False)))
    return Program(name="lornatangfsrcnn_x2", model=model, batch=(first["lr"], first["hr"]), loss_fn=pixel_criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=lambda m, b: validate(m),
                   loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: ``random_crop`` takes the LR patch at the HR corner instead of ``hr_top // upscale_factor`` (clipped
    # to fit), so the LR input shows another part of the image than the HR target it is scored against.
    Bug("lr_corner_not_scaled", functools.partial(_build, bug="lr_corner_not_scaled"), "learning_ledger", ("TASK",)),
    # classic: the deconvolution's group (the one with its own lr) dropped from ``define_optimizer``: the layer that
    # makes the HR image stays at its 0.001-std init.
    Bug("deconv_group_dropped", functools.partial(_build, bug="deconv_group_dropped"), "four_structures",
        ("deconv",)),
    # classic: ``model.zero_grad()`` left out of the loop: the gradients pile up across steps (README rule 6).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]

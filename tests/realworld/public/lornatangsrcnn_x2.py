"""SRCNN x2 super-resolution from Lornatang/SRCNN-PyTorch: the three-layer network of Dong et al. (9x9 feature
extraction to 64 channels, 5x5 non-linear mapping to 32, 5x5 reconstruction; Gaussian init with the reconstruction
layer at std 0.001) on the Y channel of bicubic-upsampled low-resolution crops, MSE to the high-resolution crop,
SGD (momentum 0.9, weight decay 1e-4) with the reconstruction layer at a tenth of the learning rate; PSNR on the
test images.

Source: https://github.com/Lornatang/SRCNN-PyTorch
Commit: a0a108ea47710118b7a3ba99d72290c409feacff
Files: train.py, model.py, config.py, dataset.py, imgproc.py, image_quality_assessment.py
License: Apache-2.0 (Copyright 2022 Dakewe Biotech Corporation; full text in LICENSES/Lornatang-SRCNN-PyTorch.txt)
Domain: vision, image restoration (single-image super-resolution, SRCNN)

Kept as written: ``SRCNN`` (layers and ``_initialize_weights``), ``define_loss`` (``nn.MSELoss``),
``define_optimizer`` (three parameter groups, the reconstruction's lr ``model_lr * 0.1``, momentum 0.9, weight
decay 1e-4, no Nesterov), ``train``'s loop body (``model.zero_grad()`` twice, forward, MSE, backward, step),
``config.py``'s ``upscale_factor`` 2 and ``batch_size`` 16, ``TrainValidImageDataset``'s
pipeline (random crop of the HR patch, LR made by resizing down by the factor and back up, the Y channel of BGR by
``bgr2ycbcr``'s MATLAB coefficients), ``validate``'s PSNR on the Y channel.

Deviations from the original:
- data: the T91 and Set5 image folders (read with cv2) are replaced by synthetic 32x32 BGR "photographs" made from
  ``seed`` (smooth colour gradients with sharp-edged discs and bars, in [0, 1]): 64 training and 4 test images;
  ``imgproc.image_resize`` (MATLAB-style bicubic ``imresize`` in numpy) is ``F.interpolate(mode="bicubic",
  antialias=True)`` for the downscale and ``mode="bicubic"`` for the upscale, clamped to [0, 1];
  ``imgproc.random_crop`` uses a ``random.Random(seed)``;
- sizes for 2 CPU cores: ``image_size`` (the HR crop) 32 -> 16;
- ``model_lr`` 1e-4 -> 1e-2 so that 30 steps of the self-check show the loss falling (the original runs 58000
  epochs); everything else in the optimizer as written;
- CUDA, ``channels_last``, the ``CUDAPrefetcher``, mixed precision (``amp.autocast`` and ``GradScaler``: both
  CUDA-only, so on the CPU the step is the plain ``loss.backward(); optimizer.step()``), tensorboard, the meters,
  SSIM and the checkpoints are dropped;
- one ``train_step`` is one iteration of ``train``'s ``while`` loop (the next epoch starts when the loader runs
  out); ``eval_fn`` is ``validate``'s mean PSNR (``_psnr_torch`` with ``crop_border`` = upscale factor, on the
  already-Y tensors) over the test images;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

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
image_size = 16  # (port) 32
batch_size = 16
model_lr = 1e-2  # (port) 1e-4
model_momentum = 0.9
model_weight_decay = 1e-4
model_nesterov = False


# model.py
class SRCNN(nn.Module):
    def __init__(self) -> None:
        super(SRCNN, self).__init__()
        # Feature extraction layer.
        self.features = nn.Sequential(
            nn.Conv2d(1, 64, (9, 9), (1, 1), (4, 4)),
            nn.ReLU(True)
        )

        # Non-linear mapping layer.
        self.map = nn.Sequential(
            nn.Conv2d(64, 32, (5, 5), (1, 1), (2, 2)),
            nn.ReLU(True)
        )

        # Rebuild the layer.
        self.reconstruction = nn.Conv2d(32, 1, (5, 5), (1, 1), (2, 2))

        # Initialize model weights.
        self._initialize_weights()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward_impl(x)

    # Support torch.script function.
    def _forward_impl(self, x: torch.Tensor) -> torch.Tensor:
        out = self.features(x)
        out = self.map(out)
        out = self.reconstruction(out)

        return out

    # The filter weight of each layer is a Gaussian distribution with zero mean and
    # standard deviation initialized by random extraction 0.001 (deviation is 0)
    def _initialize_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.normal_(module.weight.data, 0.0, math.sqrt(2 / (module.out_channels * module.weight.data[0][0].numel())))
                nn.init.zeros_(module.bias.data)

        nn.init.normal_(self.reconstruction.weight.data, 0.0, 0.001)
        nn.init.zeros_(self.reconstruction.bias.data)


# imgproc.py (tensor versions of the numpy helpers the dataset uses)
def bgr2ycbcr_y(image: torch.Tensor) -> torch.Tensor:
    # bgr2ycbcr(image, only_use_y_channel=True) on an HWC BGR image in [0, 1]
    image = image @ torch.tensor([24.966, 128.553, 65.481]) + 16.0
    image /= 255.
    return image


def image_resize(image: torch.Tensor, scale: float) -> torch.Tensor:
    # (port) MATLAB-style bicubic imresize on an HWC image
    x = image.permute(2, 0, 1).unsqueeze(0)
    x = F.interpolate(x, scale_factor=scale, mode="bicubic", antialias=scale < 1, align_corners=False)
    return x.squeeze(0).permute(1, 2, 0).clamp(0, 1)


def random_crop(image: torch.Tensor, image_size: int, rng: random.Random) -> torch.Tensor:
    image_height, image_width = image.shape[:2]

    # Just need to find the top and left coordinates of the image
    top = rng.randint(0, image_height - image_size)
    left = rng.randint(0, image_width - image_size)

    # Crop image patch
    patch_image = image[top:top + image_size, left:left + image_size, ...]

    return patch_image


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
    """Define training/valid dataset loading methods."""

    def __init__(self, images, image_size: int, upscale_factor: int, mode: str, seed: int, bug=None) -> None:
        super(TrainValidImageDataset, self).__init__()
        self.images = images
        self.image_size = image_size
        self.upscale_factor = upscale_factor
        self.mode = mode
        self.rng = random.Random(seed)
        self.bug = bug

    def __getitem__(self, batch_index: int):
        image = self.images[batch_index]

        # Image processing operations
        if self.mode == "Train":
            hr_image = random_crop(image, self.image_size, self.rng)
        else:
            hr_image = image[:self.image_size, :self.image_size]  # center_crop's role on the test images

        lr_image = image_resize(hr_image, 1 / self.upscale_factor)
        lr_image = image_resize(lr_image, self.upscale_factor)

        # Only extract the image data of the Y channel
        lr_y_image = bgr2ycbcr_y(lr_image)
        hr_y_image = bgr2ycbcr_y(hr_image)

        # Convert image data into Tensor stream format (PyTorch).
        lr_y_tensor = lr_y_image.unsqueeze(0).float()
        hr_y_tensor = hr_y_image.unsqueeze(0).float()

        return {"lr": lr_y_tensor, "hr": hr_y_tensor}

    def __len__(self) -> int:
        return len(self.images)


# image_quality_assessment.py
def _psnr_torch(raw_tensor: torch.Tensor, dst_tensor: torch.Tensor, crop_border: int) -> torch.Tensor:
    # crop border pixels
    if crop_border > 0:
        raw_tensor = raw_tensor[:, :, crop_border:-crop_border, crop_border:-crop_border]
        dst_tensor = dst_tensor[:, :, crop_border:-crop_border, crop_border:-crop_border]

    # Convert data type to torch.float64 bit
    raw_tensor = raw_tensor.to(torch.float64)
    dst_tensor = dst_tensor.to(torch.float64)

    mse_value = torch.mean((raw_tensor * 255.0 - dst_tensor * 255.0) ** 2 + 1e-8, dim=[1, 2, 3])
    psnr_metrics = 10 * torch.log10_(255.0 ** 2 / mse_value)

    return psnr_metrics


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_datasets = TrainValidImageDataset(_synthetic_photos(seed, 64), image_size, upscale_factor, "Train", seed)
    test_datasets = TrainValidImageDataset(_synthetic_photos(seed + 1000, 4), image_size, upscale_factor, "Valid",
                                           seed + 1)
    train_dataloader = DataLoader(train_datasets, batch_size=batch_size, shuffle=True, num_workers=0,
                                  drop_last=True, generator=torch.Generator().manual_seed(seed))
    test_dataloader = DataLoader(test_datasets, batch_size=1, shuffle=False, num_workers=0, drop_last=False)

    model = SRCNN()
    pixel_criterion = nn.MSELoss()
    if bug == "reconstruction_left_out_of_optimizer":
        groups = [{"params": model.features.parameters()},
                  {"params": model.map.parameters()}]
    else:
        groups = [{"params": model.features.parameters()},
                  {"params": model.map.parameters()},
                  {"params": model.reconstruction.parameters(), "lr": model_lr * 0.1}]
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
        model.train()
        lr = batch_data["lr"]
        hr = batch_data["hr"]

        # Initialize the generator gradient
        if bug != "zero_grad_after_backward":
            model.zero_grad()
            # Initialize generator gradients
            model.zero_grad(set_to_none=True)

        sr = model(lr)
        if bug == "target_is_input":
            loss = pixel_criterion(sr, lr)
        else:
            loss = pixel_criterion(sr, hr)

        # Backpropagation
        loss.backward()
        if bug == "zero_grad_after_backward":
            model.zero_grad()
            model.zero_grad(set_to_none=True)

        # update generator weights
        optimizer.step()
        return loss.detach()

    def validate(model):
        model.eval()
        psnres = []
        with torch.no_grad():
            for batch_data in test_dataloader:
                lr = batch_data["lr"]
                hr = batch_data["hr"]
                sr = model(lr)
                psnres.append(float(_psnr_torch(sr, hr, upscale_factor).mean()))
        model.train()
        return sum(psnres) / len(psnres)

    first = next(iter(DataLoader(train_datasets, batch_size=batch_size, shuffle=False)))
    return Program(name="lornatangsrcnn_x2", model=model, batch=(first["lr"], first["hr"]), loss_fn=pixel_criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=lambda m, b: validate(m),
                   loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the loss compares the output with the network's own (bicubic) input instead of the HR patch: the
    # network learns the identity, and the super-resolution task is gone.
    Bug("target_is_input", functools.partial(_build, bug="target_is_input"), "learning_ledger", ("TASK",)),
    # classic: the third parameter group dropped from define_optimizer: the reconstruction layer stays at its
    # 0.001-std init.
    Bug("reconstruction_left_out_of_optimizer", functools.partial(_build, bug="reconstruction_left_out_of_optimizer"),
        "four_structures", ("reconstruction",)),
    # classic: the zero_grad calls moved after the backward: every step applies zero gradients (README rule 6).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

"""ESPCN single-image super-resolution (Shi et al.), Lornatang's ESPCN-PyTorch: two Tanh convolutions then a
sub-pixel convolution (conv to ``upscale_factor**2`` channels + ``nn.PixelShuffle``) clamped to [0, 1], trained on
the Y channel of random GT crops whose LR input is the MATLAB-style bicubic ``image_resize`` of the crop, MSE loss
times ``loss_weights``, SGD (lr 1e-2, momentum 0.9, weight decay 1e-4) with MultiStepLR per epoch; validation by
PSNR on the Y channel with the border cropped.

Source: https://github.com/Lornatang/ESPCN-PyTorch
Commit: a92f209618ad394d0775cb7a474aaa1517d85db8
Files: train.py, model.py, config.py, dataset.py, imgproc.py, image_quality_assessment.py
License: Apache-2.0 (Copyright 2021 Dakewe Biotech Corporation; full text in LICENSES/Lornatang-ESPCN-PyTorch.txt)
Domain: vision, super-resolution (x4, sub-pixel convolution)

Deviations from the original:
- sizes: ``epochs`` 3000 -> 50 (the MultiStepLR milestones stay at 10% and 80% of it); an epoch is the 64
  synthetic images at ``batch_size`` 16 (4 steps); ``channels`` 64, ``upscale_factor`` 4, ``gt_image_size`` 68
  kept;
- data: the T91 image folder read with ``cv2.imread`` is replaced by 64 synthetic 80x80 BGR images in [0, 1] made
  from ``seed`` (random oriented sinusoid gratings plus soft blobs); ``TrainValidImageDataset`` takes them from a
  list instead of file names; the Set5 test pair is a further synthetic image and its ``image_resize`` at 1/4;
  ``random`` (the crop's) is a ``random.Random(seed)`` instance;
- ``imgproc``: ``_cubic``, ``_calculate_weights_indices``, ``image_resize``, ``bgr_to_ycbcr`` and ``random_crop``
  copied as written; ``image_to_tensor``'s torchvision ``F_vision.to_tensor`` is written out for an HxW float
  array (HxW -> 1xHxW);
- the CUDA device, ``CUDAPrefetcher`` (a plain ``DataLoader`` iterator), ``pin_memory``/workers and the AMP
  ``autocast``/``GradScaler`` are dropped (CPU only): the step is ``loss.backward()``/``optimizer.step()`` where the
  original scales them; the tensorboard writer, progress meters, checkpointing and SSIM are left out;
- one ``train_step`` is one batch of ``train``'s loop body; at the end of each epoch ``scheduler.step()`` runs as
  ``main`` does; ``loader`` yields the ``(lr, gt)`` pairs of the train loader; ``eval_fn`` is ``validate``'s body on the test pair (model.eval(), no_grad, PSNR);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, RUF012

from __future__ import annotations

import functools
import math
import pathlib
import random as _random
import sys
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn, optim
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


class config:  # config.py (train mode)
    only_test_y_channel = False
    model_arch_name = "espcn_x4"
    in_channels = 1
    out_channels = 1
    channels = 64
    upscale_factor = 4
    gt_image_size = int(17 * upscale_factor)
    batch_size = 16
    epochs = 50
    loss_weights = 1.0
    model_lr = 1e-2
    model_momentum = 0.9
    model_weight_decay = 1e-4
    model_nesterov = False
    lr_scheduler_milestones = [int(epochs * 0.1), int(epochs * 0.8)]
    lr_scheduler_gamma = 0.1


# model.py
class ESPCN(nn.Module):
    def __init__(
            self,
            in_channels: int,
            out_channels: int,
            channels: int,
            upscale_factor: int,
            bug=None,
    ) -> None:
        super(ESPCN, self).__init__()
        hidden_channels = channels // 2
        out_channels = int(out_channels * (upscale_factor ** 2))
        self.bug = bug
        self.upscale_factor = upscale_factor

        # Feature mapping
        self.feature_maps = nn.Sequential(
            nn.Conv2d(in_channels, channels, (5, 5), (1, 1), (2, 2)),
            nn.Tanh(),
            nn.Conv2d(channels, hidden_channels, (3, 3), (1, 1), (1, 1)),
            nn.Tanh(),
        )

        # Sub-pixel convolution layer
        if bug == "pixel_shuffle_as_view":
            self.sub_pixel = nn.Sequential(
                nn.Conv2d(hidden_channels, out_channels, (3, 3), (1, 1), (1, 1)),
                _ViewShuffle(upscale_factor),
            )
        else:
            self.sub_pixel = nn.Sequential(
                nn.Conv2d(hidden_channels, out_channels, (3, 3), (1, 1), (1, 1)),
                nn.PixelShuffle(upscale_factor),
            )

        # Initial model weights
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                if module.in_channels == 32:
                    nn.init.normal_(module.weight.data,
                                    0.0,
                                    0.001)
                    nn.init.zeros_(module.bias.data)
                else:
                    nn.init.normal_(module.weight.data,
                                    0.0,
                                    math.sqrt(2 / (module.out_channels * module.weight.data[0][0].numel())))
                    nn.init.zeros_(module.bias.data)

    def forward(self, x: Tensor) -> Tensor:
        return self._forward_impl(x)

    # Support torch.script function.
    def _forward_impl(self, x: Tensor) -> Tensor:
        x = self.feature_maps(x)
        x = self.sub_pixel(x)

        x = torch.clamp_(x, 0.0, 1.0)

        return x


class _ViewShuffle(nn.Module):
    # bug variant: a hand-written "pixel shuffle" that views the r*r channels straight into the r*H x r*W grid
    def __init__(self, r):
        super().__init__()
        self.r = r

    def forward(self, x):
        b, c, h, w = x.shape
        return x.reshape(b, c // (self.r ** 2), h * self.r, w * self.r)


def espcn_x4(**kwargs) -> ESPCN:
    model = ESPCN(upscale_factor=4, **kwargs)

    return model


# imgproc.py
def _cubic(x: Any) -> Any:
    absx = torch.abs(x)
    absx2 = absx ** 2
    absx3 = absx ** 3
    return (1.5 * absx3 - 2.5 * absx2 + 1) * ((absx <= 1).type_as(absx)) + (
            -0.5 * absx3 + 2.5 * absx2 - 4 * absx + 2) * (
               ((absx > 1) * (absx <= 2)).type_as(absx))


def _calculate_weights_indices(in_length: int,
                               out_length: int,
                               scale: float,
                               kernel_width: int,
                               antialiasing: bool) -> [np.ndarray, np.ndarray, int, int]:
    if (scale < 1) and antialiasing:
        # Use a modified kernel (larger kernel width) to simultaneously
        # interpolate and antialiasing
        kernel_width = kernel_width / scale

    # Output-space coordinates
    x = torch.linspace(1, out_length, out_length)

    # Input-space coordinates. Calculate the inverse mapping such that 0.5
    # in output space maps to 0.5 in input space, and 0.5 + scale in output
    # space maps to 1.5 in input space.
    u = x / scale + 0.5 * (1 - 1 / scale)

    # What is the left-most pixel that can be involved in the computation?
    left = torch.floor(u - kernel_width / 2)

    # What is the maximum number of pixels that can be involved in the
    # computation?  Note: it's OK to use an extra pixel here; if the
    # corresponding weights are all zero, it will be eliminated at the end
    # of this function.
    p = math.ceil(kernel_width) + 2

    # The indices of the input pixels involved in computing the k-th output
    # pixel are in row k of the indices matrix.
    indices = left.view(out_length, 1).expand(out_length, p) + torch.linspace(0, p - 1, p).view(1, p).expand(
        out_length, p)

    # The weights used to compute the k-th output pixel are in row k of the
    # weights matrix.
    distance_to_center = u.view(out_length, 1).expand(out_length, p) - indices

    # apply cubic kernel
    if (scale < 1) and antialiasing:
        weights = scale * _cubic(distance_to_center * scale)
    else:
        weights = _cubic(distance_to_center)

    # Normalize the weights matrix so that each row sums to 1.
    weights_sum = torch.sum(weights, 1).view(out_length, 1)
    weights = weights / weights_sum.expand(out_length, p)

    # If a column in weights is all zero, get rid of it. only consider the
    # first and last column.
    weights_zero_tmp = torch.sum((weights == 0), 0)
    if not math.isclose(weights_zero_tmp[0], 0, rel_tol=1e-6):
        indices = indices.narrow(1, 1, p - 2)
        weights = weights.narrow(1, 1, p - 2)
    if not math.isclose(weights_zero_tmp[-1], 0, rel_tol=1e-6):
        indices = indices.narrow(1, 0, p - 2)
        weights = weights.narrow(1, 0, p - 2)
    weights = weights.contiguous()
    indices = indices.contiguous()
    sym_len_s = -indices.min() + 1
    sym_len_e = indices.max() - in_length
    indices = indices + sym_len_s - 1
    return weights, indices, int(sym_len_s), int(sym_len_e)


def image_to_tensor(image: np.ndarray, range_norm: bool, half: bool) -> Tensor:
    # Convert image data type to Tensor data type (torchvision's to_tensor for an HxW float array, written out)
    tensor = torch.from_numpy(np.ascontiguousarray(image[:, :, None].transpose(2, 0, 1)))

    # Scale the image data from [0, 1] to [-1, 1]
    if range_norm:
        tensor = tensor.mul(2.0).sub(1.0)

    # Convert torch.float32 image data type to torch.half image data type
    if half:
        tensor = tensor.half()

    return tensor


def image_resize(image: Any, scale_factor: float, antialiasing: bool = True) -> Any:
    squeeze_flag = False
    if type(image).__module__ == np.__name__:  # numpy type
        numpy_type = True
        if image.ndim == 2:
            image = image[:, :, None]
            squeeze_flag = True
        image = torch.from_numpy(image.transpose(2, 0, 1)).float()
    else:
        numpy_type = False
        if image.ndim == 2:
            image = image.unsqueeze(0)
            squeeze_flag = True

    in_c, in_h, in_w = image.size()
    out_h, out_w = math.ceil(in_h * scale_factor), math.ceil(in_w * scale_factor)
    kernel_width = 4

    # get weights and indices
    weights_h, indices_h, sym_len_hs, sym_len_he = _calculate_weights_indices(in_h, out_h, scale_factor, kernel_width,
                                                                              antialiasing)
    weights_w, indices_w, sym_len_ws, sym_len_we = _calculate_weights_indices(in_w, out_w, scale_factor, kernel_width,
                                                                              antialiasing)
    # process H dimension
    # symmetric copying
    img_aug = torch.FloatTensor(in_c, in_h + sym_len_hs + sym_len_he, in_w)
    img_aug.narrow(1, sym_len_hs, in_h).copy_(image)

    sym_patch = image[:, :sym_len_hs, :]
    inv_idx = torch.arange(sym_patch.size(1) - 1, -1, -1).long()
    sym_patch_inv = sym_patch.index_select(1, inv_idx)
    img_aug.narrow(1, 0, sym_len_hs).copy_(sym_patch_inv)

    sym_patch = image[:, -sym_len_he:, :]
    inv_idx = torch.arange(sym_patch.size(1) - 1, -1, -1).long()
    sym_patch_inv = sym_patch.index_select(1, inv_idx)
    img_aug.narrow(1, sym_len_hs + in_h, sym_len_he).copy_(sym_patch_inv)

    out_1 = torch.FloatTensor(in_c, out_h, in_w)
    kernel_width = weights_h.size(1)
    for i in range(out_h):
        idx = int(indices_h[i][0])
        for j in range(in_c):
            out_1[j, i, :] = img_aug[j, idx:idx + kernel_width, :].transpose(0, 1).mv(weights_h[i])

    # process W dimension
    # symmetric copying
    out_1_aug = torch.FloatTensor(in_c, out_h, in_w + sym_len_ws + sym_len_we)
    out_1_aug.narrow(2, sym_len_ws, in_w).copy_(out_1)

    sym_patch = out_1[:, :, :sym_len_ws]
    inv_idx = torch.arange(sym_patch.size(2) - 1, -1, -1).long()
    sym_patch_inv = sym_patch.index_select(2, inv_idx)
    out_1_aug.narrow(2, 0, sym_len_ws).copy_(sym_patch_inv)

    sym_patch = out_1[:, :, -sym_len_we:]
    inv_idx = torch.arange(sym_patch.size(2) - 1, -1, -1).long()
    sym_patch_inv = sym_patch.index_select(2, inv_idx)
    out_1_aug.narrow(2, sym_len_ws + in_w, sym_len_we).copy_(sym_patch_inv)

    out_2 = torch.FloatTensor(in_c, out_h, out_w)
    kernel_width = weights_w.size(1)
    for i in range(out_w):
        idx = int(indices_w[i][0])
        for j in range(in_c):
            out_2[j, :, i] = out_1_aug[j, :, idx:idx + kernel_width].mv(weights_w[i])

    if squeeze_flag:
        out_2 = out_2.squeeze(0)
    if numpy_type:
        out_2 = out_2.numpy()
        if not squeeze_flag:
            out_2 = out_2.transpose(1, 2, 0)

    return out_2


def bgr_to_ycbcr(image: np.ndarray, only_use_y_channel: bool) -> np.ndarray:
    if only_use_y_channel:
        image = np.dot(image, [24.966, 128.553, 65.481]) + 16.0
    else:
        image = np.matmul(image, [[24.966, 112.0, -18.214], [128.553, -74.203, -93.786], [65.481, -37.797, 112.0]]) + [
            16, 128, 128]

    image /= 255.
    image = image.astype(np.float32)

    return image


def random_crop(image: np.ndarray, image_size: int, random=_random) -> np.ndarray:
    image_height, image_width = image.shape[:2]

    # Just need to find the top and left coordinates of the image
    top = random.randint(0, image_height - image_size)
    left = random.randint(0, image_width - image_size)

    # Crop image patch
    patch_image = image[top:top + image_size, left:left + image_size, ...]

    return patch_image


# dataset.py
class TrainValidImageDataset(Dataset):
    def __init__(
            self,
            gt_images: list,
            gt_image_size: int,
            upscale_factor: int,
            mode: str,
            rng=None,
            bug=None,
    ) -> None:
        super(TrainValidImageDataset, self).__init__()
        self.gt_images = gt_images
        self.gt_image_size = gt_image_size
        self.upscale_factor = upscale_factor
        self.mode = mode
        self.rng = rng
        self.bug = bug

    def __getitem__(self, batch_index: int) -> [dict[str, Tensor], dict[str, Tensor]]:
        # Read a batch of image data
        image = self.gt_images[batch_index]

        # Image processing operations
        if self.mode == "Train":
            gt_crop_image = random_crop(image, self.gt_image_size, self.rng)
        else:
            raise ValueError("Unsupported data processing model, please use `Train` or `Valid`.")

        if self.bug == "lr_from_another_crop":
            lr_crop_image = image_resize(random_crop(image, self.gt_image_size, self.rng), 1 / self.upscale_factor)
        else:
            lr_crop_image = image_resize(gt_crop_image, 1 / self.upscale_factor)

        # BGR convert Y channel
        gt_crop_y_image = bgr_to_ycbcr(gt_crop_image, only_use_y_channel=True)
        lr_crop_y_image = bgr_to_ycbcr(lr_crop_image, only_use_y_channel=True)

        # Convert image data into Tensor stream format (PyTorch).
        # Note: The range of input and output is between [0, 1]
        gt_crop_y_tensor = image_to_tensor(gt_crop_y_image, False, False)
        lr_crop_y_tensor = image_to_tensor(lr_crop_y_image, False, False)

        return {"gt": gt_crop_y_tensor, "lr": lr_crop_y_tensor}

    def __len__(self) -> int:
        return len(self.gt_images)


# image_quality_assessment.py
def _psnr_torch(raw_tensor: torch.Tensor, dst_tensor: torch.Tensor, crop_border: int,
                only_test_y_channel: bool) -> float:
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


def synthetic_images(seed, n=64, size=80):
    """BGR float images in [0, 1]: two random oriented sinusoid gratings plus three soft blobs each."""
    gen = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    out = []
    for _ in range(n):
        img = np.zeros((size, size, 3), np.float32)
        for _ in range(2):
            theta, freq, phase = gen.uniform(0, np.pi), gen.uniform(0.05, 0.25), gen.uniform(0, 2 * np.pi)
            wave = np.sin(freq * (np.cos(theta) * xx + np.sin(theta) * yy) + phase)
            img += 0.18 * wave[:, :, None] * gen.uniform(0.5, 1.0, 3).astype(np.float32)
        for _ in range(3):
            cy, cx, r = gen.uniform(0, size), gen.uniform(0, size), gen.uniform(4, 12)
            blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
            img += 0.3 * blob[:, :, None] * gen.uniform(-1, 1, 3).astype(np.float32)
        out.append(np.clip(img + 0.5, 0.0, 1.0).astype(np.float32))
    return out


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = _random.Random(seed)

    train_datasets = TrainValidImageDataset(synthetic_images(seed), config.gt_image_size, config.upscale_factor,
                                            "Train", rng=rng, bug=bug)
    train_dataloader = DataLoader(train_datasets,
                                  batch_size=config.batch_size,
                                  shuffle=True,
                                  drop_last=True,
                                  generator=torch.Generator().manual_seed(seed))
    test_gt = bgr_to_ycbcr(synthetic_images(seed + 1000, n=1, size=config.gt_image_size)[0], only_use_y_channel=True)
    test_lr = image_resize(test_gt, 1 / config.upscale_factor)
    test_pair = {"gt": image_to_tensor(test_gt, False, False)[None],
                 "lr": image_to_tensor(test_lr, False, False)[None]}

    espcn_model = espcn_x4(in_channels=config.in_channels, out_channels=config.out_channels,
                           channels=config.channels, bug=bug)
    criterion = nn.MSELoss()
    optimizer = optim.SGD(espcn_model.parameters(),
                          lr=config.model_lr,
                          momentum=config.model_momentum,
                          weight_decay=config.model_weight_decay,
                          nesterov=config.model_nesterov)
    scheduler = lr_scheduler.MultiStepLR(optimizer, milestones=config.lr_scheduler_milestones,
                                         gamma=config.lr_scheduler_gamma)

    first = next(iter(train_dataloader))
    state = {"it": iter(train_dataloader)}

    def train_step():
        # Put the generative network model in training mode
        espcn_model.train()
        try:
            batch_data = next(state["it"])
        except StopIteration:  # the epoch ends: main's scheduler.step(), then the next epoch
            scheduler.step()
            state["it"] = iter(train_dataloader)
            batch_data = next(state["it"])

        gt = batch_data["gt"]
        lr = batch_data["lr"]

        # Initialize generator gradients
        if bug != "zero_grad_after_backward":
            espcn_model.zero_grad(set_to_none=True)

        sr = espcn_model(lr)
        loss = torch.mul(config.loss_weights, criterion(sr, gt))

        # Backpropagation
        loss.backward()
        if bug == "zero_grad_after_backward":
            espcn_model.zero_grad(set_to_none=True)

        # update generator weights
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            sr = model(test_pair["lr"])
            psnr = _psnr_torch(sr, test_pair["gt"], config.upscale_factor, config.only_test_y_channel)
        return float(psnr.mean())

    class LrGtPairs:
        # the loop's ``lr = batch_data["lr"]``, ``gt = batch_data["gt"]`` over the train loader
        def __iter__(self):
            for b in train_dataloader:
                yield b["lr"], b["gt"]

    return Program(name="lornatangespcn_sr", model=espcn_model, batch=(first["lr"], first["gt"]),
                   loss_fn=lambda sr, gt: torch.mul(config.loss_weights, criterion(sr, gt)),
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn,
                   loader=LrGtPairs())


build = functools.partial(_build)

BUGS = [
    Bug("lr_from_another_crop", functools.partial(_build, bug="lr_from_another_crop"), "learning_ledger",
        ("TASK",)),
    Bug("pixel_shuffle_as_view", functools.partial(_build, bug="pixel_shuffle_as_view"), "tensor_trace",
        ("sub_pixel",)),
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

"""EDSR of icpm/super-resolution: ``EDSR/model.py``'s ``Net`` (input conv, four residual blocks that share one
BatchNorm between their two convolutions as written, a mid conv with a long skip, log2(upscale) sub-pixel blocks, an
output conv; ``weight_init`` walks only the top-level modules), trained by ``EDSR/solver.py``'s ``EDSRTrainer``
driven from ``main.py`` (``--model edsr``): L1 loss, Adam(lr 0.01, betas (0.9, 0.999), eps 1e-8),
``MultiStepLR(milestones=[50, 75, 100], gamma=0.5)`` stepped with the epoch after ``test()``; ``train()`` puts the
model in train mode and runs ``zero_grad``, loss, ``backward``, ``step`` per batch; ``test()`` runs under ``eval()``
and ``no_grad`` and reports PSNR from the L1 criterion, as written. The data are ``dataset/``'s Y channel of each
image, centre-cropped to a multiple of the upscale factor (target) and resized down by it (input).

Source: https://github.com/icpm/super-resolution
Commit: b0914893d3edfe2488396490ece59b6511c0e6a8
Files: main.py, EDSR/model.py, EDSR/solver.py, dataset/data.py, dataset/dataset.py
License: Apache-2.0 (LICENSES/icpm-super-resolution.txt)
Domain: super-resolution (EDSR-style residual network with pixel shuffle, x4, L1)

Deviations from the original:
- sizes: crop 256 -> 32 (so inputs are 8x8, targets 32x32, x4 as ``main.py``'s default ``--upscale_factor 4``),
  ``base_channel`` 64 -> 32, ``num_residuals`` 4 kept; batch size 1 (``main.py``'s default) -> 8 so one step sees
  more than one image; 200 training images and 8 test images;
- data: BSDS300 (downloaded by ``download_bsd300``) is replaced by synthetic luminance images made from ``seed``
  (oriented sinusoid gratings plus soft blobs, in [0, 1]); torchvision and PIL are not available, so
  ``CenterCrop``, ``Resize`` (PIL bilinear with antialiasing: ``F.interpolate(mode="bilinear", antialias=True)``)
  and ``ToTensor`` are written out in plain torch on the Y channel directly;
- ``.cuda()``, ``cudnn.benchmark``, the progress bar, the prints and ``save()`` are dropped (CPU);
- one ``train_step`` is one batch of ``train()``'s loop; when the loader is exhausted the epoch ends as in ``run()``:
  ``test()``, ``scheduler.step(epoch)``, then the next ``train()``'s ``model.train()``; ``eval_fn`` is ``test()``'s
  PSNR on a batch.
"""
# ruff: noqa: UP008, SIM101, PLR0402  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
from math import log10

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as data
from torch.utils.data import DataLoader

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

UPSCALE, CROP, IMG, BATCH_SIZE, N_TRAIN, N_TEST = 4, 32, 36, 8, 200, 8
LR, N_EPOCHS, SEED, BASE_CHANNEL = 0.01, 20, 123, 32


# ---- EDSR/model.py -------------------------------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self, num_channels, base_channel, upscale_factor, num_residuals):
        super(Net, self).__init__()

        self.input_conv = nn.Conv2d(num_channels, base_channel, kernel_size=3, stride=1, padding=1)

        resnet_blocks = []
        for _ in range(num_residuals):
            resnet_blocks.append(ResnetBlock(base_channel, kernel=3, stride=1, padding=1))
        self.residual_layers = nn.Sequential(*resnet_blocks)

        self.mid_conv = nn.Conv2d(base_channel, base_channel, kernel_size=3, stride=1, padding=1)

        upscale = []
        for _ in range(int(math.log2(upscale_factor))):
            upscale.append(PixelShuffleBlock(base_channel, base_channel, upscale_factor=2))
        self.upscale_layers = nn.Sequential(*upscale)

        self.output_conv = nn.Conv2d(base_channel, num_channels, kernel_size=3, stride=1, padding=1)

    def weight_init(self, mean=0.0, std=0.02):
        for m in self._modules:
            normal_init(self._modules[m], mean, std)

    def forward(self, x):
        x = self.input_conv(x)
        residual = x
        x = self.residual_layers(x)
        x = self.mid_conv(x)
        x = torch.add(x, residual)
        x = self.upscale_layers(x)
        x = self.output_conv(x)
        return x


def normal_init(m, mean, std):
    if isinstance(m, nn.ConvTranspose2d) or isinstance(m, nn.Conv2d):
        m.weight.data.normal_(mean, std)
        if m.bias is not None:
            m.bias.data.zero_()


class ResnetBlock(nn.Module):
    def __init__(self, num_channel, kernel=3, stride=1, padding=1):
        super(ResnetBlock, self).__init__()
        self.conv1 = nn.Conv2d(num_channel, num_channel, kernel, stride, padding)
        self.conv2 = nn.Conv2d(num_channel, num_channel, kernel, stride, padding)
        self.bn = nn.BatchNorm2d(num_channel)
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x):
        residual = x
        x = self.bn(self.conv1(x))
        x = self.activation(x)
        x = self.bn(self.conv2(x))
        x = torch.add(x, residual)
        return x


class PixelShuffleBlock(nn.Module):
    def __init__(self, in_channel, out_channel, upscale_factor, kernel=3, stride=1, padding=1):
        super(PixelShuffleBlock, self).__init__()
        self.conv = nn.Conv2d(in_channel, out_channel * upscale_factor ** 2, kernel, stride, padding)
        self.ps = nn.PixelShuffle(upscale_factor)

    def forward(self, x):
        x = self.ps(self.conv(x))
        return x


# ---- dataset/: synthetic luminance images and the transforms in plain torch ----------------------------------

def synthetic_y_images(gen, n, size):
    """Y-channel images in [0, 1]: two oriented sinusoid gratings plus three soft blobs each."""
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    out = []
    for _ in range(n):
        img = torch.full((size, size), 0.5)
        for _ in range(2):
            theta, freq, phase = (float(v) for v in torch.rand(3, generator=gen) * torch.tensor([math.pi, 0.6, 6.28]))
            img += 0.2 * torch.sin((freq + 0.15) * (math.cos(theta) * xx + math.sin(theta) * yy) + phase)
        for _ in range(3):
            cy, cx = (float(v) for v in torch.rand(2, generator=gen) * size)
            r = 2.0 + 4.0 * float(torch.rand(1, generator=gen))
            sign = 1.0 if float(torch.rand(1, generator=gen)) < 0.5 else -1.0
            img += sign * 0.3 * torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
        out.append(img.clamp(0, 1)[None])
    return out


def calculate_valid_crop_size(crop_size, upscale_factor):
    return crop_size - (crop_size % upscale_factor)


def center_crop(img, crop_size):
    h, w = img.shape[-2:]
    i, j = (h - crop_size) // 2, (w - crop_size) // 2
    return img[..., i:i + crop_size, j:j + crop_size]


def input_transform(crop_size, upscale_factor):
    """Compose([CenterCrop(crop_size), Resize(crop_size // upscale_factor), ToTensor()])."""
    def t(img):
        img = center_crop(img, crop_size)
        return F.interpolate(img[None], size=(crop_size // upscale_factor,) * 2, mode="bilinear",
                             align_corners=False, antialias=True)[0]
    return t


def target_transform(crop_size):
    """Compose([CenterCrop(crop_size), ToTensor()])."""
    return lambda img: center_crop(img, crop_size)


class DatasetFromFolder(data.Dataset):
    def __init__(self, images, input_transform=None, target_transform=None, bug=None):
        super(DatasetFromFolder, self).__init__()
        self.images = images  # the loaded Y channels stand in for ``image_filenames`` + ``load_img``

        self.input_transform = input_transform
        self.target_transform = target_transform
        self.bug = bug

    def __getitem__(self, index):
        input_image = self.images[index]
        target = input_image.clone()
        if self.bug == "target_from_next_image":
            target = self.images[(index + 1) % len(self.images)].clone()
        if self.input_transform:
            input_image = self.input_transform(input_image)
        if self.target_transform:
            target = self.target_transform(target)

        return input_image, target

    def __len__(self):
        return len(self.images)


# ---- main.py + EDSR/solver.py -----------------------------------------------------------------------------

def _build(seed, bug=None):
    gen = torch.Generator().manual_seed(seed)
    crop_size = calculate_valid_crop_size(CROP, UPSCALE)
    train_set = DatasetFromFolder(synthetic_y_images(gen, N_TRAIN, IMG), input_transform(crop_size, UPSCALE),
                                  target_transform(crop_size), bug=bug)
    test_set = DatasetFromFolder(synthetic_y_images(gen, N_TEST, IMG), input_transform(crop_size, UPSCALE),
                                 target_transform(crop_size))
    training_loader = DataLoader(dataset=train_set, batch_size=BATCH_SIZE, shuffle=True,
                                 generator=torch.Generator().manual_seed(seed))
    testing_loader = DataLoader(dataset=test_set, batch_size=BATCH_SIZE, shuffle=False)

    # build_model()
    torch.manual_seed(seed)
    model = Net(num_channels=1, upscale_factor=UPSCALE, base_channel=BASE_CHANNEL, num_residuals=4)
    model.weight_init(mean=0.0, std=0.02)
    criterion = torch.nn.L1Loss()
    torch.manual_seed(seed)  # self.seed

    optimizer = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[50, 75, 100], gamma=0.5)  # lr decay

    def test():
        model.eval()
        avg_psnr = 0

        with torch.no_grad():
            for batch_num, (data, target) in enumerate(testing_loader):
                prediction = model(data)
                mse = criterion(prediction, target)
                psnr = 10 * log10(1 / mse.item())
                avg_psnr += psnr
        return avg_psnr / len(testing_loader)

    state = {"it": None, "epoch": 1}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            if state["it"] is not None:  # the end of an epoch in run()
                test()
                scheduler.step(state["epoch"])
                state["epoch"] += 1
            if bug != "train_mode_not_restored":
                model.train()
            state["it"] = iter(training_loader)
            return next(state["it"])

    def train_step():
        data, target = next_batch()
        if bug == "zero_grad_after_backward":
            loss = criterion(model(data), target)
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss = criterion(model(data), target)
            loss.backward()
        optimizer.step()
        return loss.detach()

    def eval_fn(model, batch):
        data, target = batch
        model.eval()
        with torch.no_grad():
            mse = criterion(model(data), target)
        model.train()
        return 10 * log10(1 / mse.item())

    first = next(iter(DataLoader(train_set, batch_size=BATCH_SIZE)))
    return Program(name="icpmsr_edsr", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=training_loader)


build = functools.partial(_build)

BUGS = [
    # the Dataset pairs each input with the next file's crop (an index slip in __getitem__): the target no longer
    # follows from the input.
    Bug("target_from_next_image", functools.partial(_build, bug="target_from_next_image"), "learning_ledger",
        ("TASK",)),
    # zero_grad moved between backward and step: Adam steps on zero gradients.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
    # train() without its model.train(): after the first test() the BatchNorm layers stay in eval mode and train
    # on running statistics.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe", (),
        kind="step.eval_mode_not_restored"),
]

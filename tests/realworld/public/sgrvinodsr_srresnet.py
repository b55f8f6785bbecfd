"""SRResNet x4 super-resolution (Ledig et al.), sgrvinod's a-PyTorch-Tutorial-to-Super-Resolution: a 9x9 PReLU input
convolution, residual blocks (conv-BN-PReLU, conv-BN) with a long skip, two sub-pixel (PixelShuffle x2 + PReLU)
blocks and a 9x9 Tanh output convolution; LR inputs ImageNet-normalized, HR targets in [-1, 1], ``nn.MSELoss``,
Adam (lr 1e-4) over the parameters that require gradients; LR images made by PIL's bicubic downsizing of random
96x96 HR crops; evaluation by PSNR on the Y channel (border of 4 cropped).

Source: https://github.com/sgrvinod/a-PyTorch-Tutorial-to-Super-Resolution
Commit: c30556bc79a9d43539f2d658722bcb7ff5011ddb
Files: train_srresnet.py, models.py, datasets.py, utils.py, eval.py
License: MIT (Copyright (c) 2020 Sagar Vinodababu; full text in
LICENSES/sgrvinod-a-PyTorch-Tutorial-to-Super-Resolution.txt)
Domain: vision, super-resolution (SRResNet x4, MSE)

Kept as written: ``ConvolutionalBlock``, ``SubPixelConvolutionalBlock``, ``ResidualBlock``, ``SRResNet``;
``convert_image`` (the ``pil``, ``[0, 1]``, ``[-1, 1]``, ``imagenet-norm`` and ``y-channel`` paths),
``ImageTransforms`` (the random crop with ``random.randint(1, width - crop_size)``, PIL ``Image.BICUBIC`` resize, the
test split's center crop), ``SRDataset.__getitem__`` (``convert('RGB')``), ``AverageMeter``, ``clip_gradient``,
``main``'s model/optimizer construction (``Adam(filter(requires_grad))``) and ``train``'s loop body
(``model.train()`` at the epoch's start, forward, ``criterion(sr_imgs, hr_imgs)``, zero_grad, backward, the
optional clip with ``grad_clip = None``, step); ``eval.py``'s PSNR on ``convert_image(..., 'y-channel')``.

Deviations from the original:
- sizes for 2 CPU cores: ``crop_size`` 96 -> 32 (LR 8x8, ``scaling_factor`` 4 kept), ``n_channels`` 64 -> 16,
  ``n_blocks`` 16 -> 2, kernel sizes 9/3 kept; ``batch_size`` 16 kept; ``lr`` 1e-4 -> 1e-3 so that 30 steps show the
  loss falling (the original runs 1e6 iterations);
- data: the training folders' JPEGs (listed in ``train_images.json`` by ``create_data_lists``) are replaced by 96
  synthetic 48x48 RGB PIL images made from ``seed`` (smooth colour gradients, sinusoidal textures and soft discs),
  8 further ones for the test split; ``SRDataset`` takes the PIL images from a list instead of paths (its
  ``Image.open`` and the JSON lists are dropped); ``random`` (the crop's) is seeded from ``seed``;
- torchvision is not here: ``FT.to_tensor`` (a PIL RGB image -> CHW float in [0, 1]) is written out with numpy;
- the CUDA device (``imagenet_*_cuda`` are the CPU tensors), the DataLoader's workers/pin_memory, checkpoints and
  timing/printing are dropped; the DataLoader shuffles with a ``torch.Generator(seed)``;
- one ``train_step`` is one iteration of ``train``'s loop (returning the loss); ``eval_fn`` is ``eval.py``'s loop
  for the SRResNet (``model.eval()``, ``no_grad``) on the synthetic test split, returning the mean PSNR computed as
  skimage's ``peak_signal_noise_ratio`` with ``data_range=255`` (written out; SSIM is left out, skimage is not here);
  like the original script, which evaluates a saved checkpoint separately, ``eval_fn`` puts the model back in
  training mode afterwards;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, UP031, C408

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# Data parameters
crop_size = 32  # (port) 96
scaling_factor = 4

# Model parameters
large_kernel_size = 9
small_kernel_size = 3
n_channels = 16  # (port) 64
n_blocks = 2  # (port) 16

# Learning parameters
batch_size = 16
lr = 1e-3  # (port) 1e-4
grad_clip = None

device = torch.device("cpu")


# ------------------------------------------------------------------------------------------------ models.py
class ConvolutionalBlock(nn.Module):
    """
    A convolutional block, comprising convolutional, BN, activation layers.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, batch_norm=False, activation=None):
        super(ConvolutionalBlock, self).__init__()

        if activation is not None:
            activation = activation.lower()
            assert activation in {'prelu', 'leakyrelu', 'tanh'}

        layers = list()

        layers.append(
            nn.Conv2d(in_channels=in_channels, out_channels=out_channels, kernel_size=kernel_size, stride=stride,
                      padding=kernel_size // 2))

        if batch_norm is True:
            layers.append(nn.BatchNorm2d(num_features=out_channels))

        if activation == 'prelu':
            layers.append(nn.PReLU())
        elif activation == 'leakyrelu':
            layers.append(nn.LeakyReLU(0.2))
        elif activation == 'tanh':
            layers.append(nn.Tanh())

        self.conv_block = nn.Sequential(*layers)

    def forward(self, input):
        output = self.conv_block(input)  # (N, out_channels, w, h)

        return output


class SubPixelConvolutionalBlock(nn.Module):
    """
    A subpixel convolutional block, comprising convolutional, pixel-shuffle, and PReLU activation layers.
    """

    def __init__(self, kernel_size=3, n_channels=64, scaling_factor=2):
        super(SubPixelConvolutionalBlock, self).__init__()

        self.conv = nn.Conv2d(in_channels=n_channels, out_channels=n_channels * (scaling_factor ** 2),
                              kernel_size=kernel_size, padding=kernel_size // 2)
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor=scaling_factor)
        self.prelu = nn.PReLU()

    def forward(self, input):
        output = self.conv(input)  # (N, n_channels * scaling factor^2, w, h)
        output = self.pixel_shuffle(output)  # (N, n_channels, w * scaling factor, h * scaling factor)
        output = self.prelu(output)  # (N, n_channels, w * scaling factor, h * scaling factor)

        return output


class ResidualBlock(nn.Module):
    """
    A residual block, comprising two convolutional blocks with a residual connection across them.
    """

    def __init__(self, kernel_size=3, n_channels=64):
        super(ResidualBlock, self).__init__()

        self.conv_block1 = ConvolutionalBlock(in_channels=n_channels, out_channels=n_channels, kernel_size=kernel_size,
                                              batch_norm=True, activation='PReLu')

        self.conv_block2 = ConvolutionalBlock(in_channels=n_channels, out_channels=n_channels, kernel_size=kernel_size,
                                              batch_norm=True, activation=None)

    def forward(self, input):
        residual = input  # (N, n_channels, w, h)
        output = self.conv_block1(input)  # (N, n_channels, w, h)
        output = self.conv_block2(output)  # (N, n_channels, w, h)
        output = output + residual  # (N, n_channels, w, h)

        return output


class SRResNet(nn.Module):
    """
    The SRResNet, as defined in the paper.
    """

    def __init__(self, large_kernel_size=9, small_kernel_size=3, n_channels=64, n_blocks=16, scaling_factor=4):
        super(SRResNet, self).__init__()

        scaling_factor = int(scaling_factor)
        assert scaling_factor in {2, 4, 8}, "The scaling factor must be 2, 4, or 8!"

        self.conv_block1 = ConvolutionalBlock(in_channels=3, out_channels=n_channels, kernel_size=large_kernel_size,
                                              batch_norm=False, activation='PReLu')

        self.residual_blocks = nn.Sequential(
            *[ResidualBlock(kernel_size=small_kernel_size, n_channels=n_channels) for i in range(n_blocks)])

        self.conv_block2 = ConvolutionalBlock(in_channels=n_channels, out_channels=n_channels,
                                              kernel_size=small_kernel_size,
                                              batch_norm=True, activation=None)

        n_subpixel_convolution_blocks = int(math.log2(scaling_factor))
        self.subpixel_convolutional_blocks = nn.Sequential(
            *[SubPixelConvolutionalBlock(kernel_size=small_kernel_size, n_channels=n_channels, scaling_factor=2) for i
              in range(n_subpixel_convolution_blocks)])

        self.conv_block3 = ConvolutionalBlock(in_channels=n_channels, out_channels=3, kernel_size=large_kernel_size,
                                              batch_norm=False, activation='Tanh')

    def forward(self, lr_imgs):
        output = self.conv_block1(lr_imgs)  # (N, 3, w, h)
        residual = output  # (N, n_channels, w, h)
        output = self.residual_blocks(output)  # (N, n_channels, w, h)
        output = self.conv_block2(output)  # (N, n_channels, w, h)
        output = output + residual  # (N, n_channels, w, h)
        output = self.subpixel_convolutional_blocks(output)  # (N, n_channels, w * scaling factor, h * scaling factor)
        sr_imgs = self.conv_block3(output)  # (N, 3, w * scaling factor, h * scaling factor)

        return sr_imgs


# ------------------------------------------------------------------------------------------------- utils.py
rgb_weights = torch.FloatTensor([65.481, 128.553, 24.966]).to(device)
imagenet_mean = torch.FloatTensor([0.485, 0.456, 0.406]).unsqueeze(1).unsqueeze(2)
imagenet_std = torch.FloatTensor([0.229, 0.224, 0.225]).unsqueeze(1).unsqueeze(2)
imagenet_mean_cuda = torch.FloatTensor([0.485, 0.456, 0.406]).to(device).unsqueeze(0).unsqueeze(2).unsqueeze(3)
imagenet_std_cuda = torch.FloatTensor([0.229, 0.224, 0.225]).to(device).unsqueeze(0).unsqueeze(2).unsqueeze(3)


def _to_tensor(img):  # (port) torchvision.transforms.functional.to_tensor for a PIL RGB image
    return torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.).permute(2, 0, 1).contiguous()


def convert_image(img, source, target):
    assert source in {'pil', '[0, 1]', '[-1, 1]'}, "Cannot convert from source format %s!" % source
    assert target in {'pil', '[0, 255]', '[0, 1]', '[-1, 1]', 'imagenet-norm',
                      'y-channel'}, "Cannot convert to target format %s!" % target

    # Convert from source to [0, 1]
    if source == 'pil':
        img = _to_tensor(img)

    elif source == '[0, 1]':
        pass  # already in [0, 1]

    elif source == '[-1, 1]':
        img = (img + 1.) / 2.

    # Convert from [0, 1] to target
    if target == '[0, 255]':
        img = 255. * img

    elif target == '[0, 1]':
        pass  # already in [0, 1]

    elif target == '[-1, 1]':
        img = 2. * img - 1.

    elif target == 'imagenet-norm':
        if img.ndimension() == 3:
            img = (img - imagenet_mean) / imagenet_std
        elif img.ndimension() == 4:
            img = (img - imagenet_mean_cuda) / imagenet_std_cuda

    elif target == 'y-channel':
        img = torch.matmul(255. * img.permute(0, 2, 3, 1)[:, 4:-4, 4:-4, :], rgb_weights) / 255. + 16.

    return img


class ImageTransforms(object):
    """
    Image transformation pipeline.
    """

    def __init__(self, split, crop_size, scaling_factor, lr_img_type, hr_img_type, bug=None):
        self.split = split.lower()
        self.crop_size = crop_size
        self.scaling_factor = scaling_factor
        self.lr_img_type = lr_img_type
        self.hr_img_type = hr_img_type
        self.bug = bug

        assert self.split in {'train', 'test'}

    def __call__(self, img):
        # Crop
        if self.split == 'train':
            # Take a random fixed-size crop of the image, which will serve as the high-resolution (HR) image
            left = random.randint(1, img.width - self.crop_size)
            top = random.randint(1, img.height - self.crop_size)
            right = left + self.crop_size
            bottom = top + self.crop_size
            hr_img = img.crop((left, top, right, bottom))
        else:
            # Take the largest possible center-crop of it such that its dimensions are perfectly divisible by the
            # scaling factor
            x_remainder = img.width % self.scaling_factor
            y_remainder = img.height % self.scaling_factor
            left = x_remainder // 2
            top = y_remainder // 2
            right = left + (img.width - x_remainder)
            bottom = top + (img.height - y_remainder)
            hr_img = img.crop((left, top, right, bottom))

        # Downsize this crop to obtain a low-resolution version of it
        if self.bug == "lr_from_another_crop" and self.split == 'train':
            left2 = random.randint(1, img.width - self.crop_size)
            top2 = random.randint(1, img.height - self.crop_size)
            src = img.crop((left2, top2, left2 + self.crop_size, top2 + self.crop_size))
        else:
            src = hr_img
        lr_img = src.resize((int(hr_img.width / self.scaling_factor), int(hr_img.height / self.scaling_factor)),
                            Image.BICUBIC)

        # Sanity check
        assert hr_img.width == lr_img.width * self.scaling_factor and hr_img.height == lr_img.height * self.scaling_factor

        # Convert the LR and HR image to the required type
        lr_img = convert_image(lr_img, source='pil', target=self.lr_img_type)
        hr_img = convert_image(hr_img, source='pil', target=self.hr_img_type)

        return lr_img, hr_img


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


def clip_gradient(optimizer, grad_clip):
    for group in optimizer.param_groups:
        for param in group['params']:
            if param.grad is not None:
                param.grad.data.clamp_(-grad_clip, grad_clip)


# ---------------------------------------------------------------------------------------------- datasets.py
class SRDataset(Dataset):
    def __init__(self, images, split, crop_size, scaling_factor, lr_img_type, hr_img_type, bug=None):
        self.split = split.lower()
        self.crop_size = int(crop_size)
        self.scaling_factor = int(scaling_factor)
        self.lr_img_type = lr_img_type
        self.hr_img_type = hr_img_type

        assert self.split in {'train', 'test'}
        assert lr_img_type in {'[0, 255]', '[0, 1]', '[-1, 1]', 'imagenet-norm'}
        assert hr_img_type in {'[0, 255]', '[0, 1]', '[-1, 1]', 'imagenet-norm'}

        if self.split == 'train':
            assert self.crop_size % self.scaling_factor == 0

        self.images = images  # (port) the PIL images themselves, not paths from a JSON list

        self.transform = ImageTransforms(split=self.split,
                                         crop_size=self.crop_size,
                                         scaling_factor=self.scaling_factor,
                                         lr_img_type=self.lr_img_type,
                                         hr_img_type=self.hr_img_type,
                                         bug=bug)

    def __getitem__(self, i):
        img = self.images[i]  # (port) Image.open(self.images[i], mode='r')
        img = img.convert('RGB')
        lr_img, hr_img = self.transform(img)

        return lr_img, hr_img

    def __len__(self):
        return len(self.images)


# ---------------------------------------------------------------------------------------------- (port) data
def synthetic_images(n, size, rng):
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) / size
    out = []
    for _ in range(n):
        c0, c1 = rng.random(3), rng.random(3)
        a = rng.random() * 2 * np.pi
        grad = (np.cos(a) * xs + np.sin(a) * ys + 1) / 2
        img = c0[None, None] * grad[..., None] + c1[None, None] * (1 - grad[..., None])
        f = 3 + rng.random() * 6
        b = rng.random() * 2 * np.pi
        tex = 0.5 + 0.5 * np.sin(2 * np.pi * f * (np.cos(b) * xs + np.sin(b) * ys))
        img = 0.7 * img + 0.3 * tex[..., None] * rng.random(3)[None, None]
        for _ in range(3):
            cx, cy, r = rng.random(), rng.random(), 0.05 + 0.15 * rng.random()
            m = np.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / (2 * r * r))[..., None]
            img = img * (1 - m) + rng.random(3)[None, None] * m
        out.append(Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8), mode="RGB"))
    return out


def _psnr(image_true, image_test, data_range):  # (port) skimage.metrics.peak_signal_noise_ratio
    err = np.mean((image_true.astype(np.float64) - image_test.astype(np.float64)) ** 2)
    return 10 * np.log10((data_range ** 2) / err)


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    train_images = synthetic_images(96, 48, rng)
    test_images = synthetic_images(8, 48, rng)

    model = SRResNet(large_kernel_size=large_kernel_size, small_kernel_size=small_kernel_size,
                     n_channels=n_channels, n_blocks=n_blocks, scaling_factor=scaling_factor)
    # Initialize the optimizer
    optimizer = torch.optim.Adam(params=filter(lambda p: p.requires_grad, model.parameters()),
                                 lr=lr)

    # Move to default device
    model = model.to(device)
    criterion = nn.MSELoss().to(device)

    # Custom dataloaders
    train_dataset = SRDataset(train_images,
                              split='train',
                              crop_size=crop_size,
                              scaling_factor=scaling_factor,
                              lr_img_type='imagenet-norm',
                              hr_img_type='[-1, 1]',
                              bug=bug)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=batch_size, shuffle=True, num_workers=0,
                                               generator=torch.Generator().manual_seed(seed))
    test_dataset = SRDataset(test_images, split='test', crop_size=0, scaling_factor=4,
                             lr_img_type='imagenet-norm', hr_img_type='[-1, 1]')
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=1, shuffle=False)
    losses = AverageMeter()
    st = {"it": None}

    def train_step():
        try:
            lr_imgs, hr_imgs = next(st["it"])
        except (StopIteration, TypeError):
            model.train()  # training mode enables batch normalization
            losses.reset()
            st["it"] = iter(train_loader)
            lr_imgs, hr_imgs = next(st["it"])

        # Move to default device
        lr_imgs = lr_imgs.to(device)  # (batch_size (N), 3, 24, 24), imagenet-normed
        hr_imgs = hr_imgs.to(device)  # (batch_size (N), 3, 96, 96), in [-1, 1]

        # Forward prop.
        sr_imgs = model(lr_imgs)  # (N, 3, 96, 96), in [-1, 1]

        # Loss
        loss = criterion(sr_imgs, hr_imgs)  # scalar

        # Backward prop.
        if bug == "zero_grad_after_backward":
            loss.backward()
            optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss.backward()

        # Clip gradients, if necessary
        if grad_clip is not None:
            clip_gradient(optimizer, grad_clip)

        # Update model
        optimizer.step()

        # Keep track of loss
        losses.update(loss.item(), lr_imgs.size(0))
        return loss.item()

    def evaluate(model, _batch=None):
        was_training = model.training
        model.eval()
        PSNRs = AverageMeter()
        with torch.no_grad():
            for i, (lr_imgs, hr_imgs) in enumerate(test_loader):
                sr_imgs = model(lr_imgs)  # (1, 3, w, h), in [-1, 1]
                sr_imgs_y = convert_image(sr_imgs, source='[-1, 1]', target='y-channel').squeeze(0)
                hr_imgs_y = convert_image(hr_imgs, source='[-1, 1]', target='y-channel').squeeze(0)
                psnr = _psnr(hr_imgs_y.cpu().numpy(), sr_imgs_y.cpu().numpy(), data_range=255.)
                PSNRs.update(psnr, lr_imgs.size(0))
        model.train(was_training)
        return float(PSNRs.avg)

    def loader():
        yield from train_loader

    state = random.getstate()
    random.seed(seed + 12345)
    batch = next(iter(torch.utils.data.DataLoader(train_dataset, batch_size=batch_size, shuffle=False)))
    random.setstate(state)
    return Program(name="sgrvinodsr_srresnet", model=model, batch=tuple(batch), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=evaluate, loader=loader())


build = functools.partial(_build, bug=None)

BUGS = [
    # the LR input downsized from a second random crop of the image instead of the HR crop itself (classic
    # paired-crop slip): the target is no longer the input's high-resolution version.
    Bug("lr_from_another_crop", functools.partial(_build, bug="lr_from_another_crop"), "learning_ledger",
        ("TASK",)),
    # optimizer.zero_grad() after loss.backward() (classic misplaced zero_grad): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

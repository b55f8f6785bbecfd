"""SRGAN x4 as leftthomas/SRGAN trains it: an SRResNet-style generator (9x9 input conv + PReLU, five residual blocks
with BatchNorm, a conv + BN skip, PixelShuffle upsampling, ``(tanh + 1) / 2`` output), a VGG-style discriminator
ending in a sigmoid; per batch the generator step minimizes ``GeneratorLoss`` (pixel MSE + 0.001 * ``mean(1 - D(G(z)))``
+ 0.006 * perceptual MSE on VGG16 ``features[:31]`` + 2e-8 * TV), then the discriminator step minimizes
``1 - D(x) + D(G(z).detach())``; both with Adam at PyTorch's defaults; training pairs are random HR crops and their
bicubic x4 downsamplings.

Source: https://github.com/leftthomas/SRGAN
Commit: 7ddfdf27273c42d858ec52cab5ca1cbfca81d0be
Files: train.py, model.py, loss.py, data_utils.py
License: MIT (Copyright (c) 2020 Hao Ren; full text in LICENSES/leftthomas-SRGAN.txt)
Domain: vision, super-resolution (GAN with perceptual loss)

Deviations from the original:
- sizes: crop_size 88 -> 32 (LR 8x8; 32 is the smallest crop that VGG16's five poolings in ``features[:31]`` keep
  non-empty), batch_size 64 -> 8; the generator's 64 channels -> 32 (five residual blocks kept); the
  discriminator's widths (64 ... 512, 1024) and the VGG16 loss network's widths (64 ... 512) divided by 4, to fit
  2 CPU cores;
- the perceptual loss network: ``vgg16(pretrained=True)`` cannot be downloaded here (and torchvision is absent); it is
  VGG16's ``features`` layer list written out (13 3x3 convs with ReLU, five max-pools, the same ``[:31]`` slice),
  randomly initialised (kaiming, as torchvision's VGG init), frozen and in eval mode as in ``GeneratorLoss``;
- data: the DIV2K folders are replaced by 64 synthetic 40x40 RGB "photos" made from ``seed`` (smooth colour fields
  with a few sharp-edged rectangles); ``RandomCrop`` / ``ToTensor`` / ``Resize(crop // 4, BICUBIC)`` are written in
  plain torch (a random 32x32 crop; bicubic downsampling by ``F.interpolate(..., antialias=True)`` clamped to
  [0, 1]); no workers; the validation set is 8 more images, centre-cropped;
- ``cuda()`` moves, tqdm, the running-results bookkeeping, SSIM, image saving, checkpoints and the CSV are left out;
- one ``train_step`` is one iteration of the batch loop (G step, D step, the extra ``netG(z)`` / ``netD`` pass after
  ``d_loss.backward()`` kept) and returns ``g_loss``; the Program's model is ``netG`` with ``generator_criterion``
  under the current ``netD`` as its loss; ``eval_fn`` is the validation PSNR of ``netG`` in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, FURB163  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys
from math import log10

import torch
import torch.optim as optim
import torch.utils.data
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader
from torch.utils.data.dataset import Dataset

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

CROP_SIZE = 32  # the original 88
UPSCALE_FACTOR = 4
BATCH_SIZE = 8  # the original 64
W = 4  # the discriminator's and the loss network's widths divided by W
G_CH = 32  # the generator's 64 channels


# ---- model.py --------------------------------------------------------------------------------------------------

class Generator(nn.Module):
    def __init__(self, scale_factor):
        upsample_block_num = int(math.log(scale_factor, 2))

        super(Generator, self).__init__()
        self.block1 = nn.Sequential(
            nn.Conv2d(3, G_CH, kernel_size=9, padding=4),
            nn.PReLU()
        )
        self.block2 = ResidualBlock(G_CH)
        self.block3 = ResidualBlock(G_CH)
        self.block4 = ResidualBlock(G_CH)
        self.block5 = ResidualBlock(G_CH)
        self.block6 = ResidualBlock(G_CH)
        self.block7 = nn.Sequential(
            nn.Conv2d(G_CH, G_CH, kernel_size=3, padding=1),
            nn.BatchNorm2d(G_CH)
        )
        block8 = [UpsampleBLock(G_CH, 2) for _ in range(upsample_block_num)]
        block8.append(nn.Conv2d(G_CH, 3, kernel_size=9, padding=4))
        self.block8 = nn.Sequential(*block8)

    def forward(self, x):
        block1 = self.block1(x)
        block2 = self.block2(block1)
        block3 = self.block3(block2)
        block4 = self.block4(block3)
        block5 = self.block5(block4)
        block6 = self.block6(block5)
        block7 = self.block7(block6)
        block8 = self.block8(block1 + block7)

        return (torch.tanh(block8) + 1) / 2


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 64 // W, kernel_size=3, padding=1),
            nn.LeakyReLU(0.2),

            nn.Conv2d(64 // W, 64 // W, kernel_size=3, stride=2, padding=1),
            nn.BatchNorm2d(64 // W),
            nn.LeakyReLU(0.2),

            nn.Conv2d(64 // W, 128 // W, kernel_size=3, padding=1),
            nn.BatchNorm2d(128 // W),
            nn.LeakyReLU(0.2),

            nn.Conv2d(128 // W, 128 // W, kernel_size=3, stride=2, padding=1),
            nn.BatchNorm2d(128 // W),
            nn.LeakyReLU(0.2),

            nn.Conv2d(128 // W, 256 // W, kernel_size=3, padding=1),
            nn.BatchNorm2d(256 // W),
            nn.LeakyReLU(0.2),

            nn.Conv2d(256 // W, 256 // W, kernel_size=3, stride=2, padding=1),
            nn.BatchNorm2d(256 // W),
            nn.LeakyReLU(0.2),

            nn.Conv2d(256 // W, 512 // W, kernel_size=3, padding=1),
            nn.BatchNorm2d(512 // W),
            nn.LeakyReLU(0.2),

            nn.Conv2d(512 // W, 512 // W, kernel_size=3, stride=2, padding=1),
            nn.BatchNorm2d(512 // W),
            nn.LeakyReLU(0.2),

            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(512 // W, 1024 // W, kernel_size=1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(1024 // W, 1, kernel_size=1)
        )

    def forward(self, x):
        batch_size = x.size(0)
        return torch.sigmoid(self.net(x).view(batch_size))


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.prelu = nn.PReLU()
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        residual = self.conv1(x)
        residual = self.bn1(residual)
        residual = self.prelu(residual)
        residual = self.conv2(residual)
        residual = self.bn2(residual)

        return x + residual


class UpsampleBLock(nn.Module):
    def __init__(self, in_channels, up_scale):
        super(UpsampleBLock, self).__init__()
        self.conv = nn.Conv2d(in_channels, in_channels * up_scale ** 2, kernel_size=3, padding=1)
        self.pixel_shuffle = nn.PixelShuffle(up_scale)
        self.prelu = nn.PReLU()

    def forward(self, x):
        x = self.conv(x)
        x = self.pixel_shuffle(x)
        x = self.prelu(x)
        return x


# ---- torchvision's vgg16().features, written out (randomly initialised) --------------------------------------------

def vgg16_features():
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    layers, in_channels = [], 3
    for v in cfg:
        if v == "M":
            layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
        else:
            conv = nn.Conv2d(in_channels, v // W, kernel_size=3, padding=1)
            nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
            nn.init.constant_(conv.bias, 0)
            layers += [conv, nn.ReLU(inplace=True)]
            in_channels = v // W
    return nn.Sequential(*layers)


# ---- loss.py ---------------------------------------------------------------------------------------------------

class GeneratorLoss(nn.Module):
    def __init__(self, bug=None):
        super(GeneratorLoss, self).__init__()
        self.bug = bug
        features = vgg16_features()
        loss_network = nn.Sequential(*list(features)[:31]).eval()
        for param in loss_network.parameters():
            param.requires_grad = False
        self.loss_network = loss_network
        self.mse_loss = nn.MSELoss()
        self.tv_loss = TVLoss()

    def forward(self, out_labels, out_images, target_images):
        # Adversarial Loss
        adversarial_loss = torch.mean(1 - out_labels)
        # Perception Loss
        perception_loss = self.mse_loss(self.loss_network(out_images), self.loss_network(target_images))
        # Image Loss
        image_loss = self.mse_loss(out_images, target_images)
        # TV Loss
        tv_loss = self.tv_loss(out_images)
        return image_loss + 0.001 * adversarial_loss + 0.006 * perception_loss + 2e-8 * tv_loss


class TVLoss(nn.Module):
    def __init__(self, tv_loss_weight=1):
        super(TVLoss, self).__init__()
        self.tv_loss_weight = tv_loss_weight

    def forward(self, x):
        batch_size = x.size()[0]
        h_x = x.size()[2]
        w_x = x.size()[3]
        count_h = self.tensor_size(x[:, :, 1:, :])
        count_w = self.tensor_size(x[:, :, :, 1:])
        h_tv = torch.pow((x[:, :, 1:, :] - x[:, :, :h_x - 1, :]), 2).sum()
        w_tv = torch.pow((x[:, :, :, 1:] - x[:, :, :, :w_x - 1]), 2).sum()
        return self.tv_loss_weight * 2 * (h_tv / count_h + w_tv / count_w) / batch_size

    @staticmethod
    def tensor_size(t):
        return t.size()[1] * t.size()[2] * t.size()[3]


# ---- data_utils.py (the transforms in plain torch, on synthetic images) -------------------------------------------

def make_photos(gen, n, size=40):
    """Smooth colour fields with 2-4 sharp-edged rectangles of random colour, in [0, 1] ([n, 3, size, size])."""
    base = F.interpolate(torch.rand(n, 3, 4, 4, generator=gen), size=size, mode="bilinear", align_corners=False)
    imgs = base.clone()
    for i in range(n):
        for _ in range(int(torch.randint(2, 5, (1,), generator=gen))):
            y0, x0 = torch.randint(0, size - 8, (2,), generator=gen).tolist()
            h, w = torch.randint(4, 16, (2,), generator=gen).tolist()
            imgs[i, :, y0:y0 + h, x0:x0 + w] = torch.rand(3, 1, 1, generator=gen)
    return imgs.clamp(0, 1)


def calculate_valid_crop_size(crop_size, upscale_factor):
    return crop_size - (crop_size % upscale_factor)


def random_crop(img, crop_size):  # RandomCrop(crop_size)
    _, h, w = img.shape
    top = int(torch.randint(0, h - crop_size + 1, ()))
    left = int(torch.randint(0, w - crop_size + 1, ()))
    return img[:, top:top + crop_size, left:left + crop_size]


def bicubic_down(img, size):  # ToPILImage(), Resize(size, interpolation=Image.BICUBIC), ToTensor()
    return F.interpolate(img[None], size=(size, size), mode="bicubic", align_corners=False,
                         antialias=True)[0].clamp(0, 1)


class TrainDatasetFromFolder(Dataset):
    def __init__(self, images, crop_size, upscale_factor, bug=None):
        super(TrainDatasetFromFolder, self).__init__()
        self.images = images
        self.bug = bug
        crop_size = calculate_valid_crop_size(crop_size, upscale_factor)
        self.crop_size = crop_size
        self.hr_transform = functools.partial(random_crop, crop_size=crop_size)
        self.lr_transform = functools.partial(bicubic_down, size=crop_size // upscale_factor)

    def __getitem__(self, index):
        hr_image = self.hr_transform(self.images[index])
        if self.bug == "lr_from_another_crop":
            # the random crop transform called a second time for the LR input (classic): LR and HR show
            # different windows of the image
            lr_image = self.lr_transform(self.hr_transform(self.images[index]))
        else:
            lr_image = self.lr_transform(hr_image)
        return lr_image, hr_image

    def __len__(self):
        return len(self.images)


# ---- train.py --------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_set = TrainDatasetFromFolder(make_photos(gen, 64), crop_size=CROP_SIZE, upscale_factor=UPSCALE_FACTOR,
                                       bug=bug)
    val_hr = make_photos(gen, 8)[:, :, 4:4 + CROP_SIZE, 4:4 + CROP_SIZE]
    val_lr = torch.stack([bicubic_down(x, CROP_SIZE // UPSCALE_FACTOR) for x in val_hr])
    train_loader = DataLoader(dataset=train_set, num_workers=0, batch_size=BATCH_SIZE, shuffle=True,
                              generator=torch.Generator().manual_seed(seed))

    netG = Generator(UPSCALE_FACTOR)
    netD = Discriminator()

    generator_criterion = GeneratorLoss(bug=bug)

    optimizerG = optim.Adam(netG.parameters())
    optimizerD = optim.Adam(netD.parameters())

    state = {"it": None}

    def next_batch():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            netG.train()
            netD.train()
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        data, target = next_batch()

        ############################
        # (1) Update G network: minimize 1-D(G(z)) + Perception Loss + Image Loss + TV Loss
        ###########################
        real_img = target
        z = data
        fake_img = netG(z)
        fake_out = netD(fake_img).mean()

        if bug != "g_zero_grad_dropped":
            optimizerG.zero_grad()
        g_loss = generator_criterion(fake_out, fake_img, real_img)
        g_loss.backward()
        optimizerG.step()

        ############################
        # (2) Update D network: maximize D(x)-1-D(G(z))
        ###########################
        real_out = netD(real_img).mean()
        fake_out = netD(fake_img.detach()).mean()
        if bug == "d_loss_signs_swapped":
            # D pushed to score the fakes high and the real images low (classic sign slip)
            d_loss = 1 - fake_out + real_out
        else:
            d_loss = 1 - real_out + fake_out

        optimizerD.zero_grad()
        d_loss.backward()

        fake_img = netG(z)
        fake_out = netD(fake_img).mean()

        optimizerD.step()
        return g_loss.detach()

    def loss_fn(sr, hr):
        return generator_criterion(netD(sr).mean(), sr, hr)

    def eval_fn(model, batch):
        model.eval()
        with torch.no_grad():
            sr = model(val_lr)
            mse = ((sr - val_hr) ** 2).data.mean()
        model.train()
        return 10 * log10((val_hr.max() ** 2) / mse)

    first = [train_set[i] for i in range(BATCH_SIZE)]
    batch = (torch.stack([f[0] for f in first]), torch.stack([f[1] for f in first]))
    return Program(name="srgan_leftthomas_x4", model=netG, batch=batch, loss_fn=loss_fn, optimizer=optimizerG,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the HR crop drawn again for the LR input (classic data-pipeline slip): input and target are different windows.
    Bug("lr_from_another_crop", functools.partial(_build, bug="lr_from_another_crop"), "learning_ledger",
        ("TASK",)),
    # the discriminator's loss with its two terms' signs swapped (classic): D rewards the fakes, G's adversarial
    # term pulls towards whatever D calls real.
    Bug("d_loss_signs_swapped", functools.partial(_build, bug="d_loss_signs_swapped"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizerG.zero_grad() left out (classic): the generator's gradients pile up across steps.
    Bug("g_zero_grad_dropped", functools.partial(_build, bug="g_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

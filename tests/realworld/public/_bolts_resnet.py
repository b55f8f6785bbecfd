"""pytorch-lightning-bolts' ResNet-18 autoencoder components, shared by the ports that use them: ``lightningbolts_vae``
(Bolts' own VAE) and ``plvae_cifar`` (William Falcon's VAE, which imports them from Bolts); and the synthetic CIFAR-like
images both ports train on.

Source: https://github.com/Lightning-Universe/lightning-bolts
Commit: 34958a8892d42714edf02ba896fd5861ebb3cb7e
File: src/pl_bolts/models/autoencoders/components.py (``Interpolate``, ``conv3x3``, ``conv1x1``, ``resize_conv3x3``,
      ``resize_conv1x1``, ``EncoderBlock``, ``DecoderBlock``, ``ResNetEncoder``, ``ResNetDecoder``, ``resnet18_encoder``,
      ``resnet18_decoder``)
License: Apache-2.0 (full text in LICENSES/Lightning-Universe-lightning-bolts.txt)

Deviations from the original: only the ResNet-18 pieces (the resnet50 bottleneck blocks are left out); the base
width 64 that ``ResNetEncoder`` and ``ResNetDecoder`` hard-code is their ``width`` argument (default 64; every channel
count scales with it), passed on by ``resnet18_encoder``/``resnet18_decoder``, so that each port fits 2 CPU cores.
``make_images`` is not Bolts code: the ports' stand-in for CIFAR-10.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

# ---- src/pl_bolts/models/autoencoders/components.py (resnet18 encoder and decoder) --------------------------

class Interpolate(nn.Module):
    """nn.Module wrapper for F.interpolate."""

    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__()
        self.size, self.scale_factor = size, scale_factor

    def forward(self, x):
        return F.interpolate(x, size=self.size, scale_factor=self.scale_factor)


def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    """1x1 convolution."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


def resize_conv3x3(in_planes, out_planes, scale=1):
    """Upsample + 3x3 convolution with padding to avoid checkerboard artifact."""
    if scale == 1:
        return conv3x3(in_planes, out_planes)
    return nn.Sequential(Interpolate(scale_factor=scale), conv3x3(in_planes, out_planes))


def resize_conv1x1(in_planes, out_planes, scale=1):
    """Upsample + 1x1 convolution with padding to avoid checkerboard artifact."""
    if scale == 1:
        return conv1x1(in_planes, out_planes)
    return nn.Sequential(Interpolate(scale_factor=scale), conv1x1(in_planes, out_planes))


class EncoderBlock(nn.Module):
    """ResNet block, copied from https://github.com/pytorch/vision/blob/master/torchvision/models/resnet.py#L35."""

    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None) -> None:
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        return self.relu(out)


class DecoderBlock(nn.Module):
    """ResNet block, but convs replaced with resize convs, and channel increase is in second conv, not first."""

    expansion = 1

    def __init__(self, inplanes, planes, scale=1, upsample=None) -> None:
        super().__init__()
        self.conv1 = resize_conv3x3(inplanes, inplanes)
        self.bn1 = nn.BatchNorm2d(inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = resize_conv3x3(inplanes, planes, scale)
        self.bn2 = nn.BatchNorm2d(planes)
        self.upsample = upsample

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.upsample is not None:
            identity = self.upsample(x)

        out += identity
        return self.relu(out)


class ResNetEncoder(nn.Module):
    def __init__(self, block, layers, first_conv=False, maxpool1=False, width=64) -> None:  # (port) width
        super().__init__()

        self.inplanes = WIDTH = width
        self.first_conv = first_conv
        self.maxpool1 = maxpool1

        if self.first_conv:
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        else:
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=3, stride=1, padding=1, bias=False)

        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)

        if self.maxpool1:
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        else:
            self.maxpool = nn.MaxPool2d(kernel_size=1, stride=1)

        self.layer1 = self._make_layer(block, WIDTH, layers[0])
        self.layer2 = self._make_layer(block, 2 * WIDTH, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * WIDTH, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 8 * WIDTH, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        return torch.flatten(x, 1)


class ResNetDecoder(nn.Module):
    """Resnet in reverse order."""

    def __init__(self, block, layers, latent_dim, input_height, first_conv=False, maxpool1=False,
                 width=64) -> None:  # (port) width
        super().__init__()

        self.expansion = block.expansion
        self.width = WIDTH = width
        self.inplanes = 8 * WIDTH * block.expansion
        self.first_conv = first_conv
        self.maxpool1 = maxpool1
        self.input_height = input_height

        self.upscale_factor = 8

        self.linear = nn.Linear(latent_dim, self.inplanes * 4 * 4)

        self.layer1 = self._make_layer(block, 4 * WIDTH, layers[0], scale=2)
        self.layer2 = self._make_layer(block, 2 * WIDTH, layers[1], scale=2)
        self.layer3 = self._make_layer(block, WIDTH, layers[2], scale=2)

        if self.maxpool1:
            self.layer4 = self._make_layer(block, WIDTH, layers[3], scale=2)
            self.upscale_factor *= 2
        else:
            self.layer4 = self._make_layer(block, WIDTH, layers[3])

        if self.first_conv:
            self.upscale = Interpolate(scale_factor=2)
            self.upscale_factor *= 2
        else:
            self.upscale = Interpolate(scale_factor=1)

        # interpolate after linear layer using scale factor
        self.upscale1 = Interpolate(size=input_height // self.upscale_factor)

        self.conv1 = nn.Conv2d(WIDTH * block.expansion, 3, kernel_size=3, stride=1, padding=1, bias=False)

    def _make_layer(self, block, planes, blocks, scale=1):
        upsample = None
        if scale != 1 or self.inplanes != planes * block.expansion:
            upsample = nn.Sequential(
                resize_conv1x1(self.inplanes, planes * block.expansion, scale),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = []
        layers.append(block(self.inplanes, planes, scale, upsample))
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.linear(x)

        # NOTE: replaced this by Linear(in_channels, 514 * 4 * 4)
        # x = F.interpolate(x, scale_factor=4)

        x = x.view(x.size(0), 8 * self.width * self.expansion, 4, 4)
        x = self.upscale1(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.upscale(x)

        return self.conv1(x)


def resnet18_encoder(first_conv, maxpool1, width=64):
    return ResNetEncoder(EncoderBlock, [2, 2, 2, 2], first_conv, maxpool1, width)


def resnet18_decoder(latent_dim, input_height, first_conv, maxpool1, width=64):
    return ResNetDecoder(DecoderBlock, [2, 2, 2, 2], latent_dim, input_height, first_conv, maxpool1, width)




# ---- data: synthetic CIFAR-like images ---------------------------------------------------------------------

def make_images(seed, n_train, n_val, height=16):
    """(train, val) image tensors [N, 3, height, height] in [0, 1]: a colour gradient and one or two soft coloured
    blobs."""
    g = torch.Generator().manual_seed(seed)
    coords = torch.linspace(-1, 1, height)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")

    def sample(n):
        base = torch.rand(n, 3, 1, 1, generator=g) * 0.5
        slope = (torch.rand(n, 3, 1, 1, generator=g) - 0.5) * 0.4
        images = base + slope * xx
        for _ in range(2):
            centre = (torch.rand(n, 2, 1, 1, generator=g) - 0.5) * 1.4
            width = 0.15 + 0.25 * torch.rand(n, 1, 1, 1, generator=g)
            colour = torch.rand(n, 3, 1, 1, generator=g)
            present = (torch.rand(n, 1, 1, 1, generator=g) < 0.8).float()
            blob = torch.exp(-((xx - centre[:, :1]) ** 2 + (yy - centre[:, 1:]) ** 2) / (2 * width ** 2))
            images = images + present * blob * colour
        return images.clamp(0, 1)

    return sample(n_train), sample(n_val)

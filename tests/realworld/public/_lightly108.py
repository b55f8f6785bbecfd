# ruff: noqa: UP008, UP031, PLR1704
"""Pieces of lightly 1.0.8 (https://github.com/lightly-ai/lightly, tag v1.0.8,
b8a19889ef47f1a6cd545a527b46adba30d88412; MIT, LICENSES/lightly-ai-lightly.txt) for the ports that pin that
release: ``lightly/models/resnet.py`` (``BasicBlock``, ``ResNet``, ``ResNetGenerator``; ``get_norm_layer(planes, 0)``
inlined as ``BatchNorm2d``; ``Bottleneck``, the deeper variants and the docstrings left out) and
``lightly/data/collate.py`` (``SimCLRCollateFunction`` with ``BaseCollateFunction.forward``; the torchvision
transforms written out on tensors, random draws from a ``torch.Generator``: random resized crop, horizontal flip,
colour jitter with hue as a YIQ rotation, grayscale, normalization; Gaussian blur, vertical flip and rotation, off
in the ported scripts, left out)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

imagenet_normalize = {'mean': [0.485, 0.456, 0.406], 'std': [0.229, 0.224, 0.225]}


# lightly 1.0.8: lightly/models/resnet.py
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1, num_splits: int = 0):
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion*planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion*planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes)
            )

    def forward(self, x: torch.Tensor):
        out = self.conv1(x)
        out = self.bn1(out)
        out = F.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):

    def __init__(self, block=BasicBlock, layers=[2, 2, 2, 2], num_classes=10, width=1., num_splits=0):  # noqa: B006
        super(ResNet, self).__init__()
        self.in_planes = int(64 * width)
        self.base = int(64 * width)
        self.conv1 = nn.Conv2d(3, self.base, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(self.base)
        self.layer1 = self._make_layer(block, self.base, layers[0], stride=1, num_splits=num_splits)
        self.layer2 = self._make_layer(block, self.base*2, layers[1], stride=2, num_splits=num_splits)
        self.layer3 = self._make_layer(block, self.base*4, layers[2], stride=2, num_splits=num_splits)
        self.layer4 = self._make_layer(block, self.base*8, layers[3], stride=2, num_splits=num_splits)
        self.linear = nn.Linear(self.base*8*block.expansion, num_classes)

    def _make_layer(self, block, planes, layers, stride, num_splits):
        strides = [stride] + [1]*(layers-1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride, num_splits))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = F.avg_pool2d(out, 4)
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def ResNetGenerator(name='resnet-18', width=1, num_classes=10, num_splits=0):
    model_params = {
        'resnet-9': {'block': BasicBlock, 'layers': [1, 1, 1, 1]},
        'resnet-18': {'block': BasicBlock, 'layers': [2, 2, 2, 2]},
        'resnet-34': {'block': BasicBlock, 'layers': [3, 4, 6, 3]},
    }
    if name not in model_params:
        raise ValueError('Illegal name: {%s}.' % (name))
    return ResNet(**model_params[name], width=width, num_classes=10, num_splits=num_splits)


# lightly 1.0.8: lightly/data/collate.py (SimCLRCollateFunction, the torchvision transforms written out on tensors)
def _u(g, lo, hi):
    return lo + (hi - lo) * torch.rand((), generator=g).item()


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None]


def _random_resized_crop(img, size, g, scale):
    _, h, w = img.shape
    for _ in range(10):
        target, aspect = h * w * _u(g, *scale), math.exp(_u(g, math.log(3 / 4), math.log(4 / 3)))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(torch.randint(0, h - ch + 1, (), generator=g))
            left = int(torch.randint(0, w - cw + 1, (), generator=g))
            break
    else:
        ch, cw, top, left = h, w, 0, 0
    crop = img[:, top:top + ch, left:left + cw]
    return F.interpolate(crop[None], size=(size, size), mode="bilinear", align_corners=False)[0]


def _color_jitter(img, g, bright, contrast, sat, hue):
    for op in torch.randperm(4, generator=g).tolist():
        if op == 0:
            img = (img * _u(g, 1 - bright, 1 + bright)).clamp(0, 1)
        elif op == 1:
            m = _gray(img).mean()
            img = ((img - m) * _u(g, 1 - contrast, 1 + contrast) + m).clamp(0, 1)
        elif op == 2:
            img = ((img - _gray(img)) * _u(g, 1 - sat, 1 + sat) + _gray(img)).clamp(0, 1)
        else:
            t = 2 * math.pi * _u(g, -hue, hue)
            yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
            rot = torch.tensor([[1.0, 0, 0], [0, math.cos(t), -math.sin(t)], [0, math.sin(t), math.cos(t)]])
            img = torch.einsum("ij,jhw->ihw", torch.linalg.inv(yiq) @ rot @ yiq, img).clamp(0, 1)
    return img


class SimCLRCollateFunction:
    def __init__(self, g, input_size=224, cj_prob=0.8, cj_strength=0.5, min_scale=0.08, random_gray_scale=0.2,
                 gaussian_blur=0.5, hf_prob=0.5, normalize=imagenet_normalize):
        self.g, self.input_size, self.cj_prob, self.min_scale = g, input_size, cj_prob, min_scale
        self.cj = (cj_strength * 0.8, cj_strength * 0.8, cj_strength * 0.8, cj_strength * 0.2)
        self.random_gray_scale, self.hf_prob = random_gray_scale, hf_prob  # gaussian_blur 0. in main.py
        self.mean = torch.tensor(normalize['mean']).view(3, 1, 1)
        self.std = torch.tensor(normalize['std']).view(3, 1, 1)

    def transform(self, img):
        g = self.g
        img = _random_resized_crop(img, self.input_size, g, (self.min_scale, 1.0))
        if torch.rand((), generator=g) < self.hf_prob:
            img = img.flip(-1)
        if torch.rand((), generator=g) < self.cj_prob:
            img = _color_jitter(img, g, *self.cj)
        if torch.rand((), generator=g) < self.random_gray_scale:
            img = _gray(img).repeat(3, 1, 1)
        return (img - self.mean) / self.std

    def __call__(self, batch):  # BaseCollateFunction.forward
        batch_size = len(batch)
        # list of transformed images
        transforms = [self.transform(batch[i % batch_size][0]).unsqueeze_(0)
                      for i in range(2 * batch_size)]
        # list of labels
        labels = torch.LongTensor([item[1] for item in batch])
        # list of filenames
        fnames = [item[2] for item in batch]
        # tuple of transforms
        transforms = (
            torch.cat(transforms[:batch_size], 0),
            torch.cat(transforms[batch_size:], 0)
        )
        return transforms, labels, fnames

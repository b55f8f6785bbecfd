"""kornia's ``augmentation.ColorJitter``, ``RandomGrayscale``, ``RandomHorizontalFlip``, ``RandomResizedCrop`` and
``filters.GaussianBlur2d``, written out in plain torch on image batches for the ports whose upstream uses kornia
(kornia is not installed here); first used by ``contrastivelearner_simclr``. One random draw per call for the whole
batch (kornia draws per image), from the global torch RNG; ColorJitter's hue shift is a rotation in YIQ space
instead of HSV. ``augs`` and ``filters`` stand for ``kornia.augmentation`` and ``kornia.filters``.
"""

from __future__ import annotations

import math
import types

import torch
import torch.nn.functional as F
from torch import nn


def _gray(x):
    return (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1)


def _uniform(lo, hi):
    return float(torch.empty(1).uniform_(lo, hi))


class _ColorJitter(nn.Module):
    def __init__(self, brightness, contrast, saturation, hue):
        super().__init__()
        self.b, self.c, self.s, self.h = brightness, contrast, saturation, hue

    def forward(self, x):
        for op in torch.randperm(4).tolist():
            if op == 0:
                x = (x * _uniform(max(0, 1 - self.b), 1 + self.b)).clamp(0, 1)
            elif op == 1:
                mean = _gray(x).mean(dim=(-3, -2, -1), keepdim=True)
                x = ((x - mean) * _uniform(max(0, 1 - self.c), 1 + self.c) + mean).clamp(0, 1)
            elif op == 2:
                x = ((x - _gray(x)) * _uniform(max(0, 1 - self.s), 1 + self.s) + _gray(x)).clamp(0, 1)
            else:
                theta = 2 * math.pi * _uniform(-self.h, self.h)
                yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
                rot = torch.tensor([[1.0, 0.0, 0.0], [0.0, math.cos(theta), -math.sin(theta)],
                                    [0.0, math.sin(theta), math.cos(theta)]])
                x = torch.einsum("ij,bjhw->bihw", torch.linalg.inv(yiq) @ rot @ yiq, x).clamp(0, 1)
        return x


class _RandomGrayscale(nn.Module):
    def __init__(self, p=0.1):
        super().__init__()
        self.p = p

    def forward(self, x):
        return _gray(x).expand_as(x).contiguous() if torch.rand(1) < self.p else x


class _RandomHorizontalFlip(nn.Module):
    def forward(self, x):
        return x.flip(-1) if torch.rand(1) < 0.5 else x


class _GaussianBlur2d(nn.Module):
    def __init__(self, kernel_size, sigma):
        super().__init__()
        self.k, self.sigma = kernel_size[0], sigma[0]

    def forward(self, x):
        r = self.k // 2
        w = torch.exp(-torch.arange(-r, r + 1, dtype=x.dtype) ** 2 / (2 * self.sigma ** 2))
        w = w / w.sum()
        c = x.shape[1]
        x = F.pad(x, (r, r, r, r), mode="reflect")
        x = F.conv2d(x, w.view(1, 1, 1, -1).repeat(c, 1, 1, 1), groups=c)
        return F.conv2d(x, w.view(1, 1, -1, 1).repeat(c, 1, 1, 1), groups=c)


class _RandomResizedCrop(nn.Module):
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
        super().__init__()
        self.size, self.scale, self.ratio = size, scale, ratio

    def forward(self, x):
        h, w = x.shape[-2:]
        top, left, ch, cw = 0, 0, h, w
        for _ in range(10):
            area = h * w * _uniform(*self.scale)
            aspect = math.exp(_uniform(math.log(self.ratio[0]), math.log(self.ratio[1])))
            tw, th = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if 0 < tw <= w and 0 < th <= h:
                top = int(torch.randint(0, h - th + 1, size=(1,)))
                left = int(torch.randint(0, w - tw + 1, size=(1,)))
                ch, cw = th, tw
                break
        crop = x[..., top:top + ch, left:left + cw]
        return F.interpolate(crop, size=self.size, mode="bilinear", align_corners=False)


augs = types.SimpleNamespace(ColorJitter=_ColorJitter, RandomGrayscale=_RandomGrayscale,
                             RandomHorizontalFlip=_RandomHorizontalFlip, RandomResizedCrop=_RandomResizedCrop)
filters = types.SimpleNamespace(GaussianBlur2d=_GaussianBlur2d)

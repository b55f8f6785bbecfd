"""An image classification data pipeline as user code writes it: a folder-like in-memory Dataset returning
``(image, class_name)`` tuples (HWC uint8 RGB, as a PIL/imageio decode gives them), user-written transform
classes (ToTensor, Resize via F.interpolate, RandomHorizontalFlip with its own generator, Normalize), a label
encoder built from the folder names."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
STAIN_MEAN = (0.75, 0.45, 0.15)   # a stained-tissue dataset: strongly different channel statistics
STAIN_STD = (0.12, 0.12, 0.10)
FOLDERS = ["train/dog/0001.png", "train/cat/0002.png", "train/bird/0003.png", "train/dog/0004.png", "train/cat/0005.png"]


def _texture(rng: np.random.Generator, h: int, w: int, mean: tuple, std: tuple) -> np.ndarray:
    """A smooth random HWC image whose channels have about the given 0..1 statistics."""
    coarse = torch.from_numpy(rng.standard_normal((1, 3, h // 4, w // 4)))
    smooth = F.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)[0].numpy()
    smooth = smooth / smooth.std(axis=(1, 2), keepdims=True) * 0.8 + 0.6 * rng.standard_normal((3, h, w))
    chw = np.asarray(mean)[:, None, None] + np.asarray(std)[:, None, None] * smooth
    return (np.clip(chw.transpose(1, 2, 0), 0, 1) * 255).round().astype(np.uint8)


class FolderImages(Dataset):
    """(image, class name) pairs; ``bgr=True`` decodes the way OpenCV does (channels B, G, R)."""

    def __init__(self, seed: int, mean=IMAGENET_MEAN, std=IMAGENET_STD, size=(40, 48), bgr=False, red_box=False):
        rng = np.random.default_rng(seed)
        self.paths = list(FOLDERS)
        self.images = [_texture(rng, *size, mean, std) for _ in self.paths]
        if red_box:
            for img in self.images:
                img[2:8, 3:11] = (255, 0, 0)
        self.bgr = bgr

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        image = self.images[i][..., ::-1].copy() if self.bgr else self.images[i].copy()
        return image, self.paths[i].split("/")[1]


class ToTensor:
    def __call__(self, sample):
        image, label = sample
        return torch.from_numpy(image).permute(2, 0, 1).float().div(255), label


class FromOpenCV:
    """Ported from an OpenCV pipeline: converts BGR to RGB."""

    def __call__(self, sample):
        image, label = sample
        return image[..., ::-1].copy(), label


class Resize:
    def __init__(self, size):
        self.size = size

    def __call__(self, sample):
        image, label = sample
        return F.interpolate(image[None], size=self.size, mode="bilinear", align_corners=False)[0], label


class RandomHorizontalFlip:
    def __init__(self, p=0.5, seed=0):
        self.p, self.g = p, torch.Generator().manual_seed(seed)

    def __call__(self, sample):
        image, label = sample
        if torch.rand(1, generator=self.g).item() < self.p:
            image = image.flip(-1)
        return image, label


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = list(mean), list(std)

    def __call__(self, sample):
        image, label = sample
        mean = torch.tensor(self.mean, dtype=image.dtype).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=image.dtype).view(-1, 1, 1)
        return (image - mean) / std, label


class NormalizeByMean(Normalize):
    """The typo: divides by the mean."""

    def __call__(self, sample):
        image, label = sample
        mean = torch.tensor(self.mean, dtype=image.dtype).view(-1, 1, 1)
        return (image - mean) / mean, label


class EncodeLabel:
    def __init__(self, class_to_idx):
        self.class_to_idx = class_to_idx

    def __call__(self, sample):
        image, name = sample
        return image, torch.tensor(self.class_to_idx[name])


def sorted_classes(paths):
    """What torchvision's ImageFolder does: sorted folder names."""
    return {c: i for i, c in enumerate(sorted({p.split("/")[1] for p in paths}))}


def listing_order_classes(paths):
    """The bug: classes in the order the listing met them."""
    names = []
    for p in paths:
        if p.split("/")[1] not in names:
            names.append(p.split("/")[1])
    return {c: i for i, c in enumerate(names)}


def train_stages(seed, class_to_idx, normalize=None, size=(32, 32)):
    return [("to_tensor", ToTensor()), ("random_flip", RandomHorizontalFlip(seed=seed)), ("resize", Resize(size)),
            ("normalize", normalize or Normalize(IMAGENET_MEAN, IMAGENET_STD)), ("encode_label", EncodeLabel(class_to_idx))]


def program(seed, *, index=0, stages=None, eval_stages=None, **data):
    data_set = FolderImages(seed, **data)
    c2i = sorted_classes(data_set.paths)
    return SimpleNamespace(dataset=data_set, sample=data_set[index % len(data_set)], class_to_idx=c2i,
                           stages=stages(seed, data_set) if stages else train_stages(seed, c2i),
                           eval_stages=eval_stages(seed, data_set) if eval_stages else None)


KNOWN_RED = {"channel_order": "RGB", "known_colour": {"box": [2, 8, 3, 11], "rgb": [255, 0, 0]}}


class RandomResizedCrop:
    def __init__(self, size, scale=(0.5, 1.0), seed=0):
        self.size, self.scale, self.g = size, scale, torch.Generator().manual_seed(seed)

    def __call__(self, sample):
        image, label = sample
        h, w = image.shape[-2:]
        frac = self.scale[0] + (self.scale[1] - self.scale[0]) * torch.rand(1, generator=self.g).item()
        ch, cw = max(1, int(h * frac ** 0.5)), max(1, int(w * frac ** 0.5))
        y = int(torch.randint(0, h - ch + 1, (1,), generator=self.g))
        x = int(torch.randint(0, w - cw + 1, (1,), generator=self.g))
        crop = image[:, y:y + ch, x:x + cw]
        return F.interpolate(crop[None], size=self.size, mode="bilinear", align_corners=False)[0], label


class CenterCrop:
    def __init__(self, size):
        self.size = size

    def __call__(self, sample):
        image, label = sample
        h, w = image.shape[-2:]
        y, x = (h - self.size[0]) // 2, (w - self.size[1]) // 2
        return image[:, y:y + self.size[0], x:x + self.size[1]], label


class AddGaussianNoise:
    def __init__(self, mean=0.0, std=0.03, seed=0):
        self.mean, self.std, self.g = mean, std, torch.Generator().manual_seed(seed)

    def __call__(self, sample):
        image, label = sample
        return (image + self.mean + self.std * torch.randn(image.shape, generator=self.g)).clamp(0, 1), label


class Brightness:
    def __init__(self, factor=0.3, seed=0):
        self.factor, self.g = factor, torch.Generator().manual_seed(seed)

    def __call__(self, sample):
        image, label = sample
        scale = 1 + self.factor * (2 * torch.rand(1, generator=self.g).item() - 1)
        return (image * scale).clamp(0, 1), label

"""SimSiam self-supervised pre-training as lightly's example ``examples/pytorch/simsiam.py`` writes it: a ResNet-18
backbone, ``SimSiamProjectionHead`` (3 layers, BN on every layer, the output BN without affine) and
``SimSiamPredictionHead`` (2 layers), the stop-gradient ``z.detach()`` in ``forward``, two ``SimSiamTransform``
views, the symmetric ``NegativeCosineSimilarity`` loss ``0.5 * (criterion(z0, p1) + criterion(z1, p0))``, SGD lr
0.06; per batch: both views forward, loss, backward, step, zero_grad.

Source: https://github.com/lightly-ai/lightly
Commit: e8d317fc5a87f4387a85a35e689869039ec249ee
Files: examples/pytorch/simsiam.py, lightly/loss/negative_cosine_similarity.py, lightly/models/modules/heads.py,
       lightly/transforms/simsiam_transform.py
License: MIT (full text in LICENSES/lightly-ai-lightly.txt)
Domain: self-supervised learning (Siamese networks with stop-gradient, two views)

Deviations from the original:
- torchvision is not installed: ``torchvision.models.resnet18()`` is ``_tv_resnet.resnet18`` (same module names,
  channel widths / 8, so the backbone's feature size is 64, not 512); the heads keep their layout with
  ``SimSiamProjectionHead(64, 64, 32)`` and ``SimSiamPredictionHead(32, 16, 32)`` (example: (512, 512, 128) and
  (128, 64, 128));
- CIFAR-10 (``torchvision.datasets.CIFAR10(download=True)``) is replaced by 64 synthetic 32x32 RGB images made from
  ``seed`` (a coloured square, disk or stripe pattern at a random place on a noisy background); the
  ``SimSiamTransform(input_size=32)`` views are written out in torch on tensors with the transform's defaults:
  RandomResizedCrop (scale 0.2-1, bilinear), horizontal flip p 0.5, ColorJitter(0.4, 0.4, 0.4, 0.1) with p 0.8 (hue
  as a rotation in YIQ space), grayscale p 0.2, Gaussian blur p 0.5 (sigma 0.1-2, a separable kernel instead of
  PIL's filter), ImageNet normalization; their random draws come from a generator seeded from ``seed``;
- sizes for 2 CPU cores: batch_size 256 -> 16, num_workers 8 -> 0; no CUDA;
- one ``train_step`` is one batch of the loop; the epoch loss bookkeeping and printing are dropped;
- declared evidence: ``batch`` is (first views, second views); ``loss_fn((z0, p0), x1)`` runs the model on the
  second views and applies the example's symmetric loss;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

# ruff: noqa: UP008  (the original's code style is kept as written)

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.functional import cosine_similarity

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
_PUBLIC = str(pathlib.Path(__file__).resolve().parent)
if _PUBLIC not in sys.path:
    sys.path.insert(0, _PUBLIC)
import _tv_resnet as torchvision_models
from _api import Bug, Program

N_IMAGES, SIZE, BATCH_SIZE = 64, 32, 16
IMAGENET_NORMALIZE = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


# ---- lightly/models/modules/heads.py -------------------------------------------------------------------------

class ProjectionHead(nn.Module):
    """Base class for all projection and prediction heads."""

    def __init__(self, blocks) -> None:
        super().__init__()

        layers = []
        for block in blocks:
            input_dim, output_dim, batch_norm, non_linearity, *bias = block
            use_bias = bias[0] if bias else not bool(batch_norm)
            layers.append(nn.Linear(input_dim, output_dim, bias=use_bias))
            if batch_norm:
                layers.append(batch_norm)
            if non_linearity:
                layers.append(non_linearity)
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        projection: Tensor = self.layers(x)
        return projection


class SimSiamProjectionHead(ProjectionHead):
    """Projection head used for SimSiam."""

    def __init__(
        self, input_dim: int = 2048, hidden_dim: int = 2048, output_dim: int = 2048
    ):
        super(SimSiamProjectionHead, self).__init__(
            [
                (input_dim, hidden_dim, nn.BatchNorm1d(hidden_dim), nn.ReLU()),
                (hidden_dim, hidden_dim, nn.BatchNorm1d(hidden_dim), nn.ReLU()),
                (
                    hidden_dim,
                    output_dim,
                    nn.BatchNorm1d(output_dim, affine=False),
                    None,
                ),
            ]
        )


class SimSiamPredictionHead(ProjectionHead):
    """Prediction head used for SimSiam."""

    def __init__(
        self, input_dim: int = 2048, hidden_dim: int = 512, output_dim: int = 2048
    ):
        super(SimSiamPredictionHead, self).__init__(
            [
                (input_dim, hidden_dim, nn.BatchNorm1d(hidden_dim), nn.ReLU()),
                (hidden_dim, output_dim, None, None),
            ]
        )


# ---- lightly/loss/negative_cosine_similarity.py --------------------------------------------------------------

class NegativeCosineSimilarity(torch.nn.Module):
    """Implementation of the Negative Cosine Simililarity used in the SimSiam[0] paper."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, x0: torch.Tensor, x1: torch.Tensor) -> torch.Tensor:
        return -cosine_similarity(x0, x1, self.dim, self.eps).mean()


# ---- lightly/transforms/simsiam_transform.py (SimSiamTransform, written out on tensors) --------------------------

def _u(g, lo, hi):
    return lo + (hi - lo) * torch.rand((), generator=g).item()


def random_resized_crop(img, size, g, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    _, h, w = img.shape
    area = h * w
    for _ in range(10):
        target = area * _u(g, *scale)
        aspect = math.exp(_u(g, math.log(ratio[0]), math.log(ratio[1])))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(torch.randint(0, h - ch + 1, (), generator=g))
            left = int(torch.randint(0, w - cw + 1, (), generator=g))
            break
    else:
        ch, cw, top, left = h, w, 0, 0
    crop = img[:, top:top + ch, left:left + cw]
    return F.interpolate(crop[None], size=(size, size), mode="bilinear", align_corners=False)[0]


def _gray(img):
    return (0.299 * img[0] + 0.587 * img[1] + 0.114 * img[2])[None]


def color_jitter(img, g, brightness, contrast, saturation, hue):
    for op in torch.randperm(4, generator=g).tolist():
        if op == 0:
            img = (img * _u(g, 1 - brightness, 1 + brightness)).clamp(0, 1)
        elif op == 1:
            img = ((img - _gray(img).mean()) * _u(g, 1 - contrast, 1 + contrast) + _gray(img).mean()).clamp(0, 1)
        elif op == 2:
            img = ((img - _gray(img)) * _u(g, 1 - saturation, 1 + saturation) + _gray(img)).clamp(0, 1)
        else:
            theta = 2 * math.pi * _u(g, -hue, hue)
            yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
            rot = torch.tensor([[1.0, 0.0, 0.0], [0.0, math.cos(theta), -math.sin(theta)],
                                [0.0, math.sin(theta), math.cos(theta)]])
            img = torch.einsum("ij,jhw->ihw", torch.linalg.inv(yiq) @ rot @ yiq, img).clamp(0, 1)
    return img


def gaussian_blur(img, g, sigmas=(0.1, 2.0)):
    sigma = _u(g, *sigmas)
    radius = max(1, min(math.ceil(2 * sigma), 3))
    x = torch.arange(-radius, radius + 1, dtype=torch.float32)
    x = torch.exp(-x ** 2 / (2 * sigma * sigma))
    x = x / x.sum()
    k = 2 * radius + 1
    img = F.pad(img[None], (radius, radius, radius, radius), mode="reflect")
    img = F.conv2d(img, x.view(1, 1, k, 1).repeat(3, 1, 1, 1), groups=3)
    img = F.conv2d(img, x.view(1, 1, 1, k).repeat(3, 1, 1, 1), groups=3)
    return img[0]


def SimSiamTransform(input_size, g, min_scale=0.2, cj_prob=0.8, cj_strength=1.0, cj_bright=0.4, cj_contrast=0.4,
                    cj_sat=0.4, cj_hue=0.1, random_gray_scale=0.2, gaussian_blur_prob=0.5, hf_prob=0.5,
                    normalize=IMAGENET_NORMALIZE):
    mean = torch.tensor(normalize["mean"]).view(3, 1, 1)
    std = torch.tensor(normalize["std"]).view(3, 1, 1)

    def view(img):
        img = random_resized_crop(img, input_size, g, scale=(min_scale, 1.0))
        if torch.rand((), generator=g) < hf_prob:
            img = img.flip(-1)
        if torch.rand((), generator=g) < cj_prob:
            img = color_jitter(img, g, cj_strength * cj_bright, cj_strength * cj_contrast, cj_strength * cj_sat,
                               cj_strength * cj_hue)
        if torch.rand((), generator=g) < random_gray_scale:
            img = _gray(img).repeat(3, 1, 1)
        if torch.rand((), generator=g) < gaussian_blur_prob:
            img = gaussian_blur(img, g)
        return (img - mean) / std

    def transform(img):
        return [view(img), view(img)]
    return transform


class SyntheticImages(torch.utils.data.Dataset):
    """The stand-in for CIFAR-10: 4 kinds of pattern (square, disk, horizontal / vertical stripes)."""

    def __init__(self, seed, transform):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
        images, labels = [], []
        for i in range(N_IMAGES):
            kind = i % 4
            bg = 0.2 + 0.1 * torch.rand(3, 1, 1, generator=g) + 0.05 * torch.rand(3, SIZE, SIZE, generator=g)
            color = torch.rand(3, 1, 1, generator=g)
            cy, cx = torch.randint(8, SIZE - 8, (2,), generator=g).tolist()
            if kind == 0:
                mask = ((yy - cy).abs() < 6) & ((xx - cx).abs() < 6)
            elif kind == 1:
                mask = (yy - cy) ** 2 + (xx - cx) ** 2 < 49
            elif kind == 2:
                mask = (yy // 4) % 2 == 0
            else:
                mask = (xx // 4) % 2 == 0
            images.append(torch.where(mask, color, bg).clamp(0, 1))
            labels.append(kind)
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


# ---- examples/pytorch/simsiam.py ----------------------------------------------------------------------------

class SimSiam(nn.Module):
    def __init__(self, backbone, bug=None):
        super().__init__()
        self.backbone = backbone
        self.projection_head = SimSiamProjectionHead(64, 64, 32)
        self.prediction_head = SimSiamPredictionHead(32, 16, 32)
        self.bug = bug

    def forward(self, x):
        f = self.backbone(x).flatten(start_dim=1)
        z = self.projection_head(f)
        p = self.prediction_head(z)
        if self.bug != "stop_gradient_dropped":
            z = z.detach()
        return z, p


def _build(seed, bug=None):
    torch.manual_seed(seed)
    resnet = torchvision_models.resnet18(width=8)
    backbone = nn.Sequential(*list(resnet.children())[:-1])
    model = SimSiam(backbone, bug=bug)

    device = "cpu"
    model.to(device)

    g = torch.Generator().manual_seed(seed)
    transform = SimSiamTransform(input_size=SIZE, g=g)
    dataset = SyntheticImages(seed, transform=transform)

    dataloader = torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH_SIZE,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(seed),
    )

    criterion = NegativeCosineSimilarity()
    if bug == "prediction_head_not_optimized":
        # the optimizer built over the encoder only (backbone + projection head)
        optimizer = torch.optim.SGD(
            list(model.backbone.parameters()) + list(model.projection_head.parameters()), lr=0.06
        )
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.06)

    def batches():
        while True:
            yield from dataloader

    stream = batches()

    def train_step():
        batch = next(stream)
        x0, x1 = batch[0]
        x0 = x0.to(device)
        x1 = x1.to(device)
        z0, p0 = model(x0)
        z1, p1 = model(x1)
        loss = 0.5 * (criterion(z0, p1) + criterion(z1, p0))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    # the evidence: one batch of two views, drawn with its own generator
    g_probe = torch.Generator().manual_seed(seed + 1)
    probe_transform = SimSiamTransform(input_size=SIZE, g=g_probe)
    views = [probe_transform(dataset.images[i]) for i in range(BATCH_SIZE)]
    batch = (torch.stack([v[0] for v in views]), torch.stack([v[1] for v in views]))

    def loss_fn(outputs, x1):
        z0, p0 = outputs
        z1, p1 = model(x1)
        return 0.5 * (criterion(z0, p1) + criterion(z1, p0))

    return Program(name="lightly_simsiam", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, loader=dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the stop-gradient (z.detach()) dropped: the loss also pulls each view's projection towards the other view's
    # prediction, the shortcut SimSiam's paper shows collapses the representation.
    Bug("stop_gradient_dropped", functools.partial(_build, bug="stop_gradient_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
    # the optimizer built over the backbone and projection head only: the prediction head keeps its initial weights.
    Bug("prediction_head_not_optimized", functools.partial(_build, bug="prediction_head_not_optimized"),
        "four_structures", ("prediction_head",)),
]

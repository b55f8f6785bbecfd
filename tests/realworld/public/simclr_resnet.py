# ruff: noqa: UP004, UP008
"""SimCLR: a ResNet-18 with an MLP projection head trained with the InfoNCE (NT-Xent) loss on two augmented views.

Source: https://github.com/sthalles/SimCLR, commit 1848fc934ad844ae630e6c452300433fe99acfd9, files ``simclr.py``
(SimCLR: info_nce_loss, the train loop body), ``run.py`` (arguments, optimizer, scheduler, loader),
``models/resnet_simclr.py`` (ResNetSimCLR), ``data_aug/contrastive_learning_dataset.py``,
``data_aug/view_generator.py``, ``data_aug/gaussian_blur.py``. License: MIT (Copyright (c) 2020 Thalles Silva;
full text in LICENSES/sthalles-SimCLR.txt).

Kept as written: ``ResNetSimCLR`` (resnet18 with ``num_classes=out_dim``, its fc replaced by
``Sequential(Linear(dim_mlp, dim_mlp), ReLU, fc)``); ``info_nce_loss`` (labels from ``args.batch_size`` and
``n_views``, normalized features, the diagonal dropped, positives first, logits / temperature, all-zero targets);
``CrossEntropyLoss``; the loop body (``torch.cat(images, dim=0)``, autocast and GradScaler with fp16_precision off,
zero_grad, ``scaler.scale(loss).backward()``, ``scaler.step``, ``scaler.update``, the per-epoch scheduler step after
10 warm-up epochs); run.py's defaults (Adam lr 0.0003, weight_decay 1e-4, temperature 0.07, out_dim 128,
n_views 2, CosineAnnealingLR with T_max=len(train_loader)); the CIFAR-10 view pipeline (size 32, s=1).

Deviations:
- CIFAR-10 (``datasets.CIFAR10(download=True)``) is replaced by 32 synthetic 32x32 RGB images made from the seed
  (a coloured square, disk or stripe pattern at a random place on a noisy background, 4 kinds); the label is
  the kind, unused by SimCLR as in the original.
- torchvision is not installed: ``resnet18`` is written out in ``_tv_resnet.py`` (same module names) with channel
  widths / 8 (width 8); the torchvision transforms are written out in torch on tensors: RandomResizedCrop (scale
  0.08-1, ratio 3/4-4/3, bilinear), RandomHorizontalFlip, RandomApply([ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8)
  with the hue shift done as a rotation in YIQ space (torchvision shifts H in HSV), RandomGrayscale(p=0.2),
  data_aug's GaussianBlur (kernel int(0.1 * size), sigma uniform 0.1-2.0, reflection padding). Their random draws
  come from a generator seeded from the seed. ``resnet_dict`` holds resnet18 only (resnet50 is not built).
- sizes for 2 CPU cores: batch_size 256 -> 8, workers 12 -> 0, pin_memory off; epochs are not counted to 200:
  ``train_step`` runs one iteration of the loop body and, at the end of each pass over the loader, the epoch's
  scheduler step.
- train()'s inner loop body is the method ``train_iteration(images, scaler)`` (unchanged lines; the scaler is
  created once, as train() does before its loop); ``_get_basemodel`` drops its InvalidBackboneError branch.
- ``torch.cuda.amp`` (GradScaler, autocast) is replaced by ``torch.amp`` on the CPU, still disabled
  (fp16_precision is off); the tensorboard writer, logging, top-1/top-5 logging and checkpoint saving are dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types

import torch
import torch.nn.functional as F
from torch import nn
from torch.amp import GradScaler, autocast

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
import _tv_resnet as models
from _api import Bug, Program

N_IMAGES, SIZE = 32, 32


# ---------------------------------------------------------------- models/resnet_simclr.py
class ResNetSimCLR(nn.Module):

    def __init__(self, base_model, out_dim):
        super(ResNetSimCLR, self).__init__()
        self.resnet_dict = {"resnet18": models.resnet18(pretrained=False, num_classes=out_dim, width=8)}

        self.backbone = self._get_basemodel(base_model)
        dim_mlp = self.backbone.fc.in_features

        # add mlp projection head
        self.backbone.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), self.backbone.fc)

    def _get_basemodel(self, model_name):
        return self.resnet_dict[model_name]

    def forward(self, x):
        return self.backbone(x)


# ---------------------------------------------------------------- simclr.py
class SimCLR(object):

    def __init__(self, *args, **kwargs):
        self.args = kwargs['args']
        self.model = kwargs['model'].to(self.args.device)
        self.optimizer = kwargs['optimizer']
        self.scheduler = kwargs['scheduler']
        self.criterion = torch.nn.CrossEntropyLoss().to(self.args.device)

    def info_nce_loss(self, features):

        labels = torch.cat([torch.arange(self.args.batch_size) for i in range(self.args.n_views)], dim=0)
        labels = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()
        labels = labels.to(self.args.device)

        features = F.normalize(features, dim=1)

        similarity_matrix = torch.matmul(features, features.T)

        # discard the main diagonal from both: labels and similarities matrix
        mask = torch.eye(labels.shape[0], dtype=torch.bool).to(self.args.device)
        labels = labels[~mask].view(labels.shape[0], -1)
        similarity_matrix = similarity_matrix[~mask].view(similarity_matrix.shape[0], -1)

        # select and combine multiple positives
        positives = similarity_matrix[labels.bool()].view(labels.shape[0], -1)

        # select only the negatives the negatives
        negatives = similarity_matrix[~labels.bool()].view(similarity_matrix.shape[0], -1)

        logits = torch.cat([positives, negatives], dim=1)
        labels = torch.zeros(logits.shape[0], dtype=torch.long).to(self.args.device)
        if self.args.bug == "random_positive_index":
            # the "fix" proposed in https://github.com/sthalles/SimCLR/issues/33: a random column as the positive
            labels = torch.randint(low=0, high=logits.shape[1], size=(logits.shape[0],)).to(self.args.device)

        logits = logits / self.args.temperature
        return logits, labels

    def train_iteration(self, images, scaler):
        """One pass of train()'s inner loop, as written."""
        images = torch.cat(images, dim=0)

        images = images.to(self.args.device)

        with autocast("cpu", enabled=self.args.fp16_precision):
            features = self.model(images)
            logits, labels = self.info_nce_loss(features)
            loss = self.criterion(logits, labels)

        self.optimizer.zero_grad()

        scaler.scale(loss).backward()

        scaler.step(self.optimizer)
        scaler.update()
        return loss


# ---------------------------------------------------------------- data_aug, written out on tensors
class ContrastiveLearningViewGenerator(object):
    """Take two random crops of one image as the query and key."""

    def __init__(self, base_transform, n_views=2):
        self.base_transform = base_transform
        self.n_views = n_views

    def __call__(self, x):
        return [self.base_transform(x) for i in range(self.n_views)]


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
    ops = torch.randperm(4, generator=g).tolist()
    for op in ops:
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
            m = torch.linalg.inv(yiq) @ rot @ yiq
            img = torch.einsum("ij,jhw->ihw", m, img).clamp(0, 1)
    return img


def gaussian_blur(img, kernel_size, g):
    radias = kernel_size // 2
    kernel_size = radias * 2 + 1
    sigma = _u(g, 0.1, 2.0)
    x = torch.arange(-radias, radias + 1, dtype=torch.float32)
    x = torch.exp(-x ** 2 / (2 * sigma * sigma))
    x = x / x.sum()
    img = F.pad(img[None], (radias, radias, radias, radias), mode="reflect")
    img = F.conv2d(img, x.view(1, 1, kernel_size, 1).repeat(3, 1, 1, 1), groups=3)
    img = F.conv2d(img, x.view(1, 1, 1, kernel_size).repeat(3, 1, 1, 1), groups=3)
    return img[0]


def get_simclr_pipeline_transform(size, g, s=1):
    """RandomResizedCrop, RandomHorizontalFlip, RandomApply([ColorJitter], p=0.8), RandomGrayscale(p=0.2),
    GaussianBlur(kernel_size=int(0.1 * size)), on a [3, H, W] tensor in [0, 1]."""
    def transform(img):
        img = random_resized_crop(img, size, g)
        if torch.rand((), generator=g) < 0.5:
            img = img.flip(-1)
        if torch.rand((), generator=g) < 0.8:
            img = color_jitter(img, g, 0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s)
        if torch.rand((), generator=g) < 0.2:
            img = _gray(img).repeat(3, 1, 1)
        return gaussian_blur(img, int(0.1 * size), g)
    return transform


class SyntheticImages(torch.utils.data.Dataset):
    """32 images of 4 kinds (square, disk, horizontal stripes, vertical stripes) in random colours and places."""

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


# ---------------------------------------------------------------- run.py
def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = types.SimpleNamespace(arch="resnet18", workers=0, epochs=200, batch_size=8, lr=0.0003, weight_decay=1e-4,
                                 disable_cuda=True, fp16_precision=False, out_dim=128, log_every_n_steps=100,
                                 temperature=0.07, n_views=2, gpu_index=-1, device=torch.device('cpu'), bug=bug)

    g = torch.Generator().manual_seed(seed)
    train_dataset = SyntheticImages(seed, ContrastiveLearningViewGenerator(get_simclr_pipeline_transform(SIZE, g),
                                                                           args.n_views))
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True,
        num_workers=args.workers, pin_memory=False, drop_last=True, generator=torch.Generator().manual_seed(seed))

    model = ResNetSimCLR(base_model=args.arch, out_dim=args.out_dim)

    optimizer = torch.optim.Adam(model.parameters(), args.lr, weight_decay=args.weight_decay)

    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(train_loader), eta_min=0,
                                                           last_epoch=-1)

    simclr = SimCLR(model=model, optimizer=optimizer, scheduler=scheduler, args=args)
    scaler = GradScaler("cpu", enabled=args.fp16_precision)
    if bug == "trained_in_eval_mode":
        # features for a k-NN baseline were computed before training with model.eval(), and train() never calls
        # model.train(): BatchNorm normalizes with its initial running statistics throughout training
        model.eval()

    first_views, _ = next(iter(train_loader))
    batch = (torch.cat(first_views, dim=0),)
    state = {"epoch_counter": 0, "it": None}

    def train_step():
        while True:
            if state["it"] is None:
                state["it"] = iter(train_loader)
            try:
                images, _ = next(state["it"])
                break
            except StopIteration:
                state["it"] = None
                # warmup for the first 10 epochs
                if state["epoch_counter"] >= 10:
                    scheduler.step()
                state["epoch_counter"] += 1
        return simclr.train_iteration(images, scaler)

    def loss_fn(features, _targets):
        logits, labels = simclr.info_nce_loss(features)
        return simclr.criterion(logits, labels)

    return Program(name="simclr_resnet", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the positive's index replaced by a random column, as proposed in https://github.com/sthalles/SimCLR/issues/33
    # (all-zero targets are right: the positive is column 0).
    Bug("random_positive_index", functools.partial(_build, bug="random_positive_index"), "learning_ledger",
        ("OBJECTIVE",)),
    # the model is left in eval() before training (classic: train() never calls model.train()).
    Bug("trained_in_eval_mode", functools.partial(_build, bug="trained_in_eval_mode"), "step_probe", ("backbone",)),
]

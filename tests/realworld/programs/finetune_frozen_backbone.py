"""Transfer learning with a frozen feature extractor: a conv backbone (backbone.stage1, backbone.stage2; random weights
here stand in for the pretrained checkpoint) frozen with requires_grad_(False) and kept in eval() by a train() override
so its BatchNorm statistics stay put, a new `head` trained with Adam over filter(lambda p: p.requires_grad, ...)."""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

NUM_CLASSES = 5


class Backbone(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.stage1 = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                                    nn.MaxPool2d(2))
        self.stage2 = nn.Sequential(nn.Conv2d(width, 2 * width, 3, padding=1, bias=False), nn.BatchNorm2d(2 * width),
                                    nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1))
        self.out_features = 2 * width

    def forward(self, x):
        return torch.flatten(self.stage2(self.stage1(x)), 1)


class FineTuner(nn.Module):
    def __init__(self, num_classes: int, unfreeze_on_train: bool = False):
        super().__init__()
        self.backbone = Backbone()
        self.head = nn.Sequential(nn.Linear(self.backbone.out_features, 32), nn.ReLU(), nn.Linear(32, num_classes))
        self.unfreeze_on_train = unfreeze_on_train

    def train(self, mode: bool = True):
        super().train(mode)
        if self.unfreeze_on_train:
            self.requires_grad_(mode)
        else:
            self.backbone.eval()
        return self

    def forward(self, x):
        return self.head(self.backbone(x))


def load_pretrained(backbone: nn.Module, images: torch.Tensor) -> None:
    """Stands in for load_state_dict(checkpoint): BatchNorm running statistics as a pretrained backbone has them."""
    bns = [m for m in backbone.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in bns:
        bn.momentum = None
    backbone.train()
    with torch.no_grad():
        backbone(images)
    for bn in bns:
        bn.momentum = 0.1


def make_images(seed: int, backbone: nn.Module, n: int = 24):
    """Labels come from a fixed linear rule on the (frozen) backbone's features, so the new head can learn them."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(n, 3, 4, 4, generator=g)
    images = nn.functional.interpolate(coarse, size=(16, 16), mode="bilinear", align_corners=False)
    images = 2.0 * images + torch.randn(n, 3, 1, 1, generator=g) + 0.1 * torch.randn(n, 3, 16, 16, generator=g)
    load_pretrained(backbone, images)
    backbone.eval()
    with torch.no_grad():
        features = backbone(images)
    mean, std = features.mean(0), features.std(0) + 1e-6
    w = torch.randn(features.shape[1], NUM_CLASSES, generator=g)

    def label_rule(x):
        with torch.no_grad():
            was_training = backbone.training
            backbone.eval()
            out = (((backbone(x) - mean) / std) @ w).argmax(1)
            backbone.train(was_training)
        return out

    return images, label_rule(images), label_rule


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    model = FineTuner(NUM_CLASSES, unfreeze_on_train=bug == "unfreeze_on_train")
    images, labels, label_rule = make_images(seed, model.backbone)
    for param in model.backbone.parameters():
        param.requires_grad_(False)
    if bug == "unfreeze_on_train":
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    else:
        optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=3e-3)
    criterion = nn.CrossEntropyLoss()
    model.train()

    def train_step():
        model.train()
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    def evaluate(net, batch):
        x, y = batch
        net.eval()
        with torch.no_grad():
            acc = (net(x).argmax(1) == y).float().mean().item()
        net.train()
        return acc

    return Program(name="finetune_frozen_backbone", model=model, batch=(images, labels), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=evaluate, task_probe=label_rule,
                   task="classification", frozen=("backbone.*",))


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("unfreeze_on_train", functools.partial(_build, bug="unfreeze_on_train"), "four_structures", ("backbone.stage1",)),
]

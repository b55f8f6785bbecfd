"""An MLP classifier with the legacy nn.utils.weight_norm reparametrization (weight_g, weight_v) on its Linear layers
(fc1, fc2 and the fc head), CrossEntropyLoss, plain SGD lr 0.1 on 20-feature inputs, 4 classes."""

from __future__ import annotations

import functools
import pathlib
import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IN_FEATURES, HIDDEN, NUM_CLASSES = 20, 64, 4


def weight_norm(module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch deprecates the legacy API in favour of parametrizations
        return nn.utils.weight_norm(module)


class WNClassifier(nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        self.fc1 = weight_norm(nn.Linear(IN_FEATURES, HIDDEN))
        self.fc2 = weight_norm(nn.Linear(HIDDEN, HIDDEN))
        self.fc = weight_norm(nn.Linear(HIDDEN, num_classes))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc(x)


def make_data(seed: int, n: int = 48):
    g = torch.Generator().manual_seed(seed)
    centers = 2.0 * torch.randn(NUM_CLASSES, IN_FEATURES, generator=g)
    y = torch.arange(n) % NUM_CLASSES
    x = centers[y] + torch.randn(n, IN_FEATURES, generator=g)

    def nearest_center(inputs):
        return torch.cdist(inputs, centers).argmin(dim=1)

    return x, y, nearest_center


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    x, y, nearest_center = make_data(seed)
    if bug == "head_replaced_after_optimizer":
        model = WNClassifier(num_classes=10)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.fc = weight_norm(nn.Linear(HIDDEN, NUM_CLASSES))  # "adapt the head to our 4 classes"
    else:
        model = WNClassifier(num_classes=NUM_CLASSES)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()

    def train_step():
        model.train()
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return Program(name="weight_norm_classifier", model=model, batch=(x, y), loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, task_probe=nearest_center, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("head_replaced_after_optimizer", functools.partial(_build, bug="head_replaced_after_optimizer"), "four_structures",
        ("fc",)),
]

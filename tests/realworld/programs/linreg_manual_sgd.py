"""Linear regression on tabular features, written the textbook way: nn.Linear(d, 1), MSELoss, and a hand-written SGD
update under torch.no_grad() followed by model.zero_grad() (no torch.optim optimizer)."""

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

N_SAMPLES, N_FEATURES = 64, 8


def make_regression(seed: int):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N_SAMPLES, N_FEATURES, generator=g)
    true_w = torch.randn(N_FEATURES, 1, generator=g)
    true_b = torch.randn(1, generator=g)

    def f(inputs):
        return inputs @ true_w + true_b

    y = f(X) + 0.05 * torch.randn(N_SAMPLES, 1, generator=g)
    return X, y, f


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    X, y, f = make_regression(seed)
    model = nn.Linear(N_FEATURES, 1)
    loss_fn = nn.MSELoss()
    learning_rate = 0.05
    sign = 1.0 if bug == "gradient_ascent" else -1.0

    def train_step():
        y_pred = model(X)
        loss = loss_fn(y_pred, y)
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for param in model.parameters():
                param.add_(param.grad, alpha=sign * learning_rate)
        return loss

    return Program(name="linreg_manual_sgd", model=model, batch=(X, y), loss_fn=loss_fn, optimizer=None,
                   train_step=train_step, task_probe=f, task="regression")


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("gradient_ascent", functools.partial(_build, bug="gradient_ascent"), "step_probe", ("weight",)),
]

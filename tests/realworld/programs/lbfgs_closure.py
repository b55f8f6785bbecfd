"""Full-batch curve fitting with L-BFGS: a small tanh MLP fit to a smooth 1-D function, torch.optim.LBFGS(lr=1,
max_iter=20, history_size=10) and the closure idiom (zero_grad, forward, loss, backward, return loss) passed to
optimizer.step(closure)."""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch
from torch import nn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program


def target_function(x):
    return torch.sin(math.pi * x) + 0.5 * x


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(64, 1, generator=g) * 2 - 1
    y = target_function(x) + 0.01 * torch.randn(64, 1, generator=g)
    model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=20, history_size=10)

    def closure():
        if bug != "closure_no_zero_grad":
            optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        return loss

    def train_step():
        return optimizer.step(closure)

    return Program(name="lbfgs_closure", model=model, batch=(x, y), loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, task_probe=target_function, task="regression")


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("closure_no_zero_grad", functools.partial(_build, bug="closure_no_zero_grad"), "step_probe", ("0.weight",)),
]

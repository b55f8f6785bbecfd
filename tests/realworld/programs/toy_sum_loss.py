"""The toy script: no targets, the objective is an energy of the model's output (``out.pow(2).mean()``: drive a
small network's output to zero), batches ``(x,)``, plain SGD. The loss_fn takes ``(outputs, None)``.
"""

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


def energy(out, target=None, detach=False):
    if detach:
        # "element 0 of tensors does not require grad and does not have a grad_fn" -> the forum "fix"
        e = out.detach().pow(2).mean()
        e.requires_grad_(True)
        return e
    return out.pow(2).mean()


def _build(seed, bug=None):
    torch.manual_seed(seed)
    x = torch.randn(32, 10, generator=torch.Generator().manual_seed(seed))
    model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    detach = bug == "energy_on_detached_output"

    def train_step():
        optimizer.zero_grad()
        out = model(x)
        loss = energy(out, detach=detach)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return Program(name="toy_sum_loss", model=model, batch=(x,), loss_fn=functools.partial(energy, detach=detach),
                   optimizer=optimizer, train_step=train_step)


build = functools.partial(_build)

BUGS = [
    # energy of out.detach() with requires_grad_ switched back on: backward runs, no parameter gets a gradient.
    Bug("energy_on_detached_output", functools.partial(_build, bug="energy_on_detached_output"), "learning_ledger",
        ("DEPENDENCY",)),
]

"""performance_ledger on train steps people write: an MLP and a CNN step with the model, optimizer and loss_fn for
the phases, one with a LR scheduler and gradient clipping. Bug: a step that keeps every batch's outputs in a list
(memory.growth)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from _cases import Case
from torch import nn

import firstdiv


def mlp(seed: int) -> SimpleNamespace:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 5))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    batch = (torch.randn(64, 32, generator=g), torch.randint(0, 5, (64,), generator=g))
    loss_fn = nn.CrossEntropyLoss()

    def step(b):
        x, y = b
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    return SimpleNamespace(model=model, optimizer=optimizer, batch=batch, loss_fn=loss_fn, step=step)


def cnn(seed: int) -> SimpleNamespace:
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                          nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
    batch = (torch.randn(32, 1, 16, 16, generator=g), torch.randint(0, 10, (32,), generator=g))

    def step(b):
        x, y = b
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()

    return SimpleNamespace(model=model, optimizer=optimizer, batch=batch, loss_fn=F.cross_entropy, step=step)


def leaky(seed: int) -> SimpleNamespace:
    p = mlp(seed)
    model, optimizer, loss_fn = p.model, p.optimizer, p.loss_fn
    outputs = []  # the bug: every batch's logits kept, with their autograd graph

    def step(b):
        x, y = b
        optimizer.zero_grad()
        logits = model(x)
        outputs.append(logits)
        loss_fn(logits, y).backward()
        optimizer.step()

    p.step = step
    return p


def ledger(repeats: int = 5):
    return lambda p: firstdiv.performance_ledger(p.step, p.batch, model=p.model, optimizer=p.optimizer,
                                                 loss_fn=p.loss_fn, warmup=1, repeats=repeats)


CASES = [
    Case("timing_mlp_step", "performance_ledger", mlp, ledger(), timing=True),
    Case("timing_cnn_step_scheduler_clip", "performance_ledger", cnn, ledger(), timing=True),
    Case("timing_step_keeps_outputs", "performance_ledger", leaky, ledger(3), bug=True, timing=True,
         where=("step",), kind="memory.growth"),
]

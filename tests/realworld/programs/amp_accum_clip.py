"""The mixed-precision + gradient-accumulation loop of many training scripts: torch.autocast("cpu", dtype=torch.bfloat16)
around the forward and loss, the loss divided by accum_steps over 4 micro-batches, torch.amp.GradScaler (enabled only on
CUDA, so disabled here, but kept in the loop: scale/backward, unscale_, clip_grad_norm_(1.0), scaler.step, update), AdamW
lr 1e-3. A small MLP classifier on 32-feature inputs."""

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

IN_FEATURES, NUM_CLASSES, BATCH_SIZE = 32, 6, 32


def make_data(seed: int):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(IN_FEATURES, NUM_CLASSES, generator=g)
    x = torch.randn(BATCH_SIZE, IN_FEATURES, generator=g)

    def label_rule(inputs):
        return (inputs @ w).argmax(dim=1)

    return x, label_rule(x), label_rule


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    x, y, label_rule = make_data(seed)
    device_type = "cpu"
    model = nn.Sequential(nn.Linear(IN_FEATURES, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, NUM_CLASSES))
    criterion = nn.CrossEntropyLoss()
    lr = 1.0 if bug == "no_accum_division_lr1" else 1e-3  # the bug: lr=1 typed for 1e-3
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    scaler = torch.amp.GradScaler(device_type, enabled=(device_type == "cuda"))
    accum_steps = 4

    def train_step():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for xb, yb in zip(x.chunk(accum_steps), y.chunk(accum_steps)):
            with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
                loss = criterion(model(xb), yb)
            if bug != "no_accum_division_lr1":
                loss = loss / accum_steps
            scaler.scale(loss).backward()
            total += loss.detach().float()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()
        return total

    return Program(name="amp_accum_clip", model=model, batch=(x, y), loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, task_probe=label_rule, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("no_accum_division_lr1", functools.partial(_build, bug="no_accum_division_lr1"), "learning_ledger",
        ("PARAMETER_UPDATE",)),
]

"""Tabular MLP classifier in the Kaggle/fastai shape: standardized numeric columns plus one-hot categoricals, an MLP with
BatchNorm1d and Dropout, AdamW at a recipe lr 1e-4 with weight decay 0.01, linear warmup then cosine decay through a
LambdaLR stepped per batch, and clip_grad_norm_(..., 1.0)."""

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

N_NUMERIC, N_CATEGORIES, N_CLASSES = 8, 4, 3


class TabularMLP(nn.Module):
    def __init__(self, n_features: int, n_classes: int, hidden: int = 64, dropout: float = 0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout),
        )
        self.classifier = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.classifier(self.net(x))


def make_table(seed: int, n_rows: int = 64):
    """Numeric columns (standardized) and a one-hot categorical column; the class is the argmax of a fixed linear score."""
    g = torch.Generator().manual_seed(seed)
    numeric = torch.randn(n_rows, N_NUMERIC, generator=g) * 3.0 + 1.0
    numeric = (numeric - numeric.mean(0)) / numeric.std(0)
    category = torch.randint(0, N_CATEGORIES, (n_rows,), generator=g)
    x = torch.cat([numeric, nn.functional.one_hot(category, N_CATEGORIES).float()], dim=1)
    w_true = torch.randn(x.shape[1], N_CLASSES, generator=g)

    def label_rule(features):
        return (features @ w_true).argmax(dim=1)

    return x, label_rule(x), label_rule


def warmup_cosine(warmup_steps: int, total_steps: int):
    def lr_lambda(step):
        if step < warmup_steps:
            return float(step + 1) / float(max(1, warmup_steps))
        progress = float(step - warmup_steps) / float(max(1, total_steps - warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return lr_lambda


def evaluate(model, batch):
    x, y = batch
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(dim=1) == y).float().mean().item()
    model.train()
    return acc


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    x, y, label_rule = make_table(seed)
    model = TabularMLP(x.shape[1], N_CLASSES)
    lr = 50.0 if bug == "lr_50" else 1e-4
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(warmup_steps=5, total_steps=500))
    criterion = nn.CrossEntropyLoss()

    def train_step():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = criterion(logits, y)
        (-loss).backward() if bug == "negated_loss" else loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        scheduler.step()
        return loss

    return Program(name="tabular_mlp_adamw", model=model, batch=(x, y), loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=evaluate, task_probe=label_rule, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("lr_50", functools.partial(_build, bug="lr_50"), "learning_ledger", ("PARAMETER_UPDATE",)),
    Bug("negated_loss", functools.partial(_build, bug="negated_loss"), "learning_ledger", ("PARAMETER_UPDATE",)),
]

"""Multilabel classification of tabular rows: 5 independent 0/1 labels per row ([N, 5] float targets), an MLP trunk
with one Linear(h, 1) head per label (ModuleList, concatenated to [N, 5] logits), BCEWithLogitsLoss, Adam lr 3e-3."""

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

IN_FEATURES, NUM_LABELS, HIDDEN = 12, 5, 32


class MultiLabelNet(nn.Module):
    def __init__(self, log_softmax_heads: bool = False):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
        self.heads = nn.ModuleList([nn.Linear(HIDDEN, 1) for _ in range(NUM_LABELS)])
        self.log_softmax_heads = log_softmax_heads

    def forward(self, x):
        h = self.trunk(x)
        outs = [head(h) for head in self.heads]
        if self.log_softmax_heads:
            outs = [torch.log_softmax(o, dim=1) for o in outs]
        return torch.cat(outs, dim=1)


def make_data(seed: int, n: int = 32):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(IN_FEATURES, NUM_LABELS, generator=g)
    b = 0.5 * torch.randn(NUM_LABELS, generator=g)
    x = torch.randn(n, IN_FEATURES, generator=g)

    def label_rule(inputs):
        return (inputs @ w + b > 0).float()

    return x, label_rule(x), label_rule


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    x, y, label_rule = make_data(seed)
    model = MultiLabelNet(log_softmax_heads=bug == "log_softmax_single_unit")
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    if bug == "softmax_mse":
        mse = nn.MSELoss()

        def criterion(logits, targets):
            return mse(torch.softmax(logits, dim=1), targets)
    else:
        criterion = nn.BCEWithLogitsLoss()

    def train_step():
        model.train()
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    def evaluate(net, batch):
        inputs, targets = batch
        net.eval()
        with torch.no_grad():
            pred = (net(inputs) > 0).float()
        net.train()
        return (pred == targets).float().mean().item()

    return Program(name="multilabel_bce", model=model, batch=(x, y), loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=evaluate, task_probe=label_rule, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("softmax_mse", functools.partial(_build, bug="softmax_mse"), "learning_ledger", ("OBJECTIVE",)),
    Bug("log_softmax_single_unit", functools.partial(_build, bug="log_softmax_single_unit"), "learning_ledger",
        ("OBJECTIVE",), "objective.constant_outputs"),
]

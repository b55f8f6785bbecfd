"""Training with an exponential moving average of the weights: torch.optim.swa_utils.AveragedModel with
get_ema_multi_avg_fn(0.999) updated after every optimizer.step(), and evaluation of the EMA model (ema_model.eval(),
torch.no_grad()); the network is an MLP classifier with Dropout(0.2), Adam lr 1e-3."""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

IN_FEATURES, NUM_CLASSES = 16, 4


class Net(nn.Module):
    def __init__(self, hidden: int = 64, p_drop: float = 0.2):
        super().__init__()
        self.fc1 = nn.Linear(IN_FEATURES, hidden)
        self.dropout = nn.Dropout(p_drop)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, NUM_CLASSES)

    def forward(self, x):
        x = self.dropout(torch.relu(self.fc1(x)))
        x = self.dropout(torch.relu(self.fc2(x)))
        return self.out(x)


def make_data(seed: int, n: int = 32):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(IN_FEATURES, NUM_CLASSES, generator=g)
    x = torch.randn(n, IN_FEATURES, generator=g)

    def label_rule(inputs):
        return (inputs @ w).argmax(dim=1)

    return x, label_rule(x), label_rule


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    x, y, label_rule = make_data(seed)
    model = Net()
    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()

    def train_step():
        model.train()
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        ema_model.update_parameters(model)
        return loss

    def evaluate(_model, batch):
        inputs, targets = batch
        if bug == "ema_eval_in_train_mode":
            ema_model.train()
        else:
            ema_model.eval()
        with torch.no_grad():
            acc = (ema_model(inputs).argmax(1) == targets).float().mean().item()
        model.train()
        return acc

    return Program(name="ema_averaged", model=model, batch=(x, y), loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=evaluate, task_probe=label_rule, task="classification")


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("ema_eval_in_train_mode", functools.partial(_build, bug="ema_eval_in_train_mode"), "six_claims", ("EVALUATION",)),
]

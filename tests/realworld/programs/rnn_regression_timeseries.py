"""LSTM forecaster on sine-wave windows: inputs ``[B, T, 1]`` (batch_first), target the next value ``[B, 1]``,
MSE, Adam 1e-2, ``ReduceLROnPlateau`` on the training loss, clip 1.0.

Synthetic series: sin(w t + phase) with a fixed w and random phase, so the next value is exactly
``2 cos(w) x[T-1] - x[T-2]`` (the task_probe).
"""

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

OMEGA = 0.3
WINDOW = 16
BATCH = 12


class LSTMForecaster(nn.Module):
    def __init__(self, input_size=1, hidden_size=32, num_layers=1):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])


def make_windows(gen, n, bug=None):
    phase = torch.rand(n, 1, generator=gen) * 2 * math.pi
    t = torch.arange(WINDOW + 1, dtype=torch.float32)
    series = torch.sin(OMEGA * t + phase)
    x = series[:, :WINDOW].unsqueeze(-1)
    # windows built with `y = series[:, WINDOW - 1]` (off by one) forecast the value already seen
    y = series[:, WINDOW - 1:WINDOW] if bug == "target_is_last_value" else series[:, WINDOW:WINDOW + 1]
    return x, y


def task_probe(x):
    return 2 * math.cos(OMEGA) * x[:, -1] - x[:, -2]  # [B, 1], the shape of the targets


def _build(seed, bug=None):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    batches = [make_windows(gen, BATCH, bug) for _ in range(8)]
    model = LSTMForecaster()
    criterion = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=10)
    state = {"step": 0}

    def train_step():
        model.train()
        x, y = batches[state["step"] % len(batches)]
        state["step"] += 1
        optimizer.zero_grad()
        pred = model(x)
        loss = criterion(pred, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step(loss.item())
        return loss.detach()

    def eval_fn(model, batch):
        x, y = batch
        model.eval()
        with torch.no_grad():
            mse = criterion(model(x), y)
        model.train()
        return float(mse)

    return Program(name="rnn_regression_timeseries", model=model, batch=batches[0], loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, task="regression",
                   task_probe=task_probe)


build = functools.partial(_build)

BUGS = [
    # the target is the window's own last value: the model learns to echo its input, not to forecast.
    Bug("target_is_last_value", functools.partial(_build, bug="target_is_last_value"), "learning_ledger", ("TASK",)),
]

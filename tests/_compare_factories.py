"""Models for the fresh-process reload tests of compare_outputs: importable as ``_compare_factories`` from a
child Python process (the tests directory is on sys.path, which the reload passes on as PYTHONPATH)."""

import torch
from torch import nn


class Head(nn.Module):
    """A Linear followed by a scale kept as a plain tensor attribute: state outside the state_dict."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)
        self.scale = torch.tensor(1.0)  # bug on purpose: not a buffer, so not saved or reloaded

    def forward(self, x):
        return self.fc(x) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.head = Head()

    def forward(self, x):
        return self.head(self.act(self.fc1(x)))


def make_net():
    return Net()


def make_wrong():
    """A factory that builds a different architecture than the checkpoint's."""
    return nn.Sequential(nn.Linear(4, 3))

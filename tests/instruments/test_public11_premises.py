"""Premises that public-11's first contact showed (tests/realworld/README.md, "What public-11 showed"), each confirmed
on the program's own behaviour."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


class FeaturesAndLogits(nn.Module):
    """A center-loss classifier: 2-d features and 10 class logits, returned in that order."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(8, 2), nn.Linear(2, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.body(x)
        return f, self.head(f)


def test_targets_that_fit_the_logits_a_model_returns_after_its_features_are_no_task_warning() -> None:
    """The ids exceed the first output's size (the 2-d features) but fit the logits beside it, which loss_fn reads:
    a note, not a TASK warning about the label range."""
    torch.manual_seed(0)
    model, x = FeaturesAndLogits(), torch.randn(32, 8)
    y = torch.arange(32) % 10

    def loss_fn(outputs: tuple[torch.Tensor, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
        features, logits = outputs
        return F.cross_entropy(logits, targets) + 1e-3 * features.pow(2).sum(1).mean()
    r = firstdiv.learning_ledger(model, (x, y), loss_fn, torch.optim.SGD(model.parameters(), 0.1), overfit_steps=0)
    task = next(f for f in r.findings if f.where == "TASK")
    assert task.status.value == "PASS", task.message
    assert "outputs[1]" in task.message

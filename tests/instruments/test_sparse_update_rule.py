"""Plain SGD on a sparse embedding gradient (``Embedding(sparse=True)``) adds each stored index one by one, so a row
looked up many times in the batch is rounded that many times: the rule check allows for it and finds no departure,
while a rule that really differs (a step hook that halves the update) is still told apart from -lr * grad."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status


class Clicks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(6, 16, sparse=True)
        self.head = nn.Linear(16, 1)

    def forward(self, ids):
        return self.head(self.emb(ids).sum(1)).squeeze(-1)


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 6, (256, 8), generator=g)  # few rows, each looked up hundreds of times
    return ids, (ids[:, 0] % 2).float()


def test_sparse_rows_looked_up_many_times_follow_plain_sgd():
    torch.manual_seed(0)
    model = Clicks()
    with torch.no_grad():
        model.emb.weight.mul_(100.0)  # large weights: the rounding of each addition is far above the update's own
    report = firstdiv.step_probe(model, _batch(), F.binary_cross_entropy_with_logits, torch.optim.SGD(model.parameters(), 1e-4))
    rule = [f for f in report.findings if f.check == "step.update_rule"]
    assert not rule, str(report)
    assert next(f for f in report.findings if f.where == "emb.weight").status is Status.PASS


class HalfSGD(torch.optim.SGD):
    """An SGD subclass whose step applies half the update."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-0.5 * group["lr"])


def test_a_halved_sparse_update_still_departs_from_the_rule():
    torch.manual_seed(0)
    model = Clicks()
    report = firstdiv.step_probe(model, _batch(), F.binary_cross_entropy_with_logits, HalfSGD(model.parameters(), 1e-2))
    rule = next(f for f in report.findings if f.where == "emb.weight" and f.check.startswith("step.update"))
    assert rule.check == "step.update_rule" and rule.evidence["max_relative_error"] > 0.4, str(report)

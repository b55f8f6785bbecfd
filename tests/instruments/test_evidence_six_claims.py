"""Evidence before FAIL in six_claims: COMPUTATION FAILs on tied units only when the layer can be trained (a frozen
layer may be a fixed map on purpose: a WARN of the kind); UPDATE does not call a parameter not updated when train_step,
given beside the optimizer, updates it by hand; REPRESENTATION's activation-name evidence needs the targets to agree
(tests/instruments/test_six_claims_real.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import six_claims
from firstdiv.instruments._core.state import Snapshot
from firstdiv.report import Status


def _data(n=32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 6, generator=g)
    return x, (x[:, 0] > 0).long()


def claim(report, name):
    return next(f for f in report.findings if f.where == name)


class Pooled(nn.Module):
    """A trainable layer, then a frozen averaging layer (identical rows by design), then a head."""

    def __init__(self, zero: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body, self.pool, self.head = nn.Linear(6, 16), nn.Linear(16, 4, bias=False), nn.Linear(4, 2)
        with torch.no_grad():
            self.pool.weight.fill_(0.0 if zero else 1 / 16)
        self.pool.requires_grad_(False)

    def forward(self, x):
        return self.head(self.pool(torch.relu(self.body(x))))


def test_a_frozen_layer_with_identical_rows_is_a_warn_not_a_fail():
    for zero, kind in ((False, "claim.computation.symmetric_init"), (True, "claim.computation.zero_init")):
        model = Pooled(zero)
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
        before = Snapshot.take(model, opt)
        comp = claim(six_claims(model, _data(), F.cross_entropy, opt), "COMPUTATION")
        assert before.diff(Snapshot.take(model, opt)) == []
        assert (comp.status, comp.check) == (Status.WARN, kind), comp.message
        assert "requires_grad=False" in comp.message and "not confirmed that they are meant to differ" in comp.message
    # the trainable twins still FAIL: test_six_claims.py::test_zero_init_fails_computation / test_symmetric_init_...


def test_a_parameter_train_step_updates_by_hand_beside_the_optimizer_is_updated():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    x, y = _data()
    opt = torch.optim.SGD(model[2].parameters(), lr=0.1)

    def train_step():  # the head by the optimizer, the first layer by a hand-written update
        opt.zero_grad()
        model[0].zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        with torch.no_grad():
            for p in model[0].parameters():
                p.add_(p.grad, alpha=-0.05)

    before = Snapshot.take(model, opt)
    report = six_claims(model, (x, y), F.cross_entropy, opt, train_step=train_step)
    assert before.diff(Snapshot.take(model, opt)) == []
    update = claim(report, "UPDATE")
    assert update.status is Status.PASS, str(report)
    assert update.evidence["moved_by_train_step"] == ["0.weight", "0.bias"]
    assert "train_step called once on your objects" in report.side_effects
    model_only = six_claims(model, (x, y), F.cross_entropy, opt)  # without train_step: nothing shows the hand update
    assert model_only.first_divergence.kind == "claim.update.not_updated"

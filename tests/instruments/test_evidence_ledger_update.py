"""Evidence before FAIL in learning_ledger's OPTIMIZER_OWNERSHIP and PARAMETER_UPDATE: a stale tensor FAILs once a
current parameter of its shape is left unowned, an unowned parameter once the loss gives it a gradient no step
applies, a parameter that did not move once its group's lr is not 0 on purpose. Unconfirmed, each is a WARN of its
kind naming the assumption."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import learning_ledger
from firstdiv.instruments._core.state import Snapshot
from firstdiv.report import Status


def _data(n=32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 6, generator=g)
    return x, (x[:, 0] > 0).long()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body, self.head = nn.Linear(6, 16), nn.Linear(16, 2)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def ledger(model, batch, loss_fn, opt, **kw):
    before = Snapshot.take(model, opt)
    report = learning_ledger(model, batch, loss_fn, opt, overfit_steps=0, **kw)
    assert before.diff(Snapshot.take(model, opt)) == []
    return report


def link(report, name):
    return next(f for f in report.findings if f.where == name)


def test_a_tensor_trained_outside_the_model_is_a_warn_not_a_stale_fail():
    model, temperature = Net(), nn.Parameter(torch.ones(()))  # a learnable temperature held by the loss, not the model
    opt = torch.optim.SGD([*model.parameters(), temperature], lr=0.1)

    def loss_fn(out, y):
        return F.cross_entropy(out / temperature, y)

    own = link(ledger(model, _data(), loss_fn, opt), "OPTIMIZER_OWNERSHIP")
    assert (own.status, own.check) == (Status.WARN, "optimizer.stale_parameter")
    assert "not confirmed that a replaced module left them" in own.message


def test_an_unowned_module_the_loss_never_reaches_is_a_warn():
    model = Net()
    model.spare = nn.Linear(16, 2)  # built, never used by forward
    opt = torch.optim.SGD([*model.body.parameters(), *model.head.parameters()], lr=0.1)
    own = link(ledger(model, _data(), F.cross_entropy, opt), "OPTIMIZER_OWNERSHIP")
    assert (own.status, own.check) == (Status.WARN, "optimizer.missing_parameter")
    assert "gave them no gradient" in own.message


def test_a_parameter_train_step_leaves_unmoved_fails_only_once_the_loss_is_shown_to_depend_on_it(monkeypatch):
    import firstdiv.instruments.learning_ledger._user_step as user_step

    model = Net()
    x, y = _data()
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)

    def train_step():  # the body is never updated, and the loss depends on it: the defect
        opt.zero_grad()
        model.body.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    report = learning_ledger(model, (x, y), F.cross_entropy, None, train_step=train_step, overfit_steps=0)
    update = link(report, "PARAMETER_UPDATE")
    assert (update.status, update.check) == (Status.FAIL, "update.not_moved")
    assert "although the loss depends on them" in update.message
    monkeypatch.setattr(user_step, "loss_depends", lambda _m, _b, _l, names: dict.fromkeys(names))  # could not run
    update = link(learning_ledger(model, (x, y), F.cross_entropy, None, train_step=train_step, overfit_steps=0),
                  "PARAMETER_UPDATE")
    assert (update.status, update.check) == (Status.WARN, "update.not_moved")
    assert "not confirmed that the loss depends on them" in update.message

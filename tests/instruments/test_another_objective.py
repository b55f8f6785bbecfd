"""A parameter another objective trains (public-28's FQF): a fraction network proposes the quantile fractions and is
trained by its own optimizer on its own loss inside the step, while the quantile loss the user declares reads those
fractions detached by design. The loss depends on the fraction network and none of its gradient reaches it: that is
a cut only if this loss was meant to train it, and the program says otherwise (the declared optimizer does not own
it, another optimizer the step reaches does; or both own it and the other one finds a gradient of its own objective on
it when it steps: TD-MPC's policy in public-31). A note, not a FAIL; the same detach with the fraction network in the
declared optimizer and no gradient of another objective reaching it, or with no declared optimizer at all, still
FAILs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status


class _Quantiles(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 16), nn.ReLU())
        self.fractions = nn.Linear(16, 8)  # proposes the fractions: trained on its own objective
        self.head = nn.Linear(16 + 8, 8)

    def taus(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fractions(self.body(x).detach()), dim=1).cumsum(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        return self.head(torch.cat([h, self.taus(x).detach()], dim=1))  # the quantile loss reads them detached


def _program(split: bool = True, own_loss: bool = True):
    torch.manual_seed(0)
    model = _Quantiles()
    main = [p for n, p in model.named_parameters() if not n.startswith("fractions")]
    opt = torch.optim.Adam(main if split else model.parameters(), lr=1e-3)
    fraction_opt = torch.optim.RMSprop(model.fractions.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g)
    y = x.sum(dim=1, keepdim=True).expand(32, 8) + 0.1 * torch.randn(32, 8, generator=g)
    batch = (x, y)

    def train_step() -> torch.Tensor:
        fraction_opt.zero_grad()
        if own_loss:
            fraction_loss = (model.taus(x) - torch.linspace(0.1, 1.0, 8)).pow(2).mean()  # its own objective
            fraction_loss.backward()
        fraction_opt.step()  # without its own loss: a step on no gradient, nothing trains the fractions
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()
    return model, batch, opt, train_step


def _fails(report) -> list:
    return [f for f in report.findings if f.status is Status.FAIL]


def _runs(model, batch, opt, train_step) -> dict:
    return {"reachability": firstdiv.reachability(model, batch, F.mse_loss, optimizer=opt, train_step=train_step),
            "step_probe": firstdiv.step_probe(model, batch, F.mse_loss, opt, train_step=train_step),
            "learning_ledger": firstdiv.learning_ledger(model, batch, F.mse_loss, opt, train_step=train_step),
            "six_claims": firstdiv.six_claims(model, batch, F.mse_loss, opt, train_step=train_step)}


def test_parameters_another_optimizer_trains_on_its_own_loss_are_a_note_not_a_cut() -> None:
    for name, report in _runs(*_program()).items():
        assert not _fails(report), (name, [(f.check, f.where, f.message) for f in _fails(report)])
        text = " ".join(f.message for f in report.findings) + " ".join(report.details.get("notes", []))
        assert "another optimizer train_step reaches" in text, (name, text)


def test_the_fractions_in_both_optimizers_trained_by_their_own_loss_are_a_note_not_a_cut() -> None:
    model, batch, opt, train_step = _program(split=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for name, report in (("reachability", firstdiv.reachability(model, batch, F.mse_loss, optimizer=opt,
                                                                train_step=train_step)),
                         ("learning_ledger", firstdiv.learning_ledger(model, batch, F.mse_loss, opt, train_step=train_step))):
        assert not [f for f in _fails(report) if f.where.startswith("fractions")], (name, [f.message for f in _fails(report)])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_the_same_detach_under_the_declared_optimizer_is_still_a_cut() -> None:
    runs = _runs(*_program(split=False, own_loss=False))
    for name, report in runs.items():
        assert any(f.where.startswith(("fractions", "DEPENDENCY", "DIFFERENTIATION")) for f in _fails(report)), (
            name, [(f.check, f.where) for f in report.findings if f.status is not Status.PASS])


def test_without_a_declared_optimizer_no_optimizer_counts_as_another() -> None:
    model, batch, _, train_step = _program()
    report = firstdiv.reachability(model, batch, F.mse_loss, train_step=train_step)
    assert report.first_divergence is not None and report.first_divergence.where.startswith("fractions"), report

"""Evidence before FAIL in four_structures: the FROZEN and OPTIMIZER items FAIL only once the program is seen to do
what the finding says (a step trains the declared-frozen parameters; the loss reaches the parameters no optimizer
owns and train_step does not move them otherwise; train_step steps both owners of a shared parameter with its
gradient). Unconfirmed, they are a WARN of the same kind that names the assumption and what would confirm it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import four_structures
from firstdiv.instruments._core.state import Snapshot
from firstdiv.report import Status


def run(model, opt, batch=None, loss_fn=None, **kw):
    others = kw.pop("others", ())
    before = Snapshot.take(model, opt, *others)
    report = four_structures(model, opt, batch, loss_fn, **kw)
    assert before.diff(Snapshot.take(model, opt, *others)) == []
    return report


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(6, 8), nn.ReLU())
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.backbone(x))


class Unfreezing(Classifier):
    def train(self, mode: bool = True):
        super().train(mode)
        for p in self.parameters():
            p.requires_grad = True
        return self


def tabular():
    return torch.randn(4, 6, generator=torch.Generator().manual_seed(2)), torch.tensor([0, 1, 2, 1])


def kinds(report, status):
    return [(f.where, f.check) for f in report.findings if f.status is status and f.where not in ("FROZEN", "OPTIMIZER")]


# ---- FROZEN -------------------------------------------------------------------------------------------------------

def test_declared_frozen_left_trainable_but_owned_by_no_optimizer_is_a_warn_naming_why():
    model = Classifier()
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)  # the backbone is frozen by omission, flags left True
    report = run(model, opt, tabular(), F.cross_entropy, frozen=("backbone.*",))
    assert kinds(report, Status.FAIL) == []
    warn = next(f for f in report.findings if f.check == "frozen.requires_grad")
    assert warn.status is Status.WARN and "no optimizer owns them" in warn.message
    assert "not confirmed that a step trains them" in warn.message


def test_declared_frozen_left_trainable_and_owned_fails_once_the_loss_reaches_them():
    model = Classifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    report = run(model, opt, tabular(), F.cross_entropy, frozen=("backbone.*",))
    assert (report.first_divergence.where, report.first_divergence.kind) == ("backbone.0.weight", "frozen.requires_grad")
    assert "the optimizer owns 2 of them and the loss reaches them" in report.first_divergence.observed
    unproven = run(model, opt, frozen=("backbone.*",))  # no batch/loss_fn: whether they get a gradient is not known
    warn = next(f for f in unproven.findings if f.check == "frozen.requires_grad")
    assert warn.status is Status.WARN and "pass batch and loss_fn" in warn.message


def test_a_train_override_unfreezing_a_stage_no_optimizer_owns_is_a_warn():
    model = Unfreezing()
    model.backbone.requires_grad_(False)
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    report = run(model, opt, tabular(), F.cross_entropy, frozen=("backbone.*",))
    warn = next(f for f in report.findings if f.check == "frozen.unfrozen_by_train")
    assert warn.status is Status.WARN and "no optimizer owns them" in warn.message
    owned = run(model, torch.optim.SGD(model.parameters(), lr=0.1), tabular(), F.cross_entropy, frozen=("backbone.*",))
    assert owned.first_divergence.kind == "frozen.unfrozen_by_train"


# ---- OPTIMIZER ----------------------------------------------------------------------------------------------------

class WithSpare(Classifier):
    """A module built but not used by forward (an auxiliary head kept for later): the loss never reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.spare = nn.Linear(8, 3)


def test_unowned_tensors_the_loss_never_reaches_are_a_warn_not_a_fail():
    model = WithSpare()
    opt = torch.optim.SGD([*model.backbone.parameters(), *model.head.parameters()], lr=0.1)
    report = run(model, opt, tabular(), F.cross_entropy)
    assert kinds(report, Status.FAIL) == []
    warn = next(f for f in report.findings if f.check == "optimizer.missing_parameter")
    assert warn.status is Status.WARN and warn.where == "spare.weight"
    assert "the loss's graph does not reach them" in warn.message and "requires_grad_(False)" in warn.message


def test_unowned_tensors_without_a_batch_are_a_warn_and_with_one_a_fail():
    model = Classifier()
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    warn = next(f for f in run(model, opt).findings if f.check == "optimizer.missing_parameter")
    assert warn.status is Status.WARN and "whether the loss reaches them is not known" in warn.message
    report = run(model, opt, tabular(), F.cross_entropy)
    assert (report.first_divergence.where, report.first_divergence.kind) == ("backbone.0.weight",
                                                                             "optimizer.missing_parameter")
    assert "their gradient is computed and never applied" in report.first_divergence.observed


def test_an_unowned_tensor_train_step_updates_by_hand_is_a_note():
    model = Classifier()
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    x, y = tabular()

    def train_step():
        opt.zero_grad()
        for p in model.backbone.parameters():
            p.grad = None
        F.cross_entropy(model(x), y).backward()
        opt.step()
        with torch.no_grad():
            for p in model.backbone.parameters():
                p.add_(p.grad, alpha=-0.01)

    report = run(model, opt, (x, y), F.cross_entropy, train_step=train_step)
    assert report.status is Status.PASS, str(report)
    assert any("train_step moves them itself" in n for n in report.details["notes"])
    assert "train_step called once on your objects" in report.side_effects


def test_two_owners_stepped_in_different_calls_are_a_warn():
    model = Classifier()
    opt, other = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = tabular()
    calls = [0]

    def train_step():  # a phase schedule: the second optimizer takes over after 1000 steps
        calls[0] += 1
        active = opt if calls[0] <= 1000 else other
        active.zero_grad()
        F.cross_entropy(model(x), y).backward()
        active.step()

    report = run(model, opt, (x, y), F.cross_entropy, train_step=train_step, others=(other,))
    assert kinds(report, Status.FAIL) == [], str(report)
    warn = next(f for f in report.findings if f.check == "optimizer.multiple_owners")
    assert warn.status is Status.WARN and "did not step two of their owners" in warn.message

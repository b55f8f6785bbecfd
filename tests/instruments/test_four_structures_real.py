"""four_structures on programs in the shapes real code takes: the root cause first, one finding per module and
cause, declared frozen stages checked both ways, legacy reparametrizations left untouched."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import four_structures
from firstdiv.errors import InvalidArgument
from firstdiv.instruments._core.state import Snapshot
from firstdiv.report import Status


def run(model, opt, batch=None, loss_fn=None, **kw):
    before = Snapshot.take(model, opt)
    report = four_structures(model, opt, batch, loss_fn, **kw)
    assert before.diff(Snapshot.take(model, opt)) == []
    return report


def _block(c: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())


class ResNetish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(*[_block(4) for _ in range(6)])
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.body(x).mean((2, 3)))


def images():
    return torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 2])


def test_optimizer_over_a_frozen_head_is_named_first_and_the_rest_grouped():
    model = ResNetish()
    model.fc.requires_grad_(False)
    opt = torch.optim.SGD(model.fc.parameters(), lr=0.1)
    report = run(model, opt, images(), F.cross_entropy)
    div = report.first_divergence
    assert (div.where, div.kind) == ("fc.weight", "optimizer.owns_only_frozen")
    assert "everything the optimizer owns is frozen (fc.weight, fc.bias)" in div.observed
    fails = [f for f in report.findings if f.status is Status.FAIL and f.where != "OPTIMIZER"]
    assert [(f.where, f.check) for f in fails] == [("fc.weight", "optimizer.owns_only_frozen"), ("body.0.0.weight", "optimizer.missing_parameter")]
    group = fails[1]
    assert "18 trainable tensors in 6 modules: body.0, body.1" in group.message
    assert group.evidence["count"] == 18 and group.evidence["modules"] == [f"body.{i}" for i in range(6)]


def test_stale_optimizer_after_replacing_the_head_is_one_finding_naming_both_sides():
    model = ResNetish()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.fc = nn.Linear(4, 5)
    report = run(model, opt, (images()[0], torch.tensor([0, 4])), F.cross_entropy)
    stale = [f for f in report.findings if f.check == "optimizer.stale_parameter"]
    assert len(stale) == 1 and report.first_divergence.where == "fc.weight"
    assert "[3, 4] at param_groups[0][18]" in stale[0].message and "fc.weight [5, 4]" in stale[0].message
    assert stale[0].evidence["stale_slots"] == {"fc.weight": [0, 18], "fc.bias": [0, 19]}


class Backbone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stage1 = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.stage2 = nn.Sequential(nn.Linear(8, 8), nn.ReLU())

    def forward(self, x):
        return self.stage2(self.stage1(x))


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone, self.head = Backbone(), nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.backbone(x))


class UnfreezingClassifier(Classifier):
    """The bug: train() re-enables requires_grad on every parameter, so after model.train() the frozen stage trains."""

    def train(self, mode: bool = True):
        super().train(mode)
        for p in self.parameters():
            p.requires_grad = True
        return self


def tabular():
    return torch.randn(4, 6, generator=torch.Generator().manual_seed(2)), torch.tensor([0, 1, 2, 1])


@pytest.mark.parametrize("over", ["trainable", "all"])
def test_declared_frozen_stage_passes_without_a_warning(over):
    model = Classifier()
    model.backbone.stage1.requires_grad_(False)
    params = model.parameters() if over == "all" else filter(lambda p: p.requires_grad, model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    report = run(model, opt, tabular(), F.cross_entropy, frozen=("backbone.stage1.*",))
    assert report.status is Status.PASS, str(report)
    if over == "all":  # owned but frozen on purpose: a note, never a WARN
        assert any(n.startswith("note: the optimizer owns 4 parameters declared frozen") for n in report.details["notes"])


def test_a_train_override_that_unfreezes_the_declared_stage_fails_at_its_parameter():
    model = UnfreezingClassifier()
    model.backbone.stage1.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    report = run(model, opt, tabular(), F.cross_entropy, frozen=("backbone.stage1.*",))
    div = report.first_divergence
    assert (div.where, div.kind) == ("backbone.stage1.0.weight", "frozen.unfrozen_by_train")
    assert "UnfreezingClassifier" in div.observed and "the optimizer owns 4 of them" in div.observed
    assert all(not p.requires_grad for p in model.backbone.stage1.parameters()) and model.training
    model.train()  # once trained, the stage is trainable now: still named, by the same cause
    assert run(model, opt, tabular(), F.cross_entropy, frozen=("backbone.stage1",)).first_divergence.kind == "frozen.unfrozen_by_train"


def test_declared_frozen_but_trainable_and_undeclared_frozen():
    model = Classifier()
    model.head.requires_grad_(False)
    opt = torch.optim.SGD(model.backbone.parameters(), lr=0.1)
    report = run(model, opt, tabular(), F.cross_entropy, frozen=("backbone.stage1.*",))
    assert (report.first_divergence.where, report.first_divergence.kind) == ("backbone.stage1.0.weight", "frozen.requires_grad")
    assert next(f for f in report.findings if f.check == "frozen.undeclared").where == "head.weight"


def test_a_pattern_matching_nothing_is_refused_with_close_names():
    with pytest.raises(InvalidArgument, match=r"'backbone.stag1.\*' matches no parameter.*backbone.stage1"):
        four_structures(Classifier(), None, frozen=("backbone.stag1.*",))


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("reparam", ["weight_norm", "spectral_norm"])
def test_legacy_reparametrization_left_exactly_as_it_was(reparam, grad):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
    getattr(nn.utils, reparam)(model[0])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = (torch.randn(2, 3, 6, 6), torch.tensor([0, 1]))
    with torch.set_grad_enabled(grad):  # a forward already ran: conv.weight is a non-leaf (grad) or a leaf (no_grad)
        model(batch[0])
    weight, leaf = model[0].weight, model[0].weight.is_leaf
    report = run(model, opt, batch, F.cross_entropy)
    assert report.status is Status.PASS, str(report)
    assert model[0].weight is weight and model[0].weight.is_leaf == leaf
    twin = copy.deepcopy(model) if leaf else None  # a non-leaf refuses deepcopy by itself; the model copy must work as before
    assert twin is None or torch.equal(twin[0].weight, weight)
    with torch.no_grad():
        model(batch[0])
    copy.deepcopy(model)  # after a no-grad forward the attribute is a leaf again: deepcopy works

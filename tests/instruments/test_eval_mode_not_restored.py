"""``step.eval_mode_not_restored``: an evaluation's ``model.eval()`` that the program never undoes, so its later
training steps run in eval mode. The evidence is the program's own calls (one trained in train mode, a later one in eval
mode) and a copy of the module run both ways; a module frozen on purpose, a program that restores the mode, or a mode
that changes nothing is no finding (public corpus misses: a validation at an epoch's end, a periodic sample)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.norm, self.out = nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.norm(self.inp(x))))


class _Checkpointed(nn.Module):
    """Reads ``self.training`` only to choose how to run the same computation: its mode changes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return self.body(x)
        return self.body(x) + 0.0


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(32, 6, generator=g), torch.randint(0, 3, (32,), generator=g)


def _program(how: str, model: nn.Module | None = None, every: int = 1):
    torch.manual_seed(0)
    model = model or _Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data()
    state = {"i": 0}

    def train_step() -> torch.Tensor:
        if how == "restores" or (how == "once" and state["i"] == 0):
            model.train()
        if how == "bn_frozen":
            model.train()
            model.norm.eval()  # frozen batch norm on purpose, the model in train mode
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        state["i"] += 1
        if state["i"] % every == 0 and how != "bn_frozen":  # the end of an epoch: validation in eval mode
            model.eval()
            with torch.no_grad():
                model(x)
        return loss.detach()
    return model, opt, (x, y), train_step


def _probe(how: str, **kw) -> firstdiv.Report:
    model, opt, batch, train_step = _program(how, **kw)
    return firstdiv.step_probe(model, batch, F.cross_entropy, opt, train_step=train_step)


def _kinds(report: firstdiv.Report) -> set[str]:
    return {f.check for f in report.findings if f.status.value == "FAIL"}


def test_training_after_an_eval_never_undone_fails_at_the_first_mode_dependent_module() -> None:
    r = _probe("once")
    assert r.status.value == "FAIL"
    assert (r.first_divergence.where, r.first_divergence.kind) == ("norm", "step.eval_mode_not_restored")
    f = next(f for f in r.findings if f.check == "step.eval_mode_not_restored")
    assert (f.evidence["trained_in_train_mode_in_call"], f.evidence["trained_in_eval_mode_in_call"]) == (1, 2)


def test_an_eval_left_at_the_last_watched_call_is_confirmed_by_one_more_call() -> None:
    r = _probe("once", every=2)  # the validation ends call 2: only a third call shows the eval mode kept
    assert (r.first_divergence.where, r.first_divergence.kind) == ("norm", "step.eval_mode_not_restored")
    assert r.findings[[f.check for f in r.findings].index("step.eval_mode_not_restored")].evidence[
        "trained_in_eval_mode_in_call"] == 3


def test_a_program_that_restores_train_mode_or_freezes_a_norm_on_purpose_has_no_finding() -> None:
    for how, every in (("restores", 1), ("restores", 2), ("bn_frozen", 1)):
        model, opt, batch, train_step = _program(how, every=every)
        r = firstdiv.step_probe(model, batch, F.cross_entropy, opt, train_step=train_step)
        assert "step.eval_mode_not_restored" not in _kinds(r), (how, every)
        assert model.training, "the probe restores the mode the model was handed over in"


def test_a_module_whose_mode_changes_nothing_is_not_confirmed() -> None:
    model = nn.Sequential(nn.Linear(6, 16), _Checkpointed(), nn.ReLU(), nn.Linear(16, 3))
    assert "step.eval_mode_not_restored" not in _kinds(_probe("once", model=model))

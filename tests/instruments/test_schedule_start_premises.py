"""A speed-run recipe (hlb-CIFAR10) at its first step, each cause reproduced on a small program:

- a one-cycle schedule with ``div_factor=1e16`` holds an lr near 1e-19 at step 0: the CAPABILITY copy escalated that lr
  1000-fold and still saw no update (``capability.cannot_overfit`` FAIL), although the program's own schedule reaches
  its ``max_lr`` a few calls later. The escalation now runs again from the lr the schedule reaches; a constant lr of
  1e-19 (no schedule to go on) still FAILs;
- the same schedule on two optimizers (non-bias and bias groups) left weights bit-identical in one call of train_step,
  read as "train_step leaves it out" (``claim.update.not_updated`` FAIL). The lr at that step is read, and a copy of the
  optimizer stepped at a larger lr moves them; a group whose step never touches its parameters still FAILs;
- a convolution whose weight is replaced after construction by ``cat((w, -w))`` (a whitening layer) convolves with
  twice its ``out_channels``: its geometry is derived from the weight its forward uses, not the stale attribute."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status

pytestmark = pytest.mark.usefixtures("one_thread")


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))


def _one_cycle(opt: torch.optim.Optimizer, lr: float) -> torch.optim.lr_scheduler.OneCycleLR:
    return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=100, pct_start=0.25, div_factor=1e16,
                                               anneal_strategy="linear", cycle_momentum=False)


def _capability(scheduled: bool) -> firstdiv.Finding:
    model, (x, y) = _model(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.5 if scheduled else 1e-19, momentum=0.9)
    sched = _one_cycle(opt, 0.5) if scheduled else None

    def train_step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        return loss.detach()

    # without a schedule, train_step's own calls move nothing either (PARAMETER_UPDATE's finding): the copy's alone
    r = firstdiv.learning_ledger(model, (x, y), F.cross_entropy, opt, train_step=train_step if scheduled else None)
    return next(f for f in r.findings if f.where == "CAPABILITY")


def test_a_warmup_starting_near_zero_is_escalated_from_the_scheduled_lr():
    f = _capability(scheduled=True)
    assert f.status is Status.PASS, f.message
    assert f.evidence["schedule_lr"] == [0.5] and f.evidence["rounds_at_this_step"], f.evidence


def test_a_constant_lr_near_zero_still_cannot_overfit():
    f = _capability(scheduled=False)
    assert (f.status, f.check) == (Status.FAIL, "capability.cannot_overfit"), f.message


class _SkippingSGD(torch.optim.SGD):
    """SGD that leaves the groups marked ``skip`` alone: those parameters never move, whatever the lr."""

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            if not g.get("skip"):
                for p in g["params"]:
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-g["lr"])


def _update(skip: bool) -> firstdiv.Finding:
    model, (x, y) = _model(), _data()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)  # no weight exactly 0: an update of 1e-19 x grad moves none of them
    weights = [p for n, p in model.named_parameters() if "bias" not in n]
    biases = [p for n, p in model.named_parameters() if "bias" in n]
    opt = _SkippingSGD([{"params": weights[:1]}, {"params": weights[1:], "skip": skip}], lr=0.1)
    opt_bias = torch.optim.SGD(biases, lr=0.1)
    scheds = [_one_cycle(opt, 0.1), _one_cycle(opt_bias, 0.1)]

    def train_step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt_bias.step()
        for s in scheds:
            s.step()
        opt.zero_grad(set_to_none=True)
        opt_bias.zero_grad(set_to_none=True)
        return loss.detach()

    r = firstdiv.six_claims(model, (x, y), F.cross_entropy, opt, train_step=train_step)
    return next(f for f in r.findings if f.where == "UPDATE")


def test_weights_held_by_a_warmups_tiny_lr_in_train_step_are_not_left_out():
    f = _update(skip=False)
    assert f.status is Status.PASS and "at a larger lr moves them" in f.message, f.message
    assert sorted(f.evidence["moved_at_a_raised_lr"]) == ["0.bias", "0.weight", "2.bias", "2.weight"], f.evidence


def test_a_group_train_steps_optimizer_never_updates_still_fails():
    f = _update(skip=True)
    assert (f.status, f.check) == (Status.FAIL, "claim.update.not_updated"), f.message
    assert f.evidence["not_moved"] == ["2.weight"], f.evidence


class _Whitened(nn.Module):
    def __init__(self, declared_next: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.whiten = nn.Conv2d(3, 12, kernel_size=2, padding=0, bias=False)
        self.whiten.weight.data = torch.cat((self.whiten.weight.data, -self.whiten.weight.data))  # 24 out channels
        self.conv = nn.Conv2d(declared_next, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(F.gelu(self.whiten(x)))


def test_a_conv_whose_weight_was_replaced_is_derived_from_that_weight():
    r = firstdiv.shape_ledger(_Whitened(24), torch.randn(2, 3, 32, 32))
    f = next(f for f in r.findings if f.where == "whiten")
    assert (f.status, f.check) == (Status.PASS, "shape.derived"), str(r)
    assert "Conv2d(3->24" in f.message and "weight [24, 3, 2, 2]" in f.message, f.message


def test_a_replaced_weight_the_next_layer_does_not_take_still_fails():
    r = firstdiv.shape_ledger(_Whitened(12), torch.randn(2, 3, 32, 32))
    assert r.status is Status.FAIL, str(r)

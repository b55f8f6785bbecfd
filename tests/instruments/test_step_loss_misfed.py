"""OBJECTIVE reads the loss the user's own train_step backpropagates, not only loss_fn's: a loop that computes its
loss itself (softmax probabilities into cross_entropy, written in the step) is found with the same graph-and-values
confirmation, and a sound step finds nothing. The patched backward is put back, also when the step raises."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


def _program(misfed: bool, raises: bool = False):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    x = torch.randn(32, 6)
    y = x[:, :3].argmax(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step() -> float:
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(F.softmax(out, dim=-1) if misfed else out, y)
        loss.backward()
        if raises:
            raise RuntimeError("the step's own failure")
        opt.step()
        return float(loss)
    return model, (x, y), opt, train_step


def test_probabilities_into_cross_entropy_inside_train_step_fail_objective_although_loss_fn_is_sound() -> None:
    model, batch, opt, step = _program(misfed=True)
    r = firstdiv.learning_ledger(model, batch, F.cross_entropy, opt, train_step=step, overfit_steps=0)
    assert r.status.value == "FAIL"
    assert (r.first_divergence.where, r.first_divergence.kind) == ("OBJECTIVE", "objective.probabilities_as_logits")
    assert "train_step" in r.first_divergence.observed or "train_step" in next(
        f.message for f in r.findings if f.where == "OBJECTIVE")


def test_a_sound_train_step_gives_no_objective_finding_and_backward_is_put_back() -> None:
    original = torch.autograd.backward
    model, batch, opt, step = _program(misfed=False)
    r = firstdiv.learning_ledger(model, batch, F.cross_entropy, opt, train_step=step, overfit_steps=0)
    assert next(f for f in r.findings if f.where == "OBJECTIVE").status.value == "PASS"
    assert torch.autograd.backward is original


def test_a_step_that_raises_leaves_backward_as_it_was() -> None:
    original = torch.autograd.backward
    model, batch, opt, step = _program(misfed=False, raises=True)
    firstdiv.learning_ledger(model, batch, F.cross_entropy, opt, train_step=step, overfit_steps=0)
    assert torch.autograd.backward is original


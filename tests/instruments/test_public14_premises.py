"""What public-14's first contact showed (tests/realworld/README.md, "What public-14 showed"), confirmed on the
program's own behaviour: a loss that jumps on a large first step and comes back is no divergence."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = pytest.mark.usefixtures("one_thread")


def _stepping(first_lr: float, then_lr: float):
    """Regression towards w = 0 from w = 0.1 with SGD whose first step from a fresh optimizer (no momentum buffer yet)
    takes ``first_lr`` and every later one ``then_lr``: a large first step overshoots, the later ones walk back."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.1)
    x = torch.randn(64, 4)
    y = torch.zeros(64, 1)
    opt = torch.optim.SGD(model.parameters(), lr=first_lr, momentum=0.5)

    def train_step() -> torch.Tensor:
        for g in opt.param_groups:
            g["lr"] = then_lr if opt.state else first_lr
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return model, (x, y), opt, train_step


def _update(first_lr: float, then_lr: float) -> firstdiv.Finding:
    model, batch, opt, step = _stepping(first_lr, then_lr)
    r = firstdiv.learning_ledger(model, batch, F.mse_loss, opt, train_step=step, overfit_steps=0)
    return next(f for f in r.findings if f.where == "PARAMETER_UPDATE")


def test_a_first_step_spike_the_next_calls_recover_from_is_a_warning_and_a_lasting_one_fails() -> None:
    spike = _update(3.0, 0.2)
    assert (spike.status.value, spike.check) == ("WARN", "update.diverges"), spike.message
    assert "came back" in spike.message
    lasting = _update(3.0, 3.0)
    assert (lasting.status.value, lasting.check) == ("FAIL", "update.diverges"), lasting.message


class SpeakerNet(nn.Module):
    """A model that returns embeddings, or (loss, accuracy) when given the labels: its forward takes them."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor, label: torch.Tensor | None = None):
        emb = self.body(x)
        if label is None:
            return emb
        logits = self.head(emb)
        return F.cross_entropy(logits, label), (logits.argmax(1) == label).float().mean()


def test_a_loss_fn_given_the_wrong_call_is_not_blamed_when_forward_takes_the_labels() -> None:
    """Called as model(inputs) the model returns embeddings and loss_fn's outputs[0] is a row of them: firstdiv's
    call, not the user's loss_fn, so no FAIL, and the reason names the parameter and the fix."""
    torch.manual_seed(0)
    model, x, y = SpeakerNet(), torch.randn(16, 6), torch.randint(0, 3, (16,))
    opt = torch.optim.SGD(model.parameters(), 0.1)
    r = firstdiv.learning_ledger(model, (x, y), lambda out, _t: out[0], opt, overfit_steps=0)
    assert r.status.value != "FAIL", str(r)
    assert "`label`" in r.reason and "((inputs, targets), targets)" in r.reason, r.reason
    fed = firstdiv.learning_ledger(model, ((x, y), y), lambda out, _t: out[0], opt, overfit_steps=0)
    objective = next(f for f in fed.findings if f.where == "OBJECTIVE")
    assert objective.check != "objective.unusable_loss", objective.message

"""An optimizer that computes its schedule inside its own ``step`` (BERT's Adam: the update times a warmup from 0 at
step 0, while ``param_groups[i]['lr']`` keeps the base lr) holds every parameter on its first call. ``step_probe``
and ``six_claims`` confirm ``not_updated`` by the optimizer's next steps on the same gradient: a parameter those move
is not stuck (a note); one whose warmup never advances (the step counter never incremented) stays a FAIL."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status


class WarmupSGD(torch.optim.Optimizer):
    def __init__(self, params, lr: float, warmup: int = 4, counts: bool = True) -> None:
        super().__init__(params, {"lr": lr, "warmup": warmup})
        self.counts = counts

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                state.setdefault("step", 0)
                scale = min(1.0, state["step"] / group["warmup"])  # 0 at the first step
                p.add_(p.grad, alpha=-group["lr"] * scale)
                state["step"] += 1 if self.counts else 0


@pytest.mark.parametrize("counts", [True, False], ids=["warmup_advances", "warmup_stuck_at_0"])
def test_an_update_held_by_the_optimizers_own_first_step_is_not_a_stuck_parameter(counts):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = WarmupSGD(model.parameters(), 0.1, counts=counts)

    def train_step():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    probe = firstdiv.step_probe(model, (x, y), F.mse_loss, opt, train_step=train_step)
    claims = firstdiv.six_claims(model, (x, y), F.mse_loss, opt)
    update = next(f for f in claims.findings if f.where == "UPDATE")
    stuck = [f for f in probe.findings if f.check == "step.not_updated" and f.status is Status.FAIL]
    if counts:
        assert not stuck, str(probe)
        assert update.status is Status.PASS and "next steps on the same gradient move them" in update.message, str(claims)
    else:
        assert stuck, str(probe)
        assert (update.status, update.check) == (Status.FAIL, "claim.update.not_updated"), str(claims)


@pytest.mark.parametrize("counts", [True, False], ids=["warmup_advances", "warmup_stuck_at_0"])
def test_the_ledgers_controlled_update_confirms_a_held_first_step_by_the_next_ones(counts):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    ledger = firstdiv.learning_ledger(model, (x, y), F.mse_loss, WarmupSGD(model.parameters(), 0.1, counts=counts),
                                      overfit_steps=0)
    update = next(f for f in ledger.findings if f.where == "PARAMETER_UPDATE")
    if counts:
        assert update.status is Status.PASS, str(ledger)
        assert any("next steps on the same gradients move them" in n for n in ledger.details["notes"]), ledger.details
    else:
        assert (update.status, update.check) == (Status.FAIL, "update.not_moved"), str(ledger)

"""CAPABILITY's plateau is a FAIL only when its counterfactual shows what the model lacks: the same copy with a
learnable offset and scale on its outputs fits the batch the model could not. An objective with a floor of its own
(the false FAILs of public code at first contact: a GAN's, a photometric loss's, a term no weight can lower) plateaus
with the offset too, and is a WARN that says so."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


def _capability(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn, opt) -> firstdiv.Finding:
    r = firstdiv.learning_ledger(model, (x, y), loss_fn, opt)
    return next(f for f in r.findings if f.where == "CAPABILITY")


def test_a_model_without_the_bias_its_targets_need_fails_with_the_counterfactual_that_fits() -> None:
    torch.manual_seed(0)
    model = nn.Linear(2, 1, bias=False)
    x = torch.randn(32, 2)
    cap = _capability(model, x, x.sum(1, keepdim=True) + 20, F.mse_loss, torch.optim.SGD(model.parameters(), lr=0.01))
    assert (cap.status.name, cap.check) == ("FAIL", "capability.cannot_overfit"), cap.message
    assert cap.evidence["offset_counterfactual"]["outcome"] == "fitted"
    assert "offset and scale on its outputs fits" in cap.message


def test_an_objective_with_a_floor_of_its_own_plateaus_with_the_offset_too_and_is_a_warn() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.randn(32, 4)

    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # a term no weight lowers: the objective's floor
        return F.mse_loss(out, y) + 50.0

    before = {k: v.clone() for k, v in model.state_dict().items()}
    cap = _capability(model, x, x[:, :1].sin(), loss_fn, torch.optim.Adam(model.parameters(), lr=1e-3))
    assert cap.status.name == "WARN" and cap.message.startswith("inconclusive"), cap.message
    assert cap.evidence["offset_counterfactual"]["outcome"] not in ("fitted", "learning")
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # the counterfactual ran on a copy

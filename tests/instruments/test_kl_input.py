"""``objective.kl_input_not_log``: ``F.kl_div`` (or ``nn.KLDivLoss``) handed probabilities or raw scores where it reads
log-probabilities, or log-probabilities as its target without ``log_target=True``: the values show it, read from the
call itself while ``loss_fn`` runs on the ledger's copy. A distillation loss written as documented finds nothing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = pytest.mark.usefixtures("one_thread")

T = 4.0


def _distill(kind: str):
    teacher = nn.Linear(10, 5)

    def loss_fn(logits, y):
        with torch.no_grad():
            t = teacher(x_of[0])
        if kind == "as_documented":
            soft = F.kl_div(F.log_softmax(logits / T, dim=1), F.softmax(t / T, dim=1), reduction="batchmean")
        elif kind == "module_log_target":
            soft = nn.KLDivLoss(reduction="batchmean", log_target=True)(F.log_softmax(logits / T, 1), F.log_softmax(t / T, 1))
        elif kind == "probabilities":
            soft = F.kl_div(F.softmax(logits / T, dim=1), F.softmax(t / T, dim=1), reduction="batchmean")
        elif kind == "raw_scores":
            soft = nn.KLDivLoss(reduction="batchmean")(logits, F.softmax(t / T, dim=1))
        else:  # log-probabilities as the target without log_target=True
            soft = F.kl_div(F.log_softmax(logits / T, dim=1), F.log_softmax(t / T, dim=1), reduction="batchmean")
        return soft * T * T + F.cross_entropy(logits, y)

    x_of: list[torch.Tensor] = []
    return loss_fn, x_of


def _objective(kind: str) -> firstdiv.Finding:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 5))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 10, generator=g), torch.randint(0, 5, (32,), generator=g)
    loss_fn, x_of = _distill(kind)
    x_of.append(x)
    r = firstdiv.learning_ledger(model, (x, y), loss_fn, torch.optim.SGD(model.parameters(), 0.1), overfit_steps=0)
    return next(f for f in r.findings if f.where == "OBJECTIVE")


@pytest.mark.parametrize("kind", ["probabilities", "raw_scores", "log_target_missing"])
def test_kl_div_handed_what_it_does_not_read_fails(kind):
    f = _objective(kind)
    assert (f.status.value, f.check) == ("FAIL", "objective.kl_input_not_log"), f.message
    if kind != "log_target_missing":
        assert f.evidence["kl_div_input_read_as"] == kind.replace("_", " ")


@pytest.mark.parametrize("kind", ["as_documented", "module_log_target"])
def test_kl_div_of_log_probabilities_finds_nothing(kind):
    f = _objective(kind)
    assert f.check != "objective.kl_input_not_log", f.message

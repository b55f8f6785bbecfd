"""``nll_loss`` fed a ``log_softmax`` taken over the wrong axis (the time axis of ``[B, T, V]`` scores): the input has a
log-normalization behind it, but over the positions, so the classes never compete. Read from the loss's own graph
and the values it saved: logsumexp over the classes is not 0."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status


class TokenScorer(nn.Module):
    def __init__(self, dim: int, vocab: int = 20) -> None:
        super().__init__()
        self.emb, self.out, self.dim = nn.Embedding(vocab, 16), nn.Linear(16, vocab), dim

    def forward(self, ids):
        return F.log_softmax(self.out(self.emb(ids)), dim=self.dim)


@pytest.mark.parametrize("dim", [-1, 1], ids=["over_vocabulary", "over_time"])
def test_nll_of_a_log_softmax_over_time_is_not_a_class_likelihood(dim):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 20, (8, 13), generator=g)
    torch.manual_seed(0)
    model = TokenScorer(dim)
    loss_fn = lambda out, t: F.nll_loss(out.transpose(2, 1), t)
    report = firstdiv.learning_ledger(model, (tokens[:, :-1], tokens[:, 1:]), loss_fn,
                                      torch.optim.Adam(model.parameters(), 1e-3), overfit_steps=0)
    objective = next(f for f in report.findings if f.where == "OBJECTIVE")
    if dim == -1:
        assert objective.status is Status.PASS, str(report)
    else:
        assert (objective.status, objective.check) == (Status.FAIL, "objective.nll_of_raw_scores"), str(report)
        assert "another axis than the classes (its dim 1" in objective.message

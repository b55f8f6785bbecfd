"""A cross-entropy written out by hand (``-(targets * log_softmax(z, dim)).sum(1)``, a gather of log-probabilities
along the class axis) whose ``log_softmax`` normalized another axis than the one the loss takes the values along: the
classes never compete, each entry is normalized against the other rows (a multinomial likelihood over the users
instead of the items, a prototypical network's log_softmax over the queries). Read from the loss's own graph and the
log_softmax's saved result: logsumexp along the consumed axes is not 0.

Sound forms give no finding: the same sums over the class axis, a segmentation cross-entropy summed over the classes
and the pixels together, and a sound cross-entropy whose sums come in another order (targets that are a distribution
over the log_softmax's own axis)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv import Status

pytestmark = pytest.mark.usefixtures("one_thread")


def _objective(model, batch, loss_fn):
    report = firstdiv.learning_ledger(model, batch, loss_fn, torch.optim.Adam(model.parameters(), 1e-3), overfit_steps=0)
    return next(f for f in report.findings if f.where == "OBJECTIVE"), report


def _ratings(dim: int):
    """A multinomial autoencoder over 30 items: ``-(log_softmax(z, dim) * ratings).sum(1).mean()``."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(16, 30, generator=g) < 0.2).float()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(30, 8), nn.Tanh(), nn.Linear(8, 30))
    return model, (x, x), lambda z, r: -(F.log_softmax(z, dim) * r).sum(1).mean()


@pytest.mark.parametrize("dim", [1, 0], ids=["over_items", "over_users"])
def test_a_multinomial_likelihood_normalized_over_the_users_is_failed(dim):
    objective, report = _objective(*_ratings(dim))
    if dim == 1:
        assert objective.status is not Status.FAIL, str(report)
    else:
        assert (objective.status, objective.check) == (Status.FAIL, "objective.nll_of_raw_scores"), str(report)
        assert "along dims [1]" in objective.message and "its dim 0" in objective.message


class _Protos(nn.Module):
    """Queries scored against class prototypes (negative squared distances), log_softmax over ``dim``, viewed
    ``[ways, queries per way, ways]`` and gathered at each query's class."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.enc, self.dim = nn.Linear(6, 8), dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.enc(x)
        protos = z[:12].view(4, 3, 8).mean(1)
        return F.log_softmax(-torch.cdist(z[12:], protos) ** 2, dim=self.dim).view(4, 5, 4)


@pytest.mark.parametrize("dim", [1, 0], ids=["over_prototypes", "over_queries"])
def test_a_gather_of_log_probabilities_normalized_over_the_queries_is_failed(dim):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 6, generator=g)
    target = torch.arange(4).view(4, 1, 1).expand(4, 5, 1)
    torch.manual_seed(0)
    loss_fn = lambda logp, t: -logp.gather(2, t).squeeze().view(-1).mean()
    objective, report = _objective(_Protos(dim), (x, target), loss_fn)
    if dim == 1:
        assert objective.status is not Status.FAIL, str(report)
    else:
        assert (objective.status, objective.check) == (Status.FAIL, "objective.nll_of_raw_scores"), str(report)
        assert "along dims [2]" in objective.message


def test_sound_written_out_cross_entropies_give_no_finding():
    g = torch.Generator().manual_seed(2)
    torch.manual_seed(0)
    seg = nn.Conv2d(3, 5, 1)
    x, y = torch.randn(4, 3, 6, 6, generator=g), torch.randint(0, 5, (4, 6, 6), generator=g)
    onehot = lambda t: F.one_hot(t, 5).permute(0, 3, 1, 2).float()
    # summed over the classes and the pixels together
    objective, report = _objective(seg, (x, y), lambda z, t: -(onehot(t) * F.log_softmax(z, 1)).sum((1, 2, 3)).mean())
    assert objective.status is not Status.FAIL, str(report)
    # a sound soft-target cross-entropy summed over the examples first, then averaged over the classes
    head = nn.Linear(6, 4)
    xs = torch.randn(16, 6, generator=g)
    soft = torch.softmax(torch.randn(16, 4, generator=g), 1)
    objective, report = _objective(head, (xs, soft), lambda z, t: -(t * F.log_softmax(z, 1)).sum(0).mean())
    assert objective.status is not Status.FAIL, str(report)

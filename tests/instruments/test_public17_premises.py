"""What the public-17 batch showed at first contact, each cause reproduced on a small program and confirmed fixed:

- a Mult-VAE whose decoder ends in a softmax over the items and whose loss is the multinomial likelihood of the
  multi-hot targets plus a KL term: the softmax cannot reach targets that sum to 20, which is that likelihood's design,
  and the KL made the loss affine (not linear) in the targets, so the exemption for it was missed
  (``objective.unreachable`` FAIL). Binary cross-entropy on the same softmax, independent labels behind a softmax, still
  FAILs;
- a schedule whose warmup starts at lr 1e-8: the first step's update is below float32's resolution next to the
  weights, which stay bit-identical (``claim.update.not_updated`` FAIL). One more step of the copy at a larger lr moves
  them; a parameter that even that step leaves in place still FAILs;
- an aspect-sentiment model whose one attention class, softmaxed over the batch, runs twice (over the aspect and over
  the context): holding either softmax alone leaves the other's share of the move, so no single reduction carried it
  and ``dependency.examples_mixed`` gave no finding. Held together they take the move away, and both are named."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv

pytestmark = pytest.mark.usefixtures("one_thread")


class _MultVAE(nn.Module):
    def __init__(self, items: int = 40) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.enc, self.dec = nn.Linear(items, 2 * 8), nn.Linear(8, items)

    def forward(self, x: torch.Tensor):
        mu, logvar = self.enc(x).chunk(2, dim=1)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.softmax(self.dec(z), dim=1), mu, logvar


def _baskets() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return (torch.rand(32, 40, generator=g) < 0.5).float()  # about 20 items on per user


def _objective(loss_fn) -> firstdiv.Finding:
    model, x = _MultVAE(), _baskets()
    r = firstdiv.learning_ledger(model, (x, x), loss_fn, torch.optim.Adam(model.parameters(), 1e-3), overfit_steps=0)
    return next(f for f in r.findings if f.where == "OBJECTIVE")


def _kl(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    return -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1)


def test_a_multinomial_likelihood_with_a_kl_term_is_a_warn_not_a_fail():
    def loss_fn(outputs, x):
        probs, mu, logvar = outputs
        return torch.mean(-torch.sum(x * torch.log(probs + 1e-10), dim=1) + _kl(mu, logvar))

    f = _objective(loss_fn)
    assert (f.status.value, f.check) == ("WARN", "objective.unreachable"), f.message
    assert f.evidence["loss_weighted_by_targets"] is True


def test_binary_cross_entropy_on_a_softmax_still_fails():
    def loss_fn(outputs, x):
        probs, mu, logvar = outputs
        return F.binary_cross_entropy(probs.clamp(1e-6, 1 - 1e-6), x, reduction="sum") / len(x) + _kl(mu, logvar).mean()

    f = _objective(loss_fn)
    assert (f.status.value, f.check) == ("FAIL", "objective.unreachable"), f.message


class _SkippingSGD(torch.optim.SGD):
    """SGD that leaves the groups marked ``skip`` alone: those parameters never move, whatever the lr."""

    @torch.no_grad()
    def step(self, closure=None):
        kept = [g for g in self.param_groups if not g.get("skip")]
        for g in kept:
            for p in g["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-g["lr"])


def _update(optimizer_of) -> firstdiv.Finding:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 3))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(50.0)  # large weights: an update of 1e-8 x grad is far below float32's step next to them
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)
    r = firstdiv.six_claims(model, (x, y), F.cross_entropy, optimizer_of(model))
    return next(f for f in r.findings if f.where == "UPDATE")


def test_a_warmup_starting_at_a_tiny_lr_is_no_parameter_left_in_place():
    f = _update(lambda m: torch.optim.SGD(m.parameters(), lr=1e-8))
    assert f.status.value == "PASS", f.message
    assert "float32" in f.message


def test_a_parameter_no_lr_moves_still_fails():
    def skipping(m: nn.Module) -> torch.optim.Optimizer:
        first, second = list(m[0].parameters()), list(m[2].parameters())
        return _SkippingSGD([{"params": first}, {"params": second, "skip": True}], lr=1e-8)

    f = _update(skipping)
    assert (f.status.value, f.check) == ("FAIL", "claim.update.not_updated"), f.message
    assert f.evidence["not_moved"] == ["2.weight", "2.bias"]


class _Attention(nn.Module):
    """Pools a sequence by attention; ``dim=0`` normalizes the weights over the examples instead of the positions."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.score, self.dim = nn.Linear(6, 1), dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = F.softmax(self.score(x).squeeze(-1), dim=self.dim)
        return (w.unsqueeze(-1) * x).sum(1)


class _TwoAttentions(nn.Module):
    """The same attention class over two sequences (an aspect and its context), as an aspect-sentiment model."""

    def __init__(self, over_batch: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        dim = 0 if over_batch else 1
        self.aspect, self.context, self.head = _Attention(dim), _Attention(dim), nn.Linear(12, 3)

    def forward(self, a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([self.aspect(a), self.context(c)], 1))


@pytest.mark.parametrize("over_batch", [True, False])
def test_two_attentions_over_the_batch_are_named_together(over_batch):
    g = torch.Generator().manual_seed(0)
    a, c, y = torch.randn(16, 5, 6, generator=g), torch.randn(16, 7, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
    model = _TwoAttentions(over_batch)
    r = firstdiv.learning_ledger(model, ((a, c), y), F.cross_entropy, torch.optim.Adam(model.parameters(), 1e-3),
                                 overfit_steps=0)
    dep = next(f for f in r.findings if f.where == "DEPENDENCY")
    if not over_batch:
        assert dep.check != "dependency.examples_mixed", dep.message
        return
    assert (dep.status.value, dep.check) == ("FAIL", "dependency.examples_mixed"), dep.message
    assert dep.evidence["mixing_module"] == "aspect, context", dep.evidence

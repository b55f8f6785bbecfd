"""What public-30's first contact showed, each fixed in general (tests/realworld/README.md):

- ICLRec's SASRec encoder masks attention additively with ``(1 - padding_mask * causal_mask) * -10000``: a left-padded
  query position whose every allowed key is padding gets the same score everywhere and attends uniformly, later
  tokens included. Those positions are padding and the loss never asks them anything, so the leak trains nothing;
  ``dependency.future_visible`` now measures the earlier outputs only where the loss's gradient is nonzero.
- A C51 agent's loss is a cross-entropy against projected target distributions that, from a fresh network, are
  nearly uniform: the loss starts at their entropy, its floor, and cannot fall. ``capability.cannot_overfit`` took the
  plateau for a model that cannot fit, confirmed by an output offset and scale that pushed the probabilities out of
  [0, 1] (below the entropy no distribution can go). The entropy of soft targets is now read as the floor.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status

pytestmark = pytest.mark.usefixtures("one_thread")

V, T, B, PAD = 20, 12, 8, 0


class _PaddedCausal(nn.Module):
    """One attention layer under an additive padding-and-causal mask of -10000 (the BERT-era recipe)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.qkv, self.head = nn.Embedding(V, 16), nn.Linear(16, 48), nn.Linear(16, V)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        q, k, v = self.qkv(h).chunk(3, -1)
        keep = (ids > PAD).unsqueeze(1) * torch.tril(torch.ones(T, T)).unsqueeze(0)
        scores = q @ k.transpose(1, 2) / 4 + (1.0 - keep) * -10000.0
        return self.head(torch.softmax(scores, -1) @ v)


def test_a_leak_only_at_padding_positions_the_loss_ignores_is_no_future_visible() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, V, (B, T + 1), generator=g)
    ids[:, :8] = PAD  # left padding past the middle position: their queries see only padding
    x, y = ids[:, :-1], ids[:, 1:].clone()
    y[x == PAD] = -100  # the loss asks nothing of padding positions
    model = _PaddedCausal()
    r = firstdiv.learning_ledger(model, (x, y), lambda o, t: F.cross_entropy(o.reshape(-1, V), t.reshape(-1)),
                                 torch.optim.Adam(model.parameters(), lr=1e-3))
    assert not any(f.check == "dependency.future_visible" and f.status is Status.FAIL for f in r.findings), r


def test_the_same_model_without_its_causal_mask_still_fails_future_visible() -> None:
    class _Open(_PaddedCausal):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h = self.emb(ids)
            q, k, v = self.qkv(h).chunk(3, -1)
            keep = (ids > PAD).unsqueeze(1).float().expand(-1, T, -1)
            return self.head(torch.softmax(q @ k.transpose(1, 2) / 4 + (1.0 - keep) * -10000.0, -1) @ v)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, V, (B, T + 1), generator=g)
    ids[:, :3] = PAD
    x, y = ids[:, :-1], ids[:, 1:].clone()
    y[x == PAD] = -100
    model = _Open()
    r = firstdiv.learning_ledger(model, (x, y), lambda o, t: F.cross_entropy(o.reshape(-1, V), t.reshape(-1)),
                                 torch.optim.Adam(model.parameters(), lr=1e-3))
    assert r.status is Status.FAIL and r.first_divergence.kind == "dependency.future_visible", r


def test_a_cross_entropy_at_the_entropy_of_its_soft_targets_is_fitted_not_cannot_overfit() -> None:
    torch.manual_seed(0)
    atoms = 51
    model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, atoms), nn.Softmax(-1))
    g = torch.Generator().manual_seed(2)
    x = torch.randn(16, 6, generator=g)
    targets = torch.softmax(0.01 * torch.randn(16, atoms, generator=g), -1)  # nearly uniform, as a fresh C51 projects

    def loss_fn(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return -torch.sum(t * torch.log(p.clamp(min=1e-3)))
    r = firstdiv.learning_ledger(model, (x, targets), loss_fn, torch.optim.Adam(model.parameters(), lr=6e-4))
    cap = next(f for f in r.findings if f.where == "CAPABILITY")
    assert cap.status is not Status.FAIL, cap


def _policy_batch() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1), nn.LogSigmoid())  # log pi(a|s), [B, 1]
    return model, (torch.randn(32, 4, generator=g), torch.randn(32, generator=g))  # states, advantages [B]


def test_a_per_example_weight_broadcast_against_a_column_of_predictions_is_shape_broadcast() -> None:
    """PPO's ``ratio * adv`` with the advantages never unsqueezed: every example's log-probability is weighted by every
    example's advantage ([B, 1] * [B] -> [B, B]), the policy gradient averaged away."""
    model, batch = _policy_batch()
    r = firstdiv.learning_ledger(model, batch, lambda logp, adv: -(logp * adv).mean(),
                                 torch.optim.Adam(model.parameters(), lr=1e-3))
    assert r.status is Status.FAIL and r.first_divergence.kind == "objective.shape_broadcast", r


@pytest.mark.parametrize("loss", ["unsqueezed", "pairwise", "masked_table"])
def test_products_that_mean_their_shape_are_no_broadcast(loss: str) -> None:
    model, batch = _policy_batch()
    table = (torch.arange(32)[:, None] < torch.arange(32)[None, :]).float()
    fns = {"unsqueezed": lambda s, adv: -(s * adv.unsqueeze(-1)).mean(),
           "pairwise": lambda s, adv: F.softplus(-(s - s.T) * torch.sign(adv[:, None] - adv[None, :])).mean(),  # RankNet
           "masked_table": lambda s, adv: (s * table).mean()}  # a row's score against a table of pairs
    r = firstdiv.learning_ledger(model, batch, fns[loss], torch.optim.Adam(model.parameters(), lr=1e-3))
    assert not any(f.check == "objective.shape_broadcast" and f.status is Status.FAIL for f in r.findings), r


class _Critic(nn.Module):
    """A critic whose own training method scores through ``self.forward`` (as a trainer library's network does)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, real: torch.Tensor, fake: torch.Tensor, swapped: bool) -> torch.Tensor:
        real_score, fake_score = self.forward(real).mean(), self.forward(fake).mean()
        return real_score - fake_score if swapped else fake_score - real_score


def _wgan(swapped: bool):
    torch.manual_seed(0)
    g_net, d_net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)), _Critic()
    opt_g, opt_d = torch.optim.Adam(g_net.parameters(), 1e-3), torch.optim.Adam(d_net.parameters(), 1e-3)
    gen = torch.Generator().manual_seed(0)
    real = torch.randn(64, 2, generator=gen) * 0.3 + 1.0

    def train_step() -> float:
        x = real[torch.randperm(64, generator=gen)[:32]]
        with torch.no_grad():
            fake = g_net(torch.randn(32, 4, generator=gen))
        opt_d.zero_grad()
        d_loss = d_net.loss(x, fake, swapped)
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        g_loss = -d_net(g_net(torch.randn(32, 4, generator=gen))).mean()
        g_loss.backward()
        opt_g.step()
        return float(d_loss)
    batch = (real[:32], torch.ones(32, 1))
    return d_net, batch, lambda s, _t: -s.mean(), opt_d, train_step


@pytest.mark.parametrize("swapped", [False, True])
def test_a_critic_scoring_through_self_forward_is_watched(swapped: bool) -> None:
    """mimicry's WGAN-GP critic scores real and generated inputs in a method of its own (``self.forward``): the
    adversarial check saw only the generator's call (a forward hook misses a direct ``forward``), so swapped critic
    signs passed."""
    model, batch, loss_fn, opt, step = _wgan(swapped)
    before = dict(model.__dict__)
    report = firstdiv.learning_ledger(model, batch, loss_fn, opt, train_step=step, overfit_steps=0)
    found = [f for f in report.findings if f.check == "objective.adversarial_direction"]
    assert model.__dict__.keys() == before.keys() and "forward" not in model.__dict__
    if swapped:
        assert found and found[0].status is Status.FAIL and found[0].evidence["which"] == "generator", str(report)
    else:
        assert not found, str(report)


def _scenes() -> tuple[nn.Module, torch.Tensor, torch.Tensor, object]:
    """Noise images whose label map is a left stripe as wide as their first channel's mean says, and the rule that
    reads it: no pixel's neighbourhood explains its label, only the user's rule does."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(4)
    width = torch.randint(3, 7, (8,), generator=g)
    images = torch.randn(8, 3, 16, 16, generator=g) * 0.1
    images[:, 0] += width.float()[:, None, None]

    def probe(x: torch.Tensor) -> torch.Tensor:
        w = x[:, 0].mean(dim=(1, 2)).round().long()
        return (torch.arange(16)[None, None, :] < w[:, None, None]).long().expand(-1, 16, -1)
    return nn.Conv2d(3, 2, 3, padding=1), images, probe(images).contiguous(), probe


@pytest.mark.parametrize("slip", [None, "transposed", "noise"])
def test_dense_targets_that_agree_with_task_probe_only_transposed_are_misaligned(slip: str | None) -> None:
    """Lightning's segmentation template with its mask read (W, H): the user's own rule (task_probe) agrees with two
    thirds of the pixels as given, which read as scattered label noise (a WARN) or a wrong mapping; transposed, it
    agrees with all of them: the targets are misaligned."""
    model, x, y, probe = _scenes()
    if slip == "transposed":
        y = y.transpose(-1, -2).contiguous()
    elif slip == "noise":  # scattered pixels relabelled: label noise, not a misalignment
        g = torch.Generator().manual_seed(5)
        flip = torch.rand(y.shape, generator=g) < 0.08
        y = torch.where(flip, 1 - y, y)
    r = firstdiv.learning_ledger(model, (x, y), F.cross_entropy, torch.optim.Adam(model.parameters(), lr=1e-2),
                                 task_probe=probe, overfit_steps=0)
    task = next(f for f in r.findings if f.where == "TASK")
    if slip == "transposed":
        assert task.status is Status.FAIL and task.check == "task.target_misaligned", task
    else:
        assert task.status is not Status.FAIL, task

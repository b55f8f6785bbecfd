"""An exactly-zero gradient that is a cancellation between loss terms or examples is no cut path.

A hinge critic's final bias gets ``-1 + 1`` while every hinge is active (the loss reads the critic through a namespace
in its closure, ``t.D(fake)``, as a GAN's training script does: the counterfactual copy must read the copy there
too); a bias at the optimum of a squared error gets residuals that sum to zero. Both are WARNs, while a parameter no
signal reaches (a rounding without a straight-through estimator) still FAILs."""

import types

import torch
import torch.nn.functional as F
from torch import nn

from firstdiv import Status, learning_ledger, reachability


def _critic(seed=0):
    torch.manual_seed(seed)
    critic = nn.Sequential(nn.Linear(6, 16), nn.LeakyReLU(0.1), nn.Linear(16, 1))
    with torch.no_grad():
        critic[2].weight.mul_(0.05)  # outputs near 0: every hinge active
        critic[2].bias.zero_()
    return critic


def _hinge_program(seed=0):
    t = types.SimpleNamespace(D=_critic(seed))
    g = torch.Generator().manual_seed(seed)
    real, fake = torch.randn(16, 6, generator=g) + 1.0, torch.randn(16, 6, generator=g)
    t.opt = torch.optim.Adam(t.D.parameters(), lr=2e-4, betas=(0.0, 0.9))

    def loss_fn(d_real, fake_images):
        return F.relu(1.0 - d_real).mean() + F.relu(1.0 + t.D(fake_images)).mean()

    def train_step():
        t.opt.zero_grad()
        loss = F.relu(1.0 - t.D(real)).mean() + F.relu(1.0 + t.D(fake)).mean()
        loss.backward()
        t.opt.step()
        return loss.item()
    return t.D, (real, fake), loss_fn, t.opt, train_step


def test_hinge_critic_bias_is_a_cancellation_not_a_cut():
    model, batch, loss_fn, _, _ = _hinge_program()
    r = reachability(model, batch, loss_fn)
    bias = next(f for f in r.findings if f.where == "2.bias")
    assert r.status is not Status.FAIL and bias.status is Status.WARN and bias.evidence["grad"] == "zero", str(r)


def test_hinge_critic_bias_not_moved_is_no_skipped_update():
    model, batch, loss_fn, opt, step = _hinge_program()
    r = learning_ledger(model, batch, loss_fn, opt, train_step=step)
    assert not (r.first_divergence and r.first_divergence.kind == "update.not_moved"), str(r)


def test_bias_at_the_optimum_cancels_between_examples():
    """Residuals -0.5 and +0.5: the bias's gradient is exactly zero and perturbing it raises the loss (it is at its
    minimum), yet the signal reaches it through each example: a stationary point, not a cut."""
    model = nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(0.5)
        model.bias.zero_()
    batch = (torch.tensor([[1.0], [-1.0]]), torch.tensor([[1.0], [-1.0]]))
    r = reachability(model, batch, F.mse_loss)
    bias = next(f for f in r.findings if f.where == "bias")
    assert r.status is not Status.FAIL, str(r)
    assert bias.status is Status.WARN and bias.evidence["cause"] == "cancelled" and bias.evidence["loss_depends"], str(r)


class _Rounded(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, 8), nn.Linear(8, 1)

    def forward(self, x):
        return self.fc2(torch.round(4.0 * self.fc1(x)))  # no straight-through estimator: round's gradient is zero


def test_rounding_without_ste_still_fails():
    torch.manual_seed(0)
    model = _Rounded()
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(32, 3, generator=g), torch.randn(32, 1, generator=g))
    r = reachability(model, batch, F.mse_loss)
    assert r.status is Status.FAIL and r.first_divergence.kind == "reachability.zero_gradient", str(r)
    assert r.first_divergence.where.startswith("fc1."), str(r)
    fc1 = next(f for f in r.findings if f.where == r.first_divergence.where)
    assert fc1.evidence["cancels"] is False, str(r)


def test_step_probe_reads_a_balanced_hinge_bias_as_a_cancellation():
    """public-28: a conditional SN-GAN's hinge discriminator at one seed: step_probe's controlled step FAILed
    ``step.zero_gradient`` on the final bias. Here one real and one generated score sit inside their hinges (-1/2 and
    +1/2 on the bias) and two outside: the gradient is exactly zero, and a large enough shift of the bias brings an
    outside score in (the loss depends on it): a cancellation, not a cut."""
    from firstdiv import step_probe

    critic = nn.Linear(1, 1)
    with torch.no_grad():
        critic.weight.fill_(1.0)
        critic.bias.zero_()
    real, fake = torch.tensor([[0.5], [1.05]]), torch.tensor([[-0.5], [-1.05]])

    def loss_fn(d_real, fake_points):
        return F.relu(1.0 - d_real).mean() + F.relu(1.0 + critic(fake_points)).mean()

    r = step_probe(critic, (real, fake), loss_fn, torch.optim.SGD(critic.parameters(), lr=0.1))
    bias = next((f for f in r.findings if f.where == "bias" and f.check == "step.zero_gradient"), None)
    assert bias is not None, [(f.where, f.check, f.status.value, f.message[:90]) for f in r.findings if f.where == "bias"]
    assert bias.status is Status.WARN and bias.evidence["cancels"] is True, str(r)

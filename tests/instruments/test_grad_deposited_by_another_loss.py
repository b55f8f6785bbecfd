"""An actor-critic step (SAC, CQL, TD3): the actor's loss reads the critic, so the actor's backward deposits gradients
in the critic's ``.grad`` on top of the critic's previous gradient; the critic's optimizer clears them before the
critic's own backward, so its step uses this step's gradient only. step_probe judges what ``.grad`` holds when the
owning optimizer steps, not what the first backward of the call found there; a critic whose zero_grad is missing
still FAILs ``step.grad_accumulation``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv
from firstdiv.report import Status


def _actor_critic(critic_zero_grad: bool = True, clear_by_hand: bool = False):
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1), nn.Tanh())
    critic = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))
    actor_opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    s, a, r = torch.randn(32, 4, generator=g), torch.rand(32, 1, generator=g) * 2 - 1, torch.randn(32, 1, generator=g)
    batch = (torch.cat([s, a], dim=1), r)

    def train_step() -> torch.Tensor:
        actor_loss = -critic(torch.cat([s, actor(s)], dim=1)).mean()  # reaches the critic's parameters too
        critic_loss = F.mse_loss(critic(batch[0]), r)
        actor_opt.zero_grad()
        actor_loss.backward()
        actor_opt.step()
        if clear_by_hand:  # a clearing the probe does not wrap
            for p in critic.parameters():
                p.grad = None
        elif critic_zero_grad:
            critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()
        return critic_loss.detach()
    return critic, batch, critic_opt, train_step


def _carried(report) -> list:
    return [f for f in report.findings if f.check == "step.grad_accumulation" and f.status is Status.FAIL]


def test_gradients_another_loss_deposits_and_the_owner_clears_are_not_accumulation() -> None:
    for clear_by_hand in (False, True):
        critic, batch, opt, train_step = _actor_critic(clear_by_hand=clear_by_hand)
        r = firstdiv.step_probe(critic, batch, F.mse_loss, opt, train_step=train_step)
        assert not _carried(r), [f.message for f in _carried(r)]
        f = next(f for f in r.findings if f.check == "step.grad_accumulation")
        assert f.evidence["cleared_before_own_backward"] == 4, f


def test_a_critic_without_zero_grad_still_accumulates() -> None:
    critic, batch, opt, train_step = _actor_critic(critic_zero_grad=False)
    r = firstdiv.step_probe(critic, batch, F.mse_loss, opt, train_step=train_step)
    assert _carried(r) and r.first_divergence.kind == "step.grad_accumulation", r

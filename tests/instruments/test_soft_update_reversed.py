"""``step.soft_update_reversed``: a Polyak/soft update of a target network called with its arguments swapped, so the
trained network is pulled back toward a frozen copy after every optimizer step (public corpus misses: SAC's and a
dueling DDQN's ``soft_update(target, source, tau)`` called as ``(source, target)``). Read from the program's own
calls: the write after the step is exactly ``p + tau * (q - p)`` toward a network the step forwards, that the
optimizer does not own and that never moves. A correct soft update, a pull toward a stored copy the step never
computes with, and a copy that moves too are no finding."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

import firstdiv


def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    for t, s in zip(target.parameters(), source.parameters(), strict=True):
        t.data.copy_(t.data * (1.0 - tau) + s.data * tau)


def _program(how: str):
    torch.manual_seed(0)
    q = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    target = copy.deepcopy(q)
    anchor = copy.deepcopy(q)  # a stored copy the step never forwards (decay toward a reference point)
    with torch.no_grad():
        for p in anchor.parameters():
            p.add_(0.1 * torch.randn_like(p))
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    s, a, r, s2 = torch.randn(64, 4, generator=g), torch.randint(0, 2, (64,), generator=g), torch.randn(64, generator=g), \
        torch.randn(64, 4, generator=g)

    def loss_fn(out: torch.Tensor, targets: tuple) -> torch.Tensor:
        a, r, s2 = targets
        with torch.no_grad():
            y = r + 0.99 * target(s2).max(1).values
        return F.smooth_l1_loss(out.gather(1, a[:, None]).squeeze(1), y)

    def train_step() -> torch.Tensor:
        loss = loss_fn(q(s), (a, r, s2))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if how == "correct":
            soft_update(target, q, 0.01)
        elif how == "swapped":
            soft_update(q, target, 0.01)
        elif how == "toward_unused_copy":
            soft_update(q, anchor, 0.01)
        elif how == "both_move":
            soft_update(q, target, 0.01)
            soft_update(target, q, 0.01)
        return loss.detach()
    return q, target, opt, (s, (a, r, s2)), loss_fn, train_step


def _probe(how: str) -> tuple[firstdiv.Report, nn.Module, dict]:
    q, target, opt, batch, loss_fn, train_step = _program(how)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    return firstdiv.step_probe(q, batch, loss_fn, opt, train_step=train_step), target, before


def test_a_soft_update_with_its_arguments_swapped_fails_at_the_first_trained_parameter() -> None:
    r, target, before = _probe("swapped")
    assert r.status.value == "FAIL"
    assert (r.first_divergence.where, r.first_divergence.kind) == ("0.weight", "step.soft_update_reversed")
    f = next(f for f in r.findings if f.check == "step.soft_update_reversed")
    assert abs(f.evidence["tau"] - 0.01) < 1e-4 and f.evidence["count"] == 4
    assert all(torch.equal(v, target.state_dict()[k]) for k, v in before.items())


def test_a_correct_soft_update_a_copy_never_forwarded_or_a_copy_that_moves_is_no_finding() -> None:
    for how in ("correct", "toward_unused_copy", "both_move", "none"):
        r, _, _ = _probe(how)
        assert "step.soft_update_reversed" not in {f.check for f in r.findings}, how


class _Agent(nn.Module):
    """An agent module holding the online network and its target side by side (IQL's, TD3's): the step's closure
    reaches the agent, not the target network alone."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=1e-3)

    def update(self, s: torch.Tensor, y: torch.Tensor, swapped: bool) -> torch.Tensor:
        with torch.no_grad():
            y = y + 0.9 * self.q_target(s).max(1).values
        loss = F.mse_loss(self.q(s).max(1).values, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        if swapped:
            soft_update(self.q, self.q_target, 0.005)
        else:
            soft_update(self.q_target, self.q, 0.005)
        return loss.detach()


def test_a_target_network_held_inside_the_agent_module_the_step_reaches_is_found() -> None:
    for swapped in (True, False):
        agent = _Agent()
        s, y = torch.randn(32, 4), torch.randn(32)

        def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.mse_loss(out.max(1).values, y)

        r = firstdiv.step_probe(agent.q, (s, y), loss_fn, agent.opt,
                                train_step=lambda agent=agent, s=s, y=y, swapped=swapped: agent.update(s, y, swapped))
        kinds = {f.check for f in r.findings if f.status.value == "FAIL"}
        assert ("step.soft_update_reversed" in kinds) is swapped, (swapped, kinds)

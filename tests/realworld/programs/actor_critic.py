"""One-step actor-critic in the shape of the classic CartPole script: a Policy with a shared affine1 body, an
action_head (softmax over 2 actions) and a value_head; SavedAction(log_prob, value) per step, normalized discounted
returns, advantage = R - value.item() (semi-gradient), policy_loss + smooth_l1 value_loss, Adam lr 3e-3. The episode
(states [T, 4], the actions taken and the rewards) is synthetic and fixed, so the step can be replayed."""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import namedtuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

SavedAction = namedtuple("SavedAction", ["log_prob", "value"])
GAMMA, EPS, T = 0.99, 1e-7, 16


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 32)
        self.action_head = nn.Linear(32, 2)
        self.value_head = nn.Linear(32, 1)

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_prob = F.softmax(self.action_head(x), dim=-1)
        state_values = self.value_head(x)
        return action_prob, state_values


def make_episode(seed: int):
    """CartPole-shaped states (x, x_dot, theta, theta_dot); a noisy 'push toward the lean' behaviour policy;
    reward 1 while the pole is near upright."""
    g = torch.Generator().manual_seed(seed)
    states = torch.randn(T, 4, generator=g) * torch.tensor([0.5, 0.5, 0.1, 0.5])
    actions = ((states[:, 2] + 0.05 * torch.randn(T, generator=g)) > 0).long()
    rewards = (states[:, 2].abs() < 0.1).float().tolist()
    R, returns = 0.0, []
    for r in rewards[::-1]:
        R = r + GAMMA * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + EPS)
    return states, actions, returns


def _build(seed: int, bug: str | None = None) -> Program:
    torch.manual_seed(seed)
    states, actions, returns = make_episode(seed)
    model = Policy()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    def finish_episode(outputs, targets):
        probs, state_values = outputs
        taken, rets = targets
        m = Categorical(probs)
        saved_actions = [SavedAction(lp, v) for lp, v in zip(m.log_prob(taken), state_values)]
        policy_losses, value_losses = [], []
        for (log_prob, value), R in zip(saved_actions, rets.tolist()):
            advantage = R - value.item()
            policy_losses.append(-log_prob * advantage)
            v = value.detach() if bug == "value_detached" else value
            value_losses.append(F.smooth_l1_loss(v, torch.tensor([R])))
        return torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()

    def train_step():
        optimizer.zero_grad()
        loss = finish_episode(model(states), (actions, returns))
        loss.backward()
        optimizer.step()
        return loss

    return Program(name="actor_critic", model=model, batch=(states, (actions, returns)), loss_fn=finish_episode,
                   optimizer=optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    Bug("value_detached", functools.partial(_build, bug="value_detached"), "step_probe", ("value_head.weight",)),
]

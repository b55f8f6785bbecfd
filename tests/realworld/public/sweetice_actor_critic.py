# ruff: noqa: UP008, PLR0402
"""Actor-critic on cart-pole (shared trunk, softmax action head + value head, Monte-Carlo returns normalized,
advantage ``r - value.item()``, smooth-L1 critic), from sweetice's Deep-reinforcement-learning-with-pytorch.

Source: https://github.com/sweetice/Deep-reinforcement-learning-with-pytorch, Commit:
7b9fac7e5e40ffdc6f7ccb8b0a81e7841370a996, Files: ``Char03 Actor-Critic/AC_CartPole-v0.py``.
License: MIT (Copyright (c) 2018 Johnny He; full text in LICENSES/sweetice-Deep-reinforcement-learning-with-pytorch.txt).
Domain: RL, actor-critic (episodic policy gradient with a learned state-value baseline).

Kept as written: the hyperparameters (learning_rate 0.01, gamma 0.99, eps), ``SavedAction``, ``Policy``
(state_space->32, action head with softmax, value head), Adam over ``model.parameters()``, ``select_action``
(Categorical sample, ``SavedAction(m.log_prob(action), state_value)``) and ``finish_episode`` (discounted returns
built backwards, normalized, ``-log_prob * (r - value.item())`` plus ``F.smooth_l1_loss(value, r)``, both summed,
zero_grad/backward/step, the buffers cleared).

Deviations from the original:
- gym's unwrapped CartPole-v0 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations); the
  environment is the synthetic data. ``state_space`` / ``action_space`` are the constants 4 / 2.
- ``torch.manual_seed(seed)`` replaces ``torch.manual_seed(1)`` / ``env.seed(1)`` so a build is reproducible;
  the ``./AC_CartPole-v0`` directory, the plotting and the model saving are dropped.
- ``main()``'s endless episode loop is not run. At build time one episode is played with ``select_action`` (at most
  200 steps, the original stops at 1000: size for 2 CPU cores) and its states, actions and rewards are recorded;
  ``train_step`` replays that episode through ``select_action``'s forward pass with the recorded actions (so
  ``save_actions`` and ``rewards`` hold what acting on it would store) and runs ``finish_episode()``, which returns
  the loss (the original returns nothing). Replaying one fixed episode keeps the self-check's loss comparable.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import namedtuple
from itertools import count

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

state_space = 4
action_space = 2

#Hyperparameters
learning_rate = 0.01
gamma = 0.99
eps = np.finfo(np.float32).eps.item()
SavedAction = namedtuple('SavedAction', ['log_prob', 'value'])
MAX_T = 200


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.fc1 = nn.Linear(state_space, 32)

        self.action_head = nn.Linear(32, action_space)
        self.value_head = nn.Linear(32, 1) # Scalar Value

        self.save_actions = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.fc1(x))
        action_score = self.action_head(x)
        state_value = self.value_head(x)

        return F.softmax(action_score, dim=-1), state_value


def select_action(model, state, action=None):
    state = torch.from_numpy(state).float()
    probs, state_value = model(state)
    m = Categorical(probs)
    if action is None:
        action = m.sample()
    else:
        action = torch.tensor(action)
    model.save_actions.append(SavedAction(m.log_prob(action), state_value))

    return action.item()


def finish_episode(model, optimizer, bug=None):
    R = 0
    save_actions = model.save_actions
    policy_loss = []
    value_loss = []
    rewards = []

    for r in model.rewards[::-1]:
        R = r + gamma * R
        if bug == "returns_appended_reversed":
            rewards.append(R)
        else:
            rewards.insert(0, R)

    rewards = torch.tensor(rewards)
    rewards = (rewards - rewards.mean()) / (rewards.std() + eps)

    for (log_prob , value), r in zip(save_actions, rewards):
        if bug == "advantage_not_detached":
            reward = r - value
        else:
            reward = r - value.item()
        policy_loss.append(-log_prob * reward)
        value_loss.append(F.smooth_l1_loss(value, torch.tensor([r])))

    optimizer.zero_grad()
    loss = torch.stack(policy_loss).sum() + torch.stack(value_loss).sum()
    loss.backward()
    optimizer.step()

    del model.rewards[:]
    del model.save_actions[:]
    return loss


def play_episode(model, seed):
    """main()'s inner loop, once: the states met, the actions taken and the rewards."""
    env = CartPole(seed)
    state, _ = env.reset()
    states, actions, rewards = [], [], []
    for t in count():
        states.append(state)
        with torch.no_grad():
            action = select_action(model, state)
        actions.append(action)
        state, reward, done, _truncated, _info = env.step(action)
        rewards.append(reward)
        if done or t >= MAX_T:
            break
    del model.save_actions[:]
    return states, actions, rewards


def _returns(rewards):
    R, out = 0, []
    for r in rewards[::-1]:
        R = r + gamma * R
        out.insert(0, R)
    out = torch.tensor(out)
    return (out - out.mean()) / (out.std() + eps)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    model = Policy()
    optimizer = optim.Adam(model.parameters(), lr=learning_rate)
    states, actions, rewards = play_episode(model, seed)

    batch = (torch.from_numpy(np.stack(states)).float(),
             (torch.tensor(actions), _returns(rewards)))

    def loss_fn(outputs, targets):
        probs, values = outputs
        a, returns = targets
        log_prob = Categorical(probs).log_prob(a)
        values = values.squeeze(-1)
        policy_loss = -log_prob * (returns - values.detach())
        value_loss = F.smooth_l1_loss(values, returns, reduction="none")
        return policy_loss.sum() + value_loss.sum()

    def train_step():
        for state, action in zip(states, actions):
            select_action(model, state, action)
        model.rewards.extend(rewards)
        return finish_episode(model, optimizer, bug)

    return Program(name="sweetice_actor_critic", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the advantage keeps the critic's graph (``r - value`` instead of ``r - value.item()``): the policy-gradient
    # term also trains the value head, pushing V(s) up wherever log pi is large (classic).
    Bug("advantage_not_detached", functools.partial(_build, bug="advantage_not_detached"), "learning_ledger",
        ("OBJECTIVE",)),
    # the discounted returns are appended while walking the rewards backwards (``append`` for ``insert(0, ...)``):
    # the first action is credited with the last step's return (classic).
    Bug("returns_appended_reversed", functools.partial(_build, bug="returns_appended_reversed"), "learning_ledger",
        ("TASK",)),
]

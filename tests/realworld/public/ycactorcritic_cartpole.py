# ruff: noqa: UP008, PLR0402
"""Episodic advantage actor-critic on CartPole with separate actor and critic networks, from yc930401/Actor-Critic-pytorch.

Source: https://github.com/yc930401/Actor-Critic-pytorch
Commit: 5d359bc93839357255b591c0a87fc42542854eb8
Files: ``Actor-Critic.py``
License: MIT (Copyright (c) 2018 Yang Cheng; full text in LICENSES/yc930401-Actor-Critic-pytorch.txt)
Domain: RL, actor-critic (one whole episode per update: Monte-Carlo returns bootstrapped from the critic at the
last state through the done masks, advantage ``returns - values``, actor loss ``-(log_prob * advantage.detach())``,
critic loss ``advantage ** 2``, two Adam optimizers).

Kept as written: ``Actor`` (4-128-256-2, ``Categorical(softmax)``), ``Critic`` (4-128-256-1), ``compute_returns``
(gamma 0.99, masks), and ``trainIters``' loop body: the double ``env.reset()``, the episode played with
``dist.sample()``, the lists of log-probs, values, rewards and masks (``1-done``), ``next_value =
critic(next_state)``, the returns detached, both losses, both ``zero_grad``s, both ``backward``s, both steps, the
Adam optimizers with default settings.

Deviations from the original:
- gym's ``CartPole-v0`` (``.unwrapped``: no time limit) is replaced by the cart-pole written out in
  ``_cartpole.py`` (same equations and constants, seeded); its 500-step truncation flag is ignored, as the
  unwrapped environment has none. The environment is the synthetic data. ``env.reset()`` returns ``(state, info)``
  there, so the copied ``state = env.reset()`` takes its first element.
- ``Categorical.sample`` draws from torch's global generator seeded with ``torch.manual_seed(seed)``.
- ``train_step`` is one iteration of ``trainIters``' outer loop (one episode and one update) and returns the actor
  loss (the original returns nothing); rendering, printing, ``torch.save`` of the models and ``env.close()`` are
  dropped; the ``.to(device)`` calls stay on the CPU.
- the declared ``batch`` is one episode played at build time by the untrained actor (states; actions and detached
  advantages from the untrained critic as targets), for the actor's loss.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from itertools import count

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

device = torch.device("cpu")

state_size = 4
action_size = 2
lr = 0.0001

class Actor(nn.Module):
    def __init__(self, state_size, action_size):
        super(Actor, self).__init__()
        self.state_size = state_size
        self.action_size = action_size
        self.linear1 = nn.Linear(self.state_size, 128)
        self.linear2 = nn.Linear(128, 256)
        self.linear3 = nn.Linear(256, self.action_size)

    def forward(self, state):
        output = F.relu(self.linear1(state))
        output = F.relu(self.linear2(output))
        output = self.linear3(output)
        distribution = Categorical(F.softmax(output, dim=-1))
        return distribution


class Critic(nn.Module):
    def __init__(self, state_size, action_size):
        super(Critic, self).__init__()
        self.state_size = state_size
        self.action_size = action_size
        self.linear1 = nn.Linear(self.state_size, 128)
        self.linear2 = nn.Linear(128, 256)
        self.linear3 = nn.Linear(256, 1)

    def forward(self, state):
        output = F.relu(self.linear1(state))
        output = F.relu(self.linear2(output))
        value = self.linear3(output)
        return value


def compute_returns(next_value, rewards, masks, gamma=0.99, bug=None):
    R = next_value
    returns = []
    for step in reversed(range(len(rewards))):
        if bug == "masks_dropped":
            R = rewards[step] + gamma * R
        else:
            R = rewards[step] + gamma * R * masks[step]
        returns.insert(0, R)
    return returns


def play_episode(env, actor, critic):
    state = env.reset()[0]
    log_probs = []
    values = []
    rewards = []
    masks = []
    entropy = 0
    states, actions = [], []
    env.reset()

    for i in count():
        state = torch.FloatTensor(state).to(device)
        dist, value = actor(state), critic(state)

        action = dist.sample()
        next_state, reward, done, _, _ = env.step(action.cpu().numpy())

        log_prob = dist.log_prob(action).unsqueeze(0)
        entropy += dist.entropy().mean()

        log_probs.append(log_prob)
        values.append(value)
        rewards.append(torch.tensor([reward], dtype=torch.float, device=device))
        masks.append(torch.tensor([1-done], dtype=torch.float, device=device))
        states.append(state)
        actions.append(action)

        state = next_state

        if done:
            break
    return next_state, log_probs, values, rewards, masks, states, actions


def train_iter(env, actor, critic, optimizerA, optimizerC, bug=None):
    next_state, log_probs, values, rewards, masks, _, _ = play_episode(env, actor, critic)

    next_state = torch.FloatTensor(next_state).to(device)
    next_value = critic(next_state)
    returns = compute_returns(next_value, rewards, masks, bug=bug)

    log_probs = torch.cat(log_probs)
    returns = torch.cat(returns).detach()
    values = torch.cat(values)

    advantage = returns - values

    if bug == "actor_loss_not_negated":
        actor_loss = (log_probs * advantage.detach()).mean()
    else:
        actor_loss = -(log_probs * advantage.detach()).mean()
    critic_loss = advantage.pow(2).mean()

    if bug != "actor_zero_grad_dropped":
        optimizerA.zero_grad()
    optimizerC.zero_grad()
    actor_loss.backward()
    critic_loss.backward()
    optimizerA.step()
    optimizerC.step()
    return actor_loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    env = CartPole(seed)
    actor = Actor(state_size, action_size).to(device)
    critic = Critic(state_size, action_size).to(device)
    optimizerA = optim.Adam(actor.parameters())
    optimizerC = optim.Adam(critic.parameters())

    with torch.no_grad():
        next_state, _, values, rewards, masks, states, actions = play_episode(CartPole(seed + 1000), actor, critic)
        next_value = critic(torch.FloatTensor(next_state))
        returns = torch.cat(compute_returns(next_value, rewards, masks, bug=bug))
        advantage = returns - torch.cat(values)
    batch = (torch.stack(states), (torch.stack(actions), advantage))

    def loss_fn(dist, targets):
        actions, advantage = targets
        log_probs = dist.log_prob(actions)
        if bug == "actor_loss_not_negated":
            return (log_probs * advantage.detach()).mean()
        return -(log_probs * advantage.detach()).mean()

    def train_step():
        return train_iter(env, actor, critic, optimizerA, optimizerC, bug)

    return Program(name="ycactorcritic_cartpole", model=actor, batch=batch, loss_fn=loss_fn, optimizer=optimizerA,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: compute_returns leaves the done masks out, so the terminal step bootstraps from the critic's value of
    # the state after the fall.
    Bug("masks_dropped", functools.partial(_build, bug="masks_dropped"), "learning_ledger", ("TASK",)),
    # classic sign slip: the actor loss is log_prob * advantage without the minus, so the actor descends the return.
    Bug("actor_loss_not_negated", functools.partial(_build, bug="actor_loss_not_negated"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: optimizerA.zero_grad() left out (the critic's kept): the actor's gradients pile up across episodes.
    Bug("actor_zero_grad_dropped", functools.partial(_build, bug="actor_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

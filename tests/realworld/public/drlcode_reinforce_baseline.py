# ruff: noqa: PLR0402, UP008, UP004
"""REINFORCE with a learned state-value baseline on CartPole, from Lizhi-sjtu/DRL-code-pytorch.

Source: https://github.com/Lizhi-sjtu/DRL-code-pytorch, commit 8f767b99ad44990b49f6acf3159660c5594db77e,
file ``1.REINFORCE/REINFORCE_baseline.py``. License: MIT (Copyright (c) 2022 Lizhi; full text in
LICENSES/Lizhi-sjtu-DRL-code-pytorch.txt).
Domain: RL, policy gradient (Monte-Carlo REINFORCE with a value baseline, per-time-step updates).

Kept as written: ``Policy`` (state->64->actions, softmax), ``Value`` (state->64->1), ``REINFORCE`` (hidden_width
64, lr 4e-4, GAMMA 0.99, two Adam optimizers, ``choose_action`` sampling with ``np.random.choice``, ``store``,
``learn``: discounted returns computed backwards, then for every time step the policy loss
``-GAMMA**t * (g - v_s).detach() * log(a_prob[a])`` with its own zero_grad/backward/step, then the value loss
``(g - v_s) ** 2`` with its own zero_grad/backward/step, then the buffer cleared); the main loop's episode body
(``choose_action(s, deterministic=False)``, ``store(s, a, r)`` until done, then ``learn()``).

Deviations from the original:
- gym's CartPole-v0 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations and constants,
  seeded; the episode is cut at 200 steps as CartPole-v0's limit); the environment is the synthetic data.
- the episode is played once at build time (the first one of at least 20 steps) and stored; ``train_step`` stores that episode again and calls
  ``learn()`` (one REINFORCE update over the episode), so the step can be replayed (the original plays a new
  episode before every ``learn()``).
- ``learn()`` returns the mean over the episode of ``policy_loss + value_loss`` (the original returns nothing) so
  the step has a loss to report.
- the evaluation, tensorboard writer and ``np.save`` bookkeeping are dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

MAX_EPISODE_STEPS = 200  # CartPole-v0


class Policy(nn.Module):
    def __init__(self, state_dim, action_dim, hidden_width):
        super(Policy, self).__init__()
        self.l1 = nn.Linear(state_dim, hidden_width)
        self.l2 = nn.Linear(hidden_width, action_dim)

    def forward(self, s):
        s = F.relu(self.l1(s))
        a_prob = F.softmax(self.l2(s), dim=1)
        return a_prob


class Value(nn.Module):
    def __init__(self, state_dim, hidden_width):
        super(Value, self).__init__()
        self.l1 = nn.Linear(state_dim, hidden_width)
        self.l2 = nn.Linear(hidden_width, 1)

    def forward(self, s):
        s = F.relu(self.l1(s))
        v_s = self.l2(s)
        return v_s


class REINFORCE(object):
    def __init__(self, state_dim, action_dim, bug=None):
        self.state_dim = state_dim
        self.action_dim = action_dim
        self.hidden_width = 64  # The number of neurons in hidden layers of the neural network
        self.lr = 4e-4  # learning rate
        self.GAMMA = 0.99  # discount factor
        self.episode_s, self.episode_a, self.episode_r = [], [], []
        self.bug = bug

        self.policy = Policy(state_dim, action_dim, self.hidden_width)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.lr)

        self.value = Value(state_dim, self.hidden_width)
        self.value_optimizer = torch.optim.Adam(self.value.parameters(), lr=self.lr)

    def choose_action(self, s, deterministic):
        s = torch.unsqueeze(torch.tensor(s, dtype=torch.float), 0)
        prob_weights = self.policy(s).detach().numpy().flatten()  # probability distribution(numpy)
        if deterministic:  # We use the deterministic policy during the evaluating
            a = np.argmax(prob_weights)  # Select the action with the highest probability
            return a
        else:  # We use the stochastic policy during the training
            a = np.random.choice(range(self.action_dim), p=prob_weights)  # Sample the action according to the probability distribution
            return a

    def store(self, s, a, r):
        self.episode_s.append(s)
        self.episode_a.append(a)
        self.episode_r.append(r)

    def returns(self):
        G = []
        g = 0
        if self.bug == "returns_not_reversed":
            for r in self.episode_r:  # the return accumulated forwards, from the episode's start
                g = self.GAMMA * g + r
                G.append(g)
            return G
        for r in reversed(self.episode_r):  # calculate the return G reversely
            g = self.GAMMA * g + r
            G.insert(0, g)
        return G

    def learn(self, ):
        G = self.returns()

        total = 0.0
        for t in range(len(self.episode_r)):
            s = torch.unsqueeze(torch.tensor(self.episode_s[t], dtype=torch.float), 0)
            a = self.episode_a[t]
            g = G[t]
            v_s = self.value(s).flatten()

            # Update policy
            a_prob = self.policy(s).flatten()
            if self.bug == "log_prob_dropped":
                policy_loss = -pow(self.GAMMA, t) * ((g - v_s).detach()) * a_prob[a]
            else:
                policy_loss = -pow(self.GAMMA, t) * ((g - v_s).detach()) * torch.log(a_prob[a])
            self.policy_optimizer.zero_grad()
            policy_loss.backward()
            self.policy_optimizer.step()

            # Update value function
            value_loss = (g - v_s) ** 2
            self.value_optimizer.zero_grad()
            value_loss.backward()
            self.value_optimizer.step()
            total += policy_loss.item() + value_loss.item()

        n = len(self.episode_r)
        # Clean the buffer
        self.episode_s, self.episode_a, self.episode_r = [], [], []
        return total / n


def play_episode(agent, env):
    """The main loop's episode body, without the evaluation bookkeeping."""
    s, _ = env.reset()
    done = False
    steps = 0
    while not done:
        steps += 1
        a = agent.choose_action(s, deterministic=False)
        s_, r, done, _truncated, _ = env.step(a)
        done = done or steps >= MAX_EPISODE_STEPS
        agent.store(s, a, r)
        s = s_


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    env = CartPole(seed)
    agent = REINFORCE(4, 2, bug=bug)
    play_episode(agent, env)
    while len(agent.episode_r) < 20:  # an episode long enough to learn from
        agent.episode_s, agent.episode_a, agent.episode_r = [], [], []
        play_episode(agent, env)
    episode = (list(agent.episode_s), list(agent.episode_a), list(agent.episode_r))

    G = agent.returns()
    T = len(G)
    states = torch.tensor(np.array(episode[0]), dtype=torch.float)
    actions = torch.tensor(episode[1]).view(-1, 1)
    returns = torch.tensor(G, dtype=torch.float).view(-1, 1)
    discounts = torch.tensor([pow(agent.GAMMA, t) for t in range(T)], dtype=torch.float).view(-1, 1)
    batch = (states, (actions, returns, discounts))

    def loss_fn(a_prob, targets):
        actions, returns, discounts = targets
        v_s = agent.value(states)
        if bug == "log_prob_dropped":
            policy_loss = -discounts * (returns - v_s).detach() * a_prob.gather(1, actions)
        else:
            policy_loss = -discounts * (returns - v_s).detach() * torch.log(a_prob.gather(1, actions))
        return policy_loss.mean()

    def train_step():
        agent.episode_s, agent.episode_a, agent.episode_r = (list(x) for x in episode)
        return agent.learn()

    return Program(name="drlcode_reinforce_baseline", model=agent.policy, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.policy_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the return accumulated forwards (``G.append`` over ``self.episode_r``) instead of backwards: each step is
    # credited with the rewards before it, not after it (classic: returns misaligned with their time steps).
    Bug("returns_not_reversed", functools.partial(_build, bug="returns_not_reversed"), "learning_ledger",
        ("TASK",)),
    # the log left out of the score-function term: ``-adv * a_prob[a]`` (classic: the policy-gradient objective
    # taken on probabilities instead of log-probabilities).
    Bug("log_prob_dropped", functools.partial(_build, bug="log_prob_dropped"), "learning_ledger", ("OBJECTIVE",)),
]

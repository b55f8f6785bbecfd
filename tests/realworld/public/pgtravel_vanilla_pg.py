# ruff: noqa: PIE808, PLR0402, UP004, UP008
"""Vanilla policy gradient for continuous control from reinforcement-learning-kr/pg_travel: a tanh MLP Gaussian actor
(unit standard deviation), Monte-Carlo returns normalized per batch, a critic regressed on the returns for 5 epochs of
minibatches, and one actor step on ``-mean(returns * log_density)``.

Source: https://github.com/reinforcement-learning-kr/pg_travel
Commit: c61a11e57e340e2e5c4db85eb34185ec1c0faa97
Files: ``mujoco/agent/vanila_pg.py`` (``get_returns``, ``get_loss``, ``train_critic``, ``train_actor``,
``train_model``), ``mujoco/model.py`` (``Actor``, ``Critic``), ``mujoco/hparams.py``, ``mujoco/utils/utils.py``
(``get_action``, ``log_density``), ``mujoco/utils/running_state.py`` (``RunningStat``, ``ZFilter``),
``mujoco/main.py`` (the ``--algorithm PG`` loop).
License: MIT (Copyright (c) 2018 Woongwon Lee; full text in LICENSES/reinforcement-learning-kr-pg_travel.txt)
Domain: RL, on-policy policy gradient (vanilla PG / REINFORCE with normalized returns, continuous actions)

Kept as written: ``Actor`` and ``Critic`` (two tanh hidden layers of ``hp.hidden`` = 64, the last layer's weight
scaled by 0.1 and bias zeroed, the actor's ``logstd`` zeros), the hyperparameters (gamma 0.99, batch_size 64,
actor_lr and critic_lr 3e-4, l2_rate 1e-3 as the critic's Adam weight decay), ``get_returns`` (backward discounted
returns cut by the masks, then standardized), ``get_loss``, ``train_critic`` (5 epochs of shuffled minibatches, MSE),
``train_actor``, ``train_model``, ``log_density``, ``get_action`` (``torch.normal``), ``ZFilter(clip=5)`` on the
states, main.py's rollout body (``actor.eval(), critic.eval()``, mask 0 on done, ``memory.append([state, action,
reward, mask])``, then ``actor.train(), critic.train()`` and ``train_model``).

Deviations from the original:
- gym's MuJoCo Hopper-v2 is replaced by the numpy ``ContinuousCartPole`` of ``_continuous_control.py`` (4 states, 1
  action, reward 1 per step, terminal falls, seeded); the environment is the synthetic data.
- sizes for 2 CPU cores: a rollout gathers 256 steps per iteration (the original 2048). ``RunningStat``'s
  setters and ``n`` / ``sum_square`` / ``shape`` properties and ``ZFilter.output_shape`` (used only to load and save
  checkpoints) are left out.
- main.py's ``for iter in range(15000)`` loop is not run as a whole: ``train_step`` is one iteration (a fresh rollout
  and ``train_model``). ``train_critic`` and ``train_actor`` return their (last) losses and ``train_model`` returns
  their sum (the originals return nothing / the returns) so the step has a loss to report. Printing, tensorboardX,
  checkpoint saving and ``--load_model`` are dropped.
- ``np.array(memory)`` is written ``np.array(memory, dtype=object)`` (the rows are ragged: numpy >= 1.24 refuses the
  implicit object array the original relied on). ``np.random`` is seeded with ``seed`` and ``torch.manual_seed(seed)``
  replaces ``torch.manual_seed(500)``; ``env.seed(seed)``. ``hp`` is a class in this module, not an import.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole

ROLLOUT_STEPS = 256  # (port) 2048 in main.py


class HyperParams:
    gamma = 0.99
    lamda = 0.98
    hidden = 64
    critic_lr = 0.0003
    actor_lr = 0.0003
    batch_size = 64
    l2_rate = 0.001
    max_kl = 0.01
    clip_param = 0.2


hp = HyperParams


# ---- mujoco/model.py
class Actor(nn.Module):
    def __init__(self, num_inputs, num_outputs):
        self.num_inputs = num_inputs
        self.num_outputs = num_outputs
        super(Actor, self).__init__()
        self.fc1 = nn.Linear(num_inputs, hp.hidden)
        self.fc2 = nn.Linear(hp.hidden, hp.hidden)
        self.fc3 = nn.Linear(hp.hidden, num_outputs)
        self.fc3.weight.data.mul_(0.1)
        self.fc3.bias.data.mul_(0.0)

    def forward(self, x):
        x = F.tanh(self.fc1(x))
        x = F.tanh(self.fc2(x))
        mu = self.fc3(x)
        logstd = torch.zeros_like(mu)
        std = torch.exp(logstd)
        return mu, std, logstd


class Critic(nn.Module):
    def __init__(self, num_inputs):
        super(Critic, self).__init__()
        self.fc1 = nn.Linear(num_inputs, hp.hidden)
        self.fc2 = nn.Linear(hp.hidden, hp.hidden)
        self.fc3 = nn.Linear(hp.hidden, 1)
        self.fc3.weight.data.mul_(0.1)
        self.fc3.bias.data.mul_(0.0)

    def forward(self, x):
        x = F.tanh(self.fc1(x))
        x = F.tanh(self.fc2(x))
        v = self.fc3(x)
        return v


# ---- mujoco/utils/utils.py
def get_action(mu, std):
    action = torch.normal(mu, std)
    action = action.data.numpy()
    return action


def log_density(x, mu, std, logstd):
    var = std.pow(2)
    log_density = -(x - mu).pow(2) / (2 * var) \
                  - 0.5 * math.log(2 * math.pi) - logstd
    return log_density.sum(1, keepdim=True)


# ---- mujoco/utils/running_state.py
class RunningStat(object):
    def __init__(self, shape):
        self._n = 0
        self._M = np.zeros(shape)
        self._S = np.zeros(shape)

    def push(self, x):
        x = np.asarray(x)
        assert x.shape == self._M.shape
        self._n += 1
        if self._n == 1:
            self._M[...] = x
        else:
            oldM = self._M.copy()
            self._M[...] = oldM + (x - oldM) / self._n
            self._S[...] = self._S + (x - oldM) * (x - self._M)

    @property
    def mean(self):
        return self._M

    @property
    def var(self):
        return self._S / (self._n - 1) if self._n > 1 else np.square(self._M)

    @property
    def std(self):
        return np.sqrt(self.var)


class ZFilter:
    """
    y = (x-mean)/std
    using running estimates of mean,std
    """

    def __init__(self, shape, demean=True, destd=True, clip=10.0):
        self.demean = demean
        self.destd = destd
        self.clip = clip

        self.rs = RunningStat(shape)

    def __call__(self, x, update=True):
        if update: self.rs.push(x)
        if self.demean:
            x = x - self.rs.mean
        if self.destd:
            x = x / (self.rs.std + 1e-8)
        if self.clip:
            x = np.clip(x, -self.clip, self.clip)
        return x


# ---- mujoco/agent/vanila_pg.py
def get_returns(rewards, masks, bug=None):
    rewards = torch.Tensor(rewards)
    masks = torch.Tensor(masks)
    returns = torch.zeros_like(rewards)

    running_returns = 0

    for t in reversed(range(0, len(rewards))):
        if bug == "masks_dropped":
            running_returns = rewards[t] + hp.gamma * running_returns
        else:
            running_returns = rewards[t] + hp.gamma * running_returns * masks[t]
        returns[t] = running_returns

    returns = (returns - returns.mean()) / returns.std()
    return returns


def get_loss(actor, returns, states, actions, bug=None):
    mu, std, logstd = actor(torch.Tensor(states))
    log_policy = log_density(torch.Tensor(actions), mu, std, logstd)
    returns = returns.unsqueeze(1)

    objective = returns * log_policy
    objective = objective.mean()
    if bug == "objective_not_negated":
        return objective
    return - objective


def train_critic(critic, states, returns, critic_optim):
    criterion = torch.nn.MSELoss()
    n = len(states)
    arr = np.arange(n)

    for epoch in range(5):
        np.random.shuffle(arr)

        for i in range(n // hp.batch_size):
            batch_index = arr[hp.batch_size * i: hp.batch_size * (i + 1)]
            batch_index = torch.LongTensor(batch_index)
            inputs = torch.Tensor(states)[batch_index]
            target = returns.unsqueeze(1)[batch_index]

            values = critic(inputs)
            loss = criterion(values, target)
            critic_optim.zero_grad()
            loss.backward()
            critic_optim.step()
    return loss


def train_actor(actor, returns, states, actions, actor_optim, bug=None):
    loss = get_loss(actor, returns, states, actions, bug)
    if bug != "actor_zero_grad_dropped":
        actor_optim.zero_grad()
    loss.backward()
    actor_optim.step()
    return loss


def train_model(actor, critic, memory, actor_optim, critic_optim, bug=None):
    memory = np.array(memory, dtype=object)
    states = np.vstack(memory[:, 0])
    actions = list(memory[:, 1])
    rewards = list(memory[:, 2])
    masks = list(memory[:, 3])

    returns = get_returns(rewards, masks, bug)
    critic_loss = train_critic(critic, states, returns, critic_optim)
    actor_loss = train_actor(actor, returns, states, actions, actor_optim, bug)
    return critic_loss + actor_loss


# ---- mujoco/main.py (one iteration of the loop)
def _build(seed, bug=None):
    env = ContinuousCartPole()
    env.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)

    num_inputs = env.observation_space.shape[0]
    num_actions = env.action_space.shape[0]

    actor = Actor(num_inputs, num_actions)
    critic = Critic(num_inputs)

    running_state = ZFilter((num_inputs,), clip=5)

    actor_optim = optim.Adam(actor.parameters(), lr=hp.actor_lr)
    critic_optim = optim.Adam(critic.parameters(), lr=hp.critic_lr,
                              weight_decay=hp.l2_rate)

    def rollout():
        actor.eval(), critic.eval()
        memory = deque()

        steps = 0
        while steps < ROLLOUT_STEPS:
            state = env.reset()
            state = running_state(state)
            for _ in range(10000):
                steps += 1
                mu, std, _ = actor(torch.Tensor(state).unsqueeze(0))
                action = get_action(mu, std)[0]
                next_state, reward, done, _ = env.step(action)
                next_state = running_state(next_state)

                if done:
                    mask = 0
                else:
                    mask = 1

                memory.append([state, action, reward, mask])

                state = next_state

                if done:
                    break
        return memory

    first = np.array(rollout(), dtype=object)
    states = torch.Tensor(np.vstack(first[:, 0]))
    returns = get_returns(list(first[:, 2]), list(first[:, 3]), bug)
    actions = torch.Tensor(np.vstack(first[:, 1]))
    batch = (states, (returns, actions))

    def loss_fn(outputs, targets):
        mu, std, logstd = outputs
        returns, actions = targets
        objective = (returns.unsqueeze(1) * log_density(actions, mu, std, logstd)).mean()
        return objective if bug == "objective_not_negated" else - objective

    def train_step():
        memory = rollout()
        actor.train(), critic.train()
        return train_model(actor, critic, memory, actor_optim, critic_optim, bug)

    return Program(name="pgtravel_vanilla_pg", model=actor, batch=batch, loss_fn=loss_fn, optimizer=actor_optim,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the done masks left out of the discounted sum: returns run across episode boundaries, each episode's last
    # steps are credited with the next episode's rewards (classic).
    Bug("masks_dropped", functools.partial(_build, bug="masks_dropped"), "learning_ledger", ("TASK",)),
    # get_loss returns the objective instead of its negation: Adam minimizes the expected return (classic sign slip).
    Bug("objective_not_negated", functools.partial(_build, bug="objective_not_negated"), "learning_ledger",
        ("OBJECTIVE",)),
    # train_actor without actor_optim.zero_grad(): the actor's gradients pile up across iterations (classic).
    Bug("actor_zero_grad_dropped", functools.partial(_build, bug="actor_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

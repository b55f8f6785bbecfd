# ruff: noqa: UP008, PLR0402, UP004, RUF059
"""DQN on cart-pole (eval net + target net, numpy replay memory, MSE TD loss), from MorvanZhou's PyTorch tutorial.

Source: https://github.com/MorvanZhou/PyTorch-Tutorial, Commit: dbe154a9e56635e51c6b0c2ccea8ae36cfb585a7,
Files: ``tutorial-contents/405_DQN_Reinforcement_learning.py``.
License: MIT (Copyright (c) 2017; full text in LICENSES/MorvanZhou-PyTorch-Tutorial.txt).
Domain: RL, value-based (DQN with a target network replaced every 100 learn steps, uniform replay).

Kept as written: the hyperparameters (BATCH_SIZE 32, LR 0.01, EPSILON 0.9, GAMMA 0.9, TARGET_REPLACE_ITER 100),
``Net`` (N_STATES->50->N_ACTIONS, weights ``normal_(0, 0.1)``), ``DQN`` (``choose_action``, ``store_transition``
into the numpy memory ``[s, a, r, s_]``, ``learn``: target replacement, sampling, ``gather``, detached
``target_net`` max, ``nn.MSELoss``, zero_grad/backward/step with Adam over ``eval_net``), and the loop body
(choose an action, step, the shaped reward ``r1 + r2``, store, learn once the memory is full, reset when done).

Deviations from the original:
- gym's unwrapped CartPole-v0 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations; its
  ``X_LIMIT`` / ``THETA_LIMIT`` stand for ``env.x_threshold`` / ``env.theta_threshold_radians``; the 500-step
  truncation is ignored, as the unwrapped env has none); the environment is the synthetic data.
- ``np.random`` is a ``np.random.RandomState(seed)`` instance and ``torch.manual_seed(seed)`` is called, so a build
  is reproducible; ``N_STATES`` / ``N_ACTIONS`` are the constants 4 / 2 (no ``env.action_space``);
  ``ENV_A_SHAPE`` is 0 (discrete actions).
- MEMORY_CAPACITY is 500 (2000 in the original: size for 2 CPU cores). At build time the loop body runs without
  learning until ``memory_counter > MEMORY_CAPACITY``, as in the original; ``train_step`` is one further pass of the
  loop body (one environment step, store, ``learn()``); ``learn`` returns the loss (the original returns nothing).
- ``env.render()`` and the printing are dropped; the 400-episode loop is not run.
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
from _cartpole import THETA_LIMIT, X_LIMIT, CartPole

# Hyper Parameters
BATCH_SIZE = 32
LR = 0.01                   # learning rate
EPSILON = 0.9               # greedy policy
GAMMA = 0.9                 # reward discount
TARGET_REPLACE_ITER = 100   # target update frequency
MEMORY_CAPACITY = 500
N_ACTIONS = 2
N_STATES = 4
ENV_A_SHAPE = 0


class Net(nn.Module):
    def __init__(self, ):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(N_STATES, 50)
        self.fc1.weight.data.normal_(0, 0.1)   # initialization
        self.out = nn.Linear(50, N_ACTIONS)
        self.out.weight.data.normal_(0, 0.1)   # initialization

    def forward(self, x):
        x = self.fc1(x)
        x = F.relu(x)
        actions_value = self.out(x)
        return actions_value


class DQN(object):
    def __init__(self, rng, bug=None):
        self.eval_net, self.target_net = Net(), Net()
        self.np_random = rng
        self.bug = bug

        self.learn_step_counter = 0                                     # for target updating
        self.memory_counter = 0                                         # for storing memory
        self.memory = np.zeros((MEMORY_CAPACITY, N_STATES * 2 + 2))     # initialize memory
        self.optimizer = torch.optim.Adam(self.eval_net.parameters(), lr=LR)
        self.loss_func = nn.MSELoss()

    def choose_action(self, x):
        x = torch.unsqueeze(torch.FloatTensor(x), 0)
        # input only one sample
        if self.np_random.uniform() < EPSILON:   # greedy
            actions_value = self.eval_net.forward(x)
            action = torch.max(actions_value, 1)[1].data.numpy()
            action = action[0] if ENV_A_SHAPE == 0 else action.reshape(ENV_A_SHAPE)  # return the argmax index
        else:   # random
            action = self.np_random.randint(0, N_ACTIONS)
            action = action if ENV_A_SHAPE == 0 else action.reshape(ENV_A_SHAPE)
        return action

    def store_transition(self, s, a, r, s_):
        transition = np.hstack((s, [a, r], s_))
        # replace the old memory with new memory
        index = self.memory_counter % MEMORY_CAPACITY
        self.memory[index, :] = transition
        self.memory_counter += 1

    def sample(self):
        # sample batch transitions
        sample_index = self.np_random.choice(MEMORY_CAPACITY, BATCH_SIZE)
        b_memory = self.memory[sample_index, :]
        b_s = torch.FloatTensor(b_memory[:, :N_STATES])
        b_a = torch.LongTensor(b_memory[:, N_STATES:N_STATES+1].astype(int))
        b_r = torch.FloatTensor(b_memory[:, N_STATES+1:N_STATES+2])
        if self.bug == "next_state_from_state_columns":
            b_s_ = torch.FloatTensor(b_memory[:, :N_STATES])
        else:
            b_s_ = torch.FloatTensor(b_memory[:, -N_STATES:])
        return b_s, b_a, b_r, b_s_

    def learn(self):
        # target parameter update
        if self.learn_step_counter % TARGET_REPLACE_ITER == 0:
            self.target_net.load_state_dict(self.eval_net.state_dict())
        self.learn_step_counter += 1

        b_s, b_a, b_r, b_s_ = self.sample()

        # q_eval w.r.t the action in experience
        q_eval = self.eval_net(b_s).gather(1, b_a)  # shape (batch, 1)
        q_next = self.target_net(b_s_).detach()     # detach from graph, don't backpropagate
        q_target = b_r + GAMMA * q_next.max(1)[0].view(BATCH_SIZE, 1)   # shape (batch, 1)
        loss = self.loss_func(q_eval, q_target)

        if self.bug != "zero_grad_dropped":
            self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss


class _Loop:
    """main()'s loop body, one environment step at a time (the episode state kept between calls)."""

    def __init__(self, dqn, env):
        self.dqn, self.env = dqn, env
        self.s, _ = env.reset()

    def step(self):
        dqn, env, s = self.dqn, self.env, self.s
        a = dqn.choose_action(s)

        # take action
        s_, r, done, _truncated, info = env.step(a)

        # modify the reward
        x, x_dot, theta, theta_dot = s_
        r1 = (X_LIMIT - abs(x)) / X_LIMIT - 0.8
        r2 = (THETA_LIMIT - abs(theta)) / THETA_LIMIT - 0.5
        r = r1 + r2

        dqn.store_transition(s, a, r, s_)

        loss = None
        if dqn.memory_counter > MEMORY_CAPACITY:
            loss = dqn.learn()

        if done:
            s_, _ = env.reset()
        self.s = s_
        return loss


def _build(seed, bug=None):
    torch.manual_seed(seed)
    dqn = DQN(np.random.RandomState(seed), bug)
    loop = _Loop(dqn, CartPole(seed))
    while dqn.memory_counter <= MEMORY_CAPACITY:
        loop.step()

    b_s, b_a, b_r, b_s_ = dqn.sample()
    batch = (b_s, (b_a, b_r, b_s_))

    def loss_fn(q_out, targets):
        b_a, b_r, b_s_ = targets
        q_eval = q_out.gather(1, b_a)
        q_next = dqn.target_net(b_s_).detach()
        q_target = b_r + GAMMA * q_next.max(1)[0].view(BATCH_SIZE, 1)
        return dqn.loss_func(q_eval, q_target)

    return Program(name="morvanzhou_dqn", model=dqn.eval_net, batch=batch, loss_fn=loss_fn,
                   optimizer=dqn.optimizer, train_step=loop.step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the next states are sliced from the memory's first columns (the current states): the TD target bootstraps
    # from Q(s) instead of Q(s') (classic column-slicing slip of a flat numpy replay memory).
    Bug("next_state_from_state_columns", functools.partial(_build, bug="next_state_from_state_columns"),
        "learning_ledger", ("TASK",)),
    # optimizer.zero_grad() dropped from learn(): gradients pile up across updates (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

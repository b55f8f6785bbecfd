# ruff: noqa: UP004, UP008, PLR0402
"""The double DQN of "Hands-On Reinforcement Learning for Games" (Packt), chapter 7: a 128-128 ReLU Q-network and a
target copy synchronized every 500 loop passes, epsilon decayed exponentially with the loop counter, a deque replay
buffer of 3000 transitions, and one TD update of 32 sampled transitions after every environment step: the next
action chosen by the current network's argmax and valued by the target network, masked by ``1 - done``, squared
error against the target's ``.data``, Adam at its default lr.

Source: https://github.com/PacktPublishing/Hands-On-Reinforcement-Learning-for-Games
Commit: 99c9b4921a42df46dfab6d7818c26925d34aef88
Files: ``Chapter07/Chapter_7/Chapter_7_DoubleDQN.py`` (``ReplayBuffer``, ``eps_by_episode``, ``DQN`` with ``act``,
``update_target``, ``compute_td_loss``, the training loop)
License: MIT (Copyright (c) 2020 Packt; full text in LICENSES/PacktPublishing-Hands-On-Reinforcement-Learning-for-Games.txt)
Domain: RL, value-based (double DQN with replay and a periodically synchronized target network)

Kept as written: ``ReplayBuffer`` (``expand_dims`` on push, ``zip(*random.sample(...))`` and ``np.concatenate``
on sample), ``eps_by_episode`` (1.0 -> 0.01, decay 1000, indexed by the loop counter the script calls
``episode``), ``DQN`` (``Linear(obs, neurons)``, ReLU, ``Linear(neurons, neurons)``, ReLU, ``Linear(neurons,
actions)``, neurons 128) and ``act``, ``update_target`` (at start and every 500 passes), ``compute_td_loss``
(gather of the taken action, the double-DQN ``next_q_state_values.gather(1, argmax of next_q_values)``,
``reward + gamma * next_q_value * (1 - done)``, the squared error against ``expected_q_value.data``, zero_grad,
backward, step), ``Adam`` with its defaults, the loop body (act, step, push, reset on done, one
``compute_td_loss`` once the buffer holds more than ``batch_size``), buffer_size 3000, batch_size 32, gamma 0.99.

Deviations from the original:
- gym's LunarLander-v2 (Box2D) is not here: the cart-pole written out in numpy in ``_cartpole.py`` is the
  environment (the synthetic data, seeded from ``seed``; 4 observations and 2 actions instead of 8 and 4), with
  CartPole-v1's 500-step limit as ``done``; ``DQN`` reads the sizes from its arguments (the original reads the
  global ``env``'s spaces);
- ``autograd.Variable`` (and ``volatile=True``) is dropped: a no-op wrapper in current PyTorch; ``act``'s forward
  runs under ``torch.no_grad()`` (what ``volatile`` meant); ``random`` is a ``random.Random(seed)`` instance and
  the build seeds torch with ``seed``;
- one ``train_step`` is one pass of the ``for episode in tr`` loop (one environment step and one update); the
  build runs the first passes until the buffer holds more than ``batch_size`` transitions (they do not update);
  ``play_game`` (a rendered greedy episode after each finished episode past 3000 passes), the tqdm bar, reward
  bookkeeping and plots are dropped;
- the Program declares ``current_model``, a replay batch sampled at build time, ``compute_td_loss``'s loss on it,
  and the optimizer;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

SELF_CHECK_STEPS = 60  # (port) one environment step and one update of 32 transitions per step


class ReplayBuffer(object):
    def __init__(self, capacity, rng):
        self.buffer = deque(maxlen=capacity)
        self.random = rng

    def push(self, state, action, reward, next_state, done):
        state      = np.expand_dims(state, 0)
        next_state = np.expand_dims(next_state, 0)

        self.buffer.append((state, action, reward, next_state, done))

    def sample(self, batch_size):
        state, action, reward, next_state, done = zip(*self.random.sample(self.buffer, batch_size))
        return np.concatenate(state), action, reward, np.concatenate(next_state), done

    def __len__(self):
        return len(self.buffer)


epsilon_start = 1.0
epsilon_final = 0.01
epsilon_decay = 1000
buffer_size = 3000
neurons = 128

eps_by_episode = lambda episode: epsilon_final + (epsilon_start - epsilon_final) * math.exp(-1. * episode / epsilon_decay)


class DQN(nn.Module):
    def __init__(self, num_inputs, num_actions, rng):
        super(DQN, self).__init__()

        self.layers = nn.Sequential(
            nn.Linear(num_inputs, neurons),
            nn.ReLU(),
            nn.Linear(neurons, neurons),
            nn.ReLU(),
            nn.Linear(neurons, num_actions)
        )
        self.num_actions = num_actions
        self.random = rng

    def forward(self, x):
        return self.layers(x)

    def act(self, state, epsilon):
        if self.random.random() > epsilon:
            with torch.no_grad():
                state   = torch.FloatTensor(state).unsqueeze(0)
                q_value = self.forward(state)
            action  = q_value.max(1)[1].item()
        else:
            action = self.random.randrange(self.num_actions)
        return action


def td_loss(current_model, target_model, batch, gamma, bug=None):
    """(port) ``compute_td_loss`` from the tensors to the loss, shared with the declared ``loss_fn``."""
    state, action, reward, next_state, done = batch
    q_values      = current_model(state)
    next_q_values = current_model(next_state)
    next_q_state_values = target_model(next_state)

    if bug == "taken_action_not_gathered":
        q_value          = q_values.max(1)[0]
    else:
        q_value          = q_values.gather(1, action.unsqueeze(1)).squeeze(1)
    next_q_value     = next_q_state_values.gather(1, torch.max(next_q_values, 1)[1].unsqueeze(1)).squeeze(1)
    if bug == "done_mask_dropped":
        expected_q_value = reward + gamma * next_q_value
    else:
        expected_q_value = reward + gamma * next_q_value * (1 - done)

    loss = (q_value - expected_q_value.data).pow(2).mean()
    return loss


def _tensors(sample):
    state, action, reward, next_state, done = sample
    state      = torch.FloatTensor(np.float32(state))
    next_state = torch.FloatTensor(np.float32(next_state))
    action     = torch.LongTensor(action)
    reward     = torch.FloatTensor(reward)
    done       = torch.FloatTensor(done)
    return state, action, reward, next_state, done


def _build(seed, bug=None):
    batch_size = 32
    gamma      = 0.99
    rng = random.Random(seed)
    torch.manual_seed(seed)
    env = CartPole(seed)

    current_model = DQN(4, 2, rng)
    target_model = DQN(4, 2, rng)

    optimizer = optim.Adam(current_model.parameters())

    replay_buffer = ReplayBuffer(buffer_size, rng)

    def update_target(current_model, target_model):
        target_model.load_state_dict(current_model.state_dict())

    update_target(current_model, target_model)

    def compute_td_loss(batch_size):
        loss = td_loss(current_model, target_model, _tensors(replay_buffer.sample(batch_size)), gamma, bug)

        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        return loss

    st = {"episode": 0, "state": env.reset()[0]}

    def loop_body():
        epsilon = eps_by_episode(st["episode"])
        action = current_model.act(st["state"], epsilon)

        next_state, reward, done, _truncated, _ = env.step(action)
        done = done or _truncated  # (port) gym < 0.26's single flag
        replay_buffer.push(st["state"], action, reward, next_state, done)

        st["state"] = next_state

        if done:
            st["state"] = env.reset()[0]

        loss = None
        if len(replay_buffer) > batch_size:
            loss = compute_td_loss(batch_size)

        if st["episode"] % 500 == 0:
            update_target(current_model, target_model)
        st["episode"] += 1
        return loss

    while len(replay_buffer) <= batch_size:  # (port) the passes before the first update
        loop_body()

    probe = ReplayBuffer(buffer_size, random.Random(seed + 1))  # (port) the declared batch: a replay sample
    probe.buffer = replay_buffer.buffer
    batch0 = _tensors(probe.sample(batch_size))
    batch = (batch0[0], batch0[1:])

    def loss_fn(_q_values, targets):
        return td_loss(current_model, target_model, (batch[0], *targets), gamma, bug)

    def train_step():
        return loop_body().item()

    return Program(name="rlforgames_double_dqn", model=current_model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the prediction is the maximum Q-value of the state instead of the taken action's, so the sampled action
    # never enters the loss.
    Bug("taken_action_not_gathered", functools.partial(_build, bug="taken_action_not_gathered"), "learning_ledger",
        ("TASK",)),
    # classic: the ``(1 - done)`` mask left out of the target, so terminal transitions bootstrap from the next
    # episode's first state.
    Bug("done_mask_dropped", functools.partial(_build, bug="done_mask_dropped"), "learning_ledger", ("TASK",)),
    # classic: optimizer.zero_grad() left out of compute_td_loss, every update adds all earlier updates' gradients.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

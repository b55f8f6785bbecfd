# ruff: noqa: PLR0402, UP008, UP004
"""A DRQN (LSTM Q-network) on a partially observable cart-pole, from g6ling's Reinforcement-Learning-Pytorch-Cartpole:
the observation keeps only the cart position and the pole angle, whole episodes are stored (short ones front-padded
with zero transitions to ``sequence_length``), sequences of 8 are sampled with episode-length weights, the first
``burn_in_length`` (4) steps of each sequence are sliced off the Q-values, the target is ``r + mask * gamma *
max_a Q_target(s', a)`` from a target network copied every ``update_target`` steps, MSE against the detached target,
Adam, epsilon-greedy actions from the target network decaying by 5e-5 per step to 0.1.

Source: https://github.com/g6ling/Reinforcement-Learning-Pytorch-Cartpole
Commit: ecb7b622cfefe825ac95388cceb6752413d90a2a
Files: POMDP/1-DRQN/config.py, POMDP/1-DRQN/memory.py, POMDP/1-DRQN/model.py, POMDP/1-DRQN/train.py
License: MIT (Copyright (c) 2018 Cheol Kang; full text in LICENSES/g6ling-Reinforcement-Learning-Pytorch-Cartpole.txt)
Domain: RL, value-based, recurrent (DRQN with burn-in, episode replay, target network)

Kept as written: config.py's values (gamma 0.99, batch_size 32, lr 0.001, initial_exploration 1000, update_target
100, replay_memory_capacity 100 episodes, sequence_length 8, burn_in_length 4), ``Memory`` (push with front padding
on the episode's end, length-weighted episode choice, random window), ``DRQN`` (LSTM 2->128, fc 128->256->2,
xavier-uniform linear weights) with ``train_model`` and ``get_action``, train.py's loop body (action from the target
network, -1 reward on a failing terminal step, push, epsilon decay, sample, ``train_model``, target copy every 100
steps).

Deviations:
- gym's CartPole-v1 is the numpy cart-pole of ``_cartpole.py`` (same equations and constants, seeded); its
  ``terminated or truncated`` is the old API's ``done``; ``env.action_space.sample()`` is a seeded numpy draw; the
  environment is the synthetic data.
- ``random`` and ``np.random`` (the memory's sampling, epsilon's coin) are seeded ``random.Random`` /
  ``numpy.random.default_rng`` instances, and ``torch.manual_seed(seed)`` replaces ``torch.manual_seed(500)``, so a
  build is reproducible from ``seed``.
- ``nn.init.xavier_uniform`` (deprecated) is spelled ``nn.init.xavier_uniform_`` (same initialization).
- ``main()`` is not run as a 30000-episode loop: at build time the first ``initial_exploration`` (1000) steps are
  played at epsilon 1.0 exactly as the loop does (no training before them); ``train_step`` is one later iteration
  of the inner ``while`` loop (one environment step, then one ``train_model``), starting a new episode when the last
  one ended. ``train_model``'s lines are split, unchanged, into ``prepare`` (stack and view), ``drqn_loss`` (the
  Program's ``loss_fn``) and the update; tensorboard logging and printing are left out; the device is the CPU.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
from collections import deque, namedtuple

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
from _cartpole import CartPole

# ---- config.py ---------------------------------------------------------------------------------------------------
gamma = 0.99
batch_size = 32
lr = 0.001
initial_exploration = 1000
update_target = 100
replay_memory_capacity = 100
sequence_length = 8
burn_in_length = 4

# ---- memory.py ---------------------------------------------------------------------------------------------------
Transition = namedtuple('Transition', ('state', 'next_state', 'action', 'reward', 'mask'))


class Memory(object):
    def __init__(self, capacity, rng, np_rng):
        self.memory = deque(maxlen=capacity)
        self.local_memory = []
        self.capacity = capacity
        self.random, self.np_random = rng, np_rng

    def push(self, state, next_state, action, reward, mask):
        self.local_memory.append(Transition(state, next_state, action, reward, mask))
        if mask == 0:
            while len(self.local_memory) < sequence_length:
                self.local_memory.insert(0, Transition(
                    torch.Tensor([0, 0]),
                    torch.Tensor([0, 0]),
                    0,
                    0,
                    0,
                ))
            self.memory.append(self.local_memory)
            self.local_memory = []

    def sample(self, batch_size):
        batch_state, batch_next_state, batch_action, batch_reward, batch_mask = [], [], [], [], []
        p = np.array([len(episode) for episode in self.memory])
        p = p / p.sum()

        batch_indexes = self.np_random.choice(np.arange(len(self.memory)), batch_size, p=p)

        for batch_idx in batch_indexes:
            episode = self.memory[batch_idx]

            start = self.random.randint(0, len(episode) - sequence_length)
            transitions = episode[start:start + sequence_length]
            batch = Transition(*zip(*transitions))

            batch_state.append(torch.stack(list(batch.state)))
            batch_next_state.append(torch.stack(list(batch.next_state)))
            batch_action.append(torch.Tensor(list(batch.action)))
            batch_reward.append(torch.Tensor(list(batch.reward)))
            batch_mask.append(torch.Tensor(list(batch.mask)))

        return Transition(batch_state, batch_next_state, batch_action, batch_reward, batch_mask)

    def __len__(self):
        return len(self.memory)


# ---- model.py ----------------------------------------------------------------------------------------------------
class DRQN(nn.Module):
    def __init__(self, num_inputs, num_outputs):
        super(DRQN, self).__init__()
        self.num_inputs = num_inputs
        self.num_outputs = num_outputs

        self.lstm = nn.LSTM(input_size=num_inputs, hidden_size=128, batch_first=True)
        self.fc1 = nn.Linear(128, 256)
        self.fc2 = nn.Linear(256, num_outputs)

        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)

    def forward(self, x, hidden=None):
        # x [batch_size, sequence_length, num_inputs]

        if hidden is not None:
            out, hidden = self.lstm(x, hidden)
        else:
            out, hidden = self.lstm(x)
        out = F.relu(self.fc1(out))
        qvalue = self.fc2(out)

        return qvalue, hidden

    def get_action(self, state, hidden):
        state = state.unsqueeze(0).unsqueeze(0)

        qvalue, hidden = self.forward(state, hidden)

        _, action = torch.max(qvalue, 2)

        return action.numpy()[0][0], hidden


def prepare(online_net, batch):
    """(port) the first lines of ``train_model``: the sampled lists stacked into [batch, sequence, ...] tensors."""
    states = torch.stack(batch.state).view(batch_size, sequence_length, online_net.num_inputs)
    next_states = torch.stack(batch.next_state).view(batch_size, sequence_length, online_net.num_inputs)
    actions = torch.stack(batch.action).view(batch_size, sequence_length, -1).long()
    rewards = torch.stack(batch.reward).view(batch_size, sequence_length, -1)
    masks = torch.stack(batch.mask).view(batch_size, sequence_length, -1)
    return states, (next_states, actions, rewards, masks)


def drqn_loss(outputs, targets, target_net, bug=None):
    """(port) the rest of ``train_model`` up to the loss: ``outputs`` is ``online_net(states)``."""
    def slice_burn_in(item):
        return item[:, burn_in_length:, :]
    next_states, actions, rewards, masks = targets
    pred, _ = outputs
    next_pred, _ = target_net(next_states)

    pred = slice_burn_in(pred)
    next_pred = slice_burn_in(next_pred)
    actions = slice_burn_in(actions)
    rewards = slice_burn_in(rewards)
    masks = slice_burn_in(masks)

    if bug == "gather_over_time_axis":
        pred = pred.gather(1, actions)
    else:
        pred = pred.gather(2, actions)

    if bug == "done_mask_dropped":
        target = rewards + gamma * next_pred.max(2, keepdim=True)[0]
    else:
        target = rewards + masks * gamma * next_pred.max(2, keepdim=True)[0]

    loss = F.mse_loss(pred, target.detach())
    return loss


def train_model(online_net, target_net, optimizer, batch, bug=None):
    states, targets = prepare(online_net, batch)
    pred = online_net(states)
    loss = drqn_loss(pred, targets, target_net, bug)
    if bug != "zero_grad_dropped":
        optimizer.zero_grad()
    loss.backward()
    optimizer.step()

    return loss


# ---- train.py ----------------------------------------------------------------------------------------------------
def get_action(state, target_net, epsilon, env, hidden, np_rng):
    action, hidden = target_net.get_action(state, hidden)

    if np_rng.random() <= epsilon:
        return int(np_rng.integers(2)), hidden
    else:
        return action, hidden


def update_target_model(online_net, target_net):
    # Target <- Net
    target_net.load_state_dict(online_net.state_dict())


def state_to_partial_observability(state):
    state = state[[0, 2]]
    return state


def env_step(run, online_net, target_net, memory, env):
    """(port) the inner ``while not done`` body up to the training condition; a new episode starts when one ended."""
    if run["done"]:
        run["done"], run["score"], run["hidden"] = False, 0, None
        state, _ = env.reset()
        run["state"] = torch.Tensor(state_to_partial_observability(state))
    run["steps"] += 1
    action, run["hidden"] = get_action(run["state"], target_net, run["epsilon"], env, run["hidden"], run["np_rng"])
    next_state, reward, terminated, truncated, _ = env.step(action)
    done = terminated or truncated
    next_state = torch.Tensor(state_to_partial_observability(next_state))

    mask = 0 if done else 1
    reward = reward if not done or run["score"] == 499 else -1

    memory.push(run["state"], next_state, action, reward, mask)

    run["score"] += reward
    run["state"], run["done"] = next_state, done


def _build(seed, bug=None):
    env = CartPole(seed)
    torch.manual_seed(seed)
    np_rng = np.random.default_rng(seed)
    num_inputs, num_actions = 2, 2

    online_net = DRQN(num_inputs, num_actions)
    target_net = DRQN(num_inputs, num_actions)
    update_target_model(online_net, target_net)

    optimizer = optim.Adam(online_net.parameters(), lr=lr)
    online_net.train()
    target_net.train()
    memory = Memory(replay_memory_capacity, random.Random(seed), np_rng)
    run = {"epsilon": 1.0, "steps": 0, "done": True, "np_rng": np_rng}
    while run["steps"] < initial_exploration or len(memory) <= batch_size:
        env_step(run, online_net, target_net, memory, env)

    def train_step():
        env_step(run, online_net, target_net, memory, env)
        run["epsilon"] -= 0.00005
        run["epsilon"] = max(run["epsilon"], 0.1)

        batch = memory.sample(batch_size)
        loss = train_model(online_net, target_net, optimizer, batch, bug)

        if run["steps"] % update_target == 0:
            update_target_model(online_net, target_net)
        return loss

    def loss_fn(outputs, targets):
        return drqn_loss(outputs, targets, target_net, bug)

    batch = prepare(online_net, memory.sample(batch_size))
    return Program(name="g6lingrl_drqn", model=online_net, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the terminal mask left out of the TD target, so the failing step bootstraps from the padded or reset
    # state as if the episode went on.
    Bug("done_mask_dropped", functools.partial(_build, bug="done_mask_dropped"), "learning_ledger", ("TASK",)),
    # classic wrong axis: ``gather(1, actions)`` on [batch, time, action] Q-values picks time steps 0/1 by the action
    # index instead of the taken action's value (the shapes agree, nothing raises).
    Bug("gather_over_time_axis", functools.partial(_build, bug="gather_over_time_axis"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: ``optimizer.zero_grad()`` left out of ``train_model``, so every update adds all past gradients.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

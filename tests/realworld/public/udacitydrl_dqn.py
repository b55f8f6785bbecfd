# ruff: noqa: PLR0402, SIM102, UP008, UP039
"""Deep Q-Network agent from Udacity's Deep Reinforcement Learning Nanodegree: a 64-64 Q-network, a replay buffer of
named tuples, learning every 4 environment steps, MSE TD loss against a target network, and a soft target update.

Source: https://github.com/udacity/deep-reinforcement-learning
Commit: 561eec3ae8678a23a4557f1a15414a9b076fdfff
Files: ``dqn/solution/dqn_agent.py`` (``Agent``, ``ReplayBuffer``), ``dqn/solution/model.py`` (``QNetwork``),
``dqn/solution/Deep_Q_Network_Solution.ipynb`` (the ``dqn()`` episode loop).
License: MIT (Copyright (c) 2018 Udacity; full text in LICENSES/udacity-deep-reinforcement-learning.txt)
Domain: RL, value-based (DQN, replay, soft-updated target network)

Kept as written: ``QNetwork`` (state -> 64 -> 64 -> actions, ReLU), ``Agent`` (``step`` adding to memory and
learning every ``UPDATE_EVERY`` = 4 steps once the memory holds more than a batch, ``act`` with epsilon-greedy
selection in eval mode, ``learn``: ``qnetwork_target(next_states).detach().max(1)[0]``, ``rewards + gamma *
Q_targets_next * (1 - dones)``, ``gather(1, actions)``, ``F.mse_loss``, zero_grad/backward/step, then
``soft_update`` with tau 1e-3), ``ReplayBuffer`` (deque, namedtuple ``Experience``, ``random.sample``, ``np.vstack``
into tensors), the constants (BUFFER_SIZE 1e5, BATCH_SIZE 64, GAMMA 0.99, TAU 1e-3, LR 5e-4, UPDATE_EVERY 4), Adam
over ``qnetwork_local``, the notebook's epsilon decay (start 1.0, end 0.01, decay 0.995 per episode).

Deviations from the original:
- gym's LunarLander-v2 (8 states, 4 actions) is replaced by the numpy cart-pole of ``_cartpole.py`` (4 states, 2
  actions, seeded); the environment is the synthetic data. ``env.reset`` / ``env.step`` return that module's tuples
  (``done`` is its terminal flag or its time limit).
- the notebook's ``dqn()`` loop is not run as a whole: at build time episodes are played with ``agent.act`` and
  ``agent.step`` (which learns as written) until the memory holds 300 experiences; ``train_step`` then continues the
  same episode loop for ``UPDATE_EVERY`` environment steps, i.e. exactly one ``learn`` call, and returns its loss.
  Epsilon decays per finished episode as in the notebook.
- ``learn`` returns its loss (the original returns nothing) so the step has a loss to report; ``step`` returns what
  ``learn`` returned. Score printing and checkpoint saving are dropped.
- the ``learn`` lines computing ``Q_targets`` are moved, unchanged, into ``q_targets`` so the Program's ``loss_fn``
  applies the same target. ``device`` is the CPU.
- the methods' ``Params`` docstrings are left out (the code is unchanged).
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

BUFFER_SIZE = int(1e5)  # replay buffer size
BATCH_SIZE = 64         # minibatch size
GAMMA = 0.99            # discount factor
TAU = 1e-3              # for soft update of target parameters
LR = 5e-4               # learning rate
UPDATE_EVERY = 4        # how often to update the network
FILL = 300              # (port) experiences gathered at build time

device = torch.device("cpu")


class QNetwork(nn.Module):
    """Actor (Policy) Model."""

    def __init__(self, state_size, action_size, seed, fc1_units=64, fc2_units=64):
        super(QNetwork, self).__init__()
        self.seed = torch.manual_seed(seed)
        self.fc1 = nn.Linear(state_size, fc1_units)
        self.fc2 = nn.Linear(fc1_units, fc2_units)
        self.fc3 = nn.Linear(fc2_units, action_size)

    def forward(self, state):
        """Build a network that maps state -> action values."""
        x = F.relu(self.fc1(state))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Agent():
    """Interacts with and learns from the environment."""

    def __init__(self, state_size, action_size, seed, bug=None):
        self.state_size = state_size
        self.action_size = action_size
        self.seed = random.seed(seed)
        self.bug = bug

        # Q-Network
        self.qnetwork_local = QNetwork(state_size, action_size, seed).to(device)
        self.qnetwork_target = QNetwork(state_size, action_size, seed).to(device)
        self.optimizer = optim.Adam(self.qnetwork_local.parameters(), lr=LR)

        # Replay memory
        self.memory = ReplayBuffer(action_size, BUFFER_SIZE, BATCH_SIZE, seed, bug)
        # Initialize time step (for updating every UPDATE_EVERY steps)
        self.t_step = 0

    def step(self, state, action, reward, next_state, done):
        # Save experience in replay memory
        self.memory.add(state, action, reward, next_state, done)

        # Learn every UPDATE_EVERY time steps.
        self.t_step = (self.t_step + 1) % UPDATE_EVERY
        if self.t_step == 0:
            # If enough samples are available in memory, get random subset and learn
            if len(self.memory) > BATCH_SIZE:
                experiences = self.memory.sample()
                return self.learn(experiences, GAMMA)
        return None

    def act(self, state, eps=0.):
        state = torch.from_numpy(state).float().unsqueeze(0).to(device)
        self.qnetwork_local.eval()
        with torch.no_grad():
            action_values = self.qnetwork_local(state)
        self.qnetwork_local.train()

        # Epsilon-greedy action selection
        if random.random() > eps:
            return np.argmax(action_values.cpu().data.numpy())
        else:
            return random.choice(np.arange(self.action_size))

    def q_targets(self, rewards, next_states, dones, gamma):
        """(port) the target lines of ``learn``, as written."""
        # Get max predicted Q values (for next states) from target model
        Q_targets_next = self.qnetwork_target(next_states).detach().max(1)[0].unsqueeze(1)
        # Compute Q targets for current states
        Q_targets = rewards + (gamma * Q_targets_next * (1 - dones))
        return Q_targets

    def learn(self, experiences, gamma):
        states, actions, rewards, next_states, dones = experiences

        Q_targets = self.q_targets(rewards, next_states, dones, gamma)

        # Get expected Q values from local model
        Q_expected = self.qnetwork_local(states).gather(1, actions)

        # Compute loss
        loss = F.mse_loss(Q_expected, Q_targets)
        # Minimize the loss
        if self.bug == "step_before_backward":
            self.optimizer.zero_grad()
            self.optimizer.step()
            loss.backward()
        else:
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

        # ------------------- update target network ------------------- #
        if self.bug == "soft_update_reversed":
            self.soft_update(self.qnetwork_target, self.qnetwork_local, TAU)
        else:
            self.soft_update(self.qnetwork_local, self.qnetwork_target, TAU)
        return loss

    def soft_update(self, local_model, target_model, tau):
        for target_param, local_param in zip(target_model.parameters(), local_model.parameters()):
            target_param.data.copy_(tau*local_param.data + (1.0-tau)*target_param.data)


class ReplayBuffer:
    """Fixed-size buffer to store experience tuples."""

    def __init__(self, action_size, buffer_size, batch_size, seed, bug=None):
        self.action_size = action_size
        self.memory = deque(maxlen=buffer_size)
        self.batch_size = batch_size
        self.experience = namedtuple("Experience", field_names=["state", "action", "reward", "next_state", "done"])
        self.seed = random.seed(seed)
        self.bug = bug

    def add(self, state, action, reward, next_state, done):
        """Add a new experience to memory."""
        e = self.experience(state, action, reward, next_state, done)
        self.memory.append(e)

    def sample(self):
        """Randomly sample a batch of experiences from memory."""
        experiences = random.sample(self.memory, k=self.batch_size)

        states = torch.from_numpy(np.vstack([e.state for e in experiences if e is not None])).float().to(device)
        actions = torch.from_numpy(np.vstack([e.action for e in experiences if e is not None])).long().to(device)
        rewards = torch.from_numpy(np.vstack([e.reward for e in experiences if e is not None])).float().to(device)
        if self.bug == "next_states_from_states":
            next_states = torch.from_numpy(np.vstack([e.state for e in experiences if e is not None])).float().to(device)
        else:
            next_states = torch.from_numpy(np.vstack([e.next_state for e in experiences if e is not None])).float().to(device)
        dones = torch.from_numpy(np.vstack([e.done for e in experiences if e is not None]).astype(np.uint8)).float().to(device)

        return (states, actions, rewards, next_states, dones)

    def __len__(self):
        """Return the current size of internal memory."""
        return len(self.memory)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    env = CartPole(seed)
    agent = Agent(state_size=4, action_size=2, seed=seed, bug=bug)
    eps_start, eps_end, eps_decay = 1.0, 0.01, 0.995
    loop = {"eps": eps_start, "state": env.reset()[0]}

    def env_step():
        """One pass of the notebook's inner loop body; a finished episode resets and decays epsilon."""
        state = loop["state"]
        action = agent.act(state, loop["eps"])
        next_state, reward, terminal, truncated, _ = env.step(action)
        done = terminal or truncated
        out = agent.step(state, action, reward, next_state, done)
        loop["state"] = next_state
        if done:
            loop["state"] = env.reset()[0]
            loop["eps"] = max(eps_end, eps_decay * loop["eps"])  # decrease epsilon
        return out

    while len(agent.memory) < FILL:
        env_step()
    agent.t_step = 0

    states, actions, rewards, next_states, dones = agent.memory.sample()
    batch = (states, (actions, rewards, next_states, dones))

    def loss_fn(q_out, targets):
        actions, rewards, next_states, dones = targets
        return F.mse_loss(q_out.gather(1, actions), agent.q_targets(rewards, next_states, dones, GAMMA))

    def train_step():
        loss = None
        for _ in range(UPDATE_EVERY):
            out = env_step()
            loss = out if out is not None else loss
        return loss

    return Program(name="udacitydrl_dqn", model=agent.qnetwork_local, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the Polyak update written with its arguments swapped: the online network is dragged toward the target, the
    # target never follows (classic).
    Bug("soft_update_reversed", functools.partial(_build, bug="soft_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
    # the buffer's sample stacks e.state where e.next_state belongs: every TD target bootstraps from the state itself
    # (classic copy-paste slip among the five near-identical lines).
    Bug("next_states_from_states", functools.partial(_build, bug="next_states_from_states"), "learning_ledger",
        ("TASK",)),
    # optimizer.step() placed before loss.backward(): every update applies nothing (zeroed gradients) and the fresh
    # gradients are cleared on the next learn (classic).
    Bug("step_before_backward", functools.partial(_build, bug="step_before_backward"), "step_probe", (),
        kind="step.step_before_backward"),
]

# ruff: noqa: PLR0402, UP008, UP039
"""DQN with a replay buffer and a target network, from minimalRL.

Source: https://github.com/seungeunrho/minimalRL, commit c8efed8481e3cd40e9739cfde220a55522555b57,
file ``dqn.py``. License: MIT (Copyright (c) 2019 seungeunrho; full text in
LICENSES/seungeunrho-minimalRL.txt).

Kept as written: the hyperparameters (learning_rate 0.0005, gamma 0.98, buffer_limit 50000, batch_size 32), the
``ReplayBuffer`` (deque, ``sample`` building the five tensors), ``Qnet`` (4->128->128->2) with ``sample_action``,
``train`` (10 minibatches per call: ``q_out.gather``, ``q_target(s_prime).max(1)[0]``, done mask,
``F.smooth_l1_loss``, zero_grad/backward/step), the Adam optimizer over ``q``, the target copy by
``load_state_dict`` at start and every ``print_interval`` (20) episodes, epsilon annealing.

Deviations:
- gym's CartPole-v1 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations and constants,
  seeded); the environment is the synthetic data.
- ``random.sample`` / ``random.random`` / ``random.randint`` come from a ``random.Random(seed)`` instance (the
  buffer's and ``sample_action``'s) instead of the global ``random`` module, so a build is reproducible.
- ``main()`` is not run as an endless loop. At build time the buffer is filled by playing episodes with
  ``sample_action`` at epsilon 0.08 (the schedule's start) until it holds 600 transitions (the original starts
  training after 2000: size for 2 CPU cores). ``train_step`` replays what one episode's end does once the buffer
  is full: ``train(q, q_target, memory, optimizer)``, and on every 20th call the target copy.
- ``train`` returns the last minibatch's loss (the original returns nothing) so the step has a loss to report.
- printing and the score bookkeeping are dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import collections
import functools
import pathlib
import random
import sys

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

# Hyperparameters
learning_rate = 0.0005
gamma = 0.98
buffer_limit = 50000
batch_size = 32
print_interval = 20
FILL = 600


class ReplayBuffer():
    def __init__(self, rng):
        self.buffer = collections.deque(maxlen=buffer_limit)
        self.random = rng

    def put(self, transition):
        self.buffer.append(transition)

    def sample(self, n):
        mini_batch = self.random.sample(self.buffer, n)
        s_lst, a_lst, r_lst, s_prime_lst, done_mask_lst = [], [], [], [], []

        for transition in mini_batch:
            s, a, r, s_prime, done_mask = transition
            s_lst.append(s)
            a_lst.append([a])
            r_lst.append([r])
            s_prime_lst.append(s_prime)
            done_mask_lst.append([done_mask])

        return torch.tensor(s_lst, dtype=torch.float), torch.tensor(a_lst), \
            torch.tensor(r_lst), torch.tensor(s_prime_lst, dtype=torch.float), \
            torch.tensor(done_mask_lst)

    def size(self):
        return len(self.buffer)


class Qnet(nn.Module):
    def __init__(self, rng=None):
        super(Qnet, self).__init__()
        self.fc1 = nn.Linear(4, 128)
        self.fc2 = nn.Linear(128, 128)
        self.fc3 = nn.Linear(128, 2)
        self.random = rng or random.Random(0)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

    def sample_action(self, obs, epsilon):
        out = self.forward(obs)
        coin = self.random.random()
        if coin < epsilon:
            return self.random.randint(0, 1)
        else:
            return out.argmax().item()


def train(q, q_target, memory, optimizer, bug=None):
    for i in range(10):
        s, a, r, s_prime, done_mask = memory.sample(batch_size)

        q_out = q(s)
        q_a = q_out.gather(1, a)
        max_q_prime = q_target(s_prime).max(1)[0].unsqueeze(1)
        if bug == "done_mask_dropped":
            target = r + gamma * max_q_prime
        else:
            target = r + gamma * max_q_prime * done_mask
        loss = F.smooth_l1_loss(q_a, target)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss


def fill_memory(q, memory, seed):
    """main()'s episode loop (epsilon 0.08, the schedule's start) until the buffer holds FILL transitions."""
    env = CartPole(seed)
    epsilon = 0.08
    while memory.size() < FILL:
        s, _ = env.reset()
        done = False
        while not done:
            with torch.no_grad():
                a = q.sample_action(torch.from_numpy(s).float(), epsilon)
            s_prime, r, done, _truncated, _info = env.step(a)
            done_mask = 0.0 if done else 1.0
            memory.put((s, a, r / 100.0, s_prime, done_mask))
            s = s_prime
            if done or memory.size() >= FILL:
                break


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    q = Qnet(rng)
    q_target = Qnet(rng)
    q_target.load_state_dict(q.state_dict())
    memory = ReplayBuffer(rng)
    fill_memory(q, memory, seed)

    if bug == "optimizer_over_q_target":
        optimizer = optim.Adam(q_target.parameters(), lr=learning_rate)
    else:
        optimizer = optim.Adam(q.parameters(), lr=learning_rate)

    s, a, r, s_prime, done_mask = memory.sample(batch_size)
    batch = (s, (a, r, s_prime, done_mask))

    def loss_fn(q_out, targets):
        a, r, s_prime, done_mask = targets
        q_a = q_out.gather(1, a)
        max_q_prime = q_target(s_prime).max(1)[0].unsqueeze(1)
        if bug == "done_mask_dropped":
            target = r + gamma * max_q_prime
        else:
            target = r + gamma * max_q_prime * done_mask
        return F.smooth_l1_loss(q_a, target)

    state = {"n_epi": 0}

    def train_step():
        loss = train(q, q_target, memory, optimizer, bug)
        state["n_epi"] += 1
        if state["n_epi"] % print_interval == 0:
            q_target.load_state_dict(q.state_dict())
        return loss

    return Program(name="minimalrl_dqn", model=q, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the TD target bootstraps through terminal transitions: the done mask is left out of the target. Reported for
    # this repository's ddpg.py (https://github.com/seungeunrho/minimalRL/issues/32,
    # https://github.com/seungeunrho/minimalRL/pull/21); here in dqn.py's target.
    Bug("done_mask_dropped", functools.partial(_build, bug="done_mask_dropped"), "learning_ledger", ("TASK",)),
    # the optimizer is built over the target network's parameters: q never moves (classic copy-paste slip).
    Bug("optimizer_over_q_target", functools.partial(_build, bug="optimizer_over_q_target"), "four_structures",
        ("fc1.weight",)),
]

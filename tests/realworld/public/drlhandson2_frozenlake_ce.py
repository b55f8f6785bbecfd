# ruff: noqa: UP008, PLR0402, C417, RUF059
"""The tweaked cross-entropy method on FrozenLake from Maxim Lapan's "Deep Reinforcement Learning Hands-On, Second
Edition" (Packt), chapter 4: a one-hidden-layer policy over one-hot states samples 100 episodes per iteration (20
here), the episodes are scored by their reward discounted by ``GAMMA ** len(steps)``, those above the 30th
percentile are kept and accumulated across iterations (the last 500), and the policy is trained by cross-entropy to
repeat the actions it took in the kept episodes (Adam, lr 0.001).

Source: https://github.com/PacktPublishing/Deep-Reinforcement-Learning-Hands-On-Second-Edition
Commit: d5a421d63c6d3ebbdfa54537fa5ce485bc2b9220
Files: ``Chapter04/03_frozenlake_tweaked.py``
License: MIT (Copyright (c) 2019 Packt; full text in
LICENSES/PacktPublishing-Deep-Reinforcement-Learning-Hands-On-Second-Edition.txt)
Domain: RL, policy search (cross-entropy method with discounted elite filtering and an elite memory)

Kept as written: ``DiscreteOneHotWrapper.observation``, ``Net`` (obs -> 128 -> ReLU -> actions), the ``Episode`` /
``EpisodeStep`` tuples, ``iterate_batches`` (actions sampled from the softmax of the net, episodes gathered until
``batch_size``, the generator resuming where it stopped), ``filter_batch`` (the discounted score, the
``np.percentile`` bound, the strict ``>`` filter, the kept episodes returned), ``HIDDEN_SIZE`` 128,
``PERCENTILE`` 30, ``GAMMA`` 0.9, ``nn.CrossEntropyLoss``, ``Adam(lr=0.001)`` and the loop body
(``filter_batch(full_batch + batch)``, ``continue`` while nothing is kept, ``full_batch[-500:]``, zero_grad,
scores, loss, backward, step).

Deviations from the original:
- gym's FrozenLake-v0 is not here: ``FrozenLake`` below writes it out in numpy (the 4x4 map ``SFFF FHFH FFFH
  HFFG``, slippery moves: the intended direction or either perpendicular one with probability 1/3 each, reward 1
  on the goal, the episode ends in a hole or on the goal, 100-step time limit), seeded from ``seed``: it is the
  synthetic data; ``reset``/``step`` keep gym < 0.26's signatures the script unpacks; ``DiscreteOneHotWrapper`` is
  a plain class delegating ``reset``/``step`` through its copied ``observation`` (no ``gym.ObservationWrapper``);
- the action sampling runs under ``torch.no_grad()`` and the probabilities are renormalized in float64 (the
  original builds a graph it never uses; float32 rounding would trip numpy's sum check);
- ``np.random.choice`` is a ``numpy.random.RandomState(seed)``'s and ``random.seed(12345)`` is
  ``torch.manual_seed(seed)``, so a build is reproducible; ``torch.FloatTensor([obs])`` gets ``np.array`` around
  the list (a list of arrays is slow there);
- ``BATCH_SIZE`` is 20 episodes instead of 100 (sized for 2 CPU cores);
- one ``train_step`` is one pass of the ``for iter_no, batch`` loop that reaches the update (the passes that
  ``continue`` before it are run inside the same step), returning the loss; the ``SummaryWriter``, printing and
  the "Solved!" stop are dropped;
- the Program declares ``net``, the kept observations and actions of the first iteration that keeps any (sampled
  at build time by the initial net on a second environment), and the ``CrossEntropyLoss``;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

HIDDEN_SIZE = 128
BATCH_SIZE = 20  # (port) 100 in the script: sized for 2 CPU cores
PERCENTILE = 30
GAMMA = 0.9

_MAP = ("SFFF", "FHFH", "FFFH", "HFFG")


class FrozenLake:
    """(port) FrozenLake-v0 (4x4, slippery, 100-step limit) written out in numpy, gym < 0.26 signatures."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.s = 0
        self.t = 0

    def reset(self):
        self.s, self.t = 0, 0
        return self.s

    def step(self, a):
        b = (a + int(self.rng.integers(3)) - 1) % 4  # intended or perpendicular, 1/3 each
        row, col = divmod(self.s, 4)
        if b == 0:
            col = max(col - 1, 0)
        elif b == 1:
            row = min(row + 1, 3)
        elif b == 2:
            col = min(col + 1, 3)
        else:
            row = max(row - 1, 0)
        self.s = row * 4 + col
        self.t += 1
        letter = _MAP[row][col]
        reward = 1.0 if letter == "G" else 0.0
        done = letter in "GH" or self.t >= 100
        return self.s, reward, done, {}


class DiscreteOneHotWrapper:
    def __init__(self, env, n=16):
        self.env = env
        self.low = np.zeros(n, dtype=np.float32)

    def observation(self, observation):
        res = np.copy(self.low)
        res[observation] = 1.0
        return res

    def reset(self):
        return self.observation(self.env.reset())

    def step(self, action):
        s, r, d, info = self.env.step(action)
        return self.observation(s), r, d, info


class Net(nn.Module):
    def __init__(self, obs_size, hidden_size, n_actions, bug=None):
        super(Net, self).__init__()
        layers = [
            nn.Linear(obs_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, n_actions)
        ]
        if bug == "softmax_into_cross_entropy":
            layers.append(nn.Softmax(dim=1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


Episode = namedtuple('Episode', field_names=['reward', 'steps'])
EpisodeStep = namedtuple('EpisodeStep', field_names=['observation', 'action'])


def iterate_batches(env, net, batch_size, np_random, bug=None):
    batch = []
    episode_reward = 0.0
    episode_steps = []
    obs = env.reset()
    sm = nn.Softmax(dim=1)
    while True:
        with torch.no_grad():  # (port) the original builds a graph it never uses
            obs_v = torch.FloatTensor(np.array([obs]))
            act_probs_v = sm(net(obs_v))
        act_probs = act_probs_v.data.numpy()[0].astype(np.float64)
        act_probs = act_probs / act_probs.sum()  # (port) float32 rounding would trip numpy's sum check
        action = np_random.choice(len(act_probs), p=act_probs)
        next_obs, reward, is_done, _ = env.step(action)
        episode_reward += reward
        if bug == "observation_after_step":
            episode_steps.append(EpisodeStep(observation=next_obs, action=action))
        else:
            episode_steps.append(EpisodeStep(observation=obs, action=action))
        if is_done:
            batch.append(Episode(reward=episode_reward, steps=episode_steps))
            episode_reward = 0.0
            episode_steps = []
            next_obs = env.reset()
            if len(batch) == batch_size:
                yield batch
                batch = []
        obs = next_obs


def filter_batch(batch, percentile, bug=None):
    filter_fun = lambda s: s.reward * (GAMMA ** len(s.steps))
    disc_rewards = list(map(filter_fun, batch))
    reward_bound = np.percentile(disc_rewards, percentile)

    train_obs = []
    train_act = []
    elite_batch = []
    for example, discounted_reward in zip(batch, disc_rewards):
        if (discounted_reward >= reward_bound) if bug == "elite_filter_inclusive" else (discounted_reward > reward_bound):
            train_obs.extend(map(lambda step: step.observation,
                                 example.steps))
            train_act.extend(map(lambda step: step.action,
                                 example.steps))
            elite_batch.append(example)

    return elite_batch, train_obs, train_act, reward_bound


def _build(seed, bug=None):
    torch.manual_seed(seed)  # (port) random.seed(12345)
    env = DiscreteOneHotWrapper(FrozenLake(seed))
    obs_size = 16
    n_actions = 4

    net = Net(obs_size, HIDDEN_SIZE, n_actions, bug=bug)
    objective = nn.CrossEntropyLoss()
    optimizer = optim.Adam(params=net.parameters(), lr=0.001)

    # (port) the declared batch: the first kept set of the initial net on a second environment
    probe = iterate_batches(DiscreteOneHotWrapper(FrozenLake(seed + 1000)), net, BATCH_SIZE,
                            np.random.RandomState(seed + 1000), bug)
    obs = []
    while not obs:
        _, obs, acts, _ = filter_batch(next(probe), PERCENTILE, bug)
    batch0 = (torch.FloatTensor(np.array(obs)), torch.LongTensor(acts))

    batches = iterate_batches(env, net, BATCH_SIZE, np.random.RandomState(seed), bug)
    st = {"full_batch": []}

    def train_step():
        while True:
            batch = next(batches)
            full_batch, obs, acts, reward_bound = \
                filter_batch(st["full_batch"] + batch, PERCENTILE, bug)
            st["full_batch"] = full_batch
            if not full_batch:
                continue
            obs_v = torch.FloatTensor(np.array(obs))
            acts_v = torch.LongTensor(acts)
            st["full_batch"] = full_batch[-500:]

            optimizer.zero_grad()
            action_scores_v = net(obs_v)
            loss_v = objective(action_scores_v, acts_v)
            loss_v.backward()
            optimizer.step()
            return loss_v.item()

    return Program(name="drlhandson2_frozenlake_ce", model=net, batch=batch0, loss_fn=objective,
                   optimizer=optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the step records the observation returned by env.step (the state the action led to) instead of the
    # one the action was taken in, so the policy is taught each action at the wrong state.
    Bug("observation_after_step", functools.partial(_build, bug="observation_after_step"), "learning_ledger",
        ("TASK",)),
    # classic: the percentile filter made inclusive (``>=``); with most discounted rewards 0 the bound is 0 and every
    # failed episode is kept as an elite, so the policy is taught to repeat whatever it did.
    Bug("elite_filter_inclusive", functools.partial(_build, bug="elite_filter_inclusive"), "learning_ledger",
        ("TASK",)),
    # classic: a softmax at the end of the net before nn.CrossEntropyLoss, which applies log-softmax itself.
    Bug("softmax_into_cross_entropy", functools.partial(_build, bug="softmax_into_cross_entropy"), "learning_ledger",
        ("OBJECTIVE",)),
]

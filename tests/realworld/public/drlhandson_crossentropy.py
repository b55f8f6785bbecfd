"""The cross-entropy method on CartPole from Maxim Lapan's "Deep Reinforcement Learning Hands-On" (Packt), chapter
4: a one-hidden-layer policy samples 16 episodes, the episodes at or above the 70th percentile of total reward are
kept, and the policy is trained by cross-entropy to repeat the actions it took in those elite episodes (Adam, lr
0.01).

Source: https://github.com/PacktPublishing/Deep-Reinforcement-Learning-Hands-On
Commit: 10cd8978ac4cc29f599b70edcf83025f02c4b22e
Files: ``Chapter04/01_cartpole.py``
License: MIT (Copyright (c) 2019 Packt; full text in LICENSES/PacktPublishing-Deep-Reinforcement-Learning-Hands-On.txt)
Domain: RL, policy search (cross-entropy method: elite episodes as supervised targets)

Kept as written: ``Net`` (obs -> 128 -> ReLU -> actions), the ``Episode`` / ``EpisodeStep`` tuples,
``iterate_batches`` (actions sampled from the softmax of the net with ``np.random.choice``, episodes gathered until
``batch_size``, the generator resuming where it stopped), ``filter_batch`` (``np.percentile`` bound, episodes below
it dropped, observations and actions of the rest concatenated), ``HIDDEN_SIZE`` 128, ``BATCH_SIZE`` 16,
``PERCENTILE`` 70, ``nn.CrossEntropyLoss``, ``Adam(lr=0.01)`` and the loop body (filter, zero_grad, scores,
loss, backward, step).

Deviations from the original:
- gym's CartPole-v0 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations and constants,
  seeded from ``seed``); its gym >= 0.26 signatures are unpacked where the script uses the old ones
  (``obs = env.reset()`` and ``next_obs, reward, is_done, _ = env.step(action)``), and the episode ends at
  CartPole-v0's 200 steps; ``np.random`` is seeded from ``seed``;
- ``torch.FloatTensor([obs])`` and ``torch.FloatTensor(train_obs)`` are given ``np.array`` of the observations (a
  list of arrays is slow to convert and warned about by torch);
- one ``train_step`` is one iteration of the ``for iter_no, batch in enumerate(iterate_batches(...))`` loop,
  returning the loss; the tensorboard writer, the prints and the "Solved!" break are dropped; ``eval_fn`` is the
  mean total reward of the current batch's episodes (the script's ``reward_mean``), negated so lower is better;
  the self-check runs 20 iterations (``SELF_CHECK_STEPS``), the episodes growing towards 200 steps;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, C417, RUF059

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
from _cartpole import CartPole

HIDDEN_SIZE = 128
BATCH_SIZE = 16
PERCENTILE = 70
MAX_EPISODE_STEPS = 200  # CartPole-v0
SELF_CHECK_STEPS = 20  # (port) the episodes lengthen as the policy learns: 20 iterations keep the check in seconds


class Net(nn.Module):
    def __init__(self, obs_size, hidden_size, n_actions):
        super(Net, self).__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, n_actions)
        )

    def forward(self, x):
        return self.net(x)


Episode = namedtuple('Episode', field_names=['reward', 'steps'])
EpisodeStep = namedtuple('EpisodeStep', field_names=['observation', 'action'])


def iterate_batches(env, net, batch_size, bug=None):
    batch = []
    episode_reward = 0.0
    episode_steps = []
    obs, _ = env.reset()  # (port) obs = env.reset()
    sm = nn.Softmax(dim=1)
    while True:
        obs_v = torch.FloatTensor(np.array([obs]))
        act_probs_v = sm(net(obs_v))
        act_probs = act_probs_v.data.numpy()[0]
        action = np.random.choice(len(act_probs), p=act_probs)
        next_obs, reward, is_done, _truncated, _ = env.step(action)  # (port) gym >= 0.26 signature
        is_done = is_done or env.steps >= MAX_EPISODE_STEPS  # (port) CartPole-v0's time limit
        episode_reward += reward
        if bug == "next_obs_stored":
            episode_steps.append(EpisodeStep(observation=next_obs, action=action))
        else:
            episode_steps.append(EpisodeStep(observation=obs, action=action))
        if is_done:
            batch.append(Episode(reward=episode_reward, steps=episode_steps))
            episode_reward = 0.0
            episode_steps = []
            next_obs, _ = env.reset()
            if len(batch) == batch_size:
                yield batch
                batch = []
        obs = next_obs


def filter_batch(batch, percentile, bug=None):
    rewards = list(map(lambda s: s.reward, batch))
    reward_bound = np.percentile(rewards, percentile)
    reward_mean = float(np.mean(rewards))

    train_obs = []
    train_act = []
    for example in batch:
        if bug == "elite_test_inverted":
            if example.reward > reward_bound:
                continue
        elif example.reward < reward_bound:
            continue
        train_obs.extend(map(lambda step: step.observation, example.steps))
        train_act.extend(map(lambda step: step.action, example.steps))

    train_obs_v = torch.FloatTensor(np.array(train_obs))
    train_act_v = torch.LongTensor(train_act)
    return train_obs_v, train_act_v, reward_bound, reward_mean


def _build(seed, bug=None):
    np.random.seed(seed)
    torch.manual_seed(seed)
    env = CartPole(seed)
    obs_size = 4  # env.observation_space.shape[0]
    n_actions = 2  # env.action_space.n

    net = Net(obs_size, HIDDEN_SIZE, n_actions)
    objective = nn.CrossEntropyLoss()
    optimizer = optim.Adam(params=net.parameters(), lr=0.01)

    sm = nn.Softmax(dim=1)

    def loss_fn(action_scores_v, acts_v):
        if bug == "softmax_before_cross_entropy":
            return objective(sm(action_scores_v), acts_v)
        return objective(action_scores_v, acts_v)

    batches = iterate_batches(env, net, BATCH_SIZE, bug=bug)
    st = {"reward_m": 0.0}

    # the Program's batch: the elite steps of the first batch of episodes, under the initial policy
    first = next(batches)
    obs0, acts0, _, st["reward_m"] = filter_batch(first, PERCENTILE, bug=bug)

    def train_step():
        batch = next(batches)
        obs_v, acts_v, reward_b, reward_m = filter_batch(batch, PERCENTILE, bug=bug)
        st["reward_m"] = reward_m
        optimizer.zero_grad()
        action_scores_v = net(obs_v)
        loss_v = loss_fn(action_scores_v, acts_v)
        loss_v.backward()
        optimizer.step()
        return loss_v.item()

    def eval_fn(model, _batch=None):
        return -st["reward_m"]

    return Program(name="drlhandson_crossentropy", model=net, batch=(obs0, acts0), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the elite test inverted (``>`` for ``<``): the policy is trained on the episodes at or below the bound,
    # imitating its worst behaviour (classic).
    Bug("elite_test_inverted", functools.partial(_build, bug="elite_test_inverted"), "learning_ledger", ("TASK",)),
    # the observation after the action stored with it (``next_obs`` for ``obs``): each action is paired with the
    # state it produced, not the state it was chosen in (classic off-by-one).
    Bug("next_obs_stored", functools.partial(_build, bug="next_obs_stored"), "learning_ledger", ("TASK",)),
    # the softmax of the scores fed to CrossEntropyLoss, which applies log_softmax itself (classic).
    Bug("softmax_before_cross_entropy", functools.partial(_build, bug="softmax_before_cross_entropy"),
        "learning_ledger", ("OBJECTIVE",)),
]

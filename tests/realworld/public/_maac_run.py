# ruff: noqa: UP004
"""The replay buffer of shariqiqbal2810/MAAC and the particle task and logger stand-ins, for
``maac_attention_sac.py``.

Source: https://github.com/shariqiqbal2810/MAAC
Commit: 6174a01251251e6778c4ada26bc8d9cd930e3856
Files: utils/buffer.py (``ReplayBuffer``)
License: MIT (Copyright (c) 2018 Shariq Iqbal; full text in LICENSES/shariqiqbal2810-MAAC.txt)

Deviations: ``ReplayBuffer`` samples with a ``numpy.random.RandomState`` passed in instead of the global
``np.random``, its parameter docstring cut, and ``get_average_rewards`` (logging only) left out. ``Spread`` and
``_NullLogger`` are not from the repository: the particle task and the no-op logger described in
``maac_attention_sac.py``'s docstring.
"""

import types

import numpy as np
from torch import Tensor
from torch.autograd import Variable


class Spread:
    """(not from the repository) the particle task described in the module docstring, as a one-thread vec env."""

    def __init__(self, seed, n=3):
        self.rng, self.n = np.random.RandomState(seed), n
        self.observation_space = [types.SimpleNamespace(shape=(4 + 2 * n + 2 * (n - 1),)) for _ in range(n)]
        self.action_space = [types.SimpleNamespace(n=5) for _ in range(n)]

    def _obs(self):
        obs = []
        for i in range(self.n):
            others = [self.pos[j] - self.pos[i] for j in range(self.n) if j != i]
            obs.append(np.concatenate([self.vel[i], self.pos[i], (self.landmarks - self.pos[i]).ravel(), *others]))
        return np.array(obs, dtype=np.float32)[None]

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, (self.n, 2))
        self.vel = np.zeros((self.n, 2))
        self.landmarks = self.rng.uniform(-1, 1, (self.n, 2))
        return self._obs()

    def step(self, actions):
        a = np.array(actions[0])
        u = np.stack([a[:, 1] - a[:, 2], a[:, 3] - a[:, 4]], axis=1) * 5.0
        self.vel = self.vel * (1 - 0.25) + u * 0.1
        self.pos = self.pos + self.vel * 0.1
        dist = np.linalg.norm(self.pos[:, None] - self.pos[None], axis=-1)
        collisions = (dist < 0.3).sum(1) - 1
        rew = -np.linalg.norm(self.pos - self.landmarks, axis=1) - collisions
        return self._obs(), rew[None].astype(np.float32), np.zeros((1, self.n), dtype=bool), [{}]


class _NullLogger:
    """(port) the tensorboard ``SummaryWriter``'s calls, doing nothing."""

    def add_scalar(self, *args, **kwargs):
        pass

    def add_scalars(self, *args, **kwargs):
        pass


# ---- utils/buffer.py ---------------------------------------------------------------------------------------------
class ReplayBuffer(object):
    """Replay Buffer for multi-agent RL with parallel rollouts"""
    def __init__(self, max_steps, num_agents, obs_dims, ac_dims, np_random):
        self.max_steps = max_steps
        self.num_agents = num_agents
        self.obs_buffs = []
        self.ac_buffs = []
        self.rew_buffs = []
        self.next_obs_buffs = []
        self.done_buffs = []
        for odim, adim in zip(obs_dims, ac_dims):
            self.obs_buffs.append(np.zeros((max_steps, odim), dtype=np.float32))
            self.ac_buffs.append(np.zeros((max_steps, adim), dtype=np.float32))
            self.rew_buffs.append(np.zeros(max_steps, dtype=np.float32))
            self.next_obs_buffs.append(np.zeros((max_steps, odim), dtype=np.float32))
            self.done_buffs.append(np.zeros(max_steps, dtype=np.uint8))

        self.filled_i = 0  # index of first empty location in buffer (last index when full)
        self.curr_i = 0  # current index to write to (ovewrite oldest data)
        self.np_random = np_random

    def __len__(self):
        return self.filled_i

    def push(self, observations, actions, rewards, next_observations, dones):
        nentries = observations.shape[0]  # handle multiple parallel environments
        if self.curr_i + nentries > self.max_steps:
            rollover = self.max_steps - self.curr_i # num of indices to roll over
            for agent_i in range(self.num_agents):
                self.obs_buffs[agent_i] = np.roll(self.obs_buffs[agent_i],
                                                  rollover, axis=0)
                self.ac_buffs[agent_i] = np.roll(self.ac_buffs[agent_i],
                                                 rollover, axis=0)
                self.rew_buffs[agent_i] = np.roll(self.rew_buffs[agent_i],
                                                  rollover)
                self.next_obs_buffs[agent_i] = np.roll(
                    self.next_obs_buffs[agent_i], rollover, axis=0)
                self.done_buffs[agent_i] = np.roll(self.done_buffs[agent_i],
                                                   rollover)
            self.curr_i = 0
            self.filled_i = self.max_steps
        for agent_i in range(self.num_agents):
            self.obs_buffs[agent_i][self.curr_i:self.curr_i + nentries] = np.vstack(
                observations[:, agent_i])
            # actions are already batched by agent, so they are indexed differently
            self.ac_buffs[agent_i][self.curr_i:self.curr_i + nentries] = actions[agent_i]
            self.rew_buffs[agent_i][self.curr_i:self.curr_i + nentries] = rewards[:, agent_i]
            self.next_obs_buffs[agent_i][self.curr_i:self.curr_i + nentries] = np.vstack(
                next_observations[:, agent_i])
            self.done_buffs[agent_i][self.curr_i:self.curr_i + nentries] = dones[:, agent_i]
        self.curr_i += nentries
        if self.filled_i < self.max_steps:
            self.filled_i += nentries
        if self.curr_i == self.max_steps:
            self.curr_i = 0

    def sample(self, N, to_gpu=False, norm_rews=True):
        inds = self.np_random.choice(np.arange(self.filled_i), size=N,
                                     replace=True)
        if to_gpu:
            cast = lambda x: Variable(Tensor(x), requires_grad=False).cuda()
        else:
            cast = lambda x: Variable(Tensor(x), requires_grad=False)
        if norm_rews:
            ret_rews = [cast((self.rew_buffs[i][inds] -
                              self.rew_buffs[i][:self.filled_i].mean()) /
                             self.rew_buffs[i][:self.filled_i].std())
                        for i in range(self.num_agents)]
        else:
            ret_rews = [cast(self.rew_buffs[i][inds]) for i in range(self.num_agents)]
        return ([cast(self.obs_buffs[i][inds]) for i in range(self.num_agents)],
                [cast(self.ac_buffs[i][inds]) for i in range(self.num_agents)],
                ret_rews,
                [cast(self.next_obs_buffs[i][inds]) for i in range(self.num_agents)],
                [cast(self.done_buffs[i][inds]) for i in range(self.num_agents)])

# ruff: noqa: UP008, SIM118
"""The replay buffer, HER sampler, normalizer and networks of TianhongDai/hindsight-experience-replay, and a reach
task, for ``herddpg_reach.py``.

Source: https://github.com/TianhongDai/hindsight-experience-replay
Commit: fff9994cfcca78421136c0634c4df2e6ff9bd791
Files: rl_modules/models.py, rl_modules/replay_buffer.py, her_modules/her.py, mpi_utils/normalizer.py
License: MIT (Copyright (c) 2019 Tianhong Dai; full text in LICENSES/TianhongDai-hindsight-experience-replay.txt)

Deviations:
- ``np.random`` (buffer indices, HER sampling) is a ``numpy.random.RandomState`` passed in, so a build is
  reproducible without the global generator; the buffer's thread lock is kept.
- ``normalizer``: MPI is not available; with one process ``_mpi_average`` is the identity, written so.
- ``Reach`` is not from the repository: gym's ``FetchReach-v1`` (MuJoCo) is replaced by a point reach task written
  here with the same interface and the same rules: 4-dim actions in [-1, 1] of which the first three move the
  gripper by ``0.05 * a`` per step (the gripper command is ignored as in FetchReach), observation = gripper position
  and velocity plus a 4-dim fixed padding (10 dims as FetchReach's), achieved goal = gripper position, desired goal
  uniform within 0.15 of the start, ``compute_reward`` = ``-(distance > 0.05)``, 50 steps per episode, seeded.
"""

import threading

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Reach:
    """(not from the repository) the FetchReach stand-in described above."""

    _max_episode_steps = 50

    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)
        self.action_high = np.ones(4, dtype=np.float32)

    def _obs(self):
        observation = np.concatenate([self.pos, self.vel, np.zeros(4)])
        return {'observation': observation.copy(), 'achieved_goal': self.pos.copy(), 'desired_goal': self.goal.copy()}

    def reset(self):
        self.pos = np.array([1.34, 0.75, 0.53]) + self.rng.uniform(-0.01, 0.01, size=3)
        self.vel = np.zeros(3)
        self.goal = self.pos + self.rng.uniform(-0.15, 0.15, size=3)
        return self._obs()

    def compute_reward(self, achieved_goal, goal, info):
        d = np.linalg.norm(achieved_goal - goal, axis=-1)
        return -(d > 0.05).astype(np.float32)

    def step(self, action):
        action = np.clip(action, -1, 1)
        new_pos = self.pos + 0.05 * action[:3]
        self.vel, self.pos = (new_pos - self.pos) / 0.04, new_pos
        obs = self._obs()
        reward = self.compute_reward(obs['achieved_goal'], self.goal, None)
        return obs, reward, False, {'is_success': float(reward == 0)}


# ---- rl_modules/models.py ----------------------------------------------------------------------------------------
# define the actor network
class actor(nn.Module):
    def __init__(self, env_params):
        super(actor, self).__init__()
        self.max_action = env_params['action_max']
        self.fc1 = nn.Linear(env_params['obs'] + env_params['goal'], 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 256)
        self.action_out = nn.Linear(256, env_params['action'])

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = F.relu(self.fc3(x))
        actions = self.max_action * torch.tanh(self.action_out(x))

        return actions


class critic(nn.Module):
    def __init__(self, env_params):
        super(critic, self).__init__()
        self.max_action = env_params['action_max']
        self.fc1 = nn.Linear(env_params['obs'] + env_params['goal'] + env_params['action'], 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 256)
        self.q_out = nn.Linear(256, 1)

    def forward(self, x, actions):
        x = torch.cat([x, actions / self.max_action], dim=1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = F.relu(self.fc3(x))
        q_value = self.q_out(x)

        return q_value


# ---- rl_modules/replay_buffer.py ---------------------------------------------------------------------------------
class replay_buffer:
    def __init__(self, env_params, buffer_size, sample_func, np_random):
        self.env_params = env_params
        self.T = env_params['max_timesteps']
        self.size = buffer_size // self.T
        # memory management
        self.current_size = 0
        self.n_transitions_stored = 0
        self.sample_func = sample_func
        self.np_random = np_random
        # create the buffer to store info
        self.buffers = {'obs': np.empty([self.size, self.T + 1, self.env_params['obs']]),
                        'ag': np.empty([self.size, self.T + 1, self.env_params['goal']]),
                        'g': np.empty([self.size, self.T, self.env_params['goal']]),
                        'actions': np.empty([self.size, self.T, self.env_params['action']]),
                        }
        # thread lock
        self.lock = threading.Lock()

    # store the episode
    def store_episode(self, episode_batch):
        mb_obs, mb_ag, mb_g, mb_actions = episode_batch
        batch_size = mb_obs.shape[0]
        with self.lock:
            idxs = self._get_storage_idx(inc=batch_size)
            # store the informations
            self.buffers['obs'][idxs] = mb_obs
            self.buffers['ag'][idxs] = mb_ag
            self.buffers['g'][idxs] = mb_g
            self.buffers['actions'][idxs] = mb_actions
            self.n_transitions_stored += self.T * batch_size

    # sample the data from the replay buffer
    def sample(self, batch_size):
        temp_buffers = {}
        with self.lock:
            for key in self.buffers.keys():
                temp_buffers[key] = self.buffers[key][:self.current_size]
        temp_buffers['obs_next'] = temp_buffers['obs'][:, 1:, :]
        temp_buffers['ag_next'] = temp_buffers['ag'][:, 1:, :]
        # sample transitions
        transitions = self.sample_func(temp_buffers, batch_size)
        return transitions

    def _get_storage_idx(self, inc=None):
        inc = inc or 1
        if self.current_size+inc <= self.size:
            idx = np.arange(self.current_size, self.current_size+inc)
        elif self.current_size < self.size:
            overflow = inc - (self.size - self.current_size)
            idx_a = np.arange(self.current_size, self.size)
            idx_b = self.np_random.randint(0, self.current_size, overflow)
            idx = np.concatenate([idx_a, idx_b])
        else:
            idx = self.np_random.randint(0, self.size, inc)
        self.current_size = min(self.size, self.current_size+inc)
        if inc == 1:
            idx = idx[0]
        return idx


# ---- her_modules/her.py ------------------------------------------------------------------------------------------
class her_sampler:
    def __init__(self, replay_strategy, replay_k, reward_func=None, np_random=None, bug=None):
        self.replay_strategy = replay_strategy
        self.replay_k = replay_k
        if self.replay_strategy == 'future':
            self.future_p = 1 - (1. / (1 + replay_k))
        else:
            self.future_p = 0
        self.reward_func = reward_func
        self.np_random, self.bug = np_random, bug

    def sample_her_transitions(self, episode_batch, batch_size_in_transitions):
        T = episode_batch['actions'].shape[1]
        rollout_batch_size = episode_batch['actions'].shape[0]
        batch_size = batch_size_in_transitions
        # select which rollouts and which timesteps to be used
        episode_idxs = self.np_random.randint(0, rollout_batch_size, batch_size)
        t_samples = self.np_random.randint(T, size=batch_size)
        transitions = {key: episode_batch[key][episode_idxs, t_samples].copy() for key in episode_batch.keys()}
        # her idx
        her_indexes = np.where(self.np_random.uniform(size=batch_size) < self.future_p)
        future_offset = self.np_random.uniform(size=batch_size) * (T - t_samples)
        future_offset = future_offset.astype(int)
        future_t = (t_samples + 1 + future_offset)[her_indexes]
        # replace go with achieved goal
        future_ag = episode_batch['ag'][episode_idxs[her_indexes], future_t]
        transitions['g'][her_indexes] = future_ag
        # to get the params to re-compute reward
        if self.bug == "her_reward_from_current_ag":
            transitions['r'] = np.expand_dims(self.reward_func(transitions['ag'], transitions['g'], None), 1)
        else:
            transitions['r'] = np.expand_dims(self.reward_func(transitions['ag_next'], transitions['g'], None), 1)
        transitions = {k: transitions[k].reshape(batch_size, *transitions[k].shape[1:]) for k in transitions.keys()}

        return transitions


# ---- mpi_utils/normalizer.py -------------------------------------------------------------------------------------
class normalizer:
    def __init__(self, size, eps=1e-2, default_clip_range=np.inf):
        self.size = size
        self.eps = eps
        self.default_clip_range = default_clip_range
        # some local information
        self.local_sum = np.zeros(self.size, np.float32)
        self.local_sumsq = np.zeros(self.size, np.float32)
        self.local_count = np.zeros(1, np.float32)
        # get the total sum sumsq and sum count
        self.total_sum = np.zeros(self.size, np.float32)
        self.total_sumsq = np.zeros(self.size, np.float32)
        self.total_count = np.ones(1, np.float32)
        # get the mean and std
        self.mean = np.zeros(self.size, np.float32)
        self.std = np.ones(self.size, np.float32)
        # thread locker
        self.lock = threading.Lock()

    # update the parameters of the normalizer
    def update(self, v):
        v = v.reshape(-1, self.size)
        # do the computing
        with self.lock:
            self.local_sum += v.sum(axis=0)
            self.local_sumsq += (np.square(v)).sum(axis=0)
            self.local_count[0] += v.shape[0]

    # sync the parameters across the cpus
    def sync(self, local_sum, local_sumsq, local_count):
        local_sum[...] = self._mpi_average(local_sum)
        local_sumsq[...] = self._mpi_average(local_sumsq)
        local_count[...] = self._mpi_average(local_count)
        return local_sum, local_sumsq, local_count

    def recompute_stats(self):
        with self.lock:
            local_count = self.local_count.copy()
            local_sum = self.local_sum.copy()
            local_sumsq = self.local_sumsq.copy()
            # reset
            self.local_count[...] = 0
            self.local_sum[...] = 0
            self.local_sumsq[...] = 0
        # synrc the stats
        sync_sum, sync_sumsq, sync_count = self.sync(local_sum, local_sumsq, local_count)
        # update the total stuff
        self.total_sum += sync_sum
        self.total_sumsq += sync_sumsq
        self.total_count += sync_count
        # calculate the new mean and std
        self.mean = self.total_sum / self.total_count
        self.std = np.sqrt(np.maximum(np.square(self.eps), (self.total_sumsq / self.total_count) - np.square(self.total_sum / self.total_count)))

    # average across the cpu's data (one process: the identity)
    def _mpi_average(self, x):
        buf = np.zeros_like(x)
        buf += x
        return buf

    # normalize the observation
    def normalize(self, v, clip_range=None):
        if clip_range is None:
            clip_range = self.default_clip_range
        return np.clip((v - self.mean) / (self.std), -clip_range, clip_range)

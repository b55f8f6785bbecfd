"""The trajectory dataset of nikhilbarhate99/min-decision-transformer (``decision_transformer/utils.py``:
``discount_cumsum``, ``D4RLTrajectoryDataset``) for the port ``mindt_offline.py``, and the synthetic trajectories
that stand in for D4RL's.

Source: https://github.com/nikhilbarhate99/min-decision-transformer
Commit: d6694248b48c57c84fc7487e6e8017dcca861b02
Files: decision_transformer/utils.py
License: MIT (Copyright (c) 2022 Nikhil Barhate; full text in LICENSES/nikhilbarhate99-min-decision-transformer.txt)

Deviations from the original: ``D4RLTrajectoryDataset`` takes the list of trajectories instead of the path of their
pickle; ``make_trajectories`` is not from the repository (see its docstring); ``evaluate_on_env`` and the D4RL score
helpers are left out.
"""

import random

import numpy as np
import torch
from _continuous_control import ContinuousCartPole
from torch.utils.data import Dataset

N_TRAJ, MAX_LEN = 192, 100


# ---- decision_transformer/utils.py -------------------------------------------------------------------------------

def discount_cumsum(x, gamma):
    disc_cumsum = np.zeros_like(x)
    disc_cumsum[-1] = x[-1]
    for t in reversed(range(x.shape[0]-1)):
        disc_cumsum[t] = x[t] + gamma * disc_cumsum[t+1]
    return disc_cumsum


class D4RLTrajectoryDataset(Dataset):
    def __init__(self, trajectories, context_len, rtg_scale):

        self.context_len = context_len

        # load dataset
        self.trajectories = trajectories

        # calculate min len of traj, state mean and variance
        # and returns_to_go for all traj
        min_len = 10**6
        states = []
        for traj in self.trajectories:
            traj_len = traj['observations'].shape[0]
            min_len = min(min_len, traj_len)
            states.append(traj['observations'])
            # calculate returns to go and rescale them
            traj['returns_to_go'] = discount_cumsum(traj['rewards'], 1.0) / rtg_scale

        # used for input normalization
        states = np.concatenate(states, axis=0)
        self.state_mean, self.state_std = np.mean(states, axis=0), np.std(states, axis=0) + 1e-6

        # normalize states
        for traj in self.trajectories:
            traj['observations'] = (traj['observations'] - self.state_mean) / self.state_std

    def get_state_stats(self):
        return self.state_mean, self.state_std

    def __len__(self):
        return len(self.trajectories)

    def __getitem__(self, idx):
        traj = self.trajectories[idx]
        traj_len = traj['observations'].shape[0]

        if traj_len >= self.context_len:
            # sample random index to slice trajectory
            si = random.randint(0, traj_len - self.context_len)

            states = torch.from_numpy(traj['observations'][si : si + self.context_len])
            actions = torch.from_numpy(traj['actions'][si : si + self.context_len])
            returns_to_go = torch.from_numpy(traj['returns_to_go'][si : si + self.context_len])
            timesteps = torch.arange(start=si, end=si+self.context_len, step=1)

            # all ones since no padding
            traj_mask = torch.ones(self.context_len, dtype=torch.long)

        else:
            padding_len = self.context_len - traj_len

            # padding with zeros
            states = torch.from_numpy(traj['observations'])
            states = torch.cat([states,
                                torch.zeros(([padding_len] + list(states.shape[1:])),
                                dtype=states.dtype)],
                               dim=0)

            actions = torch.from_numpy(traj['actions'])
            actions = torch.cat([actions,
                                torch.zeros(([padding_len] + list(actions.shape[1:])),
                                dtype=actions.dtype)],
                               dim=0)

            returns_to_go = torch.from_numpy(traj['returns_to_go'])
            returns_to_go = torch.cat([returns_to_go,
                                torch.zeros(([padding_len] + list(returns_to_go.shape[1:])),
                                dtype=returns_to_go.dtype)],
                               dim=0)

            timesteps = torch.arange(start=0, end=self.context_len, step=1)

            traj_mask = torch.cat([torch.ones(traj_len, dtype=torch.long),
                                   torch.zeros(padding_len, dtype=torch.long)],
                                  dim=0)

        return  timesteps, states, actions, returns_to_go, traj_mask


def make_trajectories(seed):
    """(port) stands in for the D4RL pickle: cart-pole trajectories, as float32 arrays, of three behaviour policies in
    turn: a balancing linear controller with Gaussian action noise 0.3 or 1.0, and the same with its sign flipped
    (noise 0.3), which falls within about 10 steps."""
    env = ContinuousCartPole()
    env.seed(seed)
    rng = np.random.default_rng(seed)
    trajectories = []
    for i in range(N_TRAJ):
        sign, noise = ((1.0, 0.3), (1.0, 1.0), (-1.0, 0.3))[i % 3]
        obs, acts, rews = [], [], []
        state = env.reset()
        for _ in range(MAX_LEN):
            x_dot, theta, theta_dot = state[1], state[2], state[3]
            gain = sign * (theta * 10 + theta_dot * 2 + x_dot * 0.5)
            action = np.clip(np.array([gain]) + rng.normal(0, noise, 1), -1, 1)
            next_state, reward, done, _ = env.step(action)
            obs.append(state)
            acts.append(action)
            rews.append(reward)
            state = next_state
            if done:
                break
        trajectories.append({'observations': np.array(obs, dtype=np.float32),
                             'actions': np.array(acts, dtype=np.float32),
                             'rewards': np.array(rews, dtype=np.float32)})
    return trajectories

# ruff: noqa: B008, PLR0402, UP004, UP039
"""The helpers of nicklashansen/tdmpc's TD-MPC (``src/algorithm/helper.py``) for the port ``tdmpc_pendulum.py``:
losses, orthogonal init, EMA, ``TruncatedNormal``, the state encoder, MLP and LayerNorm Q builders, ``Episode``,
the prioritized ``ReplayBuffer`` of whole episodes and ``linear_schedule``.

Source: https://github.com/nicklashansen/tdmpc
Commit: f4d85eca7419039b71bab2234ffc8aca378dd313
Files: src/algorithm/helper.py, src/env.py (``ActionRepeatWrapper``), src/train.py (``set_seed``), cfgs/default.yaml,
cfgs/tasks/cartpole.yaml
License: MIT (Copyright (c) 2021 Nicklas Hansen; full text in LICENSES/nicklashansen-tdmpc.txt)

Deviations from the original: the CPU for CUDA (``device`` arguments and ``.cuda()`` calls dropped); the pixel
branches (``NormalizeImg``, ``Flatten``, the conv encoder, frame stacking in ``_get_obs``, the shift augmentation's
body) are left out since the port learns from states (``RandomShiftsAug`` is the identity it is for states, ``pad``
None); tabs are four spaces; ``ActionRepeatWrapper`` drives the numpy pendulum (dm_control is not
available) with dm_control's [-1, 1] action (times the maximal torque) and [0, 1] reward (``1 + r / 16.3``); the
config (omegaconf in the original) is a ``SimpleNamespace`` with the sizes the port's header gives.
"""

import random
import re
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import distributions as pyd
from torch.distributions.utils import _standard_normal

# ---- src/algorithm/helper.py -------------------------------------------------------------------------------------

__REDUCE__ = lambda b: 'mean' if b else 'none'


def l1(pred, target, reduce=False):
    """Computes the L1-loss between predictions and targets."""
    return F.l1_loss(pred, target, reduction=__REDUCE__(reduce))


def mse(pred, target, reduce=False):
    """Computes the MSE loss between predictions and targets."""
    return F.mse_loss(pred, target, reduction=__REDUCE__(reduce))


def orthogonal_init(m):
    """Orthogonal layer initialization."""
    if isinstance(m, nn.Linear):
        nn.init.orthogonal_(m.weight.data)
        if m.bias is not None:
            nn.init.zeros_(m.bias)


def ema(m, m_target, tau):
    """Update slow-moving average of online network (target network) at rate tau."""
    with torch.no_grad():
        for p, p_target in zip(m.parameters(), m_target.parameters()):
            p_target.data.lerp_(p.data, tau)


def set_requires_grad(net, value):
    """Enable/disable gradients for a given (sub)network."""
    for param in net.parameters():
        param.requires_grad_(value)


class TruncatedNormal(pyd.Normal):
    """Utility class implementing the truncated normal distribution."""
    def __init__(self, loc, scale, low=-1.0, high=1.0, eps=1e-6):
        super().__init__(loc, scale, validate_args=False)
        self.low = low
        self.high = high
        self.eps = eps

    def _clamp(self, x):
        clamped_x = torch.clamp(x, self.low + self.eps, self.high - self.eps)
        x = x - x.detach() + clamped_x.detach()
        return x

    def sample(self, clip=None, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        eps = _standard_normal(shape,
                               dtype=self.loc.dtype,
                               device=self.loc.device)
        eps *= self.scale
        if clip is not None:
            eps = torch.clamp(eps, -clip, clip)
        x = self.loc + eps
        return self._clamp(x)


def enc(cfg):
    """Returns a TOLD encoder."""
    layers = [nn.Linear(cfg.obs_shape[0], cfg.enc_dim), nn.ELU(),
              nn.Linear(cfg.enc_dim, cfg.latent_dim)]
    return nn.Sequential(*layers)


def mlp(in_dim, mlp_dim, out_dim, act_fn=nn.ELU()):
    """Returns an MLP."""
    if isinstance(mlp_dim, int):
        mlp_dim = [mlp_dim, mlp_dim]
    return nn.Sequential(
        nn.Linear(in_dim, mlp_dim[0]), act_fn,
        nn.Linear(mlp_dim[0], mlp_dim[1]), act_fn,
        nn.Linear(mlp_dim[1], out_dim))


def q(cfg, act_fn=nn.ELU()):
    """Returns a Q-function that uses Layer Normalization."""
    return nn.Sequential(nn.Linear(cfg.latent_dim+cfg.action_dim, cfg.mlp_dim), nn.LayerNorm(cfg.mlp_dim), nn.Tanh(),
                         nn.Linear(cfg.mlp_dim, cfg.mlp_dim), nn.ELU(),
                         nn.Linear(cfg.mlp_dim, 1))


class RandomShiftsAug(nn.Module):
    """Random shift image augmentation (states: the identity, ``pad`` is None)."""
    def __init__(self, cfg):
        super().__init__()
        self.pad = None

    def forward(self, x):
        return x


class Episode(object):
    """Storage object for a single episode."""
    def __init__(self, cfg, init_obs):
        self.cfg = cfg
        dtype = torch.float32
        self.obs = torch.empty((cfg.episode_length+1, *init_obs.shape), dtype=dtype)
        self.obs[0] = torch.tensor(init_obs, dtype=dtype)
        self.action = torch.empty((cfg.episode_length, cfg.action_dim), dtype=torch.float32)
        self.reward = torch.empty((cfg.episode_length,), dtype=torch.float32)
        self.cumulative_reward = 0
        self.done = False
        self._idx = 0

    def __len__(self):
        return self._idx

    @property
    def first(self):
        return len(self) == 0

    def __add__(self, transition):
        self.add(*transition)
        return self

    def add(self, obs, action, reward, done):
        self.obs[self._idx+1] = torch.tensor(obs, dtype=self.obs.dtype, device=self.obs.device)
        self.action[self._idx] = action
        self.reward[self._idx] = reward
        self.cumulative_reward += reward
        self.done = done
        self._idx += 1


class ReplayBuffer():
    """Storage and sampling functionality for training TD-MPC / TOLD. Uses prioritized experience replay by
    default."""
    def __init__(self, cfg):
        self.cfg = cfg
        self.capacity = min(cfg.train_steps, cfg.max_buffer_size)
        dtype = torch.float32
        obs_shape = cfg.obs_shape
        self._obs = torch.empty((self.capacity+1, *obs_shape), dtype=dtype)
        self._last_obs = torch.empty((self.capacity//cfg.episode_length, *cfg.obs_shape), dtype=dtype)
        self._action = torch.empty((self.capacity, cfg.action_dim), dtype=torch.float32)
        self._reward = torch.empty((self.capacity,), dtype=torch.float32)
        self._priorities = torch.ones((self.capacity,), dtype=torch.float32)
        self._eps = 1e-6
        self._full = False
        self.idx = 0

    def __add__(self, episode: Episode):
        self.add(episode)
        return self

    def add(self, episode: Episode):
        self._obs[self.idx:self.idx+self.cfg.episode_length] = episode.obs[:-1]
        self._last_obs[self.idx//self.cfg.episode_length] = episode.obs[-1]
        self._action[self.idx:self.idx+self.cfg.episode_length] = episode.action
        self._reward[self.idx:self.idx+self.cfg.episode_length] = episode.reward
        if self._full:
            max_priority = self._priorities.max().item()
        else:
            max_priority = 1. if self.idx == 0 else self._priorities[:self.idx].max().item()
        mask = torch.arange(self.cfg.episode_length) >= self.cfg.episode_length-self.cfg.horizon
        new_priorities = torch.full((self.cfg.episode_length,), max_priority)
        new_priorities[mask] = 0
        self._priorities[self.idx:self.idx+self.cfg.episode_length] = new_priorities
        self.idx = (self.idx + self.cfg.episode_length) % self.capacity
        self._full = self._full or self.idx == 0

    def update_priorities(self, idxs, priorities):
        self._priorities[idxs] = priorities.squeeze(1) + self._eps

    def _get_obs(self, arr, idxs):
        return arr[idxs]

    def sample(self):
        probs = (self._priorities if self._full else self._priorities[:self.idx]) ** self.cfg.per_alpha
        probs /= probs.sum()
        total = len(probs)
        idxs = torch.from_numpy(np.random.choice(total, self.cfg.batch_size, p=probs.cpu().numpy(), replace=not self._full))
        weights = (total * probs[idxs]) ** (-self.cfg.per_beta)
        weights /= weights.max()

        obs = self._get_obs(self._obs, idxs)
        next_obs_shape = self._last_obs.shape[1:]
        next_obs = torch.empty((self.cfg.horizon+1, self.cfg.batch_size, *next_obs_shape), dtype=obs.dtype)
        action = torch.empty((self.cfg.horizon+1, self.cfg.batch_size, *self._action.shape[1:]), dtype=torch.float32)
        reward = torch.empty((self.cfg.horizon+1, self.cfg.batch_size), dtype=torch.float32)
        for t in range(self.cfg.horizon+1):
            _idxs = idxs + t
            next_obs[t] = self._get_obs(self._obs, _idxs+1)
            action[t] = self._action[_idxs]
            reward[t] = self._reward[_idxs]

        mask = (_idxs+1) % self.cfg.episode_length == 0
        next_obs[-1, mask] = self._last_obs[_idxs[mask]//self.cfg.episode_length].float()

        return obs, next_obs, action, reward.unsqueeze(2), idxs, weights


def linear_schedule(schdl, step):
    """Outputs values following a linear decay schedule. Adapted from https://github.com/facebookresearch/drqv2"""
    try:
        return float(schdl)
    except ValueError:
        match = re.match(r'linear\((.+),(.+),(.+)\)', schdl)
        if match:
            init, final, duration = [float(g) for g in match.groups()]
            mix = np.clip(step / duration, 0.0, 1.0)
            return (1.0 - mix) * init + mix * final
    raise NotImplementedError(schdl)


# ---- src/env.py (ActionRepeatWrapper), src/train.py (set_seed), cfgs/ (the config) --------------------------------------------------------------

class ActionRepeatWrapper:
    """(port) dm_control's [-1, 1] action and [0, 1] reward on the numpy pendulum, each action repeated."""

    def __init__(self, env, num_repeats):
        self._env = env
        self._num_repeats = num_repeats

    def reset(self):
        return self._env.reset()

    def step(self, action):
        reward, discount = 0.0, 1.0
        for _i in range(self._num_repeats):
            obs, r, done, info = self._env.step(np.asarray(action, dtype=np.float32) * self._env.MAX_TORQUE)
            reward += (1.0 + r / 16.3) * discount
            if done:
                break
        return obs, reward, done, info


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_cfg():
    """cfgs/default.yaml with cfgs/tasks/cartpole.yaml (action_repeat 8), sizes shrunk (see the header)."""
    action_repeat = 8
    return SimpleNamespace(
        task='pendulum-swingup', modality='state', action_repeat=action_repeat, discount=0.99,
        episode_length=200 // action_repeat, train_steps=3200 // action_repeat,
        iterations=2, num_samples=32, num_elites=8, mixture_coef=0.05, min_std=0.05, temperature=0.5, momentum=0.1,
        batch_size=64, max_buffer_size=1000000, horizon=3, reward_coef=0.5, value_coef=0.1, consistency_coef=2,
        rho=0.5, kappa=0.1, lr=1e-3, std_schedule='linear(0.5, 0.05, 25000)', horizon_schedule='linear(1, 3, 25000)',
        per_alpha=0.6, per_beta=0.4, grad_clip_norm=10, seed_steps=50, update_freq=2, tau=0.01,
        enc_dim=32, mlp_dim=32, latent_dim=16, seed=1, device='cpu')

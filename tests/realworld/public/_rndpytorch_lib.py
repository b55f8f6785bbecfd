# ruff: noqa: PLR0402, RUF059, UP004, UP008
"""The networks, the utilities and the environment worker of jcwleo/random-network-distillation-pytorch, for the port
``rndpytorch_ppo.py``: ``CnnActorCriticNetwork`` and ``RNDModel``, ``make_train_data`` (GAE returns and advantages), ``RunningMeanStd``, ``RewardForwardFilter``,
``global_grad_norm_``, and ``AtariEnvironment``'s step (sticky actions, a 4-frame history, the step limit), driven in
process over a small synthetic game drawn as 84x84 frames.

Source: https://github.com/jcwleo/random-network-distillation-pytorch
Commit: e383fb95177c50bfdcd81b43e37c443c8cde1d94
Files: model.py, utils.py, envs.py (``AtariEnvironment``), config.conf (``UseGAE``, ``Lambda``, ``MaxStepPerEpisode``)
License: MIT (Copyright (c) 2018 Chanwoong joo; full text in LICENSES/jcwleo-random-network-distillation-pytorch.txt)

Deviations from the original:
- gym's Atari (Montezuma's Revenge), ``MaxAndSkipEnv`` and the ``Process``/``Pipe`` workers are not available:
  ``AtariEnvironment`` keeps ``run()``'s loop body as a ``step(action)`` method returning what the worker sends
  (``[history, reward, force_done, done, log_reward]``), called in process; the game under it is ``KeyRoom`` (not
  from the repository, see its docstring), whose frames are already 84x84 grayscale, so ``pre_proc`` (PIL grayscale
  and ``cv2.resize``) is a float conversion; the episode print is left out; MaxStepPerEpisode 4500 -> 64;
- model.py's ``NoisyLinear`` is left out (``UseNoisyNet`` is False, so ``linear`` is ``nn.Linear``) and each layer's
  arguments are written on one line;
- ``from torch._six import inf`` is ``math.inf``; ``np.random`` is the global generator the port seeds.
"""

import math

import numpy as np
import torch
import torch.nn as nn
from torch.nn import init

use_gae = True
lam = 0.95
max_step_per_episode = 64
inf = math.inf


# ---- utils.py ----------------------------------------------------------------------------------------------------

def make_train_data(reward, done, value, gamma, num_step, num_worker):
    discounted_return = np.empty([num_worker, num_step])

    # Discounted Return
    if use_gae:
        gae = np.zeros_like([num_worker, ])
        for t in range(num_step - 1, -1, -1):
            delta = reward[:, t] + gamma * value[:, t + 1] * (1 - done[:, t]) - value[:, t]
            gae = delta + gamma * lam * (1 - done[:, t]) * gae

            discounted_return[:, t] = gae + value[:, t]

            # For Actor
        adv = discounted_return - value[:, :-1]

    else:
        running_add = value[:, -1]
        for t in range(num_step - 1, -1, -1):
            running_add = reward[:, t] + gamma * running_add * (1 - done[:, t])
            discounted_return[:, t] = running_add

        # For Actor
        adv = discounted_return - value[:, :-1]

    return discounted_return.reshape([-1]), adv.reshape([-1])


class RunningMeanStd(object):
    # https://en.wikipedia.org/wiki/Algorithms_for_calculating_variance#Parallel_algorithm
    def __init__(self, epsilon=1e-4, shape=()):
        self.mean = np.zeros(shape, 'float64')
        self.var = np.ones(shape, 'float64')
        self.count = epsilon

    def update(self, x):
        batch_mean = np.mean(x, axis=0)
        batch_var = np.var(x, axis=0)
        batch_count = x.shape[0]
        self.update_from_moments(batch_mean, batch_var, batch_count)

    def update_from_moments(self, batch_mean, batch_var, batch_count):
        delta = batch_mean - self.mean
        tot_count = self.count + batch_count

        new_mean = self.mean + delta * batch_count / tot_count
        m_a = self.var * (self.count)
        m_b = batch_var * (batch_count)
        M2 = m_a + m_b + np.square(delta) * self.count * batch_count / (self.count + batch_count)
        new_var = M2 / (self.count + batch_count)

        new_count = batch_count + self.count

        self.mean = new_mean
        self.var = new_var
        self.count = new_count


class RewardForwardFilter(object):
    def __init__(self, gamma):
        self.rewems = None
        self.gamma = gamma

    def update(self, rews):
        if self.rewems is None:
            self.rewems = rews
        else:
            self.rewems = self.rewems * self.gamma + rews
        return self.rewems


def global_grad_norm_(parameters, norm_type=2):
    r"""Computes the global gradient norm of an iterable of parameters (the original's docstring says it clips; it
    only returns the norm)."""
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    parameters = list(filter(lambda p: p.grad is not None, parameters))
    norm_type = float(norm_type)
    if norm_type == inf:
        total_norm = max(p.grad.data.abs().max() for p in parameters)
    else:
        total_norm = 0
        for p in parameters:
            param_norm = p.grad.data.norm(norm_type)
            total_norm += param_norm.item() ** norm_type
        total_norm = total_norm ** (1. / norm_type)

    return total_norm


# ---- model.py ----------------------------------------------------------------------------------------------------

class Flatten(nn.Module):
    def forward(self, input):
        return input.view(input.size(0), -1)


class CnnActorCriticNetwork(nn.Module):
    def __init__(self, input_size, output_size, use_noisy_net=False):
        super(CnnActorCriticNetwork, self).__init__()

        linear = nn.Linear

        self.feature = nn.Sequential(
            nn.Conv2d(in_channels=4, out_channels=32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(in_channels=32, out_channels=64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(in_channels=64, out_channels=64, kernel_size=3, stride=1),
            nn.ReLU(),
            Flatten(),
            linear(7 * 7 * 64, 256),
            nn.ReLU(),
            linear(256, 448),
            nn.ReLU()
        )

        self.actor = nn.Sequential(
            linear(448, 448),
            nn.ReLU(),
            linear(448, output_size)
        )

        self.extra_layer = nn.Sequential(
            linear(448, 448),
            nn.ReLU()
        )

        self.critic_ext = linear(448, 1)
        self.critic_int = linear(448, 1)

        for p in self.modules():
            if isinstance(p, nn.Conv2d):
                init.orthogonal_(p.weight, np.sqrt(2))
                p.bias.data.zero_()

            if isinstance(p, nn.Linear):
                init.orthogonal_(p.weight, np.sqrt(2))
                p.bias.data.zero_()

        init.orthogonal_(self.critic_ext.weight, 0.01)
        self.critic_ext.bias.data.zero_()

        init.orthogonal_(self.critic_int.weight, 0.01)
        self.critic_int.bias.data.zero_()

        for i in range(len(self.actor)):
            if type(self.actor[i]) == nn.Linear:
                init.orthogonal_(self.actor[i].weight, 0.01)
                self.actor[i].bias.data.zero_()

        for i in range(len(self.extra_layer)):
            if type(self.extra_layer[i]) == nn.Linear:
                init.orthogonal_(self.extra_layer[i].weight, 0.1)
                self.extra_layer[i].bias.data.zero_()

    def forward(self, state):
        x = self.feature(state)
        policy = self.actor(x)
        value_ext = self.critic_ext(self.extra_layer(x) + x)
        value_int = self.critic_int(self.extra_layer(x) + x)
        return policy, value_ext, value_int


class RNDModel(nn.Module):
    def __init__(self, input_size, output_size):
        super(RNDModel, self).__init__()

        self.input_size = input_size
        self.output_size = output_size

        feature_output = 7 * 7 * 64
        self.predictor = nn.Sequential(
            nn.Conv2d(in_channels=1, out_channels=32, kernel_size=8, stride=4),
            nn.LeakyReLU(),
            nn.Conv2d(in_channels=32, out_channels=64, kernel_size=4, stride=2),
            nn.LeakyReLU(),
            nn.Conv2d(in_channels=64, out_channels=64, kernel_size=3, stride=1),
            nn.LeakyReLU(),
            Flatten(),
            nn.Linear(feature_output, 512),
            nn.ReLU(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, 512)
        )

        self.target = nn.Sequential(
            nn.Conv2d(in_channels=1, out_channels=32, kernel_size=8, stride=4),
            nn.LeakyReLU(),
            nn.Conv2d(in_channels=32, out_channels=64, kernel_size=4, stride=2),
            nn.LeakyReLU(),
            nn.Conv2d(in_channels=64, out_channels=64, kernel_size=3, stride=1),
            nn.LeakyReLU(),
            Flatten(),
            nn.Linear(feature_output, 512)
        )

        for p in self.modules():
            if isinstance(p, nn.Conv2d):
                init.orthogonal_(p.weight, np.sqrt(2))
                p.bias.data.zero_()

            if isinstance(p, nn.Linear):
                init.orthogonal_(p.weight, np.sqrt(2))
                p.bias.data.zero_()

        for param in self.target.parameters():
            param.requires_grad = False

    def forward(self, next_obs):
        target_feature = self.target(next_obs)
        predict_feature = self.predictor(next_obs)

        return predict_feature, target_feature


# ---- the game (not from the repository) ---------------------------------------------------------------------------

class KeyRoom:
    """A sparse-reward room drawn as 84x84 grayscale frames (a stand-in for Montezuma's Revenge): a wall border
    (128), the player (a 6x6 block, 255) and a key (a 6x6 block, 200). Actions 0 no-op, 1 up, 2 down, 3 left,
    4 right move the player 4 pixels; touching the key gives reward 1 and ends the episode. The player starts in the
    left third and the key sits in the right third, both drawn per episode."""

    n_actions = 5

    def __init__(self, rng):
        self.rng = rng
        self.player = self.key = None

    def _frame(self):
        f = np.zeros((84, 84), dtype=np.uint8)
        f[:4, :] = f[-4:, :] = f[:, :4] = f[:, -4:] = 128
        ky, kx = self.key
        f[ky:ky + 6, kx:kx + 6] = 200
        py, px = self.player
        f[py:py + 6, px:px + 6] = 255
        return f

    def reset(self):
        self.player = np.array([self.rng.integers(4, 74), self.rng.integers(4, 24)])
        self.key = np.array([self.rng.integers(4, 74), self.rng.integers(54, 74)])
        return self._frame()

    def step(self, action):
        move = np.array([[0, 0], [-4, 0], [4, 0], [0, -4], [0, 4]])[action]
        self.player = np.clip(self.player + move, 4, 74)
        done = bool(np.all(np.abs(self.player - self.key) < 6))
        return self._frame(), float(done), done, {}


# ---- envs.py (AtariEnvironment, in process) -----------------------------------------------------------------------

class AtariEnvironment:
    def __init__(self, env_idx, history_size=4, h=84, w=84, sticky_action=True, p=0.25, rng=None):
        self.env = KeyRoom(rng)
        self.env_idx = env_idx
        self.steps = 0
        self.episode = 0
        self.rall = 0

        self.sticky_action = sticky_action
        self.last_action = 0
        self.p = p

        self.history_size = history_size
        self.history = np.zeros([history_size, h, w])
        self.h = h
        self.w = w

        self.reset()

    def step(self, action):
        """``run()``'s loop body for one received action; returns what the worker sends."""
        # sticky action
        if self.sticky_action:
            if np.random.rand() <= self.p:
                action = self.last_action
            self.last_action = action

        s, reward, done, info = self.env.step(action)

        if max_step_per_episode < self.steps:
            done = True

        log_reward = reward
        force_done = done

        self.history[:3, :, :] = self.history[1:, :, :]
        self.history[3, :, :] = self.pre_proc(s)

        self.rall += reward
        self.steps += 1

        if done:
            self.history = self.reset()

        return [self.history[:, :, :], reward, force_done, done, log_reward]

    def reset(self):
        self.last_action = 0
        self.steps = 0
        self.episode += 1
        self.rall = 0
        s = self.env.reset()
        self.get_init_state(
            self.pre_proc(s))
        return self.history[:, :, :]

    def pre_proc(self, X):
        return np.asarray(X, dtype='float32')

    def get_init_state(self, s):
        for i in range(self.history_size):
            self.history[i, :, :] = self.pre_proc(s)

# ruff: noqa: UP008
"""``envs.py`` (``NormalizedEnv``, ``create_atari_env``) and ``my_optim.py`` (``SharedAdam``) of
ikostrikov/pytorch-a3c, with the ``Catch`` game that stands in for Atari Pong, for the ``ikostrikova3c_catch`` port
(its header gives the source, commit, license and deviations: ``NormalizedEnv`` a plain wrapper class without gym,
``create_atari_env`` returning ``NormalizedEnv(Catch(seed))``; ``SharedAdam``'s docstrings dropped for length).

Source: https://github.com/ikostrikov/pytorch-a3c (commit 48d95844755e2c3e2c7e48bbd1a7141f7212b63f, MIT);
``Catch`` is written here.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import optim


class Catch:
    """(port) A 42x42 pixel catch game standing in for Pong (gym < 0.26 interface)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def _frame(self):
        f = np.zeros((1, 42, 42), dtype=np.float32)
        f[0, self.ball_y:self.ball_y + 2, self.ball_x:self.ball_x + 2] = 1.0
        f[0, 40:42, self.paddle:self.paddle + 6] = 1.0
        return f

    def _new_ball(self):
        self.ball_x, self.ball_y = int(self.rng.integers(0, 41)), 0

    def reset(self):
        self.paddle, self.balls = 18, 0
        self._new_ball()
        return self._frame()

    def step(self, action):
        a = int(np.asarray(action).reshape(-1)[0])
        self.paddle = int(np.clip(self.paddle + (0, -3, 3)[a], 0, 36))
        self.ball_y += 4
        reward = 0.0
        if self.ball_y >= 38:
            reward = 1.0 if self.paddle - 1 <= self.ball_x <= self.paddle + 5 else -1.0
            self.balls += 1
            self._new_ball()
        return self._frame(), reward, self.balls >= 5, {}


class NormalizedEnv:
    def __init__(self, env=None):
        self.env = env
        self.state_mean = 0
        self.state_std = 0
        self.alpha = 0.9999
        self.num_steps = 0

    def reset(self):
        return self._observation(self.env.reset())

    def step(self, action):
        obs, r, d, info = self.env.step(action)
        return self._observation(obs), r, d, info

    def _observation(self, observation):
        self.num_steps += 1
        self.state_mean = self.state_mean * self.alpha + \
            observation.mean() * (1 - self.alpha)
        self.state_std = self.state_std * self.alpha + \
            observation.std() * (1 - self.alpha)

        unbiased_mean = self.state_mean / (1 - pow(self.alpha, self.num_steps))
        unbiased_std = self.state_std / (1 - pow(self.alpha, self.num_steps))

        return (observation - unbiased_mean) / (unbiased_std + 1e-8)


def create_atari_env(seed):
    """(port) ``Catch`` instead of ``gym.make`` + ``AtariRescale42x42``."""
    return NormalizedEnv(Catch(seed))


# my_optim.py
class SharedAdam(optim.Adam):
    """Implements Adam algorithm with shared states.
    """

    def __init__(self,
                 params,
                 lr=1e-3,
                 betas=(0.9, 0.999),
                 eps=1e-8,
                 weight_decay=0):
        super(SharedAdam, self).__init__(params, lr, betas, eps, weight_decay)

        for group in self.param_groups:
            for p in group['params']:
                state = self.state[p]
                state['step'] = torch.zeros(1)
                state['exp_avg'] = p.data.new().resize_as_(p.data).zero_()
                state['exp_avg_sq'] = p.data.new().resize_as_(p.data).zero_()

    def share_memory(self):
        for group in self.param_groups:
            for p in group['params']:
                state = self.state[p]
                state['step'].share_memory_()
                state['exp_avg'].share_memory_()
                state['exp_avg_sq'].share_memory_()

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]

                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']
                beta1, beta2 = group['betas']

                state['step'] += 1

                if group['weight_decay'] != 0:
                    grad = grad.add(group['weight_decay'], p.data)

                # Decay the first and second moment running average coefficient
                exp_avg.mul_(beta1).add_(1 - beta1, grad)
                exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, grad, grad)

                denom = exp_avg_sq.sqrt().add_(group['eps'])

                bias_correction1 = 1 - beta1 ** state['step'].item()
                bias_correction2 = 1 - beta2 ** state['step'].item()
                step_size = group['lr'] * math.sqrt(
                    bias_correction2) / bias_correction1

                p.data.addcdiv_(-step_size, exp_avg, denom)

        return loss

"""Two continuous-control environments written out in numpy for the continuous-action RL ports (no gym here).

- ``Pendulum``: the classic torque-limited pendulum swing-up with Pendulum-v1's equations and constants (g 10, m 1,
  l 1, dt 0.05, max speed 8, max torque 2; observation ``[cos th, sin th, th_dot]``; reward ``-(th^2 + 0.1 th_dot^2
  + 0.001 u^2)`` with th normalized to [-pi, pi]); no terminal state, the episode ends at the 200-step time limit.
- ``ContinuousCartPole``: the cart-pole of ``_cartpole.py`` (CartPole-v1's equations and constants) driven by a
  continuous force ``10 * clip(a, -1, 1)``; reward 1 per step, the episode terminates when the pole leans past 12
  degrees or the cart leaves [-2.4, 2.4], and is cut at 500 steps.

Both follow the gym < 0.26 interface the ported scripts call: ``seed(s)``, ``state = env.reset()``,
``next_state, reward, done, info = env.step(action)`` (``done`` is also set at the time limit, as gym's TimeLimit
wrapper does), ``env._max_episode_steps``, ``observation_space.shape``, ``action_space.shape / high / low /
sample() / seed(s)``. Everything random comes from seeded ``numpy.random.default_rng`` generators.

Not taken from any repository: the equations are public physics, written here.
"""

from __future__ import annotations

import math

import numpy as np
from _cartpole import FORCE_MAG, GRAVITY, LENGTH, MASSPOLE, POLEMASS_LENGTH, TAU, THETA_LIMIT, TOTAL_MASS, X_LIMIT


class Box:
    def __init__(self, low, high, shape):
        self.low = np.full(shape, low, dtype=np.float32)
        self.high = np.full(shape, high, dtype=np.float32)
        self.shape = shape
        self.rng = np.random.default_rng(0)

    def seed(self, seed):
        self.rng = np.random.default_rng(seed)

    def sample(self):
        return self.rng.uniform(self.low, self.high).astype(np.float32)


class _Env:
    _max_episode_steps = 200

    def seed(self, seed):
        self.rng = np.random.default_rng(seed)

    def close(self):
        pass


class Pendulum(_Env):
    MAX_SPEED, MAX_TORQUE, DT, G, M, L = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0
    _max_episode_steps = 200

    def __init__(self):
        self.observation_space = Box(-np.inf, np.inf, (3,))
        self.action_space = Box(-self.MAX_TORQUE, self.MAX_TORQUE, (1,))
        self.rng = np.random.default_rng(0)
        self.state = None
        self.steps = 0

    def _obs(self):
        th, thdot = self.state
        return np.array([math.cos(th), math.sin(th), thdot], dtype=np.float32)

    def reset(self):
        self.state = self.rng.uniform(low=[-math.pi, -1.0], high=[math.pi, 1.0])
        self.steps = 0
        return self._obs()

    def step(self, u):
        th, thdot = self.state
        u = float(np.clip(u, -self.MAX_TORQUE, self.MAX_TORQUE)[0])
        norm_th = ((th + math.pi) % (2 * math.pi)) - math.pi
        costs = norm_th ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2
        newthdot = thdot + (3 * self.G / (2 * self.L) * math.sin(th) + 3.0 / (self.M * self.L ** 2) * u) * self.DT
        newthdot = float(np.clip(newthdot, -self.MAX_SPEED, self.MAX_SPEED))
        self.state = np.array([th + newthdot * self.DT, newthdot])
        self.steps += 1
        return self._obs(), -costs, self.steps >= self._max_episode_steps, {}


class ContinuousCartPole(_Env):
    _max_episode_steps = 500

    def __init__(self):
        self.observation_space = Box(-np.inf, np.inf, (4,))
        self.action_space = Box(-1.0, 1.0, (1,))
        self.rng = np.random.default_rng(0)
        self.state = None
        self.steps = 0

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        return self.state.astype(np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = FORCE_MAG * float(np.clip(action, -1.0, 1.0)[0])
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot ** 2 * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * costheta ** 2 / TOTAL_MASS))
        xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        x, x_dot = x + TAU * x_dot, x_dot + TAU * xacc
        theta, theta_dot = theta + TAU * theta_dot, theta_dot + TAU * thetaacc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self.steps += 1
        failed = bool(abs(x) > X_LIMIT or abs(theta) > THETA_LIMIT)
        return self.state.astype(np.float32), 1.0, failed or self.steps >= self._max_episode_steps, {}

"""A cart-pole written out in numpy for the reinforcement-learning ports (no gym here).

The dynamics are the classic cart-pole equations (Barto, Sutton & Anderson 1983) with CartPole-v1's constants:
4 observations (cart position, cart velocity, pole angle, pole angular velocity), 2 actions (push left/right),
reward 1 per step, the episode ends when the pole leans past 12 degrees or the cart leaves [-2.4, 2.4], and is
truncated at 500 steps. ``reset`` and ``step`` follow the gym >= 0.26 signatures the ported scripts call:
``s, _ = env.reset()`` and ``s_prime, r, done, truncated, info = env.step(a)``. Everything random comes from
``numpy.random.default_rng(seed)``: the same seed gives the same episodes.

Not taken from any repository: the equations are public physics, written here.
"""

from __future__ import annotations

import math

import numpy as np

GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = MASSCART + MASSPOLE
POLEMASS_LENGTH = MASSPOLE * LENGTH
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4
MAX_STEPS = 500


class CartPole:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.state = None
        self.steps = 0

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        return self.state.astype(np.float32), {}

    def step(self, action: int):
        x, x_dot, theta, theta_dot = self.state
        force = FORCE_MAG if action == 1 else -FORCE_MAG
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot ** 2 * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * costheta ** 2 / TOTAL_MASS))
        xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        x, x_dot = x + TAU * x_dot, x_dot + TAU * xacc
        theta, theta_dot = theta + TAU * theta_dot, theta_dot + TAU * thetaacc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self.steps += 1
        done = bool(abs(x) > X_LIMIT or abs(theta) > THETA_LIMIT)
        truncated = self.steps >= MAX_STEPS
        return self.state.astype(np.float32), 1.0, done, truncated, {}

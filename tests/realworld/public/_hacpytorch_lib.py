# ruff: noqa: PLR1730
"""The replay buffer and the continuous mountain car of nikhilbarhate99/Hierarchical-Actor-Critic-HAC-PyTorch, for
``hacpytorch_mountaincar.py``.

Source: https://github.com/nikhilbarhate99/Hierarchical-Actor-Critic-HAC-PyTorch
Commit: 96bac543bf4f37d17e56e822608a4979ecb4b13e
Files: utils.py (``ReplayBuffer``), asset/continuous_mountain_car.py (``Continuous_MountainCarEnv``'s ``step`` and
``reset``)
License: MIT (Copyright (c) 2019 Nikhil Barhate; full text in LICENSES/nikhilbarhate99-Hierarchical-Actor-Critic-HAC-PyTorch.txt)

Deviations:
- the environment is not a ``gym.Env``: its constants, ``step`` and ``reset`` are as written, its random source a
  ``numpy.random.RandomState(seed)``; spaces and rendering are dropped.
- ``ReplayBuffer`` samples with a ``numpy.random.RandomState`` passed in (not the global ``np.random``), and
  ``np.array(..., copy=False)`` (an error under numpy 2 when a copy is needed) is ``np.asarray``.
"""

import math

import numpy as np


# ---- asset/continuous_mountain_car.py (step and reset) -----------------------------------------------------------
class Continuous_MountainCarEnv:
    def __init__(self, seed):
        self.min_action = -1.0
        self.max_action = 1.0
        self.min_position = -1.2
        self.max_position = 0.6
        self.max_speed = 0.07
        self.goal_position = 0.45 # was 0.5 in gym, 0.45 in Arnaud de Broissia's version
        self.power = 0.0015
        self.np_random = np.random.RandomState(seed)
        self.reset()

    def step(self, action):
        position = self.state[0]
        velocity = self.state[1]
        force = min(max(action[0], -1.0), 1.0)
        velocity += force*self.power -0.0025 * math.cos(3*position)
        if (velocity > self.max_speed): velocity = self.max_speed
        if (velocity < -self.max_speed): velocity = -self.max_speed
        position += velocity
        if (position > self.max_position): position = self.max_position
        if (position < self.min_position): position = self.min_position
        if (position==self.min_position and velocity<0): velocity = 0
        done = bool(position >= self.goal_position)
        reward = 0
        if done:
            reward = 100.0
        reward-= math.pow(action[0],2)*0.1
        self.state = np.array([position, velocity])
        return self.state, reward, done, {}

    def reset(self):
        self.state = np.array([self.np_random.uniform(low=-0.6, high=-0.4), 0])
        return np.array(self.state)


# ---- utils.py ----------------------------------------------------------------------------------------------------
class ReplayBuffer:
    def __init__(self, np_random, max_size=5e5):
        self.buffer = []
        self.max_size = int(max_size)
        self.size = 0
        self.np_random = np_random

    def add(self, transition):
        assert len(transition) == 7, "transition must have length = 7"

        # transiton is tuple of (state, action, reward, next_state, goal, gamma, done)
        self.buffer.append(transition)
        self.size +=1

    def sample(self, batch_size):
        # delete 1/5th of the buffer when full
        if self.size > self.max_size:
            del self.buffer[0:int(self.size/5)]
            self.size = len(self.buffer)

        indexes = self.np_random.randint(0, len(self.buffer), size=batch_size)
        states, actions, rewards, next_states, goals, gamma, dones = [], [], [], [], [], [], []

        for i in indexes:
            states.append(np.asarray(self.buffer[i][0]))
            actions.append(np.asarray(self.buffer[i][1]))
            rewards.append(np.asarray(self.buffer[i][2]))
            next_states.append(np.asarray(self.buffer[i][3]))
            goals.append(np.asarray(self.buffer[i][4]))
            gamma.append(np.asarray(self.buffer[i][5]))
            dones.append(np.asarray(self.buffer[i][6]))

        return np.array(states), np.array(actions), np.array(rewards), np.array(next_states), np.array(goals),  np.array(gamma), np.array(dones)

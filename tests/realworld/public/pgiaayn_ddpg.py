"""DDPG (chapter 03 of pg-is-all-you-need): a deterministic tanh actor and a Q critic (128-128 each, small uniform
init of the output layers) with target copies, a numpy replay buffer, Ornstein-Uhlenbeck exploration noise, random
actions for the first steps, the critic trained by MSE against ``r + gamma Q'(s', mu'(s')) * (1 - done)``, the actor
by ``-Q(s, mu(s)).mean()``, soft target updates (tau 5e-3); Adam lr 3e-4 (actor) and 1e-3 (critic).

Source: https://github.com/MrSyee/pg-is-all-you-need
Commit: a13bc8e1ea02b2d5af42576fa9bd3a6e7d8231a6
Files: 03.DDPG.ipynb (ReplayBuffer, OUNoise, Actor, Critic, DDPGAgent, ActionNormalizer, the environment, seeding
and parameter cells)
License: MIT (Copyright (c) 2019 Kyunghwan Kim; full text in LICENSES/MrSyee-pg-is-all-you-need.txt)
Domain: RL, continuous actor-critic (DDPG)

Kept as written: every class above with its methods that training uses (``select_action``, ``step``,
``update_model``, ``_target_soft_update``), the loop body of ``train``, the parameters cell (memory_size 100000,
batch_size 128, ou_noise_theta 1.0, ou_noise_sigma 0.1, gamma 0.99, tau 5e-3) and the seeding of ``random``,
``numpy`` and ``torch``.

Deviations from the original:
- gymnasium's Pendulum-v1 is replaced by the Pendulum written out in ``_continuous_control.py`` (Pendulum-v1's
  equations and constants, 200-step time limit), wrapped to the gymnasium interface the notebook calls
  (``reset(seed=...)`` reseeding as gymnasium does, ``step`` returning ``terminated`` False and ``truncated`` at the
  limit); ``ActionNormalizer`` (a ``gym.ActionWrapper``) is written as a subclass applying its ``action`` in
  ``step``; ``action_space.sample()`` still samples the unwrapped space, as the wrapper leaves it;
- sizes for 2 CPU cores: initial_random_steps 10000 -> 1000 (played at build time; the buffer keeps its size 100000,
  untouched rows are not allocated), num_frames 50000 -> unbounded (``train_step`` runs one frame);
- seeding uses the build's ``seed`` instead of 777; the device is the CPU (``print(self.device)`` dropped);
- ``train_step`` is one iteration of ``train``'s ``for self.total_step`` body (select, step, reset at the episode's
  end, ``update_model``) and returns the critic loss; plotting, the test episode and video are left out;
- the Program's model is the critic with its optimizer; its batch is 128 transitions of the buffer after the random
  steps (drawn with a generator of its own), and ``loss_fn`` is update_model's critic loss on them;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP006, UP008, UP035, C408, PLR0402, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import copy
import functools
import pathlib
import random
import sys
from typing import Dict, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum


class PendulumV1(Pendulum):
    """gymnasium.make("Pendulum-v1") as the notebook calls it."""

    def reset(self, seed=None):
        if seed is not None:
            self.seed(seed)
        return super().reset(), {}

    def step(self, action):
        s, r, done, info = super().step(action)
        return s, r, False, done, info


# ---- ReplayBuffer cell -------------------------------------------------------------------------------------------

class ReplayBuffer:
    """A simple numpy replay buffer."""

    def __init__(self, obs_dim: int, act_dim: int, size: int, batch_size: int = 32):
        """Initializate."""
        self.obs_buf = np.zeros([size, obs_dim], dtype=np.float32)
        self.next_obs_buf = np.zeros([size, obs_dim], dtype=np.float32)
        self.acts_buf = np.zeros([size, act_dim], dtype=np.float32)
        self.rews_buf = np.zeros([size], dtype=np.float32)
        self.done_buf = np.zeros([size], dtype=np.float32)
        self.max_size, self.batch_size = size, batch_size
        self.ptr, self.size = 0, 0

    def store(
        self,
        obs: np.ndarray,
        act: np.ndarray,
        rew: float,
        next_obs: np.ndarray,
        done: bool,
    ):
        """Store the transition in buffer."""
        self.obs_buf[self.ptr] = obs
        self.next_obs_buf[self.ptr] = next_obs
        self.acts_buf[self.ptr] = act
        self.rews_buf[self.ptr] = rew
        self.done_buf[self.ptr] = done
        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)

    def sample_batch(self) -> Dict[str, np.ndarray]:
        """Randomly sample a batch of experiences from memory."""
        idxs = np.random.choice(self.size, size=self.batch_size, replace=False)
        return dict(
            obs=self.obs_buf[idxs],
            next_obs=self.next_obs_buf[idxs],
            acts=self.acts_buf[idxs],
            rews=self.rews_buf[idxs],
            done=self.done_buf[idxs],
        )

    def __len__(self) -> int:
        return self.size


# ---- OUNoise cell ------------------------------------------------------------------------------------------------

class OUNoise:
    """Ornstein-Uhlenbeck process.
    Taken from Udacity deep-reinforcement-learning github repository:
    https://github.com/udacity/deep-reinforcement-learning/blob/master/
    ddpg-pendulum/ddpg_agent.py
    """

    def __init__(self, size: int, mu: float = 0.0, theta: float = 0.15, sigma: float = 0.2):
        """Initialize parameters and noise process."""
        self.state = np.float64(0.0)
        self.mu = mu * np.ones(size)
        self.theta = theta
        self.sigma = sigma
        self.reset()

    def reset(self):
        """Reset the internal state (= noise) to mean (mu)."""
        self.state = copy.copy(self.mu)

    def sample(self) -> np.ndarray:
        """Update internal state and return it as a noise sample."""
        x = self.state
        dx = self.theta * (self.mu - x) + self.sigma * np.array(
            [random.random() for _ in range(len(x))]
        )
        self.state = x + dx
        return self.state


# ---- Actor / Critic cell -----------------------------------------------------------------------------------------

class Actor(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, init_w: float = 3e-3):
        """Initialize."""
        super(Actor, self).__init__()

        self.hidden1 = nn.Linear(in_dim, 128)
        self.hidden2 = nn.Linear(128, 128)
        self.out = nn.Linear(128, out_dim)

        self.out.weight.data.uniform_(-init_w, init_w)
        self.out.bias.data.uniform_(-init_w, init_w)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """Forward method implementation."""
        x = F.relu(self.hidden1(state))
        x = F.relu(self.hidden2(x))
        action = self.out(x).tanh()

        return action


class Critic(nn.Module):
    def __init__(
        self,
        in_dim: int,
        init_w: float = 3e-3,
    ):
        """Initialize."""
        super(Critic, self).__init__()

        self.hidden1 = nn.Linear(in_dim, 128)
        self.hidden2 = nn.Linear(128, 128)
        self.out = nn.Linear(128, 1)

        self.out.weight.data.uniform_(-init_w, init_w)
        self.out.bias.data.uniform_(-init_w, init_w)

    def forward(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Forward method implementation."""
        x = torch.cat((state, action), dim=-1)
        x = F.relu(self.hidden1(x))
        x = F.relu(self.hidden2(x))
        value = self.out(x)

        return value


# ---- DDPGAgent cell (the methods training uses) ------------------------------------------------------------------

class DDPGAgent:
    """DDPGAgent interacting with environment (see the notebook for the attribute list)."""

    def __init__(
        self,
        env,
        memory_size: int,
        batch_size: int,
        ou_noise_theta: float,
        ou_noise_sigma: float,
        gamma: float = 0.99,
        tau: float = 5e-3,
        initial_random_steps: int = 1e4,
        seed: int = 777,
        bug=None,
    ):
        """Initialize."""
        obs_dim = env.observation_space.shape[0]
        action_dim = env.action_space.shape[0]

        self.env = env
        self.memory = ReplayBuffer(obs_dim, action_dim, memory_size, batch_size)
        self.batch_size = batch_size
        self.gamma = gamma
        self.tau = tau
        self.initial_random_steps = initial_random_steps
        self.seed = seed
        self.bug = bug

        # noise
        self.noise = OUNoise(
            action_dim,
            theta=ou_noise_theta,
            sigma=ou_noise_sigma,
        )

        # device: cpu / gpu
        self.device = torch.device("cpu")

        # networks
        self.actor = Actor(obs_dim, action_dim).to(self.device)
        self.actor_target = Actor(obs_dim, action_dim).to(self.device)
        self.actor_target.load_state_dict(self.actor.state_dict())

        self.critic = Critic(obs_dim + action_dim).to(self.device)
        self.critic_target = Critic(obs_dim + action_dim).to(self.device)
        self.critic_target.load_state_dict(self.critic.state_dict())

        # optimizer
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=3e-4)
        self.critic_optimizer = optim.Adam(self.critic.parameters(), lr=1e-3)

        # transition to store in memory
        self.transition = list()

        # total steps count
        self.total_step = 0

        # mode: train / test
        self.is_test = False

    def select_action(self, state: np.ndarray) -> np.ndarray:
        """Select an action from the input state."""
        # if initial random action should be conducted
        if self.total_step < self.initial_random_steps and not self.is_test:
            selected_action = self.env.action_space.sample()
        else:
            selected_action = (
                self.actor(torch.FloatTensor(state).to(self.device)).detach().cpu().numpy()
            )

        # add noise for exploration during training
        if not self.is_test:
            noise = self.noise.sample()
            selected_action = np.clip(selected_action + noise, -1.0, 1.0)

        self.transition = [state, selected_action]

        return selected_action

    def step(self, action: np.ndarray) -> Tuple[np.ndarray, np.float64, bool]:
        """Take an action and return the response of the env."""
        next_state, reward, terminated, truncated, _ = self.env.step(action)
        done = terminated or truncated

        if not self.is_test:
            self.transition += [reward, next_state, done]
            self.memory.store(*self.transition)

        return next_state, reward, done

    def update_model(self) -> torch.Tensor:
        """Update the model by gradient descent."""
        device = self.device  # for shortening the following lines

        samples = self.memory.sample_batch()
        state = torch.FloatTensor(samples["obs"]).to(device)
        next_state = torch.FloatTensor(samples["next_obs"]).to(device)
        action = torch.FloatTensor(samples["acts"]).to(device)
        if self.bug == "reward_not_reshaped":
            reward = torch.FloatTensor(samples["rews"]).to(device)
        else:
            reward = torch.FloatTensor(samples["rews"].reshape(-1, 1)).to(device)
        done = torch.FloatTensor(samples["done"].reshape(-1, 1)).to(device)

        masks = 1 - done
        next_action = self.actor_target(next_state)
        next_value = self.critic_target(next_state, next_action)
        curr_return = reward + self.gamma * next_value * masks

        # train critic
        values = self.critic(state, action)
        critic_loss = F.mse_loss(values, curr_return)

        if self.bug != "critic_zero_grad_dropped":
            self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()

        # train actor
        actor_loss = -self.critic(state, self.actor(state)).mean()

        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()

        # target update
        self._target_soft_update()

        return actor_loss.data, critic_loss.data

    def _target_soft_update(self):
        """Soft-update: target = tau*local + (1-tau)*target."""
        tau = self.tau

        for t_param, l_param in zip(self.actor_target.parameters(), self.actor.parameters()):
            t_param.data.copy_(tau * l_param.data + (1.0 - tau) * t_param.data)

        for t_param, l_param in zip(self.critic_target.parameters(), self.critic.parameters()):
            t_param.data.copy_(tau * l_param.data + (1.0 - tau) * t_param.data)


# ---- ActionNormalizer cell (gym.ActionWrapper written as a subclass) ---------------------------------------------

class ActionNormalizer(PendulumV1):
    """Rescale and relocate the actions."""

    def step(self, action):
        return super().step(self.action(action))

    def action(self, action: np.ndarray) -> np.ndarray:
        """Change the range (-1, 1) to (low, high)."""
        low = self.action_space.low
        high = self.action_space.high

        scale_factor = (high - low) / 2
        reloc_factor = high - scale_factor

        action = action * scale_factor + reloc_factor
        action = np.clip(action, low, high)

        return action


def seed_torch(seed):
    torch.manual_seed(seed)


def _build(seed, bug=None):
    # environment
    env = ActionNormalizer()
    env.action_space.seed(seed)

    random.seed(seed)
    np.random.seed(seed)
    seed_torch(seed)

    # parameters
    memory_size = 100000
    batch_size = 128
    ou_noise_theta = 1.0
    ou_noise_sigma = 0.1
    initial_random_steps = 1000

    agent = DDPGAgent(
        env,
        memory_size,
        batch_size,
        ou_noise_theta,
        ou_noise_sigma,
        initial_random_steps=initial_random_steps,
        seed=seed,
        bug=bug,
    )

    # train(): the loop's state; the frames go one at a time
    agent.is_test = False
    loop = {"state": agent.env.reset(seed=agent.seed)[0], "score": 0}

    def frame():
        agent.total_step += 1
        action = agent.select_action(loop["state"])
        next_state, reward, done = agent.step(action)

        loop["state"] = next_state
        loop["score"] += reward

        # if episode ends
        if done:
            loop["state"], _ = agent.env.reset(seed=agent.seed)
            loop["score"] = 0

        # if training is ready
        if len(agent.memory) >= agent.batch_size and agent.total_step > agent.initial_random_steps:
            actor_loss, critic_loss = agent.update_model()
            return critic_loss
        return None

    while agent.total_step < agent.initial_random_steps:
        frame()

    def train_step():
        return frame()

    # the Program's batch: 128 transitions of the buffer, drawn with a generator of its own
    idxs = np.random.default_rng(seed).choice(len(agent.memory), size=batch_size, replace=False)
    m = agent.memory
    batch = ({"state": torch.FloatTensor(m.obs_buf[idxs]), "action": torch.FloatTensor(m.acts_buf[idxs])},
             (torch.FloatTensor(m.next_obs_buf[idxs]), m.rews_buf[idxs], torch.FloatTensor(m.done_buf[idxs])))

    def loss_fn(values, targets):
        """update_model's critic loss on the critic's outputs for ``batch`` (the same lines)."""
        next_state, rews, done = targets
        if bug == "reward_not_reshaped":
            reward = torch.FloatTensor(rews)
        else:
            reward = torch.FloatTensor(rews.reshape(-1, 1))
        masks = 1 - done.reshape(-1, 1)
        next_action = agent.actor_target(next_state)
        next_value = agent.critic_target(next_state, next_action)
        curr_return = reward + agent.gamma * next_value * masks
        return F.mse_loss(values, curr_return)

    return Program(name="pgiaayn_ddpg", model=agent.critic, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.critic_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the rewards are not reshaped to [B, 1]: ``reward + gamma * next_value * masks`` broadcasts to [B, B] and the
    # MSE compares every Q value with every transition's return (classic broadcasting slip; a UserWarning only).
    Bug("reward_not_reshaped", functools.partial(_build, bug="reward_not_reshaped"), "learning_ledger",
        ("OBJECTIVE",)),
    # critic_optimizer.zero_grad() left out: the critic's gradients accumulate over the updates (classic).
    Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe",
        ("hidden1.weight",)),
]

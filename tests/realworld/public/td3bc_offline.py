# ruff: noqa: PLR0402, RUF059, UP004, UP008
"""TD3+BC: offline RL from a fixed dataset of transitions (TD3's twin critics, clipped target policy noise and
delayed actor updates, with a behaviour-cloning term added to the actor loss and the Q term scaled by
``alpha / mean|Q|``), on states normalized by the dataset's mean and standard deviation.

Source: https://github.com/sfujim/TD3_BC
Commit: 8791ad7d7656cb8396f1b3ac8c37f170b2a2dd5f
Files: ``TD3_BC.py`` (``Actor``, ``Critic``, ``TD3_BC``), ``utils.py`` (``ReplayBuffer`` with ``convert_D4RL`` and
``normalize_states``), ``main.py`` (the argument defaults and the training loop).
License: MIT (Copyright (c) 2021 Scott Fujimoto; full text in LICENSES/sfujim-TD3_BC.txt)
Domain: RL, offline (TD3+BC)

Kept as written: ``Actor`` (two hidden ReLU layers, ``max_action * tanh``), ``Critic`` (two Q heads and ``Q1``),
``TD3_BC.__init__`` (Adam 3e-4 for actor and critic, deep-copied targets) and ``TD3_BC.train``'s body (target policy
smoothing with noise 0.2 clipped to 0.5, clipped double-Q target with ``not_done``, both critics' MSE, the actor
updated every ``policy_freq`` = 2 iterations on ``-lmbda * Q.mean() + F.mse_loss(pi, action)`` with ``lmbda =
alpha / Q.abs().mean().detach()``, alpha 2.5, Polyak targets with tau 0.005), ``ReplayBuffer`` (``sample``,
``convert_D4RL``, ``normalize_states`` with eps 1e-3), main.py's defaults (discount 0.99, batch_size 256,
normalize True) and its loop (``policy.train(replay_buffer, args.batch_size)`` once per time step).

Deviations from the original:
- D4RL (``d4rl.qlearning_dataset(env)`` of hopper-medium-v0) and MuJoCo are not available: the dataset is made by
  running the numpy ``ContinuousCartPole`` of ``_continuous_control.py`` (seeded) under a fixed, noisy linear
  controller (``-(theta * 10 + theta_dot * 2 + x_dot * 0.5)`` plus Gaussian noise 0.3, clipped; a mediocre behaviour
  policy, so the data holds falls), 2000 transitions, written into the dict of arrays ``qlearning_dataset`` returns
  (``observations``, ``actions``, ``next_observations``, ``rewards``, ``terminals``: a fall is terminal, the time
  limit is not, as in D4RL) and loaded by ``convert_D4RL``. The environment is the synthetic data.
- sizes for 2 CPU cores: the hidden width 256 of actor and critics is 64 (batch_size 256 kept).
- ``np.random`` is a ``numpy.random.default_rng(seed)`` instance held by the buffer (same draws in kind), and
  ``torch.manual_seed(seed)``; device is the CPU. Tabs are written as four spaces.
- ``train_step`` is one iteration of main.py's loop (``policy.train(replay_buffer, args.batch_size)``); ``train``
  returns that iteration's critic loss (the original returns nothing). Evaluation episodes (``eval_policy``) and
  saving are dropped.
- the critic target's lines of ``train`` are moved, unchanged, into a method ``target_Q`` that ``train`` calls, so
  the Program's ``loss_fn`` applies the same target.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole

device = torch.device("cpu")
HIDDEN = 64  # (port) 256 in the original, shrunk for 2 CPU cores
DATASET = 2000


# ---- TD3_BC.py ---------------------------------------------------------------------------------------------------

class Actor(nn.Module):
    def __init__(self, state_dim, action_dim, max_action):
        super(Actor, self).__init__()

        self.l1 = nn.Linear(state_dim, HIDDEN)
        self.l2 = nn.Linear(HIDDEN, HIDDEN)
        self.l3 = nn.Linear(HIDDEN, action_dim)

        self.max_action = max_action

    def forward(self, state):
        a = F.relu(self.l1(state))
        a = F.relu(self.l2(a))
        return self.max_action * torch.tanh(self.l3(a))


class Critic(nn.Module):
    def __init__(self, state_dim, action_dim):
        super(Critic, self).__init__()

        # Q1 architecture
        self.l1 = nn.Linear(state_dim + action_dim, HIDDEN)
        self.l2 = nn.Linear(HIDDEN, HIDDEN)
        self.l3 = nn.Linear(HIDDEN, 1)

        # Q2 architecture
        self.l4 = nn.Linear(state_dim + action_dim, HIDDEN)
        self.l5 = nn.Linear(HIDDEN, HIDDEN)
        self.l6 = nn.Linear(HIDDEN, 1)

    def forward(self, state, action):
        sa = torch.cat([state, action], 1)

        q1 = F.relu(self.l1(sa))
        q1 = F.relu(self.l2(q1))
        q1 = self.l3(q1)

        q2 = F.relu(self.l4(sa))
        q2 = F.relu(self.l5(q2))
        q2 = self.l6(q2)
        return q1, q2

    def Q1(self, state, action):
        sa = torch.cat([state, action], 1)

        q1 = F.relu(self.l1(sa))
        q1 = F.relu(self.l2(q1))
        q1 = self.l3(q1)
        return q1


class TD3_BC(object):
    def __init__(
        self,
        state_dim,
        action_dim,
        max_action,
        discount=0.99,
        tau=0.005,
        policy_noise=0.2,
        noise_clip=0.5,
        policy_freq=2,
        alpha=2.5,
        bug=None,
    ):

        self.actor = Actor(state_dim, action_dim, max_action).to(device)
        self.actor_target = copy.deepcopy(self.actor)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=3e-4)

        self.critic = Critic(state_dim, action_dim).to(device)
        self.critic_target = copy.deepcopy(self.critic)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=3e-4)

        self.max_action = max_action
        self.discount = discount
        self.tau = tau
        self.policy_noise = policy_noise
        self.noise_clip = noise_clip
        self.policy_freq = policy_freq
        self.alpha = alpha

        self.total_it = 0
        self.bug = bug

    def select_action(self, state):
        state = torch.FloatTensor(state.reshape(1, -1)).to(device)
        return self.actor(state).cpu().data.numpy().flatten()

    def target_Q(self, action, next_state, reward, not_done):
        """(port) the critic target of ``train``, lines as written (shared with the Program's loss_fn)."""
        with torch.no_grad():
            # Select action according to policy and add clipped noise
            noise = (
                torch.randn_like(action) * self.policy_noise
            ).clamp(-self.noise_clip, self.noise_clip)

            next_action = (
                self.actor_target(next_state) + noise
            ).clamp(-self.max_action, self.max_action)

            # Compute the target Q value
            target_Q1, target_Q2 = self.critic_target(next_state, next_action)
            target_Q = torch.min(target_Q1, target_Q2)
            if self.bug == "not_done_dropped":
                target_Q = reward + self.discount * target_Q
            else:
                target_Q = reward + not_done * self.discount * target_Q
        return target_Q

    def train(self, replay_buffer, batch_size=256):
        self.total_it += 1

        # Sample replay buffer
        state, action, next_state, reward, not_done = replay_buffer.sample(batch_size)

        target_Q = self.target_Q(action, next_state, reward, not_done)

        # Get current Q estimates
        current_Q1, current_Q2 = self.critic(state, action)

        # Compute critic loss
        critic_loss = F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q2, target_Q)

        # Optimize the critic
        if self.bug != "critic_zero_grad_dropped":
            self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()

        # Delayed policy updates
        if self.total_it % self.policy_freq == 0:

            # Compute actor loss
            pi = self.actor(state)
            Q = self.critic.Q1(state, pi)
            lmbda = self.alpha/Q.abs().mean().detach()

            actor_loss = -lmbda * Q.mean() + F.mse_loss(pi, action)

            # Optimize the actor
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()

            # Update the frozen target models
            for param, target_param in zip(self.critic.parameters(), self.critic_target.parameters()):
                target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)

            for param, target_param in zip(self.actor.parameters(), self.actor_target.parameters()):
                target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)
        return critic_loss


# ---- utils.py ----------------------------------------------------------------------------------------------------

class ReplayBuffer(object):
    def __init__(self, state_dim, action_dim, max_size=int(1e6), rng=None, bug=None):
        self.max_size = max_size
        self.ptr = 0
        self.size = 0

        self.state = np.zeros((max_size, state_dim))
        self.action = np.zeros((max_size, action_dim))
        self.next_state = np.zeros((max_size, state_dim))
        self.reward = np.zeros((max_size, 1))
        self.not_done = np.zeros((max_size, 1))

        self.device = device
        self.rng = rng
        self.bug = bug

    def sample(self, batch_size):
        ind = self.rng.integers(0, self.size, size=batch_size)

        return (
            torch.FloatTensor(self.state[ind]).to(self.device),
            torch.FloatTensor(self.action[ind]).to(self.device),
            torch.FloatTensor(self.next_state[ind]).to(self.device),
            torch.FloatTensor(self.reward[ind]).to(self.device),
            torch.FloatTensor(self.not_done[ind]).to(self.device)
        )

    def convert_D4RL(self, dataset):
        self.state = dataset['observations']
        self.action = dataset['actions']
        self.next_state = dataset['next_observations']
        self.reward = dataset['rewards'].reshape(-1,1)
        self.not_done = 1. - dataset['terminals'].reshape(-1,1)
        self.size = self.state.shape[0]

    def normalize_states(self, eps = 1e-3):
        mean = self.state.mean(0,keepdims=True)
        std = self.state.std(0,keepdims=True) + eps
        self.state = (self.state - mean)/std
        if self.bug != "next_state_not_normalized":
            self.next_state = (self.next_state - mean)/std
        return mean, std


def qlearning_dataset(env, rng, gaussian_std=0.3):
    """(port) stands in for ``d4rl.qlearning_dataset(env)``: transitions of a noisy fixed linear controller."""
    max_action = float(env.action_space.high[0])
    obs, acts, next_obs, rews, terms = [], [], [], [], []
    state, steps = env.reset(), 0
    for _ in range(DATASET):
        x_dot, theta, theta_dot = state[1], state[2], state[3]
        action = np.clip(np.array([-(theta * 10 + theta_dot * 2 + x_dot * 0.5)])
                         + rng.normal(0, max_action * gaussian_std, size=1), -max_action, max_action)
        next_state, reward, done, _ = env.step(action)
        steps += 1
        obs.append(state)
        acts.append(action)
        next_obs.append(next_state)
        rews.append(reward)
        terms.append(float(done and steps < env._max_episode_steps))
        state = next_state
        if done:
            state, steps = env.reset(), 0
    return {"observations": np.array(obs, dtype=np.float32), "actions": np.array(acts, dtype=np.float32),
            "next_observations": np.array(next_obs, dtype=np.float32), "rewards": np.array(rews, dtype=np.float32),
            "terminals": np.array(terms, dtype=np.float32)}


# ---- main.py -----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    env = ContinuousCartPole()

    # Set seeds
    env.seed(seed)
    env.action_space.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    state_dim = env.observation_space.shape[0]
    action_dim = env.action_space.shape[0]
    max_action = float(env.action_space.high[0])

    kwargs = {
        "state_dim": state_dim,
        "action_dim": action_dim,
        "max_action": max_action,
        "discount": 0.99,
        "tau": 0.005,
        # TD3
        "policy_noise": 0.2 * max_action,
        "noise_clip": 0.5 * max_action,
        "policy_freq": 2,
        # TD3 + BC
        "alpha": 2.5
    }

    # Initialize policy
    policy = TD3_BC(**kwargs, bug=bug)

    replay_buffer = ReplayBuffer(state_dim, action_dim, rng=rng, bug=bug)
    replay_buffer.convert_D4RL(qlearning_dataset(env, rng))
    mean, std = replay_buffer.normalize_states()

    batch_size = 256
    state, action, next_state, reward, not_done = replay_buffer.sample(batch_size)
    batch = ((state, action), (action, next_state, reward, not_done))

    def loss_fn(outputs, targets):
        """train()'s critic loss on the critic's outputs for ``batch`` (the same lines)."""
        current_Q1, current_Q2 = outputs
        target_Q = policy.target_Q(*targets)
        return F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q2, target_Q)

    def train_step():
        return policy.train(replay_buffer, batch_size)

    return Program(name="td3bc_offline", model=policy.critic, batch=batch, loss_fn=loss_fn,
                   optimizer=policy.critic_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``not_done`` left out of the critic target (classic): the value bootstraps through the pole's fall.
    Bug("not_done_dropped", functools.partial(_build, bug="not_done_dropped"), "learning_ledger", ("TASK",)),
    # ``normalize_states`` normalizes ``state`` but leaves ``next_state`` raw (classic preprocessing slip): the target
    # is the critic's value of a state in other units than the one it is regressed on.
    Bug("next_state_not_normalized", functools.partial(_build, bug="next_state_not_normalized"), "learning_ledger",
        ("TASK",)),
    # the critic's ``zero_grad`` left out (classic): every critic step applies the sum of all past gradients.
    # Every critic parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

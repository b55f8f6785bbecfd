# ruff: noqa: PLR0402, UP004, UP008
"""Batch-Constrained deep Q-learning (BCQ, continuous): offline RL from a fixed buffer with a conditional VAE of the
behavioural actions, a perturbation actor, twin critics with soft clipped double Q-learning over ten VAE-sampled
next actions, and Polyak target updates.

Source: https://github.com/sfujim/BCQ
Commit: 4876f7e5afa9eb2981feec5daf67202514477518
Files: ``continuous_BCQ/BCQ.py`` (``Actor``, ``Critic``, ``VAE``, ``BCQ``), ``continuous_BCQ/utils.py``
(``ReplayBuffer``), ``continuous_BCQ/main.py`` (``interact_with_environment``'s buffer generation, ``train_BCQ``,
the argument defaults).
License: MIT (Copyright (c) 2020 Scott Fujimoto; full text in LICENSES/sfujim-BCQ.txt)
Domain: RL, off-policy / offline (BCQ)

Kept as written: the three networks (the actor and twin critics with two hidden layers each, the VAE with two
encoder and two decoder hidden layers and latent ``2 * action_dim``, ``log_std`` clamped to [-4, 15], decoder latent clipped to [-0.5, 0.5]), the optimizers (Adam 1e-3 for actor and
critic, Adam default for the VAE), ``BCQ.train``'s body (VAE recon + 0.5 KL, the critic target over
``repeat_interleave(next_state, 10, 0)`` with ``lmbda`` min/max mixing and a max over the ten samples, the critic
MSE on both heads, the DPG actor loss through ``critic.q1``, the Polyak updates), ``ReplayBuffer`` (``add`` /
``sample``), the defaults discount 0.99, tau 0.005, lmbda 0.75, phi 0.05, batch_size 100, and main.py's
``done_bool`` rule (a time-limit end is not terminal).

Deviations from the original:
- gym and MuJoCo are replaced by the numpy ``ContinuousCartPole`` of ``_continuous_control.py`` (seeded); it has
  terminal states, so the buffer's ``not_done`` matters. The environment is the synthetic data.
- the buffer is not made by a trained DDPG behavioural policy (``--train_behavioral`` then ``--generate_buffer``):
  ``interact_with_environment``'s generation loop runs with ``policy.select_action`` replaced by a fixed linear
  controller (``-(theta * 10 + theta_dot * 2 + x_dot * 0.5)``, clipped: a poor behaviour policy, so the buffer holds
  falls), keeping main.py's
  ``rand_action_p`` 0.3 uniform actions and ``gaussian_std`` 0.3 noise; 2000 transitions (max_timesteps 1e6) and a
  buffer of that size. Nothing is saved to or loaded from disk.
- sizes for 2 CPU cores: the hidden widths 400 and 300 (actor, critics) are 64 and 48, the VAE's 750 is 96.
- ``train_BCQ``'s while loop calls ``policy.train(replay_buffer, iterations=eval_freq)``; here ``train_step`` is one
  iteration (``iterations=1``) and ``train`` returns that iteration's critic loss (the original returns nothing).
  Evaluation episodes and saving are dropped.
- the critic target's lines of ``train`` are moved, unchanged, into a method ``target_Q`` that ``train`` calls, so
  the Program's ``loss_fn`` applies the same target.
- ``np.random`` is a ``numpy.random.default_rng(seed)`` instance held by the buffer (same draws in kind), and
  ``torch.manual_seed(seed)``; device is the CPU. Tabs are written as four spaces.
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

BUFFER = 2000
H1, H2, HV = 64, 48, 96  # (port) hidden sizes 400, 300 (actor, critics) and 750 (VAE), shrunk for 2 CPU cores


class Actor(nn.Module):
    def __init__(self, state_dim, action_dim, max_action, phi=0.05):
        super(Actor, self).__init__()
        self.l1 = nn.Linear(state_dim + action_dim, H1)
        self.l2 = nn.Linear(H1, H2)
        self.l3 = nn.Linear(H2, action_dim)

        self.max_action = max_action
        self.phi = phi

    def forward(self, state, action):
        a = F.relu(self.l1(torch.cat([state, action], 1)))
        a = F.relu(self.l2(a))
        a = self.phi * self.max_action * torch.tanh(self.l3(a))
        return (a + action).clamp(-self.max_action, self.max_action)


class Critic(nn.Module):
    def __init__(self, state_dim, action_dim):
        super(Critic, self).__init__()
        self.l1 = nn.Linear(state_dim + action_dim, H1)
        self.l2 = nn.Linear(H1, H2)
        self.l3 = nn.Linear(H2, 1)

        self.l4 = nn.Linear(state_dim + action_dim, H1)
        self.l5 = nn.Linear(H1, H2)
        self.l6 = nn.Linear(H2, 1)

    def forward(self, state, action):
        q1 = F.relu(self.l1(torch.cat([state, action], 1)))
        q1 = F.relu(self.l2(q1))
        q1 = self.l3(q1)

        q2 = F.relu(self.l4(torch.cat([state, action], 1)))
        q2 = F.relu(self.l5(q2))
        q2 = self.l6(q2)
        return q1, q2

    def q1(self, state, action):
        q1 = F.relu(self.l1(torch.cat([state, action], 1)))
        q1 = F.relu(self.l2(q1))
        q1 = self.l3(q1)
        return q1


# Vanilla Variational Auto-Encoder
class VAE(nn.Module):
    def __init__(self, state_dim, action_dim, latent_dim, max_action, device):
        super(VAE, self).__init__()
        self.e1 = nn.Linear(state_dim + action_dim, HV)
        self.e2 = nn.Linear(HV, HV)

        self.mean = nn.Linear(HV, latent_dim)
        self.log_std = nn.Linear(HV, latent_dim)

        self.d1 = nn.Linear(state_dim + latent_dim, HV)
        self.d2 = nn.Linear(HV, HV)
        self.d3 = nn.Linear(HV, action_dim)

        self.max_action = max_action
        self.latent_dim = latent_dim
        self.device = device

    def forward(self, state, action):
        z = F.relu(self.e1(torch.cat([state, action], 1)))
        z = F.relu(self.e2(z))

        mean = self.mean(z)
        # Clamped for numerical stability
        log_std = self.log_std(z).clamp(-4, 15)
        std = torch.exp(log_std)
        z = mean + std * torch.randn_like(std)

        u = self.decode(state, z)

        return u, mean, std

    def decode(self, state, z=None):
        # When sampling from the VAE, the latent vector is clipped to [-0.5, 0.5]
        if z is None:
            z = torch.randn((state.shape[0], self.latent_dim)).to(self.device).clamp(-0.5,0.5)

        a = F.relu(self.d1(torch.cat([state, z], 1)))
        a = F.relu(self.d2(a))
        return self.max_action * torch.tanh(self.d3(a))


class BCQ(object):
    def __init__(self, state_dim, action_dim, max_action, device, discount=0.99, tau=0.005, lmbda=0.75, phi=0.05,
                 bug=None):
        latent_dim = action_dim * 2

        self.actor = Actor(state_dim, action_dim, max_action, phi).to(device)
        self.actor_target = copy.deepcopy(self.actor)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=1e-3)

        self.critic = Critic(state_dim, action_dim).to(device)
        self.critic_target = copy.deepcopy(self.critic)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=1e-3)

        self.vae = VAE(state_dim, action_dim, latent_dim, max_action, device).to(device)
        self.vae_optimizer = torch.optim.Adam(self.vae.parameters())

        self.max_action = max_action
        self.action_dim = action_dim
        self.discount = discount
        self.tau = tau
        self.lmbda = lmbda
        self.device = device
        self.bug = bug

    def target_Q(self, next_state, reward, not_done, batch_size):
        """(port) the critic target of ``train``, lines as written (shared with the Program's loss_fn)."""
        with torch.no_grad():
            # Duplicate next state 10 times
            if self.bug == "next_state_repeated_not_interleaved":
                next_state = next_state.repeat(10, 1)
            else:
                next_state = torch.repeat_interleave(next_state, 10, 0)

            # Compute value of perturbed actions sampled from the VAE
            target_Q1, target_Q2 = self.critic_target(next_state, self.actor_target(next_state, self.vae.decode(next_state)))

            # Soft Clipped Double Q-learning
            target_Q = self.lmbda * torch.min(target_Q1, target_Q2) + (1. - self.lmbda) * torch.max(target_Q1, target_Q2)
            # Take max over each action sampled from the VAE
            target_Q = target_Q.reshape(batch_size, -1).max(1)[0].reshape(-1, 1)

            if self.bug == "not_done_dropped":
                target_Q = reward + self.discount * target_Q
            else:
                target_Q = reward + not_done * self.discount * target_Q
        return target_Q

    def train(self, replay_buffer, iterations, batch_size=100):

        for it in range(iterations):
            # Sample replay buffer / batch
            state, action, next_state, reward, not_done = replay_buffer.sample(batch_size)

            # Variational Auto-Encoder Training
            recon, mean, std = self.vae(state, action)
            recon_loss = F.mse_loss(recon, action)
            KL_loss	= -0.5 * (1 + torch.log(std.pow(2)) - mean.pow(2) - std.pow(2)).mean()
            vae_loss = recon_loss + 0.5 * KL_loss

            self.vae_optimizer.zero_grad()
            vae_loss.backward()
            self.vae_optimizer.step()

            # Critic Training
            target_Q = self.target_Q(next_state, reward, not_done, batch_size)

            current_Q1, current_Q2 = self.critic(state, action)
            critic_loss = F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q2, target_Q)

            self.critic_optimizer.zero_grad()
            critic_loss.backward()
            self.critic_optimizer.step()

            # Pertubation Model / Action Training
            sampled_actions = self.vae.decode(state)
            perturbed_actions = self.actor(state, sampled_actions)

            # Update through DPG
            actor_loss = -self.critic.q1(state, perturbed_actions).mean()

            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()

            # Update Target Networks
            for param, target_param in zip(self.critic.parameters(), self.critic_target.parameters()):
                if self.bug == "soft_update_reversed":
                    param.data.copy_(self.tau * target_param.data + (1 - self.tau) * param.data)
                else:
                    target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)

            for param, target_param in zip(self.actor.parameters(), self.actor_target.parameters()):
                target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)
        return critic_loss


class ReplayBuffer(object):
    def __init__(self, state_dim, action_dim, device, max_size=int(1e6), rng=None):
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

    def add(self, state, action, next_state, reward, done):
        self.state[self.ptr] = state
        self.action[self.ptr] = action
        self.next_state[self.ptr] = next_state
        self.reward[self.ptr] = reward
        self.not_done[self.ptr] = 1. - done

        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)

    def sample(self, batch_size):
        ind = self.rng.integers(0, self.size, size=batch_size)

        return (
            torch.FloatTensor(self.state[ind]).to(self.device),
            torch.FloatTensor(self.action[ind]).to(self.device),
            torch.FloatTensor(self.next_state[ind]).to(self.device),
            torch.FloatTensor(self.reward[ind]).to(self.device),
            torch.FloatTensor(self.not_done[ind]).to(self.device)
        )


def generate_buffer(env, action_dim, max_action, replay_buffer, rng, rand_action_p=0.3, gaussian_std=0.3):
    """(port) interact_with_environment's --generate_buffer loop, the DDPG behavioural policy replaced by a fixed
    linear controller."""
    def select_action(state):
        _x, x_dot, theta, theta_dot = state
        return np.clip(np.array([-(theta * 10 + theta_dot * 2 + x_dot * 0.5)]), -max_action, max_action)

    state, done = env.reset(), False
    episode_timesteps = 0
    for t in range(BUFFER):
        episode_timesteps += 1
        if rng.uniform(0, 1) < rand_action_p:
            action = env.action_space.sample()
        else:
            action = (
                select_action(np.array(state))
                + rng.normal(0, max_action * gaussian_std, size=action_dim)
            ).clip(-max_action, max_action)

        next_state, reward, done, _ = env.step(action)
        done_bool = float(done) if episode_timesteps < env._max_episode_steps else 0

        replay_buffer.add(state, action, next_state, reward, done_bool)

        state = next_state
        if done:
            state, done = env.reset(), False
            episode_timesteps = 0


def _build(seed, bug=None):
    torch.manual_seed(seed)
    env = ContinuousCartPole()
    env.seed(seed)
    env.action_space.seed(seed)
    rng = np.random.default_rng(seed)
    device = torch.device("cpu")

    state_dim = env.observation_space.shape[0]
    action_dim = env.action_space.shape[0]
    max_action = float(env.action_space.high[0])

    replay_buffer = ReplayBuffer(state_dim, action_dim, device, max_size=BUFFER, rng=rng)
    generate_buffer(env, action_dim, max_action, replay_buffer, rng)

    policy = BCQ(state_dim, action_dim, max_action, device, 0.99, 0.005, 0.75, 0.05, bug=bug)

    state, action, next_state, reward, not_done = replay_buffer.sample(100)
    batch = ({"state": state, "action": action}, (next_state, reward, not_done))

    def loss_fn(outputs, targets):
        """train()'s critic loss on the critic's outputs for ``batch`` (the same lines)."""
        current_Q1, current_Q2 = outputs
        next_state, reward, not_done = targets
        target_Q = policy.target_Q(next_state, reward, not_done, next_state.shape[0])
        return F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q2, target_Q)

    def train_step():
        return policy.train(replay_buffer, iterations=1, batch_size=100)

    return Program(name="bcq_continuous", model=policy.critic, batch=batch, loss_fn=loss_fn,
                   optimizer=policy.critic_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``not_done`` left out of the critic target (classic): the value bootstraps through the pole's fall.
    Bug("not_done_dropped", functools.partial(_build, bug="not_done_dropped"), "learning_ledger", ("TASK",)),
    # ``next_state.repeat(10, 1)`` for ``repeat_interleave(next_state, 10, 0)`` (classic layout slip): the ten
    # copies are tiled, so ``reshape(batch_size, -1).max(1)`` takes each row's max over ten *different* next
    # states and every transition is regressed on another transition's target.
    Bug("next_state_repeated_not_interleaved", functools.partial(_build, bug="next_state_repeated_not_interleaved"),
        "learning_ledger", ("TASK",)),
    # the critic's Polyak update with source and target swapped (classic argument-order slip): after every step the
    # critic is pulled back toward a target network that never moves.
    # Every critic parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("soft_update_reversed", functools.partial(_build, bug="soft_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
]

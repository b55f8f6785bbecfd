# ruff: noqa: UP004, UP008, UP034, RUF059, PLR0402
"""DDPG (Lillicrap et al. 2015) as written in ikostrikov/pytorch-ddpg-naf (``--algo DDPG``): a deterministic tanh
actor and a Q critic, both 2-layer MLPs with a hand-written LayerNorm, target copies updated by Polyak averaging
(tau 0.001), Ornstein-Uhlenbeck exploration noise, a replay memory, 5 updates per environment step once it holds more
than a batch; critic MSE against ``r + gamma * mask * Q'(s', mu'(s'))``, actor loss ``-Q(s, mu(s)).mean()``, Adam
(1e-4 actor, 1e-3 critic).

Source: https://github.com/ikostrikov/pytorch-ddpg-naf
Commit: ec5a46927faf9a1f85d895416ad1d7e02ac0df04
Files: ``ddpg.py`` (``soft_update``, ``hard_update``, ``LayerNorm``, ``Actor``, ``Critic``, ``DDPG``), ``main.py``
(arguments, seeding, the episode loop), ``ounoise.py`` (``OUNoise``), ``normalized_actions.py``, ``replay_memory.py``
(interface only, see below)
License: MIT (Copyright (c) 2017 Ilya Kostrikov; full text in LICENSES/ikostrikov-pytorch-ddpg-naf.txt)
Domain: RL, continuous actor-critic (DDPG with OU noise, LayerNorm MLPs, soft target updates; numpy pendulum)

Kept as written: ``LayerNorm`` (per-sample mean/std over all features, ``gamma`` uniform-initialized), ``Actor`` and
``Critic`` (hidden 128, the action concatenated after the critic's first layer, output layers scaled by 0.1),
``DDPG.__init__`` / ``select_action`` (eval mode around the actor, the noise added, clamp to [-1, 1]) /
``update_parameters`` (targets from ``actor_target`` and ``critic_target``, critic step, actor step, both soft
updates), ``OUNoise`` (theta 0.15, sigma 0.2, ``scale`` set per episode from noise_scale 0.3), main.py's loop body
(``torch.Tensor([state])``, ``mask = torch.Tensor([not done])``, ``memory.push``, ``updates_per_step`` 5 updates of
``batch_size`` 128 once ``len(memory) > batch_size``, the reset at episode end), gamma 0.99, tau 0.001.

Deviations from the original:
- gym's HalfCheetah-v2 is replaced by the Pendulum written out in numpy in ``_continuous_control.py`` (Pendulum-v1's
  equations, 200-step time limit with ``done`` at the limit; the loop stores ``mask = not done`` as written);
  ``NormalizedActions`` is written as a small wrapper with the repository's ``_action`` (``[-1, 1]`` to the action
  range) instead of a ``gym.ActionWrapper``; the env is seeded with ``seed`` (the script's default seed is 4).
- ``ddpg.py`` patches ``nn.LayerNorm = LayerNorm`` for the whole process; here ``Actor`` and ``Critic`` name the
  hand-written ``LayerNorm`` directly (the same layers, without changing torch.nn for other modules).
- ``replay_memory.py`` says it was taken from pytorch/tutorials, one of this project's independent-check
  repositories: it is not copied; the same interface (``Transition``, ``push``, ``sample`` by ``random.sample``,
  ``__len__``, a ring of ``capacity``) is written here.
- ``torch.Tensor([state])`` is written ``torch.Tensor(np.array([state]))`` (the same tensor, without torch's warning
  about lists of arrays).
- sizes: none changed (hidden 128, batch 128, replay 1e6); ``random`` and ``np.random`` are seeded from ``seed``.
- the tensorboardX writer, tqdm, the test episode every 10 episodes, param noise (off by default) and saving are
  dropped; ``train_step`` is one environment step of the episode loop (with its 5 updates) and returns the mean of
  those updates' ``value_loss``; the loop first runs, at build time, the 129 environment steps before updates begin.
- the Program's model is the critic (with its optimizer), its batch one replay sample and its ``loss_fn``
  ``update_parameters``' critic loss on the critic's output (the same lines).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum


# ddpg.py
def soft_update(target, source, tau):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(target_param.data * (1.0 - tau) + param.data * tau)

def hard_update(target, source):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(param.data)

"""
From: https://github.com/pytorch/pytorch/issues/1959
There's an official LayerNorm implementation in pytorch now, but it hasn't been included in 
pip version yet. This is a temporary version
This slows down training by a bit
"""
class LayerNorm(nn.Module):
    def __init__(self, num_features, eps=1e-5, affine=True):
        super(LayerNorm, self).__init__()
        self.num_features = num_features
        self.affine = affine
        self.eps = eps

        if self.affine:
            self.gamma = nn.Parameter(torch.Tensor(num_features).uniform_())
            self.beta = nn.Parameter(torch.zeros(num_features))

    def forward(self, x):
        shape = [-1] + [1] * (x.dim() - 1)
        mean = x.view(x.size(0), -1).mean(1).view(*shape)
        std = x.view(x.size(0), -1).std(1).view(*shape)

        y = (x - mean) / (std + self.eps)
        if self.affine:
            shape = [1, -1] + [1] * (x.dim() - 2)
            y = self.gamma.view(*shape) * y + self.beta.view(*shape)
        return y

# nn.LayerNorm = LayerNorm  (port) the classes below use this LayerNorm directly instead of patching torch.nn


class Actor(nn.Module):
    def __init__(self, hidden_size, num_inputs, action_space):
        super(Actor, self).__init__()
        self.action_space = action_space
        num_outputs = action_space.shape[0]

        self.linear1 = nn.Linear(num_inputs, hidden_size)
        self.ln1 = LayerNorm(hidden_size)

        self.linear2 = nn.Linear(hidden_size, hidden_size)
        self.ln2 = LayerNorm(hidden_size)

        self.mu = nn.Linear(hidden_size, num_outputs)
        self.mu.weight.data.mul_(0.1)
        self.mu.bias.data.mul_(0.1)

    def forward(self, inputs):
        x = inputs
        x = self.linear1(x)
        x = self.ln1(x)
        x = F.relu(x)
        x = self.linear2(x)
        x = self.ln2(x)
        x = F.relu(x)
        mu = F.tanh(self.mu(x))
        return mu

class Critic(nn.Module):
    def __init__(self, hidden_size, num_inputs, action_space):
        super(Critic, self).__init__()
        self.action_space = action_space
        num_outputs = action_space.shape[0]

        self.linear1 = nn.Linear(num_inputs, hidden_size)
        self.ln1 = LayerNorm(hidden_size)

        self.linear2 = nn.Linear(hidden_size+num_outputs, hidden_size)
        self.ln2 = LayerNorm(hidden_size)

        self.V = nn.Linear(hidden_size, 1)
        self.V.weight.data.mul_(0.1)
        self.V.bias.data.mul_(0.1)

    def forward(self, inputs, actions):
        x = inputs
        x = self.linear1(x)
        x = self.ln1(x)
        x = F.relu(x)

        x = torch.cat((x, actions), 1)
        x = self.linear2(x)
        x = self.ln2(x)
        x = F.relu(x)
        V = self.V(x)
        return V

class DDPG(object):
    def __init__(self, gamma, tau, hidden_size, num_inputs, action_space, bug=None):
        self.bug = bug
        self.num_inputs = num_inputs
        self.action_space = action_space

        self.actor = Actor(hidden_size, self.num_inputs, self.action_space)
        self.actor_target = Actor(hidden_size, self.num_inputs, self.action_space)
        self.actor_perturbed = Actor(hidden_size, self.num_inputs, self.action_space)
        self.actor_optim = Adam(self.actor.parameters(), lr=1e-4)

        self.critic = Critic(hidden_size, self.num_inputs, self.action_space)
        self.critic_target = Critic(hidden_size, self.num_inputs, self.action_space)
        self.critic_optim = Adam(self.critic.parameters(), lr=1e-3)

        self.gamma = gamma
        self.tau = tau

        hard_update(self.actor_target, self.actor)  # Make sure target is with the same weight
        hard_update(self.critic_target, self.critic)


    def select_action(self, state, action_noise=None, param_noise=None):
        self.actor.eval()
        if param_noise is not None: 
            mu = self.actor_perturbed((Variable(state)))
        else:
            mu = self.actor((Variable(state)))

        self.actor.train()
        mu = mu.data

        if action_noise is not None:
            mu += torch.Tensor(action_noise.noise())

        return mu.clamp(-1, 1)


    def update_parameters(self, batch):
        state_batch = Variable(torch.cat(batch.state))
        action_batch = Variable(torch.cat(batch.action))
        reward_batch = Variable(torch.cat(batch.reward))
        mask_batch = Variable(torch.cat(batch.mask))
        next_state_batch = Variable(torch.cat(batch.next_state))
        
        next_action_batch = self.actor_target(next_state_batch)
        next_state_action_values = self.critic_target(next_state_batch, next_action_batch)

        reward_batch = reward_batch.unsqueeze(1)
        mask_batch = mask_batch.unsqueeze(1)
        if self.bug == "naf_target_typo":
            expected_state_action_batch = reward_batch + (self.gamma * mask_batch + next_state_action_values)
        else:
            expected_state_action_batch = reward_batch + (self.gamma * mask_batch * next_state_action_values)

        if self.bug != "critic_zero_grad_dropped":
            self.critic_optim.zero_grad()

        state_action_batch = self.critic((state_batch), (action_batch))

        value_loss = F.mse_loss(state_action_batch, expected_state_action_batch)
        value_loss.backward()
        self.critic_optim.step()

        self.actor_optim.zero_grad()

        policy_loss = -self.critic((state_batch),self.actor((state_batch)))

        policy_loss = policy_loss.mean()
        policy_loss.backward()
        self.actor_optim.step()

        soft_update(self.actor_target, self.actor, self.tau)
        if self.bug == "soft_update_args_swapped":
            soft_update(self.critic, self.critic_target, self.tau)
        else:
            soft_update(self.critic_target, self.critic, self.tau)

        return value_loss.item(), policy_loss.item()


# ounoise.py
# from https://github.com/songrotek/DDPG/blob/master/ou_noise.py
class OUNoise:

    def __init__(self, action_dimension, scale=0.1, mu=0, theta=0.15, sigma=0.2):
        self.action_dimension = action_dimension
        self.scale = scale
        self.mu = mu
        self.theta = theta
        self.sigma = sigma
        self.state = np.ones(self.action_dimension) * self.mu
        self.reset()

    def reset(self):
        self.state = np.ones(self.action_dimension) * self.mu

    def noise(self):
        x = self.state
        dx = self.theta * (self.mu - x) + self.sigma * np.random.randn(len(x))
        self.state = x + dx
        return self.state * self.scale


# (port) replay_memory.py is not copied (the repository took it from an independent-check repository): the same
# interface written here, a ring buffer of Transition tuples sampled with random.sample.
Transition = namedtuple(
    'Transition', ('state', 'action', 'mask', 'next_state', 'reward'))


class ReplayMemory:
    def __init__(self, capacity):
        self.capacity, self.memory, self.position = capacity, [], 0

    def push(self, *args):
        if len(self.memory) < self.capacity:
            self.memory.append(None)
        self.memory[self.position] = Transition(*args)
        self.position = (self.position + 1) % self.capacity

    def sample(self, batch_size):
        return random.sample(self.memory, batch_size)

    def __len__(self):
        return len(self.memory)


# normalized_actions.py (the ActionWrapper's _action, on a plain wrapper)
class NormalizedActions:
    def __init__(self, env):
        self.env = env
        self.action_space = env.action_space
        self.observation_space = env.observation_space

    def _action(self, action):
        action = (action + 1) / 2  # [-1, 1] => [0, 1]
        action *= (self.action_space.high - self.action_space.low)
        action += self.action_space.low
        return action

    def seed(self, seed):
        self.env.seed(seed)

    def reset(self):
        return self.env.reset()

    def step(self, action):
        return self.env.step(self._action(action))


# main.py
def _build(seed, bug=None):
    class args:  # (port) argparse defaults of main.py, --algo DDPG
        algo = "DDPG"
        gamma = 0.99
        tau = 0.001
        ou_noise = True
        param_noise = False
        noise_scale = 0.3
        final_noise_scale = 0.3
        exploration_end = 100
        batch_size = 128
        hidden_size = 128
        updates_per_step = 5
        replay_size = 1000000

    env = NormalizedActions(Pendulum())

    env.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)  # (port) ReplayMemory.sample draws from random
    agent = DDPG(args.gamma, args.tau, args.hidden_size,
                 env.observation_space.shape[0], env.action_space, bug=bug)

    memory = ReplayMemory(args.replay_size)

    ounoise = OUNoise(env.action_space.shape[0]) if args.ou_noise else None
    param_noise = None

    def loop():
        i_episode = 0
        while True:
            state = torch.Tensor(np.array([env.reset()]))

            if args.ou_noise:
                ounoise.scale = (args.noise_scale - args.final_noise_scale) * max(0, args.exploration_end -
                                                                              i_episode) / args.exploration_end + args.final_noise_scale
                ounoise.reset()

            episode_reward = 0
            while True:
                action = agent.select_action(state, ounoise, param_noise)
                next_state, reward, done, _ = env.step(action.numpy()[0])
                episode_reward += reward

                action = torch.Tensor(action)
                mask = torch.Tensor([not done])
                next_state = torch.Tensor(np.array([next_state]))
                reward = torch.Tensor([reward])

                memory.push(state, action, mask, next_state, reward)

                state = next_state

                losses = []
                if len(memory) > args.batch_size:
                    for _ in range(args.updates_per_step):
                        transitions = memory.sample(args.batch_size)
                        batch = Transition(*zip(*transitions))

                        value_loss, policy_loss = agent.update_parameters(batch)
                        losses.append(value_loss)
                yield float(np.mean(losses)) if losses else None
                if done:
                    break
            i_episode += 1

    steps = loop()
    while len(memory) <= args.batch_size:
        next(steps)

    rs = random.Random(seed)  # (port) the evidence batch is drawn without touching the loop's random
    sample = Transition(*zip(*rs.sample(memory.memory, args.batch_size)))
    state_b, action_b = torch.cat(sample.state), torch.cat(sample.action)
    batch = ((state_b, action_b), (torch.cat(sample.next_state), torch.cat(sample.reward), torch.cat(sample.mask)))

    def loss_fn(state_action_batch, targets):
        """update_parameters' critic loss on the critic's output for ``batch`` (the same lines)."""
        next_state_batch, reward_batch, mask_batch = targets
        next_action_batch = agent.actor_target(next_state_batch)
        next_state_action_values = agent.critic_target(next_state_batch, next_action_batch)
        reward_batch = reward_batch.unsqueeze(1)
        mask_batch = mask_batch.unsqueeze(1)
        if bug == "naf_target_typo":
            expected_state_action_batch = reward_batch + (agent.gamma * mask_batch + next_state_action_values)
        else:
            expected_state_action_batch = reward_batch + (agent.gamma * mask_batch * next_state_action_values)
        return F.mse_loss(state_action_batch, expected_state_action_batch)

    return Program(name="ddpgnaf_ddpg", model=agent.critic, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.critic_optim, train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
    # the target line of this repository's naf.py at the ported commit, reward + (gamma * mask + V'), in DDPG's
    # update: https://github.com/ikostrikov/pytorch-ddpg-naf/issues/16 (and PR #11): the discount and the done mask
    # no longer multiply the bootstrapped value.
    Bug("naf_target_typo", functools.partial(_build, bug="naf_target_typo"), "learning_ledger", ("TASK",)),
    # classic: soft_update's arguments swapped for the critic: the online critic is pulled toward its target.
    Bug("soft_update_args_swapped", functools.partial(_build, bug="soft_update_args_swapped"), "step_probe", (),
        kind="step.soft_update_reversed"),
    # classic: self.critic_optim.zero_grad() left out: the critic's gradients pile up across updates.
    Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

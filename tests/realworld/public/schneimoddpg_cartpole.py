# ruff: noqa: UP004, UP008, PLR0402
"""DDPG with LayerNorm actor and critic, from schneimo/ddpg-pytorch (``train.py``, ``ddpg.py``, ``utils/``): a tanh
actor and a critic that inserts the action after its first layer, both Linear + LayerNorm + ReLU with fan-in uniform
initialization and small final layers; Ornstein-Uhlenbeck exploration noise reset every episode; a replay memory of
``Transition`` tuples; after every environment step one update on a sampled batch: the critic's MSE to
``r + (1 - done) * gamma * Q_target(s', mu_target(s'))`` (Adam lr 1e-3, weight decay 1e-2), the actor's
``-Q(s, mu(s)).mean()`` (Adam lr 1e-4), then soft updates of both target networks (tau 0.001).

Source: https://github.com/schneimo/ddpg-pytorch
Commit: 7fb6383627b3b95ee55a36322f7e496aef03872b
Files: ``ddpg.py`` (``soft_update``, ``hard_update``, ``DDPG``: ``__init__``, ``calc_action``, ``update_params``),
``utils/nets.py`` (``Actor``, ``Critic``, ``fan_in_uniform_init``), ``utils/noise.py``
(``OrnsteinUhlenbeckActionNoise``), ``utils/replay_memory.py`` (``ReplayMemory``, ``Transition``),
``wrappers/normalized_actions.py`` (``NormalizedActions``), ``train.py`` (the training loop)
License: MIT (Copyright (c) 2019 Moritz Schneider; full text in LICENSES/schneimo-ddpg-pytorch.txt)
Domain: RL, actor-critic for continuous actions (DDPG: replay, OU noise, soft-updated target actor and critic)

Kept as written: ``Actor`` and ``Critic`` (layers, LayerNorms, initialization), ``DDPG.__init__`` (optimizers, the
hard copy into the targets), ``calc_action`` (eval/train around the actor, noise added, clamped to the action
space), ``update_params`` line by line, ``soft_update``, ``OrnsteinUhlenbeckActionNoise``, ``ReplayMemory``,
``NormalizedActions.action``, the body of ``train.py``'s inner loop (act, step, push ``(state, action, mask,
next_state, reward)``, update once the memory holds more than a batch), the noise reset per episode, and the
defaults gamma 0.99, tau 0.001, noise_stddev 0.2.

Deviations from the original:
- Roboschool's InvertedPendulumSwingup-v1 is replaced by the continuous-force cart-pole written out in numpy in
  ``_continuous_control.py`` (CartPole-v1's equations, force ``10 * clip(a, -1, 1)``, reward 1 per step, ``done``
  when the pole falls, the cart leaves the track or at 500 steps); ``NormalizedActions`` is kept as a plain wrapper
  (no gym); the environment is seeded from ``seed``;
- sizes for 2 CPU cores: hidden_size (400, 300) -> (64, 64), batch_size 64 -> 32, replay_size 1e6 -> 1e5;
- checkpoints, tensorboard, logging and the test episodes are dropped; the device is the CPU;
- one ``train_step`` runs 8 passes of the inner loop (a new episode, with ``ou_noise.reset()``, when one ends) and
  returns the mean of ``value_loss + policy_loss`` over their updates (the loop sums them per episode for its log);
  ``build`` first runs the loop until the memory holds more than a batch;
- the Program declares the critic with its MSE on a replay batch and targets from the initial target networks;
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
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole

device = torch.device("cpu")
STEPS_PER_TRAIN_STEP = 8  # (port) inner-loop passes per train_step

# utils/nets.py
WEIGHTS_FINAL_INIT = 3e-3
BIAS_FINAL_INIT = 3e-4


def fan_in_uniform_init(tensor, fan_in=None):
    """Utility function for initializing actor and critic"""
    if fan_in is None:
        fan_in = tensor.size(-1)

    w = 1. / np.sqrt(fan_in)
    nn.init.uniform_(tensor, -w, w)


class Actor(nn.Module):
    def __init__(self, hidden_size, num_inputs, action_space):
        super(Actor, self).__init__()
        self.action_space = action_space
        num_outputs = action_space.shape[0]

        # Layer 1
        self.linear1 = nn.Linear(num_inputs, hidden_size[0])
        self.ln1 = nn.LayerNorm(hidden_size[0])

        # Layer 2
        self.linear2 = nn.Linear(hidden_size[0], hidden_size[1])
        self.ln2 = nn.LayerNorm(hidden_size[1])

        # Output Layer
        self.mu = nn.Linear(hidden_size[1], num_outputs)

        # Weight Init
        fan_in_uniform_init(self.linear1.weight)
        fan_in_uniform_init(self.linear1.bias)

        fan_in_uniform_init(self.linear2.weight)
        fan_in_uniform_init(self.linear2.bias)

        nn.init.uniform_(self.mu.weight, -WEIGHTS_FINAL_INIT, WEIGHTS_FINAL_INIT)
        nn.init.uniform_(self.mu.bias, -BIAS_FINAL_INIT, BIAS_FINAL_INIT)

    def forward(self, inputs):
        x = inputs
        # Layer 1
        x = self.linear1(x)
        x = self.ln1(x)
        x = F.relu(x)
        # Layer 2
        x = self.linear2(x)
        x = self.ln2(x)
        x = F.relu(x)
        # Output
        mu = torch.tanh(self.mu(x))
        return mu


class Critic(nn.Module):
    def __init__(self, hidden_size, num_inputs, action_space):
        super(Critic, self).__init__()
        self.action_space = action_space
        num_outputs = action_space.shape[0]

        # Layer 1
        self.linear1 = nn.Linear(num_inputs, hidden_size[0])
        self.ln1 = nn.LayerNorm(hidden_size[0])

        # Layer 2
        # In the second layer the actions will be inserted also
        self.linear2 = nn.Linear(hidden_size[0] + num_outputs, hidden_size[1])
        self.ln2 = nn.LayerNorm(hidden_size[1])

        # Output layer (single value)
        self.V = nn.Linear(hidden_size[1], 1)

        # Weight Init
        fan_in_uniform_init(self.linear1.weight)
        fan_in_uniform_init(self.linear1.bias)

        fan_in_uniform_init(self.linear2.weight)
        fan_in_uniform_init(self.linear2.bias)

        nn.init.uniform_(self.V.weight, -WEIGHTS_FINAL_INIT, WEIGHTS_FINAL_INIT)
        nn.init.uniform_(self.V.bias, -BIAS_FINAL_INIT, BIAS_FINAL_INIT)

    def forward(self, inputs, actions):
        x = inputs
        # Layer 1
        x = self.linear1(x)
        x = self.ln1(x)
        x = F.relu(x)
        # Layer 2
        x = torch.cat((x, actions), 1)  # Insert the actions
        x = self.linear2(x)
        x = self.ln2(x)
        x = F.relu(x)
        # Output
        V = self.V(x)
        return V


# utils/replay_memory.py
Transition = namedtuple('Transition',
                        ('state', 'action', 'done', 'next_state', 'reward')
                        )


class ReplayMemory(object):

    def __init__(self, capacity):
        self.capacity = capacity
        self.memory = []
        self.position = 0

    def push(self, *args):
        """Saves a transition."""
        if len(self.memory) < self.capacity:
            self.memory.append(None)
        self.memory[self.position] = Transition(*args)
        self.position = (self.position + 1) % self.capacity

    def sample(self, batch_size):
        return random.sample(self.memory, batch_size)

    def __len__(self):
        return len(self.memory)


# utils/noise.py
class OrnsteinUhlenbeckActionNoise:
    def __init__(self, mu, sigma, theta=.15, dt=1e-2, x0=None):
        self.theta = theta
        self.mu = mu
        self.sigma = sigma
        self.dt = dt
        self.x0 = x0
        self.reset()

    def noise(self):
        x = self.x_prev + self.theta * (self.mu - self.x_prev) * self.dt \
            + self.sigma * np.sqrt(self.dt) * np.random.normal(size=self.mu.shape)
        self.x_prev = x
        return x

    def reset(self):
        self.x_prev = self.x0 if self.x0 is not None else np.zeros_like(self.mu)


# wrappers/normalized_actions.py
class NormalizedActions:
    """(port) gym.ActionWrapper written out: ``step`` maps the action through ``action`` as the wrapper does."""

    def __init__(self, env):
        self.env = env
        self.action_space = env.action_space
        self.observation_space = env.observation_space

    def reset(self):
        return self.env.reset()

    def step(self, action):
        return self.env.step(self.action(action))

    def action(self, action):
        action = (action + 1) / 2  # [-1, 1] => [0, 1]
        action *= (self.action_space.high - self.action_space.low)
        action += self.action_space.low
        return action


# ddpg.py
def soft_update(target, source, tau):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(target_param.data * (1.0 - tau) + param.data * tau)


def hard_update(target, source):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(param.data)


class DDPG(object):

    def __init__(self, gamma, tau, hidden_size, num_inputs, action_space, checkpoint_dir=None, bug=None):
        self.gamma = gamma
        self.tau = tau
        self.action_space = action_space
        self.bug = bug

        # Define the actor
        self.actor = Actor(hidden_size, num_inputs, self.action_space).to(device)
        self.actor_target = Actor(hidden_size, num_inputs, self.action_space).to(device)

        # Define the critic
        self.critic = Critic(hidden_size, num_inputs, self.action_space).to(device)
        self.critic_target = Critic(hidden_size, num_inputs, self.action_space).to(device)

        # Define the optimizers for both networks
        self.actor_optimizer = Adam(self.actor.parameters(),
                                    lr=1e-4)  # optimizer for the actor network
        self.critic_optimizer = Adam(self.critic.parameters(),
                                     lr=1e-3,
                                     weight_decay=1e-2
                                     )  # optimizer for the critic network

        # Make sure both targets are with the same weight
        hard_update(self.actor_target, self.actor)
        hard_update(self.critic_target, self.critic)

    def calc_action(self, state, action_noise=None):
        x = state.to(device)

        # Get the continous action value to perform in the env
        self.actor.eval()  # Sets the actor in evaluation mode
        mu = self.actor(x)
        self.actor.train()  # Sets the actor in training mode
        mu = mu.data

        # During training we add noise for exploration
        if action_noise is not None:
            noise = torch.Tensor(action_noise.noise()).to(device)
            mu += noise

        # Clip the output according to the action space of the env
        mu = mu.clamp(self.action_space.low[0], self.action_space.high[0])

        return mu

    def update_params(self, batch):
        # Get tensors from the batch
        state_batch = torch.cat(batch.state).to(device)
        action_batch = torch.cat(batch.action).to(device)
        reward_batch = torch.cat(batch.reward).to(device)
        done_batch = torch.cat(batch.done).to(device)
        next_state_batch = torch.cat(batch.next_state).to(device)

        # Get the actions and the state values to compute the targets
        next_action_batch = self.actor_target(next_state_batch)
        next_state_action_values = self.critic_target(next_state_batch, next_action_batch.detach())

        # Compute the target
        reward_batch = reward_batch.unsqueeze(1)
        done_batch = done_batch.unsqueeze(1)
        if self.bug == "done_mask_dropped":
            expected_values = reward_batch + self.gamma * next_state_action_values
        else:
            expected_values = reward_batch + (1.0 - done_batch) * self.gamma * next_state_action_values

        # Update the critic network
        self.critic_optimizer.zero_grad()
        state_action_batch = self.critic(state_batch, action_batch)
        value_loss = F.mse_loss(state_action_batch, expected_values.detach())
        value_loss.backward()
        self.critic_optimizer.step()

        # Update the actor network
        self.actor_optimizer.zero_grad()
        policy_loss = -self.critic(state_batch, self.actor(state_batch))
        policy_loss = policy_loss.mean()
        policy_loss.backward()
        self.actor_optimizer.step()

        # Update the target networks
        soft_update(self.actor_target, self.actor, self.tau)
        if self.bug == "critic_soft_update_reversed":
            soft_update(self.critic, self.critic_target, self.tau)
        else:
            soft_update(self.critic_target, self.critic, self.tau)

        return value_loss.item(), policy_loss.item()


def _build(seed, bug=None):
    args = {"gamma": 0.99, "tau": 0.001, "batch_size": 32, "replay_size": 1e5, "noise_stddev": 0.2, "hidden_size": (64, 64)}
    env = NormalizedActions(ContinuousCartPole())
    env.env.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    agent = DDPG(args["gamma"], args["tau"], tuple(args["hidden_size"]), env.observation_space.shape[0],
                 env.action_space, bug=bug)
    memory = ReplayMemory(int(args["replay_size"]))
    nb_actions = env.action_space.shape[-1]
    ou_noise = OrnsteinUhlenbeckActionNoise(mu=np.zeros(nb_actions),
                                            sigma=float(args["noise_stddev"]) * np.ones(nb_actions))
    loop = {"state": None}

    def inner_step():
        # train.py: one pass of the inner `while True` loop (a new episode when the last one ended)
        if loop["state"] is None:
            ou_noise.reset()
            loop["state"] = torch.Tensor(np.array([env.reset()])).to(device)
        state = loop["state"]
        action = agent.calc_action(state, ou_noise)
        next_state, reward, done, _ = env.step(action.cpu().numpy()[0])
        mask = torch.Tensor([done]).to(device)
        reward = torch.Tensor([reward]).to(device)
        next_state = torch.Tensor(np.array([next_state])).to(device)
        memory.push(state, action, mask, next_state, reward)
        loop["state"] = None if done else next_state
        if len(memory) > args["batch_size"]:
            transitions = memory.sample(args["batch_size"])
            batch = Transition(*zip(*transitions))
            value_loss, policy_loss = agent.update_params(batch)
            return value_loss + policy_loss
        return None

    while len(memory) <= args["batch_size"]:
        inner_step()
    b = Transition(*zip(*memory.sample(args["batch_size"])))
    states, actions = torch.cat(b.state), torch.cat(b.action)
    with torch.no_grad():
        next_states = torch.cat(b.next_state)
        q_next = agent.critic_target(next_states, agent.actor_target(next_states))
        targets = torch.cat(b.reward).unsqueeze(1) + (1.0 - torch.cat(b.done).unsqueeze(1)) * agent.gamma * q_next
    batch = ({"inputs": states, "actions": actions}, targets)

    def train_step():
        losses = [inner_step() for _ in range(STEPS_PER_TRAIN_STEP)]
        return float(np.mean(losses))

    return Program(name="schneimoddpg_cartpole", model=agent.critic, batch=batch, loss_fn=F.mse_loss,
                   optimizer=agent.critic_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the (1 - done) mask left out of the critic's target, so the value of a fallen pole bootstraps from the next
    # state as if the episode went on (the bug reported for another DDPG: https://github.com/seungeunrho/minimalRL/issues/32,
    # https://github.com/seungeunrho/minimalRL/pull/21).
    Bug("done_mask_dropped", functools.partial(_build, bug="done_mask_dropped"), "learning_ledger", ("TASK",)),
    # classic: soft_update's target and source swapped for the critic, so the trained critic is pulled back toward a
    # target network that never moves. Every critic parameter is touched alike: declared by its mechanism.
    Bug("critic_soft_update_reversed", functools.partial(_build, bug="critic_soft_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
]

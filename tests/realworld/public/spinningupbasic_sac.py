"""Soft actor-critic (the original 2018 variant with a state-value network) on Pendulum from Kaixhin/spinning-up-basic:
a tanh-squashed Gaussian ``SoftActor`` (``TransformedDistribution`` with ``TanhTransform`` and an affine map to the
action bounds), two state-action critics and a state-value critic with a Polyak-averaged target, a replay deque,
and one update per environment step: the V regression on ``min(Q1, Q2) - alpha * log pi``, the Q regression on
``r + gamma * (1 - d) * V_target(s')``, the reparameterized policy loss ``alpha * log pi - min(Q1, Q2)``.

Source: https://github.com/Kaixhin/spinning-up-basic
Commit: ac5f2219c3c6c657b460c3150572d8deb3abfba0
Files: ``sac.py``, ``models.py`` (``SoftActor``, ``Critic``, ``create_target_network``, ``update_target_network``),
``env.py``, ``hyperparams.py``
License: MIT (Copyright (c) 2019 Kai Arulkumaran; full text in LICENSES/Kaixhin-spinning-up-basic.txt)
Domain: RL, off-policy actor-critic (SAC with a V-function, twin Q, target V, replay)

Kept as written: ``SoftActor``, ``Critic`` (two tanh hidden layers of ``HIDDEN_SIZE`` 32, the output squeezed),
``create_target_network`` and ``update_target_network``, the hyperparameters (DISCOUNT 0.99, ENTROPY_WEIGHT 0.2,
LEARNING_RATE 1e-3 for the three Adam optimisers, OFF_POLICY_BATCH_SIZE 128, POLYAK_FACTOR 0.995, UPDATE_INTERVAL 1),
``sac.py``'s loop body (the uniform ``2 * random.random() - 1`` action before ``UPDATE_START``, ``actor(state)
.sample()`` after, the dict transitions in the deque, ``random.sample`` of a batch concatenated per key, the three
updates in order and the target update) and ``test`` (the mean action over one episode).

Deviations from the original:
- gym's Pendulum-v0 is replaced by the numpy ``Pendulum`` of ``_continuous_control.py`` (Pendulum's equations and
  constants, 200-step episodes with ``done`` at the time limit, seeded); ``Env`` wraps it with the same
  ``reset`` / ``step`` tensor conversions.
- sizes for 2 CPU cores: UPDATE_START 10000 -> 500 (the random-action warm-up is run in ``build``, so the replay
  holds 500 transitions before the first update); REPLAY_SIZE 100000 kept; MAX_STEPS, tqdm, ``plot`` and the
  TEST_INTERVAL evaluation inside the loop are dropped (``test`` is the ``eval_fn``, returning the negated
  episode return). ``SELF_CHECK_STEPS`` is 150 (the Q loss falls from the first updates' large TD errors).
- the module-level script is one function: ``train_step`` is one iteration of its ``for step`` loop after the
  warm-up (an environment step, then the update), returning the critics' ``value_loss.item()`` (the Q loss, the
  last value the name holds). ``random`` is ``random.Random(seed)``, ``torch.manual_seed(seed)``.
- the Program's model is ``critic_1`` with ``critics_optimiser``, its batch a replay sample ``([state, action],
  (reward, next_state, done))``, its ``loss_fn`` the Q-regression lines.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP039, SIM118

from __future__ import annotations

import copy
import functools
import pathlib
import random
import sys
from collections import deque

import torch
from torch import nn, optim
from torch.distributions import Independent, Normal, TransformedDistribution
from torch.distributions.transforms import AffineTransform, TanhTransform

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _api import Bug, Program
from _continuous_control import Pendulum

# hyperparams.py
DISCOUNT = 0.99
ENTROPY_WEIGHT = 0.2
HIDDEN_SIZE = 32
LEARNING_RATE = 0.001
OFF_POLICY_BATCH_SIZE = 128
POLYAK_FACTOR = 0.995
REPLAY_SIZE = 100000
UPDATE_INTERVAL = 1
UPDATE_START = 500  # the original 10000
BATCH_SIZE = OFF_POLICY_BATCH_SIZE
SELF_CHECK_STEPS = 150


# env.py
class Env():
  def __init__(self, seed=0):
    self._env = Pendulum()  # deviation: gym.make('Pendulum-v0')
    self._env.seed(seed)
    self.observation_space = self._env.observation_space
    self.action_space = self._env.action_space

  def reset(self):
    state = self._env.reset()
    return torch.tensor(state, dtype=torch.float32).unsqueeze(dim=0)

  def step(self, action):
    state, reward, done, _ = self._env.step(action[0].detach().numpy())
    return torch.tensor(state, dtype=torch.float32).unsqueeze(dim=0), reward, done


# models.py
class SoftActor(nn.Module):
  def __init__(self, observation_size, action_size, hidden_size, min_action, max_action):
    super().__init__()
    self.log_std_min, self.log_std_max = -20, 2  # Constrain range of standard deviations to prevent very deterministic/stochastic policies
    self.action_loc, self.action_scale = torch.tensor(max_action + min_action, dtype=torch.float32) / 2, torch.tensor(max_action - min_action, dtype=torch.float32) / 2    # Affine transformation from (-1, 1) to action space bounds
    layers = [nn.Linear(observation_size, hidden_size), nn.Tanh(), nn.Linear(hidden_size, hidden_size), nn.Tanh(), nn.Linear(hidden_size, 2 * action_size)]
    self.policy = nn.Sequential(*layers)

  def forward(self, state):
    policy_mean, policy_log_std = self.policy(state).chunk(2, dim=1)
    policy_log_std = torch.clamp(policy_log_std, min=self.log_std_min, max=self.log_std_max)
    policy = TransformedDistribution(Independent(Normal(policy_mean, policy_log_std.exp()), 1), [TanhTransform(cache_size=1), AffineTransform(loc=self.action_loc, scale=self.action_scale)])
    policy.mean_ = self.action_scale * torch.tanh(policy.base_dist.mean) + self.action_loc  # TODO: See if mean attr can be overwritten
    return policy


class Critic(nn.Module):
  def __init__(self, observation_size, action_size, hidden_size, state_action=False, layer_norm=False, bug=None):
    super().__init__()
    self.state_action = state_action
    self.bug = bug
    layers = [nn.Linear(observation_size + (action_size if state_action else 0), hidden_size), nn.Tanh(), nn.Linear(hidden_size, hidden_size), nn.Tanh(), nn.Linear(hidden_size, action_size)]
    if layer_norm:
      layers = layers[:1] + [nn.LayerNorm(hidden_size)] + layers[1:3] + [nn.LayerNorm(hidden_size)] + layers[3:]  # Insert layer normalisation between fully-connected layers and nonlinearities
    self.value = nn.Sequential(*layers)

  def forward(self, state, action=None):
    if self.state_action:
      value = self.value(torch.cat([state, action], dim=1))
    else:
      value = self.value(state)
    if self.bug == "critic_output_not_squeezed":
      return value  # bug: [B, 1] values against [B] rewards broadcast to [B, B] in the losses
    return value.squeeze(dim=1)


def create_target_network(network):
  target_network = copy.deepcopy(network)
  for param in target_network.parameters():
    param.requires_grad = False
  return target_network


def update_target_network(network, target_network, polyak_factor):
  for param, target_param in zip(network.parameters(), target_network.parameters()):
    target_param.data = polyak_factor * target_param.data + (1 - polyak_factor) * param.data


def _build(seed, bug=None):
  torch.manual_seed(seed)
  rnd = random.Random(seed)

  # sac.py
  env = Env(seed)
  actor = SoftActor(env.observation_space.shape[0], env.action_space.shape[0], HIDDEN_SIZE, env.action_space.low, env.action_space.high)
  critic_1 = Critic(env.observation_space.shape[0], env.action_space.shape[0], HIDDEN_SIZE, state_action=True, bug=bug)
  critic_2 = Critic(env.observation_space.shape[0], env.action_space.shape[0], HIDDEN_SIZE, state_action=True, bug=bug)
  value_critic = Critic(env.observation_space.shape[0], env.action_space.shape[0], HIDDEN_SIZE, bug=bug)
  target_value_critic = create_target_network(value_critic)
  actor_optimiser = optim.Adam(actor.parameters(), lr=LEARNING_RATE)
  critics_optimiser = optim.Adam(list(critic_1.parameters()) + list(critic_2.parameters()), lr=LEARNING_RATE)
  value_critic_optimiser = optim.Adam(value_critic.parameters(), lr=LEARNING_RATE)
  D = deque(maxlen=REPLAY_SIZE)

  def test(actor):
    with torch.no_grad():
      env = Env(seed + 1)
      state, done, total_reward = env.reset(), False, 0
      while not done:
        action = actor(state).mean_  # Use purely exploitative policy at test time
        state, reward, done = env.step(action)
        total_reward += reward
      return total_reward

  st = {"state": env.reset(), "step": 0}

  def loop_iteration():
    st["step"] += 1
    step = st["step"]
    state = st["state"]
    with torch.no_grad():
      if step < UPDATE_START:
        # To improve exploration take actions sampled from a uniform random distribution over actions at the start of training
        action = torch.tensor([[2 * rnd.random() - 1]])
      else:
        # Observe state s and select action a ~ μ(a|s)
        action = actor(state).sample()
      # Execute a in the environment and observe next state s', reward r, and done signal d to indicate whether s' is terminal
      next_state, reward, done = env.step(action)
      # Store (s, a, r, s', d) in replay buffer D
      D.append({'state': state, 'action': action, 'reward': torch.tensor([reward]), 'next_state': next_state, 'done': torch.tensor([done], dtype=torch.float32)})
      state = next_state
      # If s' is terminal, reset environment state
      if done:
        state = env.reset()
      st["state"] = state

    if step > UPDATE_START and step % UPDATE_INTERVAL == 0:
      # Randomly sample a batch of transitions B = {(s, a, r, s', d)} from D
      batch = rnd.sample(D, BATCH_SIZE)
      batch = {k: torch.cat([d[k] for d in batch], dim=0) for k in batch[0].keys()}

      # Compute target for V-function
      policy = actor(batch['state'])
      action = policy.rsample()  # a(s) is a sample from μ(·|s) which is differentiable wrt θ via the reparameterisation trick
      weighted_sample_entropy = ENTROPY_WEIGHT * policy.log_prob(action)  # Note: in practice it is more numerically stable to calculate the log probability when sampling an action to avoid inverting tanh
      y_v = torch.min(critic_1(batch['state'], action), critic_2(batch['state'], action)).detach() - weighted_sample_entropy.detach()

      # Update V-function by one step of gradient descent
      value_loss = (value_critic(batch['state']) - y_v).pow(2).mean()
      value_critic_optimiser.zero_grad()
      value_loss.backward()
      value_critic_optimiser.step()

      # Compute target for Q-function
      y_q = batch['reward'] + DISCOUNT * (1 - batch['done']) * target_value_critic(batch['next_state'])

      # Update Q-functions by one step of gradient descent
      value_loss = (critic_1(batch['state'], batch['action']) - y_q).pow(2).mean() + (critic_2(batch['state'], batch['action']) - y_q).pow(2).mean()
      if bug != "critics_zero_grad_dropped":
        critics_optimiser.zero_grad()
      value_loss.backward()
      critics_optimiser.step()

      # Update policy by one step of gradient ascent
      if bug == "entropy_bonus_sign_flipped":
        # bug: the entropy term enters with the wrong sign (the policy is pushed towards determinism)
        policy_loss = (-weighted_sample_entropy - torch.min(critic_1(batch['state'], action), critic_2(batch['state'], action))).mean()
      else:
        policy_loss = (weighted_sample_entropy - torch.min(critic_1(batch['state'], action), critic_2(batch['state'], action))).mean()
      actor_optimiser.zero_grad()
      policy_loss.backward()
      actor_optimiser.step()

      # Update target value network
      update_target_network(value_critic, target_value_critic, POLYAK_FACTOR)
      return value_loss.item()
    return None

  # the random-action warm-up (deviation: run here, UPDATE_START shrunk)
  while st["step"] < UPDATE_START:
    loop_iteration()

  def train_step():
    return loop_iteration()

  sample = rnd.sample(D, BATCH_SIZE)
  sample = {k: torch.cat([d[k] for d in sample], dim=0) for k in sample[0].keys()}
  batch = ([sample['state'], sample['action']], (sample['reward'], sample['next_state'], sample['done']))

  def loss_fn(q, targets):
    reward, next_state, done = targets
    y_q = reward + DISCOUNT * (1 - done) * target_value_critic(next_state)
    return (q - y_q).pow(2).mean()

  def eval_fn(model, _batch=None):
    actor.eval()
    out = -test(actor)
    actor.train()
    return out

  return Program(name="spinningupbasic_sac", model=critic_1, batch=batch, loss_fn=loss_fn,
                 optimizer=critics_optimiser, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the critics' output left ``[B, 1]`` (the ``squeeze(dim=1)`` missing): the TD targets built from ``[B]``
    # rewards broadcast to ``[B, B]`` and every Q-value is regressed on every transition's target (classic).
    Bug("critic_output_not_squeezed", functools.partial(_build, bug="critic_output_not_squeezed"), "learning_ledger",
        ("OBJECTIVE",)),
    # the policy loss adds the negated entropy term (``-alpha * log pi``): the actor is rewarded for a collapsing
    # policy instead of an entropy bonus (classic sign slip).
    Bug("entropy_bonus_sign_flipped", functools.partial(_build, bug="entropy_bonus_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``critics_optimiser.zero_grad()`` dropped: the Q-gradients pile up across updates (classic; the whole of the
    # Program's model, README rule 6).
    Bug("critics_zero_grad_dropped", functools.partial(_build, bug="critics_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

# ruff: noqa: UP035, UP039, C417, UP006, UP045, C408, RUF012, RUF059
"""PlaNet's world model (recurrent state-space model) fitted on seed episodes, from Kaixhin/PlaNet.

Source: https://github.com/Kaixhin/PlaNet, commit 28c8491bc01e8f1b911300749e04c308c03db051, files ``main.py``
(model fitting), ``models.py`` (``bottle``, ``TransitionModel``, ``SymbolicObservationModel``, ``RewardModel``,
``SymbolicEncoder``), ``memory.py`` (``ExperienceReplay``) and ``env.py`` (``GymEnv``, symbolic observations).
License: MIT (Copyright (c) 2019 Kai Arulkumaran; full text in LICENSES/Kaixhin-PlaNet.txt).

Kept as written: the models (GRU belief, Gaussian prior and posterior states with softplus std plus min_std_dev
0.1, ReLU MLP observation and reward models, symbolic encoder), the symbolic-environment path (``--symbolic-env``
on the default ``Pendulum-v0``), ``ExperienceReplay`` (chunks that do not cross the write index), the fitting step:
``transition_model`` over ``actions[:-1]`` and the encoded ``observations[1:]`` with ``nonterminals[:-1]``, the
observation loss (squared error summed over features, averaged over time and batch), the reward loss, the KL loss
``max(KL(posterior || prior).sum(2), free_nats)`` with free_nats 3, Adam lr 1e-3 with eps 1e-4 over the four
models' parameters, ``clip_grad_norm_`` 1000; the seed episodes (5) with random actions and action_repeat 2.

Deviations:
- gym's Pendulum-v0 is replaced by the numpy pendulum of ``_continuous_control.py`` (same equations, seeded) behind
  ``GymEnv``'s symbolic path; the seed episodes are the synthetic data.
- sizes for 2 CPU cores: belief and hidden size 200 -> 32, state size 30 -> 8, embedding size 1024 -> 32 (the
  symbolic models use it as a width), batch size 50 -> 16, chunk size 50 -> 12, max episode length 1000 -> 200
  (the pendulum's time limit), experience size 10**6 -> 10**4.
- the ``jit.ScriptModule`` / ``@jit.script_method`` models are plain ``nn.Module`` s (same lines).
- ``train_step`` is one pass of the model-fitting loop body (``collect_interval`` passes per episode in main.py);
  latent overshooting and the global KL are off in main.py's defaults and not ported; the planner (CEM) and data
  collection after the seed episodes, testing, plotting and checkpoints are not run.
- ``np.random`` in ``ExperienceReplay`` comes from a ``numpy.random.default_rng(seed)`` instance.
- the Program: a ``WorldModel`` module holds the four models (their parameters are main.py's ``param_list``) and
  runs the fitting step's forward; the loss function is the fitting step's three losses.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from typing import List, Optional

import numpy as np
import torch
from torch import nn, optim
from torch.distributions import Normal
from torch.distributions.kl import kl_divergence
from torch.nn import functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

ARGS = dict(embedding_size=32, hidden_size=32, belief_size=32, state_size=8,  # main.py: 1024, 200, 200, 30
            batch_size=16, chunk_size=12,  # 50, 50
            free_nats=3, learning_rate=1e-3, adam_epsilon=1e-4, grad_clip_norm=1000,
            seed_episodes=5, action_repeat=2, max_episode_length=200,  # 1000
            experience_size=10000, activation_function='relu', symbolic_env=True)


# Wraps the input tuple for a function to process a time x batch x features sequence in batch x features (assumes one output)
def bottle(f, x_tuple):
  x_sizes = tuple(map(lambda x: x.size(), x_tuple))
  y = f(*map(lambda x: x[0].view(x[1][0] * x[1][1], *x[1][2:]), zip(x_tuple, x_sizes)))
  y_size = y.size()
  return y.view(x_sizes[0][0], x_sizes[0][1], *y_size[1:])


class TransitionModel(nn.Module):
  __constants__ = ['min_std_dev']

  def __init__(self, belief_size, state_size, action_size, hidden_size, embedding_size, activation_function='relu', min_std_dev=0.1):
    super().__init__()
    self.act_fn = getattr(F, activation_function)
    self.min_std_dev = min_std_dev
    self.fc_embed_state_action = nn.Linear(state_size + action_size, belief_size)
    self.rnn = nn.GRUCell(belief_size, belief_size)
    self.fc_embed_belief_prior = nn.Linear(belief_size, hidden_size)
    self.fc_state_prior = nn.Linear(hidden_size, 2 * state_size)
    self.fc_embed_belief_posterior = nn.Linear(belief_size + embedding_size, hidden_size)
    self.fc_state_posterior = nn.Linear(hidden_size, 2 * state_size)

  def forward(self, prev_state:torch.Tensor, actions:torch.Tensor, prev_belief:torch.Tensor, observations:Optional[torch.Tensor]=None, nonterminals:Optional[torch.Tensor]=None) -> List[torch.Tensor]:
    # Create lists for hidden states (cannot use single tensor as buffer because autograd won't work with inplace writes)
    T = actions.size(0) + 1
    beliefs, prior_states, prior_means, prior_std_devs, posterior_states, posterior_means, posterior_std_devs = [torch.empty(0)] * T, [torch.empty(0)] * T, [torch.empty(0)] * T, [torch.empty(0)] * T, [torch.empty(0)] * T, [torch.empty(0)] * T, [torch.empty(0)] * T
    beliefs[0], prior_states[0], posterior_states[0] = prev_belief, prev_state, prev_state
    # Loop over time sequence
    for t in range(T - 1):
      _state = prior_states[t] if observations is None else posterior_states[t]  # Select appropriate previous state
      _state = _state if nonterminals is None else _state * nonterminals[t]  # Mask if previous transition was terminal
      # Compute belief (deterministic hidden state)
      hidden = self.act_fn(self.fc_embed_state_action(torch.cat([_state, actions[t]], dim=1)))
      beliefs[t + 1] = self.rnn(hidden, beliefs[t])
      # Compute state prior by applying transition dynamics
      hidden = self.act_fn(self.fc_embed_belief_prior(beliefs[t + 1]))
      prior_means[t + 1], _prior_std_dev = torch.chunk(self.fc_state_prior(hidden), 2, dim=1)
      prior_std_devs[t + 1] = F.softplus(_prior_std_dev) + self.min_std_dev
      prior_states[t + 1] = prior_means[t + 1] + prior_std_devs[t + 1] * torch.randn_like(prior_means[t + 1])
      if observations is not None:
        # Compute state posterior by applying transition dynamics and using current observation
        t_ = t - 1  # Use t_ to deal with different time indexing for observations
        hidden = self.act_fn(self.fc_embed_belief_posterior(torch.cat([beliefs[t + 1], observations[t_ + 1]], dim=1)))
        posterior_means[t + 1], _posterior_std_dev = torch.chunk(self.fc_state_posterior(hidden), 2, dim=1)
        posterior_std_devs[t + 1] = F.softplus(_posterior_std_dev) + self.min_std_dev
        posterior_states[t + 1] = posterior_means[t + 1] + posterior_std_devs[t + 1] * torch.randn_like(posterior_means[t + 1])
    # Return new hidden states
    hidden = [torch.stack(beliefs[1:], dim=0), torch.stack(prior_states[1:], dim=0), torch.stack(prior_means[1:], dim=0), torch.stack(prior_std_devs[1:], dim=0)]
    if observations is not None:
      hidden += [torch.stack(posterior_states[1:], dim=0), torch.stack(posterior_means[1:], dim=0), torch.stack(posterior_std_devs[1:], dim=0)]
    return hidden


class SymbolicObservationModel(nn.Module):
  def __init__(self, observation_size, belief_size, state_size, embedding_size, activation_function='relu'):
    super().__init__()
    self.act_fn = getattr(F, activation_function)
    self.fc1 = nn.Linear(belief_size + state_size, embedding_size)
    self.fc2 = nn.Linear(embedding_size, embedding_size)
    self.fc3 = nn.Linear(embedding_size, observation_size)

  def forward(self, belief, state):
    hidden = self.act_fn(self.fc1(torch.cat([belief, state], dim=1)))
    hidden = self.act_fn(self.fc2(hidden))
    observation = self.fc3(hidden)
    return observation


class RewardModel(nn.Module):
  def __init__(self, belief_size, state_size, hidden_size, activation_function='relu'):
    super().__init__()
    self.act_fn = getattr(F, activation_function)
    self.fc1 = nn.Linear(belief_size + state_size, hidden_size)
    self.fc2 = nn.Linear(hidden_size, hidden_size)
    self.fc3 = nn.Linear(hidden_size, 1)

  def forward(self, belief, state):
    hidden = self.act_fn(self.fc1(torch.cat([belief, state], dim=1)))
    hidden = self.act_fn(self.fc2(hidden))
    reward = self.fc3(hidden).squeeze(dim=1)
    return reward


class SymbolicEncoder(nn.Module):
  def __init__(self, observation_size, embedding_size, activation_function='relu'):
    super().__init__()
    self.act_fn = getattr(F, activation_function)
    self.fc1 = nn.Linear(observation_size, embedding_size)
    self.fc2 = nn.Linear(embedding_size, embedding_size)
    self.fc3 = nn.Linear(embedding_size, embedding_size)

  def forward(self, observation):
    hidden = self.act_fn(self.fc1(observation))
    hidden = self.act_fn(self.fc2(hidden))
    hidden = self.fc3(hidden)
    return hidden


class ExperienceReplay():  # the symbolic_env path
  def __init__(self, size, symbolic_env, observation_size, action_size, bit_depth, device, rng):
    self.device = device
    self.symbolic_env = symbolic_env
    self.size = size
    self.observations = np.empty((size, observation_size), dtype=np.float32)
    self.actions = np.empty((size, action_size), dtype=np.float32)
    self.rewards = np.empty((size, ), dtype=np.float32)
    self.nonterminals = np.empty((size, 1), dtype=np.float32)
    self.idx = 0
    self.full = False  # Tracks if memory has been filled/all slots are valid
    self.steps, self.episodes = 0, 0  # Tracks how much experience has been used in total
    self.bit_depth = bit_depth
    self.rng = rng

  def append(self, observation, action, reward, done):
    self.observations[self.idx] = observation.numpy()
    self.actions[self.idx] = action.numpy()
    self.rewards[self.idx] = reward
    self.nonterminals[self.idx] = not done
    self.idx = (self.idx + 1) % self.size
    self.full = self.full or self.idx == 0
    self.steps, self.episodes = self.steps + 1, self.episodes + (1 if done else 0)

  # Returns an index for a valid single sequence chunk uniformly sampled from the memory
  def _sample_idx(self, L):
    valid_idx = False
    while not valid_idx:
      idx = self.rng.integers(0, self.size if self.full else self.idx - L)
      idxs = np.arange(idx, idx + L) % self.size
      valid_idx = not self.idx in idxs[1:]  # Make sure data does not cross the memory index
    return idxs

  def _retrieve_batch(self, idxs, n, L):
    vec_idxs = idxs.transpose().reshape(-1)  # Unroll indices
    observations = torch.as_tensor(self.observations[vec_idxs].astype(np.float32))
    return observations.reshape(L, n, *observations.shape[1:]), self.actions[vec_idxs].reshape(L, n, -1), self.rewards[vec_idxs].reshape(L, n), self.nonterminals[vec_idxs].reshape(L, n, 1)

  # Returns a batch of sequence chunks uniformly sampled from the memory
  def sample(self, n, L):
    batch = self._retrieve_batch(np.asarray([self._sample_idx(L) for _ in range(n)]), n, L)
    return [torch.as_tensor(item).to(device=self.device) for item in batch]


class GymEnv():  # env.py's symbolic path over the numpy pendulum
  def __init__(self, seed, max_episode_length, action_repeat, bit_depth=5):
    self.symbolic = True
    self._env = Pendulum()
    self._env.seed(seed)
    self._env.action_space.seed(seed)
    self.max_episode_length = max_episode_length
    self.action_repeat = action_repeat
    self.bit_depth = bit_depth

  def reset(self):
    self.t = 0  # Reset internal timer
    state = self._env.reset()
    return torch.tensor(state, dtype=torch.float32).unsqueeze(dim=0)

  def step(self, action):
    action = action.detach().numpy()
    reward = 0
    for k in range(self.action_repeat):
      state, reward_k, done, _ = self._env.step(action)
      reward += reward_k
      self.t += 1  # Increment internal timer
      done = done or self.t == self.max_episode_length
      if done:
        break
    observation = torch.tensor(state, dtype=torch.float32).unsqueeze(dim=0)
    return observation, reward, done

  @property
  def observation_size(self):
    return self._env.observation_space.shape[0]

  @property
  def action_size(self):
    return self._env.action_space.shape[0]

  # Sample an action randomly from a uniform distribution over all valid actions
  def sample_random_action(self):
    return torch.from_numpy(self._env.action_space.sample())


class WorldModel(nn.Module):
  """(port) the four models of main.py in one module, running the fitting step's forward."""

  def __init__(self, transition_model, observation_model, reward_model, encoder, bug=None):
    super().__init__()
    self.transition_model = transition_model
    self.observation_model = observation_model
    self.reward_model = reward_model
    self.encoder = encoder
    self.bug = bug

  def forward(self, observations, actions, nonterminals):
    a = ARGS
    transition_model, observation_model, reward_model, encoder = self.transition_model, self.observation_model, self.reward_model, self.encoder
    batch_size = actions.size(1)
    # Create initial belief and state for time t = 0
    init_belief, init_state = torch.zeros(batch_size, a['belief_size']), torch.zeros(batch_size, a['state_size'])
    # Update belief/state using posterior from previous belief/state, previous action and current observation (over entire sequence at once)
    if self.bug == "observations_not_shifted":
      encoded = bottle(encoder, (observations[:-1], ))
    else:
      encoded = bottle(encoder, (observations[1:], ))
    beliefs, prior_states, prior_means, prior_std_devs, posterior_states, posterior_means, posterior_std_devs = transition_model(init_state, actions[:-1], init_belief, encoded, nonterminals[:-1])
    return (bottle(observation_model, (beliefs, posterior_states)), bottle(reward_model, (beliefs, posterior_states)),
            posterior_means, posterior_std_devs, prior_means, prior_std_devs)


def _build(seed, bug=None):
  torch.manual_seed(seed)
  rng = np.random.default_rng(seed)
  a = ARGS
  free_nats = torch.full((1, ), a['free_nats'], dtype=torch.float32)  # Allowed deviation in KL divergence

  env = GymEnv(seed, a['max_episode_length'], a['action_repeat'])
  D = ExperienceReplay(a['experience_size'], a['symbolic_env'], env.observation_size, env.action_size, 5, torch.device('cpu'), rng)
  # Initialise dataset D with S random seed episodes
  for s in range(1, a['seed_episodes'] + 1):
    observation, done, t = env.reset(), False, 0
    while not done:
      action = env.sample_random_action()
      next_observation, reward, done = env.step(action)
      D.append(observation, action, reward, done)
      observation = next_observation
      t += 1

  # Initialise model parameters randomly
  transition_model = TransitionModel(a['belief_size'], a['state_size'], env.action_size, a['hidden_size'], a['embedding_size'], a['activation_function'])
  observation_model = SymbolicObservationModel(env.observation_size, a['belief_size'], a['state_size'], a['embedding_size'], a['activation_function'])
  reward_model = RewardModel(a['belief_size'], a['state_size'], a['hidden_size'], a['activation_function'])
  encoder = SymbolicEncoder(env.observation_size, a['embedding_size'], a['activation_function'])
  param_list = list(transition_model.parameters()) + list(observation_model.parameters()) + list(reward_model.parameters()) + list(encoder.parameters())
  optimiser = optim.Adam(param_list, lr=a['learning_rate'], eps=a['adam_epsilon'])
  model = WorldModel(transition_model, observation_model, reward_model, encoder, bug)

  def losses_of(outputs, observations, rewards):
    predicted_observations, predicted_rewards, posterior_means, posterior_std_devs, prior_means, prior_std_devs = outputs
    # Calculate observation likelihood, reward likelihood and KL losses (for t = 0 only for latent overshooting); sum over final dims, average over batch and time (original implementation, though paper seems to miss 1/T scaling?)
    observation_loss = F.mse_loss(predicted_observations, observations[1:], reduction='none').sum(dim=2).mean(dim=(0, 1))
    reward_loss = F.mse_loss(predicted_rewards, rewards[:-1], reduction='none').mean(dim=(0, 1))
    if bug == "free_nats_min":
      kl_loss = torch.min(kl_divergence(Normal(posterior_means, posterior_std_devs), Normal(prior_means, prior_std_devs)).sum(dim=2), free_nats).mean(dim=(0, 1))
    else:
      kl_loss = torch.max(kl_divergence(Normal(posterior_means, posterior_std_devs), Normal(prior_means, prior_std_devs)).sum(dim=2), free_nats).mean(dim=(0, 1))  # Note that normalisation by overshooting distance and weighting by overshooting distance cancel out
    return observation_loss, reward_loss, kl_loss

  def train_step():
    # Draw sequence chunks {(o_t, a_t, r_t+1, terminal_t+1)} ~ D uniformly at random from the dataset (including terminal flags)
    observations, actions, rewards, nonterminals = D.sample(a['batch_size'], a['chunk_size'])  # Transitions start at time t = 0
    observation_loss, reward_loss, kl_loss = losses_of(model(observations, actions, nonterminals), observations, rewards)
    # Update model parameters
    if bug != "zero_grad_dropped":
      optimiser.zero_grad()
    (observation_loss + reward_loss + kl_loss).backward()
    nn.utils.clip_grad_norm_(param_list, a['grad_clip_norm'], norm_type=2)
    optimiser.step()
    return (observation_loss + reward_loss + kl_loss).detach()

  observations, actions, rewards, nonterminals = D.sample(a['batch_size'], a['chunk_size'])
  batch = ({"observations": observations, "actions": actions, "nonterminals": nonterminals}, (observations, rewards))

  def loss_fn(outputs, targets):
    observations, rewards = targets
    observation_loss, reward_loss, kl_loss = losses_of(outputs, observations, rewards)
    return observation_loss + reward_loss + kl_loss

  return Program(name="planet_rssm", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimiser,
                 train_step=train_step, batch_axis=1)


build = functools.partial(_build, bug=None)

BUGS = [
  # the encoder fed observations[:-1] instead of observations[1:] (classic off-by-one of the diagram in
  # TransitionModel.forward): the posterior at t + 1 sees the observation of t, one step stale.
  Bug("observations_not_shifted", functools.partial(_build, bug="observations_not_shifted"), "learning_ledger",
      ("TASK",)),
  # torch.min for torch.max in the free-nats KL (classic): the KL term is capped at 3 nats instead of floored, so
  # any KL above the free nats is never penalized.
  Bug("free_nats_min", functools.partial(_build, bug="free_nats_min"), "learning_ledger", ("OBJECTIVE",)),
  # optimiser.zero_grad() dropped from the fitting loop (classic): gradients pile up across steps; every
  # parameter alike: declared by its mechanism (README rule 6).
  Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
      kind="step.grad_accumulation"),
]

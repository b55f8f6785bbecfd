"""ACER (Actor-Critic with Experience Replay, Wang et al.) on CartPole from Kaixhin/ACER: an LSTM actor-critic whose
critic head gives Q(s, .), V as the expectation of Q under the policy, on-policy updates followed by a Poisson
number of off-policy updates on replayed episode batches, with Retrace targets, truncated importance weights and
the bias correction term, gradients pushed from a worker's model to the shared model and a shared non-centred
RMSprop.

Source: https://github.com/Kaixhin/ACER
Commit: c0eae34d96db3b12d522c4c977a41e6a04103dc8
Files: ``train.py``, ``model.py``, ``memory.py``, ``optim.py``, ``utils.py``, ``main.py`` (the defaults)
License: MIT (Copyright (c) 2017 Kai Arulkumaran; full text in LICENSES/Kaixhin-ACER.txt)
Domain: RL, off-policy actor-critic (ACER: Retrace Q targets, truncated importance sampling with bias correction,
episodic replay, LSTM policy)

Kept as written: ``ActorCritic`` (fc1, ``LSTMCell``, softmax actor clamped below 1, Q head, V = sum Q * pi),
``EpisodicReplayMemory``, ``SharedRMSprop``, ``Counter``, ``state_to_tensor``, and all of ``train.py`` (``_poisson``,
``_transfer_grads_to_shared_model``, ``_update_networks`` with the gradient-norm clip at 40, ``_trust_region_loss``,
``_train``'s backward loop over the segment, and ``train``'s on-policy loop of ``t_max`` steps with the replay
memory and the off-policy loop), with ``main.py``'s defaults (hidden 32, t_max 100, max episode length 500,
discount 0.99, trace max 10, replay ratio 4, lr 7e-4, RMSprop decay 0.99, entropy weight 1e-4, no trust region,
no reward clipping, no lr decay).

Deviations from the original:
- gym's ``CartPole-v1`` is the cart-pole of ``_cartpole.py`` (CartPole-v1's equations and constants), behind a
  small adapter with the gym < 0.26 calls ``train`` makes (``seed``, ``reset`` -> state, ``step`` -> 4 values with
  the 500-step truncation folded into ``done``, ``observation_space.shape``, ``action_space.n``).
- multiprocessing is dropped: one training process (rank 1) runs in the main process (``--num-processes`` 6 in the
  original), without the validation process ``test`` and its csv/plotly output; ``share_memory`` calls stay.
  ``random.seed`` is added next to ``torch.manual_seed`` (``_poisson`` and the memory's sampling use ``random``).
- ``optimiser.zero_grad()`` -> ``optimiser.zero_grad(set_to_none=False)``: the original relies on the torch of
  its time zeroing the shared gradients in place, which after the first ``_transfer_grads_to_shared_model`` are the
  worker model's own gradient tensors; today's default (``set_to_none=True``) leaves the worker's gradients
  accumulating across updates (kept as the bug variant ``zero_grad_set_to_none``).
- sizes for 2 CPU cores: ``replay_start`` 20000 -> 300 transitions (so that off-policy updates start within a few
  episodes), ``batch_size`` 16 -> 8; ``memory_capacity`` 100000 kept (one process).
- ``train`` is a generator: it yields each update's loss (``_train`` now returns ``policy_loss + value_loss``), and
  once, before the first update, ``None`` (the build runs it that far); ``train_step`` is one update, on-policy or
  off-policy.
- the Program's model is the shared model (the one the optimiser holds); its batch is the first on-policy segment's
  states, each with a zero LSTM state, with its actions and n-step returns, and ``loss_fn`` is ``_train``'s
  on-policy lines for one step (rho 1, entropy term, half squared error of Q) on that batch.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP039

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
import types
from collections import deque, namedtuple

import torch
from torch import multiprocessing as mp
from torch import nn, optim
from torch.nn import functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole


# ------------------------------------------------------------------------------------------------------- model.py
class ActorCritic(nn.Module):
  def __init__(self, observation_space, action_space, hidden_size):
    super(ActorCritic, self).__init__()
    self.state_size = observation_space.shape[0]
    self.action_size = action_space.n

    self.fc1 = nn.Linear(self.state_size, hidden_size)
    self.lstm = nn.LSTMCell(hidden_size, hidden_size)
    self.fc_actor = nn.Linear(hidden_size, self.action_size)
    self.fc_critic = nn.Linear(hidden_size, self.action_size)

  def forward(self, x, h):
    x = F.relu(self.fc1(x))
    h = self.lstm(x, h)  # h is (hidden state, cell state)
    x = h[0]
    policy = F.softmax(self.fc_actor(x), dim=1).clamp(max=1 - 1e-20)  # Prevent 1s and hence NaNs
    Q = self.fc_critic(x)
    V = (Q * policy).sum(1, keepdim=True)  # V is expectation of Q under π
    return policy, Q, V, h


# ------------------------------------------------------------------------------------------------------ memory.py
Transition = namedtuple('Transition', ('state', 'action', 'reward', 'policy'))


class EpisodicReplayMemory():
  def __init__(self, capacity, max_episode_length):
    # Max number of transitions possible will be the memory capacity, could be much less
    self.num_episodes = capacity // max_episode_length
    self.memory = deque(maxlen=self.num_episodes)
    self.trajectory = []

  def append(self, state, action, reward, policy):
    self.trajectory.append(Transition(state, action, reward, policy))  # Save s_i, a_i, r_i+1, µ(·|s_i)
    # Terminal states are saved with actions as None, so switch to next episode
    if action is None:
      self.memory.append(self.trajectory)
      self.trajectory = []
  # Samples random trajectory
  def sample(self, maxlen=0):
    mem = self.memory[random.randrange(len(self.memory))]
    T = len(mem)
    # Take a random subset of trajectory if maxlen specified, otherwise return full trajectory
    if maxlen > 0 and T > maxlen + 1:
      t = random.randrange(T - maxlen - 1)  # Include next state after final "maxlen" state
      return mem[t:t + maxlen + 1]
    else:
      return mem

  # Samples batch of trajectories, truncating them to the same length
  def sample_batch(self, batch_size, maxlen=0):
    batch = [self.sample(maxlen=maxlen) for _ in range(batch_size)]
    minimum_size = min(len(trajectory) for trajectory in batch)
    batch = [trajectory[:minimum_size] for trajectory in batch]  # Truncate trajectories
    return list(map(list, zip(*batch)))  # Transpose so that timesteps are packed together

  def length(self):
    # Return number of epsiodes saved in memory
    return len(self.memory)

  def __len__(self):
    return sum(len(episode) for episode in self.memory)


# ------------------------------------------------------------------------------------------------------- optim.py
# Non-centered RMSprop update with shared statistics (without momentum)
class SharedRMSprop(optim.RMSprop):
  def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0):
    super(SharedRMSprop, self).__init__(params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=0, centered=False)

    # State initialisation (must be done before step, else will not be shared between threads)
    for group in self.param_groups:
      for p in group['params']:
        state = self.state[p]
        state['step'] = p.data.new().resize_(1).zero_()
        state['square_avg'] = p.data.new().resize_as_(p.data).zero_()

  def share_memory(self):
    for group in self.param_groups:
      for p in group['params']:
        state = self.state[p]
        state['step'].share_memory_()
        state['square_avg'].share_memory_()

  def step(self, closure=None):
    loss = None
    if closure is not None:
      loss = closure()

    for group in self.param_groups:
      for p in group['params']:
        if p.grad is None:
          continue
        grad = p.grad.data
        state = self.state[p]

        square_avg = state['square_avg']
        alpha = group['alpha']

        state['step'] += 1

        if group['weight_decay'] != 0:
          grad = grad.add(group['weight_decay'], p.data)

        # g = αg + (1 - α)Δθ^2
        # square_avg.mul_(alpha).addcmul_(1 - alpha, grad, grad)
        square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        # θ ← θ - ηΔθ/√(g + ε)
        avg = square_avg.sqrt().add_(group['eps'])
        # p.data.addcdiv_(-group['lr'], grad, avg)
        p.data.addcdiv_(grad, avg, value=-group['lr'])

    return loss


# ------------------------------------------------------------------------------------------------------- utils.py
# Global counter
class Counter():
  def __init__(self):
    self.val = mp.Value('i', 0)
    self.lock = mp.Lock()

  def increment(self):
    with self.lock:
      self.val.value += 1

  def value(self):
    with self.lock:
      return self.val.value


# Converts a state from the OpenAI Gym (a numpy array) to a batch tensor
def state_to_tensor(state):
  return torch.from_numpy(state).float().unsqueeze(0)


# ------------------------------------------------------------------------------------- (port) gym's CartPole-v1
class CartPoleV1:
  """gym < 0.26's CartPole-v1 calls on the cart-pole of _cartpole.py."""

  def __init__(self, name):
    self.observation_space = types.SimpleNamespace(shape=(4,))
    self.action_space = types.SimpleNamespace(n=2)
    self.env = CartPole(0)

  def seed(self, seed):
    self.env = CartPole(seed)

  def reset(self):
    return self.env.reset()[0]

  def step(self, action):
    s, r, done, truncated, info = self.env.step(action)
    return s, r, done or truncated, info

  def close(self):
    pass


# ------------------------------------------------------------------------------------------------------- train.py
# Knuth's algorithm for generating Poisson samples
def _poisson(lmbd):
  L, k, p = math.exp(-lmbd), 0, 1
  while p > L:
    k += 1
    p *= random.uniform(0, 1)
  return max(k - 1, 0)


# Transfers gradients from thread-specific model to shared model
def _transfer_grads_to_shared_model(model, shared_model):
  for param, shared_param in zip(model.parameters(), shared_model.parameters()):
    if shared_param.grad is not None:
      return
    shared_param._grad = param.grad


# Adjusts learning rate
def _adjust_learning_rate(optimiser, lr):
  for param_group in optimiser.param_groups:
    param_group['lr'] = lr


# Updates networks
def _update_networks(args, T, model, shared_model, shared_average_model, loss, optimiser):
  # Zero shared and local grads
  if args.bug == "zero_grad_set_to_none":
    optimiser.zero_grad()  # today's default set_to_none=True: the local grads are never zeroed
  else:
    optimiser.zero_grad(set_to_none=False)  # (port) the in-place zeroing of the 2017 torch the original ran on
  """
  Calculate gradients for gradient descent on loss functions
  Note that math comments follow the paper, which is formulated for gradient ascent
  """
  loss.backward()
  # Gradient L2 normalisation
  nn.utils.clip_grad_norm_(model.parameters(), args.max_gradient_norm)

  # Transfer gradients to shared model and update
  _transfer_grads_to_shared_model(model, shared_model)
  optimiser.step()
  if args.lr_decay:
    # Linearly decay learning rate
    _adjust_learning_rate(optimiser, max(args.lr * (args.T_max - T.value()) / args.T_max, 1e-32))

  # Update shared_average_model
  for shared_param, shared_average_param in zip(shared_model.parameters(), shared_average_model.parameters()):
    shared_average_param = args.trust_region_decay * shared_average_param + (1 - args.trust_region_decay) * shared_param

# Computes an "efficient trust region" loss (policy head only) based on an existing loss and two distributions
def _trust_region_loss(model, distribution, ref_distribution, loss, threshold, g, k):

  kl = - (ref_distribution * (distribution.log()-ref_distribution.log())).sum(1).mean(0)

  # Compute dot products of gradients
  k_dot_g = (k*g).sum(1).mean(0)
  k_dot_k = (k**2).sum(1).mean(0)
  # Compute trust region update
  if k_dot_k.item() > 0:
    trust_factor = ((k_dot_g - threshold) / k_dot_k).clamp(min=0).detach()
  else:
    trust_factor = torch.zeros(1)
  # z* = g - max(0, (k^T∙g - δ) / ||k||^2_2)∙k
  trust_loss = loss + trust_factor*kl
 
  return trust_loss


# Trains model
def _train(args, T, model, shared_model, shared_average_model, optimiser, policies, Qs, Vs, actions, rewards, Qret, average_policies, old_policies=None):
  off_policy = old_policies is not None
  action_size = policies[0].size(1)
  policy_loss, value_loss = 0, 0

  # Calculate n-step returns in forward view, stepping backwards from the last state
  t = len(rewards)
  for i in (range(t) if args.bug == "returns_not_reversed" else reversed(range(t))):
    # Importance sampling weights ρ ← π(∙|s_i) / µ(∙|s_i); 1 for on-policy
    if off_policy:
      rho = policies[i].detach() / old_policies[i]
    else:
      rho = torch.ones(1, action_size)

    # Qret ← r_i + γQret
    Qret = rewards[i] + args.discount * Qret
    # Advantage A ← Qret - V(s_i; θ)
    A = Qret - Vs[i]

    # Log policy log(π(a_i|s_i; θ))
    log_prob = policies[i].gather(1, actions[i]).log()
    # g ← min(c, ρ_a_i)∙∇θ∙log(π(a_i|s_i; θ))∙A
    single_step_policy_loss = -(rho.gather(1, actions[i]).clamp(max=args.trace_max) * log_prob * A.detach()).mean(0)  # Average over batch
    # Off-policy bias correction
    if off_policy:
      # g ← g + Σ_a [1 - c/ρ_a]_+∙π(a|s_i; θ)∙∇θ∙log(π(a|s_i; θ))∙(Q(s_i, a; θ) - V(s_i; θ)
      bias_weight = (1 - args.trace_max / rho).clamp(min=0) * policies[i]
      single_step_policy_loss -= (bias_weight * policies[i].log() * (Qs[i].detach() - Vs[i].expand_as(Qs[i]).detach())).sum(1).mean(0)
    if args.trust_region:
      # KL divergence k ← ∇θ0∙DKL[π(∙|s_i; θ_a) || π(∙|s_i; θ)]
      k = -average_policies[i].gather(1, actions[i]) / (policies[i].gather(1, actions[i]) + 1e-10)
      if off_policy:
        g = (rho.gather(1, actions[i]).clamp(max=args.trace_max) * A / (policies[i] + 1e-10).gather(1, actions[i]) \
          + (bias_weight * (Qs[i] - Vs[i].expand_as(Qs[i]))/(policies[i] + 1e-10)).sum(1)).detach()
      else:
        g = (rho.gather(1, actions[i]).clamp(max=args.trace_max) * A / (policies[i] + 1e-10).gather(1, actions[i])).detach()
      # Policy update dθ ← dθ + ∂θ/∂θ∙z*
      policy_loss += _trust_region_loss(model, policies[i].gather(1, actions[i]) + 1e-10, average_policies[i].gather(1, actions[i]) + 1e-10, single_step_policy_loss, args.trust_region_threshold, g, k)
    else:
      # Policy update dθ ← dθ + ∂θ/∂θ∙g
      policy_loss += single_step_policy_loss

    # Entropy regularisation dθ ← dθ + β∙∇θH(π(s_i; θ))
    policy_loss -= args.entropy_weight * -(policies[i].log() * policies[i]).sum(1).mean(0)  # Sum over probabilities, average over batch

    # Value update dθ ← dθ - ∇θ∙1/2∙(Qret - Q(s_i, a_i; θ))^2
    Q = Qs[i].gather(1, actions[i])
    value_loss += ((Qret - Q) ** 2 / 2).mean(0)  # Least squares loss

    # Truncated importance weight ρ¯_a_i = min(1, ρ_a_i)
    truncated_rho = rho.gather(1, actions[i]).clamp(max=1)
    # Qret ← ρ¯_a_i∙(Qret - Q(s_i, a_i; θ)) + V(s_i; θ)
    Qret = truncated_rho * (Qret - Q.detach()) + Vs[i].detach()

  # Update networks
  _update_networks(args, T, model, shared_model, shared_average_model, policy_loss + value_loss, optimiser)
  return (policy_loss + value_loss).item()  # (port) the update's loss, for train_step


# Acts and trains model
def train(rank, args, T, shared_model, shared_average_model, optimiser, record):
  torch.manual_seed(args.seed + rank)
  random.seed(args.seed + rank)  # (port) _poisson and the replay memory draw from Python's random

  env = CartPoleV1(args.env)  # (port) gym.make(args.env)
  env.seed(args.seed + rank)
  model = ActorCritic(env.observation_space, env.action_space, args.hidden_size)
  model.train()

  if not args.on_policy:
    # Normalise memory capacity by number of training processes
    memory = EpisodicReplayMemory(args.memory_capacity // args.num_processes, args.max_episode_length)

  t = 1  # Thread step counter
  done = True  # Start new episode

  while T.value() <= args.T_max:
    # On-policy episode loop
    while True:
      # Sync with shared model at least every t_max steps
      model.load_state_dict(shared_model.state_dict())
      # Get starting timestep
      t_start = t

      # Reset or pass on hidden state
      if done:
        hx, avg_hx = torch.zeros(1, args.hidden_size), torch.zeros(1, args.hidden_size)
        cx, avg_cx = torch.zeros(1, args.hidden_size), torch.zeros(1, args.hidden_size)
        # Reset environment and done flag
        state = state_to_tensor(env.reset())
        done, episode_length = False, 0
      else:
        # Perform truncated backpropagation-through-time (allows freeing buffers after backwards call)
        hx = hx.detach()
        cx = cx.detach()

      # Lists of outputs for training
      policies, Qs, Vs, actions, rewards, average_policies = [], [], [], [], [], []

      while not done and t - t_start < args.t_max:
        # Calculate policy and values
        policy, Q, V, (hx, cx) = model(state, (hx, cx))
        average_policy, _, _, (avg_hx, avg_cx) = shared_average_model(state, (avg_hx, avg_cx))

        # Sample action
        action = torch.multinomial(policy, 1)[0, 0]

        # Step
        next_state, reward, done, _ = env.step(action.item())
        next_state = state_to_tensor(next_state)
        reward = args.reward_clip and min(max(reward, -1), 1) or reward  # Optionally clamp rewards
        done = done or episode_length >= args.max_episode_length  # Stop episodes at a max length
        episode_length += 1  # Increase episode counter

        if not args.on_policy:
          # Save (beginning part of) transition for offline training
          memory.append(state, action, reward, policy.detach())  # Save just tensors
        if record.get('first', True):
          record['states'].append(state)  # (port) the first segment's states, for the Program's batch
        # Save outputs for online training
        [arr.append(el) for arr, el in zip((policies, Qs, Vs, actions, rewards, average_policies),
                                           (policy, Q, V, torch.LongTensor([[action]]), torch.Tensor([[reward]]), average_policy))]

        # Increment counters
        t += 1
        T.increment()

        # Update state
        state = next_state

      # Break graph for last values calculated (used for targets, not directly as model outputs)
      if done:
        # Qret = 0 for terminal s
        Qret = torch.zeros(1, 1)

        if not args.on_policy:
          # Save terminal state for offline training
          memory.append(state, None, None, None)
      else:
        # Qret = V(s_i; θ) for non-terminal s
        _, _, Qret, _ = model(state, (hx, cx))
        Qret = Qret.detach()

      if record.get('first', True):  # (port) the build stops here, before the first update
        record['first'] = False
        record.update(actions=actions, rewards=rewards, Qret=Qret)
        yield None
      # Train the network on-policy
      yield _train(args, T, model, shared_model, shared_average_model, optimiser, policies, Qs, Vs, actions, rewards, Qret, average_policies)

      # Finish on-policy episode
      if done:
        break

    # Train the network off-policy when enough experience has been collected
    if not args.on_policy and len(memory) >= args.replay_start:
      # Sample a number of off-policy episodes based on the replay ratio
      for _ in range(_poisson(args.replay_ratio)):
        # Act and train off-policy for a batch of (truncated) episode
        trajectories = memory.sample_batch(args.batch_size, maxlen=args.t_max)

        # Reset hidden state
        hx, avg_hx = torch.zeros(args.batch_size, args.hidden_size), torch.zeros(args.batch_size, args.hidden_size)
        cx, avg_cx = torch.zeros(args.batch_size, args.hidden_size), torch.zeros(args.batch_size, args.hidden_size)

        # Lists of outputs for training
        policies, Qs, Vs, actions, rewards, old_policies, average_policies = [], [], [], [], [], [], []

        # Loop over trajectories (bar last timestep)
        for i in range(len(trajectories) - 1):
          # Unpack first half of transition
          state = torch.cat(tuple(trajectory.state for trajectory in trajectories[i]), 0)
          action = torch.LongTensor([trajectory.action for trajectory in trajectories[i]]).unsqueeze(1)
          reward = torch.Tensor([trajectory.reward for trajectory in trajectories[i]]).unsqueeze(1)
          old_policy = torch.cat(tuple(trajectory.policy for trajectory in trajectories[i]), 0)

          # Calculate policy and values
          policy, Q, V, (hx, cx) = model(state, (hx, cx))
          average_policy, _, _, (avg_hx, avg_cx) = shared_average_model(state, (avg_hx, avg_cx))

          # Save outputs for offline training
          [arr.append(el) for arr, el in zip((policies, Qs, Vs, actions, rewards, average_policies, old_policies),
                                             (policy, Q, V, action, reward, average_policy, old_policy))]

          # Unpack second half of transition
          next_state = torch.cat(tuple(trajectory.state for trajectory in trajectories[i + 1]), 0)
          done = torch.Tensor([trajectory.action is None for trajectory in trajectories[i + 1]]).unsqueeze(1)

        # Do forward pass for all transitions
        _, _, Qret, _ = model(next_state, (hx, cx))
        # Qret = 0 for terminal s, V(s_i; θ) otherwise
        Qret = ((1 - done) * Qret).detach()

        # Train the network off-policy
        yield _train(args, T, model, shared_model, shared_average_model, optimiser, policies, Qs, Vs,
               actions, rewards, Qret, average_policies, old_policies=old_policies)
    done = True

  env.close()


# -------------------------------------------------------------------------------------------------------- main.py
def _build(seed, bug=None):
  args = types.SimpleNamespace(seed=seed, num_processes=1, T_max=500000, t_max=100, max_episode_length=500,
                               hidden_size=32, model=None, on_policy=False, memory_capacity=100000, replay_ratio=4,
                               replay_start=300, discount=0.99, trace_decay=1, trace_max=10, trust_region=False,
                               trust_region_decay=0.99, trust_region_threshold=1, reward_clip=False, lr=0.0007,
                               lr_decay=False, rmsprop_decay=0.99, batch_size=8, entropy_weight=0.0001,
                               max_gradient_norm=40, env='CartPole-v1', bug=bug)  # (port) 20000, 16

  torch.manual_seed(args.seed)
  T = Counter()  # Global shared counter

  # Create shared network
  env = CartPoleV1(args.env)
  shared_model = ActorCritic(env.observation_space, env.action_space, args.hidden_size)
  shared_model.share_memory()
  # Create average network
  shared_average_model = ActorCritic(env.observation_space, env.action_space, args.hidden_size)
  shared_average_model.load_state_dict(shared_model.state_dict())
  shared_average_model.share_memory()
  for param in shared_average_model.parameters():
    param.requires_grad = False
  # Create optimiser for shared network parameters with shared statistics
  optimiser = SharedRMSprop(shared_model.parameters(), lr=args.lr, alpha=args.rmsprop_decay)
  optimiser.share_memory()
  env.close()

  record = {'states': []}
  steps = train(1, args, T, shared_model, shared_average_model, optimiser, record)
  while next(steps) is not None:
    pass

  # the Program's batch: the first on-policy segment's states (zero LSTM state each), actions, n-step returns
  states = torch.cat(record['states'], 0)
  n = states.size(0)
  actions = torch.cat(record['actions'], 0)
  returns, Qret = [], record['Qret']
  for r in reversed(record['rewards']):
    Qret = r + args.discount * Qret
    returns.insert(0, Qret)
  returns = torch.cat(returns, 0)
  h0 = (torch.zeros(n, args.hidden_size), torch.zeros(n, args.hidden_size))
  batch = ((states, h0), (actions, returns))

  def loss_fn(outputs, targets):
    """_train's on-policy lines for one step (rho 1) on every row of the batch."""
    policy, Q, V, _ = outputs
    action, Qret = targets
    A = Qret - V
    log_prob = policy.gather(1, action).log()
    policy_loss = -(log_prob * A.detach()).mean(0)
    policy_loss = policy_loss - args.entropy_weight * -(policy.log() * policy).sum(1).mean(0)
    value_loss = ((Qret - Q.gather(1, action)) ** 2 / 2).mean(0)
    return (policy_loss + value_loss).squeeze()

  return Program(name="kaixhinacer_cartpole", model=shared_model, batch=batch, loss_fn=loss_fn, optimizer=optimiser,
                 train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
  # optimiser.zero_grad() with today's default set_to_none=True: the shared gradients are dropped, not zeroed, so the
  # worker model's own gradient tensors (which the shared model borrowed) are never cleared and every update adds
  # onto all earlier ones. The transfer's reliance on the shared grads is the question of
  # https://github.com/Kaixhin/ACER/issues/17; the same accumulation in another A3C:
  # https://github.com/MorvanZhou/pytorch-A3C/issues/21.
  Bug("zero_grad_set_to_none", functools.partial(_build, bug="zero_grad_set_to_none"), "step_probe", (),
      kind="step.grad_accumulation"),
  # the segment walked forwards instead of backwards (classic: ``reversed`` dropped): each step's Qret is built from
  # the rewards before it, not after it.
  Bug("returns_not_reversed", functools.partial(_build, bug="returns_not_reversed"), "learning_ledger", ("TASK",)),
]

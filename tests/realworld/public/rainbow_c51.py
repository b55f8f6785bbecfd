# ruff: noqa: PLR0402, RUF059, UP008, UP039
"""Rainbow (Kaixhin/Rainbow): a dueling distributional (C51) DQN with factorised noisy linear layers, double-Q
n-step targets projected onto a fixed 51-atom support, prioritised replay from a sum tree with importance-sampling
weights, and a periodically copied target network, in the repository's "data-efficient Rainbow" configuration.

Source: https://github.com/Kaixhin/Rainbow
Commit: 1745b184c3dfc03d4ffa3ce2342ced9996b39a60
Files: agent.py (Agent), model.py (NoisyLinear, DQN), memory.py (SegmentTree, ReplayMemory), main.py (arguments and
the training loop), env.py (the Env interface), README.md (the data-efficient options)
License: MIT (Copyright (c) 2017 Kai Arulkumaran; full text in LICENSES/Kaixhin-Rainbow.txt)
Domain: RL, value-based (distributional DQN, n-step returns, prioritized replay, noisy nets, target network)

Kept as written: main.py's defaults with the README's data-efficient options (architecture data-efficient, hidden
size 256, noisy std 0.1, 51 atoms on [-10, 10], multi-step 20, discount 0.99, replay frequency 1, learning rate 1e-4,
Adam eps 1.5e-4, batch 32, norm clip 10, priority exponent 0.5, priority weight 0.4 annealed to 1 over T_max 100000,
reward clip 1, history 4); ``NoisyLinear`` (factorised Gaussian noise, ``reset_noise``, noise only in training mode),
``DQN`` (two 5x5 stride-5 convolutions, value and advantage streams, ``q = v + a - a.mean``, log-softmax /
softmax over atoms); ``Agent`` (Adam over the online net, target net without gradients, ``act``, ``learn``: double-Q
selection with the online net, target distribution from the target net, ``Tz`` clamp and L2 projection with the
``l == u`` fix, cross-entropy ``-sum(m * log p)``, importance-weighted mean, ``clip_grad_norm_``, priority update with
the per-sample losses); ``SegmentTree`` and ``ReplayMemory`` (frames stored as uint8, n-step returns and blank
frames across episode starts, stratified sampling by priority, importance-sampling weights); the loop body of main.py
(reset at episode end, ``reset_noise`` every replay-frequency steps, ``act``, ``env.step``, reward clipping,
``mem.append``, priority-weight annealing, ``learn``, the target copy every ``target_update`` steps).

Deviations from the original:
- atari-py (the ALE) and OpenCV are not installed: the environment is a "catch" game written out below in numpy
  with ``env.py``'s interface (``reset`` / ``step`` returning the stack of the last 4 84x84 grayscale frames in
  [0, 1], ``action_space``, ``train`` / ``eval``): a ball falls one row per step in a 12x12 grid drawn in 7x7
  pixel cells, the agent moves a 3-cell paddle on the bottom row (no-op, left, right), +1 for a catch, -1 for a miss,
  and the episode ends there; its draws come from a numpy generator seeded from the seed. No frame skipping, no
  life-loss terminals.
- sizes: memory capacity 100000 -> 2000 (the README's "unbounded" memory of 100000 84x84 frames is 0.7 GB); the
  first ``learn_start`` (1600) steps run at build time; the evaluation (``test``, the validation memory, every 10000
  steps), the checkpointing, memory saving, the option printing, ``tqdm`` and plotting are dropped; no GPU
  (``args.device`` is the CPU) and no pretrained-model loading (``args.model`` is None).
- ``main.py``'s loop is not run to ``T_max``: ``train_step`` runs one iteration of its body (one environment step,
  then one ``learn``, as replay frequency 1 gives); ``learn`` returns its importance-weighted loss (the original
  returns nothing) so the step has a loss to report.
- ``learn``'s no_grad block (the projected target distribution ``m``) is moved unchanged into a method
  ``target_distribution`` that ``learn`` calls. The Program's batch is one prioritised sample of the memory at build
  time; ``loss_fn`` repeats ``learn``'s loss lines on the online net's log-probabilities for it, with the same
  ``target_distribution`` (``batch`` passes ``log=True`` as ``learn`` does).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
import types
from collections import deque

import numpy as np
import torch
import torch.nn as nn
from torch import optim
from torch.nn import functional as F
from torch.nn.utils import clip_grad_norm_

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
  if _p not in sys.path:
    sys.path.insert(0, _p)
from _api import Bug, Program

# main.py's defaults, with README.md's data-efficient options; the memory capacity scaled down (see the docstring)
args = types.SimpleNamespace(
  seed=123, T_max=int(100e3), history_length=4, architecture='data-efficient', hidden_size=256, noisy_std=0.1,
  atoms=51, V_min=-10, V_max=10, model=None, memory_capacity=2000, replay_frequency=1, priority_exponent=0.5,
  priority_weight=0.4, multi_step=20, discount=0.99, target_update=2000, reward_clip=1, learning_rate=0.0001,
  adam_eps=1.5e-4, batch_size=32, norm_clip=10, learn_start=1600, device=torch.device('cpu'))


# ---- the environment (port: a catch game with env.py's interface) ----------------------------------------------

class Env():
  GRID, CELL = 12, 7  # 12 x 7 = 84 pixels

  def __init__(self, args, seed):
    self.device = args.device
    self.rng = np.random.default_rng(seed)
    self.window = args.history_length  # Number of frames to concatenate
    self.state_buffer = deque([], maxlen=args.history_length)
    self.training = True  # Consistent with model training mode

  def _get_state(self):
    screen = np.zeros((84, 84), dtype=np.float32)
    c = self.CELL
    screen[self.ball_row * c:(self.ball_row + 1) * c, self.ball_col * c:(self.ball_col + 1) * c] = 1.0
    screen[(self.GRID - 1) * c:, self.paddle * c:(self.paddle + 3) * c] = 0.5
    return torch.tensor(screen, dtype=torch.float32, device=self.device)

  def _reset_buffer(self):
    for _ in range(self.window):
      self.state_buffer.append(torch.zeros(84, 84, device=self.device))

  def reset(self):
    self._reset_buffer()
    self.ball_row, self.ball_col = 0, int(self.rng.integers(self.GRID))
    self.paddle = int(self.rng.integers(self.GRID - 2))
    observation = self._get_state()
    self.state_buffer.append(observation)
    return torch.stack(list(self.state_buffer), 0)

  def step(self, action):
    self.paddle = min(max(self.paddle + (0, -1, 1)[action], 0), self.GRID - 3)
    self.ball_row += 1
    reward, done = 0, False
    if self.ball_row == self.GRID - 1:
      reward = 1 if self.paddle <= self.ball_col < self.paddle + 3 else -1
      done = True
    observation = self._get_state()
    self.state_buffer.append(observation)
    return torch.stack(list(self.state_buffer), 0), reward, done

  def train(self):
    self.training = True

  def eval(self):
    self.training = False

  def action_space(self):
    return 3

  def close(self):
    pass


# ---- model.py ---------------------------------------------------------------------------------------------------

# Factorised NoisyLinear layer with bias
class NoisyLinear(nn.Module):
  def __init__(self, in_features, out_features, std_init=0.5):
    super(NoisyLinear, self).__init__()
    self.in_features = in_features
    self.out_features = out_features
    self.std_init = std_init
    self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
    self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
    self.register_buffer('weight_epsilon', torch.empty(out_features, in_features))
    self.bias_mu = nn.Parameter(torch.empty(out_features))
    self.bias_sigma = nn.Parameter(torch.empty(out_features))
    self.register_buffer('bias_epsilon', torch.empty(out_features))
    self.reset_parameters()
    self.reset_noise()

  def reset_parameters(self):
    mu_range = 1 / math.sqrt(self.in_features)
    self.weight_mu.data.uniform_(-mu_range, mu_range)
    self.weight_sigma.data.fill_(self.std_init / math.sqrt(self.in_features))
    self.bias_mu.data.uniform_(-mu_range, mu_range)
    self.bias_sigma.data.fill_(self.std_init / math.sqrt(self.out_features))

  def _scale_noise(self, size):
    x = torch.randn(size, device=self.weight_mu.device)
    return x.sign().mul_(x.abs().sqrt_())

  def reset_noise(self):
    epsilon_in = self._scale_noise(self.in_features)
    epsilon_out = self._scale_noise(self.out_features)
    self.weight_epsilon.copy_(epsilon_out.ger(epsilon_in))
    self.bias_epsilon.copy_(epsilon_out)

  def forward(self, input):
    if self.training:
      return F.linear(input, self.weight_mu + self.weight_sigma * self.weight_epsilon, self.bias_mu + self.bias_sigma * self.bias_epsilon)
    else:
      return F.linear(input, self.weight_mu, self.bias_mu)


class DQN(nn.Module):
  def __init__(self, args, action_space, bug=None):
    super(DQN, self).__init__()
    self.bug = bug
    self.atoms = args.atoms
    self.action_space = action_space

    if args.architecture == 'canonical':
      self.convs = nn.Sequential(nn.Conv2d(args.history_length, 32, 8, stride=4, padding=0), nn.ReLU(),
                                 nn.Conv2d(32, 64, 4, stride=2, padding=0), nn.ReLU(),
                                 nn.Conv2d(64, 64, 3, stride=1, padding=0), nn.ReLU())
      self.conv_output_size = 3136
    elif args.architecture == 'data-efficient':
      self.convs = nn.Sequential(nn.Conv2d(args.history_length, 32, 5, stride=5, padding=0), nn.ReLU(),
                                 nn.Conv2d(32, 64, 5, stride=5, padding=0), nn.ReLU())
      self.conv_output_size = 576
    self.fc_h_v = NoisyLinear(self.conv_output_size, args.hidden_size, std_init=args.noisy_std)
    self.fc_h_a = NoisyLinear(self.conv_output_size, args.hidden_size, std_init=args.noisy_std)
    self.fc_z_v = NoisyLinear(args.hidden_size, self.atoms, std_init=args.noisy_std)
    self.fc_z_a = NoisyLinear(args.hidden_size, action_space * self.atoms, std_init=args.noisy_std)

  def forward(self, x, log=False):
    x = self.convs(x)
    x = x.view(-1, self.conv_output_size)
    v = self.fc_z_v(F.relu(self.fc_h_v(x)))  # Value stream
    a = self.fc_z_a(F.relu(self.fc_h_a(x)))  # Advantage stream
    v, a = v.view(-1, 1, self.atoms), a.view(-1, self.action_space, self.atoms)
    q = v + a - a.mean(1, keepdim=True)  # Combine streams
    if log and self.bug == "log_softmax_over_actions":
      q = F.log_softmax(q, dim=1)  # normalised over the actions instead of the atoms
    elif log:  # Use log softmax for numerical stability
      q = F.log_softmax(q, dim=2)  # Log probabilities with action over second dimension
    else:
      q = F.softmax(q, dim=2)  # Probabilities with action over second dimension
    return q

  def reset_noise(self):
    for name, module in self.named_children():
      if 'fc' in name:
        module.reset_noise()


# ---- memory.py --------------------------------------------------------------------------------------------------

Transition_dtype = np.dtype([('timestep', np.int32), ('state', np.uint8, (84, 84)), ('action', np.int32), ('reward', np.float32), ('nonterminal', np.bool_)])
blank_trans = (0, np.zeros((84, 84), dtype=np.uint8), 0, 0.0, False)


# Segment tree data structure where parent node values are sum/max of children node values
class SegmentTree():
  def __init__(self, size):
    self.index = 0
    self.size = size
    self.full = False  # Used to track actual capacity
    self.tree_start = 2**(size-1).bit_length()-1  # Put all used node leaves on last tree level
    self.sum_tree = np.zeros((self.tree_start + self.size,), dtype=np.float32)
    self.data = np.array([blank_trans] * size, dtype=Transition_dtype)  # Build structured array
    self.max = 1  # Initial max value to return (1 = 1^ω)

  # Updates nodes values from current tree
  def _update_nodes(self, indices):
    children_indices = indices * 2 + np.expand_dims([1, 2], axis=1)
    self.sum_tree[indices] = np.sum(self.sum_tree[children_indices], axis=0)

  # Propagates changes up tree given tree indices
  def _propagate(self, indices):
    parents = (indices - 1) // 2
    unique_parents = np.unique(parents)
    self._update_nodes(unique_parents)
    if parents[0] != 0:
      self._propagate(parents)

  # Propagates single value up tree given a tree index for efficiency
  def _propagate_index(self, index):
    parent = (index - 1) // 2
    left, right = 2 * parent + 1, 2 * parent + 2
    self.sum_tree[parent] = self.sum_tree[left] + self.sum_tree[right]
    if parent != 0:
      self._propagate_index(parent)

  # Updates values given tree indices
  def update(self, indices, values):
    self.sum_tree[indices] = values  # Set new values
    self._propagate(indices)  # Propagate values
    current_max_value = np.max(values)
    self.max = max(current_max_value, self.max)

  # Updates single value given a tree index for efficiency
  def _update_index(self, index, value):
    self.sum_tree[index] = value  # Set new value
    self._propagate_index(index)  # Propagate value
    self.max = max(value, self.max)

  def append(self, data, value):
    self.data[self.index] = data  # Store data in underlying data structure
    self._update_index(self.index + self.tree_start, value)  # Update tree
    self.index = (self.index + 1) % self.size  # Update index
    self.full = self.full or self.index == 0  # Save when capacity reached
    self.max = max(value, self.max)

  # Searches for the location of values in sum tree
  def _retrieve(self, indices, values):
    children_indices = (indices * 2 + np.expand_dims([1, 2], axis=1)) # Make matrix of children indices
    # If indices correspond to leaf nodes, return them
    if children_indices[0, 0] >= self.sum_tree.shape[0]:
      return indices
    # If children indices correspond to leaf nodes, bound rare outliers in case total slightly overshoots
    elif children_indices[0, 0] >= self.tree_start:
      children_indices = np.minimum(children_indices, self.sum_tree.shape[0] - 1)
    left_children_values = self.sum_tree[children_indices[0]]
    successor_choices = np.greater(values, left_children_values).astype(np.int32)  # Classify which values are in left or right branches
    successor_indices = children_indices[successor_choices, np.arange(indices.size)] # Use classification to index into the indices matrix
    successor_values = values - successor_choices * left_children_values  # Subtract the left branch values when searching in the right branch
    return self._retrieve(successor_indices, successor_values)

  # Searches for values in sum tree and returns values, data indices and tree indices
  def find(self, values):
    indices = self._retrieve(np.zeros(values.shape, dtype=np.int32), values)
    data_index = indices - self.tree_start
    return (self.sum_tree[indices], data_index, indices)  # Return values, data indices, tree indices

  # Returns data given a data index
  def get(self, data_index):
    return self.data[data_index % self.size]

  def total(self):
    return self.sum_tree[0]

class ReplayMemory():
  def __init__(self, args, capacity):
    self.device = args.device
    self.capacity = capacity
    self.history = args.history_length
    self.discount = args.discount
    self.n = args.multi_step
    self.priority_weight = args.priority_weight  # Initial importance sampling weight β, annealed to 1 over course of training
    self.priority_exponent = args.priority_exponent
    self.t = 0  # Internal episode timestep counter
    self.n_step_scaling = torch.tensor([self.discount ** i for i in range(self.n)], dtype=torch.float32, device=self.device)  # Discount-scaling vector for n-step returns
    self.transitions = SegmentTree(capacity)  # Store transitions in a wrap-around cyclic buffer within a sum tree for querying priorities

  # Adds state and action at time t, reward and terminal at time t + 1
  def append(self, state, action, reward, terminal):
    state = state[-1].mul(255).to(dtype=torch.uint8, device=torch.device('cpu'))  # Only store last frame and discretise to save memory
    self.transitions.append((self.t, state, action, reward, not terminal), self.transitions.max)  # Store new transition with maximum priority
    self.t = 0 if terminal else self.t + 1  # Start new episodes with t = 0

  # Returns the transitions with blank states where appropriate
  def _get_transitions(self, idxs):
    transition_idxs = np.arange(-self.history + 1, self.n + 1) + np.expand_dims(idxs, axis=1)
    transitions = self.transitions.get(transition_idxs)
    transitions_firsts = transitions['timestep'] == 0
    blank_mask = np.zeros_like(transitions_firsts, dtype=np.bool_)
    for t in range(self.history - 2, -1, -1):  # e.g. 2 1 0
      blank_mask[:, t] = np.logical_or(blank_mask[:, t + 1], transitions_firsts[:, t + 1]) # True if future frame has timestep 0
    for t in range(self.history, self.history + self.n):  # e.g. 4 5 6
      blank_mask[:, t] = np.logical_or(blank_mask[:, t - 1], transitions_firsts[:, t]) # True if current or past frame has timestep 0
    transitions[blank_mask] = blank_trans
    return transitions

  # Returns a valid sample from each segment
  def _get_samples_from_segments(self, batch_size, p_total):
    segment_length = p_total / batch_size  # Batch size number of segments, based on sum over all probabilities
    segment_starts = np.arange(batch_size) * segment_length
    valid = False
    while not valid:
      samples = np.random.uniform(0.0, segment_length, [batch_size]) + segment_starts  # Uniformly sample from within all segments
      probs, idxs, tree_idxs = self.transitions.find(samples)  # Retrieve samples from tree with un-normalised probability
      if np.all((self.transitions.index - idxs) % self.capacity > self.n) and np.all((idxs - self.transitions.index) % self.capacity >= self.history) and np.all(probs != 0):
        valid = True  # Note that conditions are valid but extra conservative around buffer index 0
    # Retrieve all required transition data (from t - h to t + n)
    transitions = self._get_transitions(idxs)
    # Create un-discretised states and nth next states
    all_states = transitions['state']
    states = torch.tensor(all_states[:, :self.history], device=self.device, dtype=torch.float32).div_(255)
    next_states = torch.tensor(all_states[:, self.n:self.n + self.history], device=self.device, dtype=torch.float32).div_(255)
    # Discrete actions to be used as index
    actions = torch.tensor(np.copy(transitions['action'][:, self.history - 1]), dtype=torch.int64, device=self.device)
    # Calculate truncated n-step discounted returns R^n = Σ_k=0->n-1 (γ^k)R_t+k+1 (note that invalid nth next states have reward 0)
    rewards = torch.tensor(np.copy(transitions['reward'][:, self.history - 1:-1]), dtype=torch.float32, device=self.device)
    R = torch.matmul(rewards, self.n_step_scaling)
    # Mask for non-terminal nth next states
    nonterminals = torch.tensor(np.expand_dims(transitions['nonterminal'][:, self.history + self.n - 1], axis=1), dtype=torch.float32, device=self.device)
    return probs, idxs, tree_idxs, states, actions, R, next_states, nonterminals

  def sample(self, batch_size):
    p_total = self.transitions.total()  # Retrieve sum of all priorities (used to create a normalised probability distribution)
    probs, idxs, tree_idxs, states, actions, returns, next_states, nonterminals = self._get_samples_from_segments(batch_size, p_total)  # Get batch of valid samples
    probs = probs / p_total  # Calculate normalised probabilities
    capacity = self.capacity if self.transitions.full else self.transitions.index
    weights = (capacity * probs) ** -self.priority_weight  # Compute importance-sampling weights w
    weights = torch.tensor(weights / weights.max(), dtype=torch.float32, device=self.device)  # Normalise by max importance-sampling weight from batch
    return tree_idxs, states, actions, returns, next_states, nonterminals, weights

  def update_priorities(self, idxs, priorities):
    priorities = np.power(priorities, self.priority_exponent)
    self.transitions.update(idxs, priorities)


# ---- agent.py ---------------------------------------------------------------------------------------------------

class Agent():
  def __init__(self, args, env, bug=None):
    self.action_space = env.action_space()
    self.atoms = args.atoms
    self.Vmin = args.V_min
    self.Vmax = args.V_max
    self.support = torch.linspace(args.V_min, args.V_max, self.atoms).to(device=args.device)  # Support (range) of z
    self.delta_z = (args.V_max - args.V_min) / (self.atoms - 1)
    self.batch_size = args.batch_size
    self.n = args.multi_step
    self.discount = args.discount
    self.norm_clip = args.norm_clip
    self.bug = bug

    self.online_net = DQN(args, self.action_space, bug=bug).to(device=args.device)

    self.online_net.train()

    self.target_net = DQN(args, self.action_space).to(device=args.device)
    self.update_target_net()
    self.target_net.train()
    for param in self.target_net.parameters():
      param.requires_grad = False

    self.optimiser = optim.Adam(self.online_net.parameters(), lr=args.learning_rate, eps=args.adam_eps)

  # Resets noisy weights in all linear layers (of online net only)
  def reset_noise(self):
    self.online_net.reset_noise()

  # Acts based on single state (no batch)
  def act(self, state):
    with torch.no_grad():
      return (self.online_net(state.unsqueeze(0)) * self.support).sum(2).argmax(1).item()

  def target_distribution(self, returns, next_states, nonterminals, actions):
    """(port) learn()'s no_grad block, as written, shared with the Program's loss_fn."""
    with torch.no_grad():
      # Calculate nth next state probabilities
      pns = self.online_net(next_states)  # Probabilities p(s_t+n, ·; θonline)
      dns = self.support.expand_as(pns) * pns  # Distribution d_t+n = (z, p(s_t+n, ·; θonline))
      argmax_indices_ns = dns.sum(2).argmax(1)  # Perform argmax action selection using online network: argmax_a[(z, p(s_t+n, a; θonline))]
      self.target_net.reset_noise()  # Sample new target net noise
      pns = self.target_net(next_states)  # Probabilities p(s_t+n, ·; θtarget)
      pns_a = pns[range(self.batch_size), argmax_indices_ns]  # Double-Q probabilities p(s_t+n, argmax_a[(z, p(s_t+n, a; θonline))]; θtarget)

      # Compute Tz (Bellman operator T applied to z)
      if self.bug == "nonterminal_mask_dropped":
        Tz = returns.unsqueeze(1) + (self.discount ** self.n) * self.support.unsqueeze(0)  # the terminal mask left out
      else:
        Tz = returns.unsqueeze(1) + nonterminals * (self.discount ** self.n) * self.support.unsqueeze(0)  # Tz = R^n + (γ^n)z (accounting for terminal states)
      Tz = Tz.clamp(min=self.Vmin, max=self.Vmax)  # Clamp between supported values
      # Compute L2 projection of Tz onto fixed support z
      b = (Tz - self.Vmin) / self.delta_z  # b = (Tz - Vmin) / Δz
      l, u = b.floor().to(torch.int64), b.ceil().to(torch.int64)
      # Fix disappearing probability mass when l = b = u (b is int)
      l[(u > 0) * (l == u)] -= 1
      u[(l < (self.atoms - 1)) * (l == u)] += 1

      # Distribute probability of Tz
      m = next_states.new_zeros(self.batch_size, self.atoms)
      offset = torch.linspace(0, ((self.batch_size - 1) * self.atoms), self.batch_size).unsqueeze(1).expand(self.batch_size, self.atoms).to(actions)
      m.view(-1).index_add_(0, (l + offset).view(-1), (pns_a * (u.float() - b)).view(-1))  # m_l = m_l + p(s_t+n, a*)(u - b)
      m.view(-1).index_add_(0, (u + offset).view(-1), (pns_a * (b - l.float())).view(-1))  # m_u = m_u + p(s_t+n, a*)(b - l)
    return m

  def learn(self, mem):
    # Sample transitions
    idxs, states, actions, returns, next_states, nonterminals, weights = mem.sample(self.batch_size)

    # Calculate current state probabilities (online network noise already sampled)
    log_ps = self.online_net(states, log=True)  # Log probabilities log p(s_t, ·; θonline)
    log_ps_a = log_ps[range(self.batch_size), actions]  # log p(s_t, a_t; θonline)

    m = self.target_distribution(returns, next_states, nonterminals, actions)

    loss = -torch.sum(m * log_ps_a, 1)  # Cross-entropy loss (minimises DKL(m||p(s_t, a_t)))
    self.online_net.zero_grad()
    (weights * loss).mean().backward()  # Backpropagate importance-weighted minibatch loss
    clip_grad_norm_(self.online_net.parameters(), self.norm_clip)  # Clip gradients by L2 norm
    self.optimiser.step()

    mem.update_priorities(idxs, loss.detach().cpu().numpy())  # Update priorities of sampled transitions
    return (weights * loss).mean().detach()

  def update_target_net(self):
    self.target_net.load_state_dict(self.online_net.state_dict())

  def train(self):
    self.online_net.train()

  def eval(self):
    self.online_net.eval()


# ---- main.py ----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
  np.random.seed(seed)
  torch.manual_seed(np.random.randint(1, 10000))

  # Environment
  env = Env(args, seed)
  env.train()

  # Agent
  dqn = Agent(args, env, bug=bug)
  mem = ReplayMemory(args, args.memory_capacity)

  priority_weight_increase = (1 - args.priority_weight) / (args.T_max - args.learn_start)

  def loop():
    # Training loop
    dqn.train()
    done = True
    for T in range(1, args.T_max + 1):
      if done:
        state = env.reset()

      if T % args.replay_frequency == 0:
        dqn.reset_noise()  # Draw a new set of noisy weights

      action = dqn.act(state)  # Choose an action greedily (with noisy weights)
      next_state, reward, done = env.step(action)  # Step
      if args.reward_clip > 0:
        reward = max(min(reward, args.reward_clip), -args.reward_clip)  # Clip rewards
      mem.append(state, action, reward, done)  # Append transition to memory

      # Train and test
      loss = None
      if T >= args.learn_start:
        mem.priority_weight = min(mem.priority_weight + priority_weight_increase, 1)  # Anneal importance sampling weight β to 1

        if T % args.replay_frequency == 0:
          loss = dqn.learn(mem)  # Train with n-step distributional double-Q learning

        # Update target network
        if T % args.target_update == 0:
          dqn.update_target_net()

      state = next_state
      if loss is not None or T == args.learn_start - 1:
        yield loss  # (port) one step of the loop per train_step, after the build's warm-up

  steps = loop()
  next(steps)  # the steps before learn_start: the memory fills

  # the Program's batch: one prioritised sample, and learn()'s loss on it
  idxs, states, actions, returns, next_states, nonterminals, weights = mem.sample(args.batch_size)
  batch = ({"x": states, "log": True}, (actions, returns, next_states, nonterminals, weights))

  def loss_fn(log_ps, targets):
    actions, returns, next_states, nonterminals, weights = targets
    log_ps_a = log_ps[range(dqn.batch_size), actions]  # log p(s_t, a_t; θonline)
    m = dqn.target_distribution(returns, next_states, nonterminals, actions)
    loss = -torch.sum(m * log_ps_a, 1)  # Cross-entropy loss (minimises DKL(m||p(s_t, a_t)))
    return (weights * loss).mean()

  return Program(name="rainbow_c51", model=dqn.online_net, batch=batch, loss_fn=loss_fn, optimizer=dqn.optimiser,
                 train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
  # the n-step target bootstraps through terminal states: the nonterminal mask is left out of Tz. Terminal handling in
  # this repository's n-step returns was reported in https://github.com/Kaixhin/Rainbow/issues/11 (the maintainer:
  # "Yep you found the bug"); here the mask the fix relies on is dropped.
  Bug("nonterminal_mask_dropped", functools.partial(_build, bug="nonterminal_mask_dropped"), "learning_ledger",
      ("TASK",)),
  # the online net's log-softmax taken over the actions (dim 1) instead of the atoms (dim 2): each action's "log
  # distribution" does not normalise over its support (classic: the softmax over the wrong axis).
  Bug("log_softmax_over_actions", functools.partial(_build, bug="log_softmax_over_actions"), "learning_ledger",
      ("OBJECTIVE",)),
]

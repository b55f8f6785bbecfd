# ruff: noqa: UP004, UP008, UP039, RUF059, PLR0402
"""LAP-TD3 (Fujimoto, Meger & Precup, "An Equivalence between Loss Functions and Non-Uniform Sampling in Experience
Replay", NeurIPS 2020): TD3 whose replay is sampled in proportion to ``max(|td1|, |td2|).clamp(min=1) ** alpha``
(a sum tree over a prioritized buffer, priorities written back after every critic update, no importance weights)
and whose critic loss is a Huber loss with threshold ``min_priority`` on each head's absolute TD error; delayed
actor updates and Polyak targets as in TD3.

Source: https://github.com/sfujim/LAP-PAL
Commit: a649b1b977e979ed0e49d67335d3c79b555e9cfb
Files: continuous/LAP_TD3.py (Actor, Critic, LAP_TD3), continuous/utils.py (PrioritizedReplayBuffer, SumTree),
continuous/main.py (arguments, seeding, the training loop)
License: MIT (Copyright (c) 2020 Scott Fujimoto; full text in LICENSES/sfujim-LAP-PAL.txt)
Domain: RL, continuous actor-critic with prioritized replay (LAP: loss-adjusted prioritization, TD3)

Kept as written: Actor (256-256, ``max_action * tanh``), Critic (two 256-256 Q heads, ``Q1``), LAP_TD3 with its
defaults (discount 0.99, tau 0.005, policy_noise 0.2 and noise_clip 0.5 scaled by max_action, policy_freq 2, alpha
0.4, min_priority 1, Adam lr 3e-4 for both), ``train`` (target smoothing, ``min(target_Q1, target_Q2)``, ``reward +
not_done * discount * target``, ``huber(td1) + huber(td2)``, the priority update, actor loss ``-Q1(s, actor(s))
.mean()`` every 2nd iteration, Polyak updates of both targets), PrioritizedReplayBuffer and SumTree (new transitions
at ``max_priority``, batched tree search, ``np.unique`` before ``batch_set``, the beta schedule only PER uses), and
main.py's loop body: random actions for the first ``start_timesteps``, then ``select_action`` plus Gaussian
exploration noise (``expl_noise`` 0.1 * max_action) clipped to the action range, ``done_bool = float(done) if
episode_timesteps < env._max_episode_steps else 0``, ``replay_buffer.add``, ``policy.train(replay_buffer,
args.batch_size)``, the reset at episode end; the seeding (``env.seed``, ``torch.manual_seed``, ``np.random.seed``).

Deviations from the original:
- gym's MuJoCo HalfCheetah-v3 is replaced by the Pendulum written out in numpy in ``_continuous_control.py``
  (Pendulum-v1's equations, gym < 0.26 interface, 200-step time limit with ``done`` at the limit as TimeLimit sets
  it); ``env.action_space.sample()`` draws from the space's own generator, seeded with ``env.action_space.seed``.
- sizes for 2 CPU cores: start_timesteps 25e3 -> 1000 (the random-action phase runs at build time), max_timesteps
  3e6 -> unbounded (``train_step`` runs one iteration of the ``for t`` loop once training has started); the buffer's
  max_size stays 1e6 (numpy zeros, untouched rows are not allocated).
- ``LAP_TD3.train`` returns its ``critic_loss`` (the original returns nothing) so the step has a loss to report.
- ``eval_policy`` (every 5e3 steps), printing, ``np.save`` of the results, save/load and the other algorithms of
  main.py (TD3, PER_TD3, PAL_TD3) are dropped; no GPU (``device`` is the CPU).
- the Program's model is the critic (with its optimizer), its batch a replay sample and its ``loss_fn`` train()'s
  critic loss on the critic's outputs (the same lines).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
	if _p not in sys.path:
		sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

device = torch.device("cpu")


# ---------------------------------------------------------------- utils.py
class PrioritizedReplayBuffer():
	def __init__(self, state_dim, action_dim, max_size=int(1e6)):
		self.max_size = max_size
		self.ptr = 0
		self.size = 0

		self.state = np.zeros((max_size, state_dim))
		self.action = np.zeros((max_size, action_dim))
		self.next_state = np.zeros((max_size, state_dim))
		self.reward = np.zeros((max_size, 1))
		self.not_done = np.zeros((max_size, 1))

		self.tree = SumTree(max_size)
		self.max_priority = 1.0
		self.beta = 0.4

		self.device = torch.device("cpu")


	def add(self, state, action, next_state, reward, done):
		self.state[self.ptr] = state
		self.action[self.ptr] = action
		self.next_state[self.ptr] = next_state
		self.reward[self.ptr] = reward
		self.not_done[self.ptr] = 1. - done

		self.tree.set(self.ptr, self.max_priority)

		self.ptr = (self.ptr + 1) % self.max_size
		self.size = min(self.size + 1, self.max_size)


	def sample(self, batch_size):
		ind = self.tree.sample(batch_size)

		weights = self.tree.levels[-1][ind] ** -self.beta
		weights /= weights.max()

		self.beta = min(self.beta + 2e-7, 1) # Hardcoded: 0.4 + 2e-7 * 3e6 = 1.0. Only used by PER.

		return (
			torch.FloatTensor(self.state[ind]).to(self.device),
			torch.FloatTensor(self.action[ind]).to(self.device),
			torch.FloatTensor(self.next_state[ind]).to(self.device),
			torch.FloatTensor(self.reward[ind]).to(self.device),
			torch.FloatTensor(self.not_done[ind]).to(self.device),
			ind,
			torch.FloatTensor(weights).to(self.device).reshape(-1, 1)
		)


	def update_priority(self, ind, priority):
		self.max_priority = max(priority.max(), self.max_priority)
		self.tree.batch_set(ind, priority)


class SumTree(object):
	def __init__(self, max_size):
		self.levels = [np.zeros(1)]
		# Tree construction
		# Double the number of nodes at each level
		level_size = 1
		while level_size < max_size:
			level_size *= 2
			self.levels.append(np.zeros(level_size))
			

	# Batch binary search through sum tree
	# Sample a priority between 0 and the max priority
	# and then search the tree for the corresponding index
	def sample(self, batch_size):
		value = np.random.uniform(0, self.levels[0][0], size=batch_size)
		ind = np.zeros(batch_size, dtype=int)
		
		for nodes in self.levels[1:]:
			ind *= 2
			left_sum = nodes[ind]
			
			is_greater = np.greater(value, left_sum)
			# If value > left_sum -> go right (+1), else go left (+0)
			ind += is_greater
			# If we go right, we only need to consider the values in the right tree
			# so we subtract the sum of values in the left tree
			value -= left_sum * is_greater
		
		return ind


	def set(self, ind, new_priority):
		priority_diff = new_priority - self.levels[-1][ind]

		for nodes in self.levels[::-1]:
			np.add.at(nodes, ind, priority_diff)
			ind //= 2


	def batch_set(self, ind, new_priority):
		# Confirm we don't increment a node twice
		ind, unique_ind = np.unique(ind, return_index=True)
		priority_diff = new_priority[unique_ind] - self.levels[-1][ind]
		
		for nodes in self.levels[::-1]:
			np.add.at(nodes, ind, priority_diff)
			ind //= 2


# ---------------------------------------------------------------- LAP_TD3.py
class Actor(nn.Module):
	def __init__(self, state_dim, action_dim, max_action):
		super(Actor, self).__init__()

		self.l1 = nn.Linear(state_dim, 256)
		self.l2 = nn.Linear(256, 256)
		self.l3 = nn.Linear(256, action_dim)
		
		self.max_action = max_action
		

	def forward(self, state):
		a = F.relu(self.l1(state))
		a = F.relu(self.l2(a))
		return self.max_action * torch.tanh(self.l3(a))


	def act(self, state):
		a = F.relu(self.l1(state))
		a = F.relu(self.l2(a))
		a = self.l3(a)
		return self.max_action * torch.tanh(a), a


class Critic(nn.Module):
	def __init__(self, state_dim, action_dim):
		super(Critic, self).__init__()

		# Q1 architecture
		self.l1 = nn.Linear(state_dim + action_dim, 256)
		self.l2 = nn.Linear(256, 256)
		self.l3 = nn.Linear(256, 1)

		# Q2 architecture
		self.l4 = nn.Linear(state_dim + action_dim, 256)
		self.l5 = nn.Linear(256, 256)
		self.l6 = nn.Linear(256, 1)


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


class LAP_TD3(object):
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
		alpha=0.4,
		min_priority=1,
		bug=None
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
		self.min_priority = min_priority

		self.total_it = 0
		self.bug = bug


	def select_action(self, state, test=False):
		state = torch.FloatTensor(state.reshape(1, -1)).to(device)
		return self.actor(state).cpu().data.numpy().flatten()


	def train(self, replay_buffer, batch_size=256):
		self.total_it += 1

		# Sample replay buffer
		state, action, next_state, reward, not_done, ind, weights = replay_buffer.sample(batch_size)

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
			if self.bug == "max_of_target_critics":
				target_Q = torch.max(target_Q1, target_Q2)
			else:
				target_Q = torch.min(target_Q1, target_Q2)
			target_Q = reward + not_done * self.discount * target_Q

		# Get current Q estimates
		current_Q1, current_Q2 = self.critic(state, action)

		td_loss1 = (current_Q1 - target_Q).abs()
		td_loss2 = (current_Q2 - target_Q).abs()

		# Compute critic loss
		critic_loss = self.huber(td_loss1) + self.huber(td_loss2)
		
		# Optimize the critic
		if self.bug != "critic_zero_grad_dropped":
			self.critic_optimizer.zero_grad()
		critic_loss.backward()
		self.critic_optimizer.step()
		
		priority = torch.max(td_loss1, td_loss2).clamp(min=self.min_priority).pow(self.alpha).cpu().data.numpy().flatten()

		replay_buffer.update_priority(ind, priority)

		# Delayed policy updates
		if self.total_it % self.policy_freq == 0:

			actor_loss = -self.critic.Q1(state, self.actor(state)).mean()

			# Optimize the actor 
			self.actor_optimizer.zero_grad()
			actor_loss.backward()
			self.actor_optimizer.step()

			# Update the frozen target models
			for param, target_param in zip(self.critic.parameters(), self.critic_target.parameters()):
				if self.bug == "polyak_args_swapped":
					param.data.copy_(self.tau * target_param.data + (1 - self.tau) * param.data)
				else:
					target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)

			for param, target_param in zip(self.actor.parameters(), self.actor_target.parameters()):
				target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)

		return critic_loss.item()  # (port) the original returns nothing


	def huber(self, x):
		return torch.where(x < self.min_priority, 0.5 * x.pow(2), self.min_priority * x).mean()


# ---------------------------------------------------------------- main.py
def _build(seed, bug=None):
	args = types.SimpleNamespace(algorithm="LAP_TD3", env="Pendulum", seed=seed, start_timesteps=1000, eval_freq=5e3,
								 max_timesteps=None, expl_noise=0.1, batch_size=256, discount=0.99, tau=0.005,
								 policy_noise=0.2, noise_clip=0.5, policy_freq=2, alpha=0.4, min_priority=1)

	env = Pendulum()

	# Set seeds
	env.seed(args.seed)
	env.action_space.seed(args.seed)
	torch.manual_seed(args.seed)
	np.random.seed(args.seed)

	state_dim = env.observation_space.shape[0]
	action_dim = env.action_space.shape[0]
	max_action = float(env.action_space.high[0])

	kwargs = {
		"state_dim": state_dim,
		"action_dim": action_dim,
		"max_action": max_action,
		"discount": args.discount,
		"tau": args.tau,
		"policy_noise": args.policy_noise * max_action,
		"noise_clip": args.noise_clip * max_action,
		"policy_freq": args.policy_freq
	}

	kwargs["alpha"] = args.alpha
	kwargs["min_priority"] = args.min_priority

	policy = LAP_TD3(**kwargs, bug=bug)
	replay_buffer = PrioritizedReplayBuffer(state_dim, action_dim)

	def loop():
		state, done = env.reset(), False
		episode_reward = 0
		episode_timesteps = 0
		episode_num = 0

		t = 0
		while True:

			episode_timesteps += 1

			# Select action randomly or according to policy
			if t < args.start_timesteps:
				action = env.action_space.sample()
			else:
				action = (
					policy.select_action(np.array(state))
					+ np.random.normal(0, max_action * args.expl_noise, size=action_dim)
				).clip(-max_action, max_action)

			# Perform action
			next_state, reward, done, _ = env.step(action)
			done_bool = float(done) if episode_timesteps < env._max_episode_steps else 0

			# Store data in replay buffer
			replay_buffer.add(state, action, next_state, reward, done_bool)

			state = next_state
			episode_reward += reward

			# Train agent after collecting sufficient data
			loss = None
			if t >= args.start_timesteps: #>=
				loss = policy.train(replay_buffer, args.batch_size)

			if done:
				state, done = env.reset(), False
				episode_reward = 0
				episode_timesteps = 0
				episode_num += 1

			t += 1
			yield loss

	steps = loop()
	for _ in range(args.start_timesteps):
		next(steps)

	rs = np.random.RandomState(seed)  # (port) the evidence batch is drawn without touching the loop's np.random
	ind = rs.randint(replay_buffer.size, size=args.batch_size)
	state, action, next_state, reward, not_done = (torch.FloatTensor(a[ind]) for a in (
		replay_buffer.state, replay_buffer.action, replay_buffer.next_state, replay_buffer.reward,
		replay_buffer.not_done))
	batch = ({"state": state, "action": action}, (next_state, reward, not_done))

	def loss_fn(outputs, targets):
		"""train()'s critic loss on the critic's outputs for ``batch`` (the same lines)."""
		current_Q1, current_Q2 = outputs
		next_state, reward, not_done = targets
		with torch.no_grad():
			noise = (torch.randn_like(action) * policy.policy_noise).clamp(-policy.noise_clip, policy.noise_clip)
			next_action = (policy.actor_target(next_state) + noise).clamp(-policy.max_action, policy.max_action)
			target_Q1, target_Q2 = policy.critic_target(next_state, next_action)
			if bug == "max_of_target_critics":
				target_Q = torch.max(target_Q1, target_Q2)
			else:
				target_Q = torch.min(target_Q1, target_Q2)
			target_Q = reward + not_done * policy.discount * target_Q
		td_loss1 = (current_Q1 - target_Q).abs()
		td_loss2 = (current_Q2 - target_Q).abs()
		return policy.huber(td_loss1) + policy.huber(td_loss2)

	return Program(name="laptd3_pendulum", model=policy.critic, batch=batch, loss_fn=loss_fn,
				   optimizer=policy.critic_optimizer, train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
	# classic: the target takes the larger of the two target critics, undoing TD3's clipped double-Q (the
	# overestimation it exists to remove comes back).
	Bug("max_of_target_critics", functools.partial(_build, bug="max_of_target_critics"), "learning_ledger",
		("TASK",)),
	# classic: the Polyak update's roles swapped for the critic: the online critic is pulled toward its frozen
	# target instead of the target tracking the critic.
	Bug("polyak_args_swapped", functools.partial(_build, bug="polyak_args_swapped"), "step_probe", (),
		kind="step.soft_update_reversed"),
	# classic: self.critic_optimizer.zero_grad() left out: the critic's gradients pile up across updates.
	Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe", (),
		kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

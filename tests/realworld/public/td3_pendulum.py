# ruff: noqa: UP004, UP008, PLR0402
"""TD3 (twin delayed DDPG): a deterministic actor and twin Q critics with target networks, clipped target-policy
noise, the minimum of the two target Qs, delayed actor updates and Polyak target updates, trained off-policy from a
replay buffer on a continuous-control task.

Source: https://github.com/sfujim/TD3
Commit: 34770ccdcb51df6f6c7d85c1ba7e40d71b940d16
Files: TD3.py (Actor, Critic, TD3), utils.py (ReplayBuffer), main.py (arguments, seeding, the training loop)
License: MIT (Copyright (c) 2020 Scott Fujimoto; full text in LICENSES/sfujim-TD3.txt)
Domain: RL, continuous actor-critic (TD3)

Kept as written: Actor (256-256, ``max_action * tanh``), Critic (two 256-256 Q heads, ``Q1``), TD3 with its defaults
(discount 0.99, tau 0.005, policy_noise 0.2, noise_clip 0.5 scaled by max_action, policy_freq 2, Adam lr 3e-4 for
both), ``train`` (target action smoothing, ``min(target_Q1, target_Q2)``, ``reward + not_done * discount * target``,
summed MSE of both heads, actor loss ``-Q1(s, actor(s)).mean()`` every 2nd iteration, Polyak updates of both
targets), ReplayBuffer (numpy arrays, ``np.random.randint`` sampling), and main.py's loop body: random actions for
the first ``start_timesteps``, then ``select_action`` plus Gaussian exploration noise (``expl_noise`` 0.1 *
max_action) clipped to the action range, ``done_bool = float(done) if episode_timesteps < env._max_episode_steps
else 0``, ``replay_buffer.add``, ``policy.train(replay_buffer, batch_size=256)``, the reset at episode end; the
seeding (``env.seed``, ``env.action_space.seed``, ``torch.manual_seed``, ``np.random.seed``).

Deviations from the original:
- gym's MuJoCo HalfCheetah-v2 is replaced by the Pendulum written out in numpy in ``_continuous_control.py``
  (Pendulum-v1's equations, gym < 0.26 interface, 200-step time limit with ``done`` at the limit as TimeLimit sets it).
- sizes for 2 CPU cores: start_timesteps 25e3 -> 1000 (the random-action phase runs at build time), max_timesteps 1e6
  -> unbounded (``train_step`` runs one iteration of the ``for t`` loop once training has started); the buffer's
  max_size stays 1e6 (numpy zeros, untouched rows are not allocated).
- ``TD3.train`` returns its ``critic_loss`` (the original returns nothing) so the step has a loss to report.
- the evaluation episodes (``eval_policy``, every 5e3 steps), printing, ``np.save`` of the results and model saving
  are dropped; no GPU (``device`` is the CPU).
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
class ReplayBuffer(object):
	def __init__(self, state_dim, action_dim, max_size=int(1e6)):
		self.max_size = max_size
		self.ptr = 0
		self.size = 0

		self.state = np.zeros((max_size, state_dim))
		self.action = np.zeros((max_size, action_dim))
		self.next_state = np.zeros((max_size, state_dim))
		self.reward = np.zeros((max_size, 1))
		self.not_done = np.zeros((max_size, 1))

		self.device = torch.device("cpu")


	def add(self, state, action, next_state, reward, done):
		self.state[self.ptr] = state
		self.action[self.ptr] = action
		self.next_state[self.ptr] = next_state
		self.reward[self.ptr] = reward
		self.not_done[self.ptr] = 1. - done

		self.ptr = (self.ptr + 1) % self.max_size
		self.size = min(self.size + 1, self.max_size)


	def sample(self, batch_size):
		ind = np.random.randint(0, self.size, size=batch_size)

		return (
			torch.FloatTensor(self.state[ind]).to(self.device),
			torch.FloatTensor(self.action[ind]).to(self.device),
			torch.FloatTensor(self.next_state[ind]).to(self.device),
			torch.FloatTensor(self.reward[ind]).to(self.device),
			torch.FloatTensor(self.not_done[ind]).to(self.device)
		)


# ---------------------------------------------------------------- TD3.py
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


class TD3(object):
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
		self.bug = bug

		self.total_it = 0


	def select_action(self, state):
		state = torch.FloatTensor(state.reshape(1, -1)).to(device)
		return self.actor(state).cpu().data.numpy().flatten()


	def train(self, replay_buffer, batch_size=256):
		self.total_it += 1

		# Sample replay buffer
		state, action, next_state, reward, not_done = replay_buffer.sample(batch_size)

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
			target_Q = reward + not_done * self.discount * target_Q

		# Get current Q estimates
		current_Q1, current_Q2 = self.critic(state, action)

		# Compute critic loss
		if self.bug == "q2_trained_on_q1":
			# copy-paste slip: the second term repeats current_Q1, the Q2 head never gets a gradient
			critic_loss = F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q1, target_Q)
		else:
			critic_loss = F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q2, target_Q)

		# Optimize the critic
		self.critic_optimizer.zero_grad()
		critic_loss.backward()
		self.critic_optimizer.step()

		# Delayed policy updates
		if self.total_it % self.policy_freq == 0:

			# Compute actor losse
			actor_loss = -self.critic.Q1(state, self.actor(state)).mean()

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


# ---------------------------------------------------------------- main.py
def _build(seed, bug=None):
	args = types.SimpleNamespace(policy="TD3", env="Pendulum", seed=seed, start_timesteps=1000, eval_freq=5e3,
								 max_timesteps=None, expl_noise=0.1, batch_size=256, discount=0.99, tau=0.005,
								 policy_noise=0.2, noise_clip=0.5, policy_freq=2)

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
	}

	# Target policy smoothing is scaled wrt the action scale
	kwargs["policy_noise"] = args.policy_noise * max_action
	kwargs["noise_clip"] = args.noise_clip * max_action
	kwargs["policy_freq"] = args.policy_freq
	policy = TD3(**kwargs, bug=bug)

	replay_buffer = ReplayBuffer(state_dim, action_dim)

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
			if bug == "timeout_as_terminal":
				# the change asked about in https://github.com/sfujim/TD3/issues/41: the time-limit end is stored as a
				# terminal state ("termination from max time steps ... penalizes the arbitrary final state")
				done_bool = float(done)
			else:
				done_bool = float(done) if episode_timesteps < env._max_episode_steps else 0

			# Store data in replay buffer
			replay_buffer.add(state, action, next_state, reward, done_bool)

			state = next_state
			episode_reward += reward

			# Train agent after collecting sufficient data
			loss = None
			if t >= args.start_timesteps:
				loss = policy.train(replay_buffer, args.batch_size)

			if done:
				# Reset environment
				state, done = env.reset(), False
				episode_reward = 0
				episode_timesteps = 0
				episode_num += 1

			t += 1
			yield loss

	steps = loop()
	for _ in range(args.start_timesteps):
		next(steps)

	state, action, next_state, reward, not_done = replay_buffer.sample(args.batch_size)
	batch = ({"state": state, "action": action}, (next_state, reward, not_done))

	def loss_fn(outputs, targets):
		"""train()'s critic loss on the critic's outputs for ``batch`` (the same lines)."""
		current_Q1, current_Q2 = outputs
		next_state, reward, not_done = targets
		with torch.no_grad():
			noise = (torch.randn_like(action) * policy.policy_noise).clamp(-policy.noise_clip, policy.noise_clip)
			next_action = (policy.actor_target(next_state) + noise).clamp(-policy.max_action, policy.max_action)
			target_Q1, target_Q2 = policy.critic_target(next_state, next_action)
			target_Q = torch.min(target_Q1, target_Q2)
			target_Q = reward + not_done * policy.discount * target_Q
		if bug == "q2_trained_on_q1":
			return F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q1, target_Q)
		return F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q2, target_Q)

	return Program(name="td3_pendulum", model=policy.critic, batch=batch, loss_fn=loss_fn,
				   optimizer=policy.critic_optimizer, train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
	# transitions that end at the time limit stored as terminal (done_bool = float(done)): the change proposed in
	# https://github.com/sfujim/TD3/issues/41, which the author explains breaks the Markov property.
	Bug("timeout_as_terminal", functools.partial(_build, bug="timeout_as_terminal"), "learning_ledger", ("TASK",)),
	# the critic loss repeats current_Q1 (classic copy-paste slip): the Q2 head is never updated.
	Bug("q2_trained_on_q1", functools.partial(_build, bug="q2_trained_on_q1"), "step_probe", ("l4.weight",)),
]

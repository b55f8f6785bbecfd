# ruff: noqa: PLR0402, UP008
"""TD3 from nikhilbarhate99/TD3-PyTorch-BipedalWalker-v2: a 400-300 tanh-bounded actor and twin 400-300 critics with
target copies, one Adam (lr 1e-3) each, clipped target-policy smoothing (noise 0.2 clipped at 0.5), the min of the
target critics, ``(1 - done)`` bootstrapping at gamma 0.99, delayed actor updates (every 2nd iteration) on
``-Q1(s, pi(s))`` with Polyak averaging at 0.995; after every episode the agent runs one update iteration per step
of it, on batches of 100 from a list replay buffer.

Source: https://github.com/nikhilbarhate99/TD3-PyTorch-BipedalWalker-v2
Commit: 1657d708e7308ef24348518c19c0e7ad4bf1cf59
Files: ``TD3.py`` (``Actor``, ``Critic``, ``TD3``), ``train.py`` (``train``), ``utils.py`` (``ReplayBuffer``)
License: MIT (Copyright (c) 2018 Nikhil Barhate; full text in LICENSES/nikhilbarhate99-TD3-PyTorch-BipedalWalker-v2.txt)
Domain: RL, continuous actor-critic (TD3: twin critics, target policy smoothing, delayed actor, Polyak targets)

Kept as written: ``Actor``, ``Critic``, ``TD3.__init__`` / ``select_action`` / ``update`` (the loop body: sample,
the smoothing noise drawn like ``action_`` and clamped, the min of the target critics, ``reward + ((1-done) * gamma *
target_Q).detach()``, critic 1 and critic 2 each with its own zero_grad / backward / step, the delayed actor step and
the three Polyak loops), ``ReplayBuffer`` (list, 1/5 deleted when over ``max_size``, ``np.random.randint`` indices),
train.py's hyperparameters (gamma 0.99, batch_size 100, lr 0.001, exploration_noise 0.1, polyak 0.995,
policy_noise 0.2, noise_clip 0.5, policy_delay 2, max_timesteps 2000) and its episode body (Gaussian exploration
noise clipped to the action box, ``float(done)`` stored, ``policy.update(replay_buffer, t, ...)`` when the episode
ends).

Deviations from the original:
- gym's BipedalWalker-v2 is replaced by the numpy ``Pendulum`` of ``_continuous_control.py`` (3 states, 1 action in
  [-2, 2], 200-step episodes whose last step reports ``done`` as gym's TimeLimit does; seeded); the environment is the
  synthetic data. ``env.seed`` / ``torch.manual_seed`` / ``np.random.seed`` take ``seed`` (train.py seeds only when
  ``random_seed`` is non-zero).
- ``ReplayBuffer.sample`` builds its arrays with ``np.asarray(x)`` for ``np.array(x, copy=False)``, which numpy >= 2
  refuses when a copy is needed (same arrays).
- the episode loop is not run as a whole: ``train_step`` is one iteration of ``update``'s ``for i in range(n_iter)``
  (when the iterations an episode bought are used up, the next episode is played first), returning critic 1's loss;
  ``TD3.update`` is split accordingly into ``update_iteration(i)``, the loop body unchanged. The log file, prints and
  checkpoints are dropped. The Program's model is ``critic_1`` with its optimizer and the batch's TD targets.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

device = torch.device("cpu")


class Actor(nn.Module):
    def __init__(self, state_dim, action_dim, max_action):
        super(Actor, self).__init__()

        self.l1 = nn.Linear(state_dim, 400)
        self.l2 = nn.Linear(400, 300)
        self.l3 = nn.Linear(300, action_dim)

        self.max_action = max_action

    def forward(self, state):
        a = F.relu(self.l1(state))
        a = F.relu(self.l2(a))
        a = torch.tanh(self.l3(a)) * self.max_action
        return a


class Critic(nn.Module):
    def __init__(self, state_dim, action_dim):
        super(Critic, self).__init__()

        self.l1 = nn.Linear(state_dim + action_dim, 400)
        self.l2 = nn.Linear(400, 300)
        self.l3 = nn.Linear(300, 1)

    def forward(self, state, action):
        state_action = torch.cat([state, action], 1)

        q = F.relu(self.l1(state_action))
        q = F.relu(self.l2(q))
        q = self.l3(q)
        return q


class TD3:
    def __init__(self, lr, state_dim, action_dim, max_action, bug=None):

        self.actor = Actor(state_dim, action_dim, max_action).to(device)
        self.actor_target = Actor(state_dim, action_dim, max_action).to(device)
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=lr)

        self.critic_1 = Critic(state_dim, action_dim).to(device)
        self.critic_1_target = Critic(state_dim, action_dim).to(device)
        self.critic_1_target.load_state_dict(self.critic_1.state_dict())
        self.critic_1_optimizer = optim.Adam(self.critic_1.parameters(), lr=lr)

        self.critic_2 = Critic(state_dim, action_dim).to(device)
        self.critic_2_target = Critic(state_dim, action_dim).to(device)
        self.critic_2_target.load_state_dict(self.critic_2.state_dict())
        self.critic_2_optimizer = optim.Adam(self.critic_2.parameters(), lr=lr)

        self.max_action = max_action
        self.bug = bug
        self.last = {}

    def select_action(self, state):
        state = torch.FloatTensor(state.reshape(1, -1)).to(device)
        return self.actor(state).cpu().data.numpy().flatten()

    def update(self, replay_buffer, n_iter, batch_size, gamma, polyak, policy_noise, noise_clip, policy_delay):

        for i in range(n_iter):
            self.update_iteration(i, replay_buffer, batch_size, gamma, polyak, policy_noise, noise_clip,
                                  policy_delay)

    def update_iteration(self, i, replay_buffer, batch_size, gamma, polyak, policy_noise, noise_clip, policy_delay):
        # (port) the body of update's `for i in range(n_iter)`
        # Sample a batch of transitions from replay buffer:
        state, action_, reward, next_state, done = replay_buffer.sample(batch_size)
        state = torch.FloatTensor(state).to(device)
        action = torch.FloatTensor(action_).to(device)
        if self.bug == "reward_not_reshaped":
            reward = torch.FloatTensor(reward).to(device)
        else:
            reward = torch.FloatTensor(reward).reshape((batch_size,1)).to(device)
        next_state = torch.FloatTensor(next_state).to(device)
        done = torch.FloatTensor(done).reshape((batch_size,1)).to(device)

        # Select next action according to target policy:
        noise = torch.FloatTensor(action_).data.normal_(0, policy_noise).to(device)
        noise = noise.clamp(-noise_clip, noise_clip)
        next_action = (self.actor_target(next_state) + noise)
        next_action = next_action.clamp(-self.max_action, self.max_action)

        # Compute target Q-value:
        target_Q1 = self.critic_1_target(next_state, next_action)
        target_Q2 = self.critic_2_target(next_state, next_action)
        if self.bug == "max_of_target_critics":
            target_Q = torch.max(target_Q1, target_Q2)
        else:
            target_Q = torch.min(target_Q1, target_Q2)
        target_Q = reward + ((1-done) * gamma * target_Q).detach()

        # Optimize Critic 1:
        current_Q1 = self.critic_1(state, action)
        loss_Q1 = F.mse_loss(current_Q1, target_Q)
        self.critic_1_optimizer.zero_grad()
        loss_Q1.backward()
        self.critic_1_optimizer.step()

        # Optimize Critic 2:
        current_Q2 = self.critic_2(state, action)
        loss_Q2 = F.mse_loss(current_Q2, target_Q)
        self.critic_2_optimizer.zero_grad()
        loss_Q2.backward()
        self.critic_2_optimizer.step()

        # Delayed policy updates:
        if i % policy_delay == 0:
            # Compute actor loss:
            actor_loss = -self.critic_1(state, self.actor(state)).mean()

            # Optimize the actor
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()

            # Polyak averaging update:
            pairs = [(self.actor, self.actor_target), (self.critic_1, self.critic_1_target),
                     (self.critic_2, self.critic_2_target)]
            for net, target in pairs:
                if self.bug == "polyak_args_swapped":
                    net, target = target, net
                for param, target_param in zip(net.parameters(), target.parameters()):
                    target_param.data.copy_( (polyak * target_param.data) + ((1-polyak) * param.data))

        self.last["batch"] = ((state, action), target_Q.detach())
        return loss_Q1.item()


class ReplayBuffer:
    def __init__(self, max_size=5e5):
        self.buffer = []
        self.max_size = int(max_size)
        self.size = 0

    def add(self, transition):
        self.size +=1
        # transiton is tuple of (state, action, reward, next_state, done)
        self.buffer.append(transition)

    def sample(self, batch_size):
        # delete 1/5th of the buffer when full
        if self.size > self.max_size:
            del self.buffer[0:int(self.size/5)]
            self.size = len(self.buffer)

        indexes = np.random.randint(0, len(self.buffer), size=batch_size)
        state, action, reward, next_state, done = [], [], [], [], []

        for i in indexes:
            s, a, r, s_, d = self.buffer[i]
            state.append(np.asarray(s))
            action.append(np.asarray(a))
            reward.append(np.asarray(r))
            next_state.append(np.asarray(s_))
            done.append(np.asarray(d))

        return np.array(state), np.array(action), np.array(reward), np.array(next_state), np.array(done)


def _build(seed, bug=None):
    ######### Hyperparameters #########
    gamma = 0.99                # discount for future rewards
    batch_size = 100            # num of transitions sampled from replay buffer
    lr = 0.001
    exploration_noise = 0.1
    polyak = 0.995              # target policy update parameter (1-tau)
    policy_noise = 0.2          # target policy smoothing noise
    noise_clip = 0.5
    policy_delay = 2            # delayed policy updates parameter
    max_timesteps = 2000        # max timesteps in one episode
    ###################################

    env = Pendulum()
    state_dim = env.observation_space.shape[0]
    action_dim = env.action_space.shape[0]
    max_action = float(env.action_space.high[0])

    env.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)

    policy = TD3(lr, state_dim, action_dim, max_action, bug=bug)
    replay_buffer = ReplayBuffer()
    st = {"pending": [], "ep_reward": 0.0}

    def play_episode():
        # one pass of train()'s `for episode in ...` up to the update call: returns n_iter = t
        state = env.reset()
        ep_reward = 0
        for t in range(max_timesteps):
            # select action and add exploration noise:
            action = policy.select_action(state)
            action = action + np.random.normal(0, exploration_noise, size=env.action_space.shape[0])
            action = action.clip(env.action_space.low, env.action_space.high)

            # take action in env:
            next_state, reward, done, _ = env.step(action)
            replay_buffer.add((state, action, reward, next_state, float(done)))
            state = next_state

            ep_reward += reward

            # if episode is done then update policy:
            if done or t==(max_timesteps-1):
                st["ep_reward"] = ep_reward
                return t
        return max_timesteps - 1

    def train_step():
        if not st["pending"]:
            st["pending"] = list(range(play_episode()))
        i = st["pending"].pop(0)
        return policy.update_iteration(i, replay_buffer, batch_size, gamma, polyak, policy_noise, noise_clip,
                                       policy_delay)

    # the Program's batch: a draw from the first episode's buffer with its TD targets (no update made)
    st["pending"] = list(range(play_episode()))
    rng_state = np.random.get_state()
    s, a, r, s2, d = replay_buffer.sample(batch_size)
    np.random.set_state(rng_state)
    with torch.no_grad():
        s, a = torch.FloatTensor(s), torch.FloatTensor(a)
        s2, d = torch.FloatTensor(s2), torch.FloatTensor(d).reshape((batch_size, 1))
        r = torch.FloatTensor(r).reshape((batch_size, 1))
        na = policy.actor_target(s2).clamp(-max_action, max_action)
        tq = r + (1 - d) * gamma * torch.min(policy.critic_1_target(s2, na), policy.critic_2_target(s2, na))
    batch = ((s, a), tq)

    def eval_fn(model, b):
        with torch.no_grad():
            return float(F.mse_loss(model(*b[0]), b[1]))

    return Program(name="td3bipedal_pendulum", model=policy.critic_1, batch=batch, loss_fn=F.mse_loss,
                   optimizer=policy.critic_1_optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the rewards left as [B] against [B, 1] values: target_Q broadcasts to [B, B] and mse_loss compares every
    # value with every other example's target (classic).
    Bug("reward_not_reshaped", functools.partial(_build, bug="reward_not_reshaped"), "learning_ledger",
        ("OBJECTIVE",)),
    # torch.max of the target critics for torch.min: the clipped double-Q target becomes an overestimating one
    # (classic slip of TD3's target).
    Bug("max_of_target_critics", functools.partial(_build, bug="max_of_target_critics"), "learning_ledger",
        ("TASK",)),
    # the Polyak loops with online and target networks swapped: the trained networks are pulled toward targets that
    # never move (classic). Every parameter alike: declared by its mechanism (README rule 6).
    Bug("polyak_args_swapped", functools.partial(_build, bug="polyak_args_swapped"), "step_probe", (),
        kind="step.soft_update_reversed"),
]

# ruff: noqa: PLR0402, UP008, UP004, PIE808, RUF059
"""DDPG (actor-critic with replay, OU exploration and Polyak targets), from ghliu/pytorch-ddpg.

Source: https://github.com/ghliu/pytorch-ddpg
Commit: e9db328ca70ef9daf7ab3d4b44975076ceddf088
Files: ``ddpg.py``, ``model.py``, ``memory.py``, ``random_process.py``, ``util.py``, ``main.py``, ``normalized_env.py``
License: Apache-2.0 (full text in LICENSES/ghliu-pytorch-ddpg.txt)
Domain: RL, off-policy actor-critic (DDPG)

Kept as written: ``Actor`` / ``Critic`` (fan-in init, 400/300 hidden units, tanh actor, action concatenated after
the critic's first layer, ``forward(xs)`` taking ``[state, action]``), ``DDPG.update_policy`` (target from the
target actor and critic through the terminal mask, ``nn.MSELoss``, ``critic.zero_grad`` / backward / step, policy
loss ``-critic([s, actor(s)]).mean()``, ``actor.zero_grad`` / backward / step, ``soft_update`` of both targets at
tau 0.001), ``select_action`` (OU noise scaled by a linearly decaying epsilon, clipped to [-1, 1]),
``observe``, ``SequentialMemory`` (ring buffers, ``sample_and_split``, window length 1), the
``OrnsteinUhlenbeckProcess``, ``to_tensor`` (``Variable(..., volatile=...)``, a no-op since torch 0.4 that only
warns, silenced here; the target critic's graph reaches the target networks, whose gradients nothing applies), ``soft_update`` /
``hard_update``, the defaults of ``main.py`` (lr 0.001 critic / 0.0001 actor, discount 0.99, batch 64, warmup 100,
OU theta 0.15 sigma 0.2, epsilon 50000, max_episode_length 500) and ``main.train``'s loop body (random actions for
the warmup, then ``select_action``, ``observe``, ``update_policy`` every environment step; at an episode's end the
extra ``memory.append(observation, select_action(observation), 0., False)``).

Deviations from the original:
- gym is not here: the environment is the continuous-force cart-pole written out in ``_continuous_control.py``
  (CartPole-v1's dynamics, reward 1 a step, a terminal when the pole falls: the original's default is
  Pendulum-v0, whose only terminal is the time limit; a task with terminals is used so the terminal mask matters),
  seeded from ``seed``; ``NormalizedEnv``'s action mapping is written out without gym's ``ActionWrapper``.
- ``rmsize`` 6000000 -> 10000 (the ring buffer preallocates its list).
- ``np.float`` (removed from numpy) -> ``float``; ``USE_CUDA`` is False; the debugger import is dropped.
- ``update_policy`` returns ``value_loss`` (the original returns nothing) so a step has a loss to report.
- seeding: ``torch.manual_seed(seed)``, ``np.random.seed(seed)`` and ``random.seed(seed)`` (the original seeds
  only with ``--seed > 0``); the evaluator, saving, printing and argparse are dropped.
- ``main.train``'s loop is not run to the end: the build plays the 100 warmup steps (plus one), and ``train_step``
  is one later environment step of the loop body, with its ``update_policy``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import warnings
from collections import deque, namedtuple
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole

# ----------------------------------------------------------------------------------------------- util.py
USE_CUDA = False
FLOAT = torch.FloatTensor


def to_numpy(var):
    return var.cpu().data.numpy() if USE_CUDA else var.data.numpy()


def to_tensor(ndarray, volatile=False, requires_grad=False, dtype=FLOAT):
    with warnings.catch_warnings():  # (port) the removed-volatile UserWarning, once per call, silenced
        warnings.simplefilter("ignore", UserWarning)
        return Variable(
            torch.from_numpy(ndarray), volatile=volatile, requires_grad=requires_grad
        ).type(dtype)


def soft_update(target, source, tau):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(
            target_param.data * (1.0 - tau) + param.data * tau
        )


def hard_update(target, source):
    for target_param, param in zip(target.parameters(), source.parameters()):
            target_param.data.copy_(param.data)


# ----------------------------------------------------------------------------------------------- model.py
def fanin_init(size, fanin=None):
    fanin = fanin or size[0]
    v = 1. / np.sqrt(fanin)
    return torch.Tensor(size).uniform_(-v, v)


class Actor(nn.Module):
    def __init__(self, nb_states, nb_actions, hidden1=400, hidden2=300, init_w=3e-3):
        super(Actor, self).__init__()
        self.fc1 = nn.Linear(nb_states, hidden1)
        self.fc2 = nn.Linear(hidden1, hidden2)
        self.fc3 = nn.Linear(hidden2, nb_actions)
        self.relu = nn.ReLU()
        self.tanh = nn.Tanh()
        self.init_weights(init_w)

    def init_weights(self, init_w):
        self.fc1.weight.data = fanin_init(self.fc1.weight.data.size())
        self.fc2.weight.data = fanin_init(self.fc2.weight.data.size())
        self.fc3.weight.data.uniform_(-init_w, init_w)

    def forward(self, x):
        out = self.fc1(x)
        out = self.relu(out)
        out = self.fc2(out)
        out = self.relu(out)
        out = self.fc3(out)
        out = self.tanh(out)
        return out


class Critic(nn.Module):
    def __init__(self, nb_states, nb_actions, hidden1=400, hidden2=300, init_w=3e-3):
        super(Critic, self).__init__()
        self.fc1 = nn.Linear(nb_states, hidden1)
        self.fc2 = nn.Linear(hidden1+nb_actions, hidden2)
        self.fc3 = nn.Linear(hidden2, 1)
        self.relu = nn.ReLU()
        self.init_weights(init_w)

    def init_weights(self, init_w):
        self.fc1.weight.data = fanin_init(self.fc1.weight.data.size())
        self.fc2.weight.data = fanin_init(self.fc2.weight.data.size())
        self.fc3.weight.data.uniform_(-init_w, init_w)

    def forward(self, xs):
        x, a = xs
        out = self.fc1(x)
        out = self.relu(out)
        out = self.fc2(torch.cat([out,a],1))
        out = self.relu(out)
        out = self.fc3(out)
        return out


# ----------------------------------------------------------------------------------------------- memory.py
Experience = namedtuple('Experience', 'state0, action, reward, state1, terminal1')


def sample_batch_indexes(low, high, size):
    if high - low >= size:
        r = range(low, high)
        batch_idxs = random.sample(r, size)
    else:
        warnings.warn('Not enough entries to sample without replacement. Consider increasing your warm-up phase to avoid oversampling!')
        batch_idxs = np.random.random_integers(low, high - 1, size=size)
    assert len(batch_idxs) == size
    return batch_idxs


class RingBuffer(object):
    def __init__(self, maxlen):
        self.maxlen = maxlen
        self.start = 0
        self.length = 0
        self.data = [None for _ in range(maxlen)]

    def __len__(self):
        return self.length

    def __getitem__(self, idx):
        if idx < 0 or idx >= self.length:
            raise KeyError()
        return self.data[(self.start + idx) % self.maxlen]

    def append(self, v):
        if self.length < self.maxlen:
            self.length += 1
        elif self.length == self.maxlen:
            self.start = (self.start + 1) % self.maxlen
        else:
            raise RuntimeError()
        self.data[(self.start + self.length - 1) % self.maxlen] = v


def zeroed_observation(observation):
    if hasattr(observation, 'shape'):
        return np.zeros(observation.shape)
    elif hasattr(observation, '__iter__'):
        out = []
        for x in observation:
            out.append(zeroed_observation(x))
        return out
    else:
        return 0.


class Memory(object):
    def __init__(self, window_length, ignore_episode_boundaries=False):
        self.window_length = window_length
        self.ignore_episode_boundaries = ignore_episode_boundaries

        self.recent_observations = deque(maxlen=window_length)
        self.recent_terminals = deque(maxlen=window_length)

    def append(self, observation, action, reward, terminal, training=True):
        self.recent_observations.append(observation)
        self.recent_terminals.append(terminal)


class SequentialMemory(Memory):
    def __init__(self, limit, **kwargs):
        super(SequentialMemory, self).__init__(**kwargs)

        self.limit = limit

        self.actions = RingBuffer(limit)
        self.rewards = RingBuffer(limit)
        self.terminals = RingBuffer(limit)
        self.observations = RingBuffer(limit)

    def sample(self, batch_size, batch_idxs=None):
        if batch_idxs is None:
            batch_idxs = sample_batch_indexes(0, self.nb_entries - 1, size=batch_size)
        batch_idxs = np.array(batch_idxs) + 1
        assert np.min(batch_idxs) >= 1
        assert np.max(batch_idxs) < self.nb_entries
        assert len(batch_idxs) == batch_size

        experiences = []
        for idx in batch_idxs:
            terminal0 = self.terminals[idx - 2] if idx >= 2 else False
            while terminal0:
                idx = sample_batch_indexes(1, self.nb_entries, size=1)[0]
                terminal0 = self.terminals[idx - 2] if idx >= 2 else False
            assert 1 <= idx < self.nb_entries

            state0 = [self.observations[idx - 1]]
            for offset in range(0, self.window_length - 1):
                current_idx = idx - 2 - offset
                current_terminal = self.terminals[current_idx - 1] if current_idx - 1 > 0 else False
                if current_idx < 0 or (not self.ignore_episode_boundaries and current_terminal):
                    break
                state0.insert(0, self.observations[current_idx])
            while len(state0) < self.window_length:
                state0.insert(0, zeroed_observation(state0[0]))
            action = self.actions[idx - 1]
            reward = self.rewards[idx - 1]
            terminal1 = self.terminals[idx - 1]

            state1 = [np.copy(x) for x in state0[1:]]
            state1.append(self.observations[idx])

            assert len(state0) == self.window_length
            assert len(state1) == len(state0)
            experiences.append(Experience(state0=state0, action=action, reward=reward,
                                          state1=state1, terminal1=terminal1))
        assert len(experiences) == batch_size
        return experiences

    def sample_and_split(self, batch_size, batch_idxs=None):
        experiences = self.sample(batch_size, batch_idxs)

        state0_batch = []
        reward_batch = []
        action_batch = []
        terminal1_batch = []
        state1_batch = []
        for e in experiences:
            state0_batch.append(e.state0)
            state1_batch.append(e.state1)
            reward_batch.append(e.reward)
            action_batch.append(e.action)
            terminal1_batch.append(0. if e.terminal1 else 1.)

        state0_batch = np.array(state0_batch).reshape(batch_size,-1)
        state1_batch = np.array(state1_batch).reshape(batch_size,-1)
        terminal1_batch = np.array(terminal1_batch).reshape(batch_size,-1)
        reward_batch = np.array(reward_batch).reshape(batch_size,-1)
        action_batch = np.array(action_batch).reshape(batch_size,-1)

        return state0_batch, action_batch, reward_batch, state1_batch, terminal1_batch

    def append(self, observation, action, reward, terminal, training=True):
        super(SequentialMemory, self).append(observation, action, reward, terminal, training=training)

        if training:
            self.observations.append(observation)
            self.actions.append(action)
            self.rewards.append(reward)
            self.terminals.append(terminal)

    @property
    def nb_entries(self):
        return len(self.observations)


# ----------------------------------------------------------------------------------------------- random_process.py
class RandomProcess(object):
    def reset_states(self):
        pass


class AnnealedGaussianProcess(RandomProcess):
    def __init__(self, mu, sigma, sigma_min, n_steps_annealing):
        self.mu = mu
        self.sigma = sigma
        self.n_steps = 0

        if sigma_min is not None:
            self.m = -float(sigma - sigma_min) / float(n_steps_annealing)
            self.c = sigma
            self.sigma_min = sigma_min
        else:
            self.m = 0.
            self.c = sigma
            self.sigma_min = sigma

    @property
    def current_sigma(self):
        sigma = max(self.sigma_min, self.m * float(self.n_steps) + self.c)
        return sigma


class OrnsteinUhlenbeckProcess(AnnealedGaussianProcess):
    def __init__(self, theta, mu=0., sigma=1., dt=1e-2, x0=None, size=1, sigma_min=None, n_steps_annealing=1000):
        super(OrnsteinUhlenbeckProcess, self).__init__(mu=mu, sigma=sigma, sigma_min=sigma_min, n_steps_annealing=n_steps_annealing)
        self.theta = theta
        self.mu = mu
        self.dt = dt
        self.x0 = x0
        self.size = size
        self.reset_states()

    def sample(self):
        x = self.x_prev + self.theta * (self.mu - self.x_prev) * self.dt + self.current_sigma * np.sqrt(self.dt) * np.random.normal(size=self.size)
        self.x_prev = x
        self.n_steps += 1
        return x

    def reset_states(self):
        self.x_prev = self.x0 if self.x0 is not None else np.zeros(self.size)


# ----------------------------------------------------------------------------------------------- ddpg.py
criterion = nn.MSELoss()


class DDPG(object):
    def __init__(self, nb_states, nb_actions, args, bug=None):
        self.bug = bug

        self.nb_states = nb_states
        self.nb_actions= nb_actions

        net_cfg = {
            'hidden1':args.hidden1,
            'hidden2':args.hidden2,
            'init_w':args.init_w
        }
        self.actor = Actor(self.nb_states, self.nb_actions, **net_cfg)
        self.actor_target = Actor(self.nb_states, self.nb_actions, **net_cfg)
        self.actor_optim  = Adam(self.actor.parameters(), lr=args.prate)

        self.critic = Critic(self.nb_states, self.nb_actions, **net_cfg)
        self.critic_target = Critic(self.nb_states, self.nb_actions, **net_cfg)
        self.critic_optim  = Adam(self.critic.parameters(), lr=args.rate)

        hard_update(self.actor_target, self.actor) # Make sure target is with the same weight
        hard_update(self.critic_target, self.critic)

        self.memory = SequentialMemory(limit=args.rmsize, window_length=args.window_length)
        self.random_process = OrnsteinUhlenbeckProcess(size=nb_actions, theta=args.ou_theta, mu=args.ou_mu, sigma=args.ou_sigma)

        self.batch_size = args.bsize
        self.tau = args.tau
        self.discount = args.discount
        self.depsilon = 1.0 / args.epsilon

        self.epsilon = 1.0
        self.s_t = None # Most recent state
        self.a_t = None # Most recent action
        self.is_training = True

    def target_q(self, next_state_batch, reward_batch, terminal_batch):
        """(port) update_policy's target lines, shared with the Program's loss_fn."""
        next_q_values = self.critic_target([
            to_tensor(next_state_batch, volatile=True),
            self.actor_target(to_tensor(next_state_batch, volatile=True)),
        ])
        with warnings.catch_warnings():  # (port) the removed-volatile UserWarning silenced
            warnings.simplefilter("ignore", UserWarning)
            next_q_values.volatile=False

        if self.bug == "terminal_mask_dropped":
            target_q_batch = to_tensor(reward_batch) + \
                self.discount*next_q_values
        else:
            target_q_batch = to_tensor(reward_batch) + \
                self.discount*to_tensor(terminal_batch.astype(float))*next_q_values
        return target_q_batch

    def update_policy(self):
        # Sample batch
        state_batch, action_batch, reward_batch, \
        next_state_batch, terminal_batch = self.memory.sample_and_split(self.batch_size)

        # Prepare for the target q batch
        target_q_batch = self.target_q(next_state_batch, reward_batch, terminal_batch)

        # Critic update
        if self.bug != "critic_zero_grad_dropped":
            self.critic.zero_grad()

        q_batch = self.critic([ to_tensor(state_batch), to_tensor(action_batch) ])

        value_loss = criterion(q_batch, target_q_batch)
        value_loss.backward()
        self.critic_optim.step()

        # Actor update
        self.actor.zero_grad()

        policy_loss = -self.critic([
            to_tensor(state_batch),
            self.actor(to_tensor(state_batch))
        ])

        policy_loss = policy_loss.mean()
        policy_loss.backward()
        self.actor_optim.step()

        # Target update
        if self.bug == "soft_update_reversed":
            soft_update(self.actor, self.actor_target, self.tau)
            soft_update(self.critic, self.critic_target, self.tau)
        else:
            soft_update(self.actor_target, self.actor, self.tau)
            soft_update(self.critic_target, self.critic, self.tau)
        return value_loss

    def observe(self, r_t, s_t1, done):
        if self.is_training:
            self.memory.append(self.s_t, self.a_t, r_t, done)
            self.s_t = s_t1

    def random_action(self):
        action = np.random.uniform(-1.,1.,self.nb_actions)
        self.a_t = action
        return action

    def select_action(self, s_t, decay_epsilon=True):
        action = to_numpy(
            self.actor(to_tensor(np.array([s_t])))
        ).squeeze(0)
        action += self.is_training*max(self.epsilon, 0)*self.random_process.sample()
        action = np.clip(action, -1., 1.)

        if decay_epsilon:
            self.epsilon -= self.depsilon

        self.a_t = action
        return action

    def reset(self, obs):
        self.s_t = obs
        self.random_process.reset_states()


# ----------------------------------------------------------------------------------------------- normalized_env.py
class NormalizedEnv:
    """ Wrap action (gym's ActionWrapper written out: step maps the action with ``_action``) """

    def __init__(self, env):
        self.env = env
        self.action_space = env.action_space
        self.observation_space = env.observation_space

    def reset(self):
        return self.env.reset()

    def step(self, action):
        return self.env.step(self._action(action))

    def _action(self, action):
        act_k = (self.action_space.high - self.action_space.low)/ 2.
        act_b = (self.action_space.high + self.action_space.low)/ 2.
        return act_k * action + act_b


# ----------------------------------------------------------------------------------------------- main.py defaults
class Args:
    hidden1 = 400
    hidden2 = 300
    rate = 0.001
    prate = 0.0001
    warmup = 100
    discount = 0.99
    bsize = 64
    rmsize = 10000  # (port) 6000000 in the original
    window_length = 1
    tau = 0.001
    ou_theta = 0.15
    ou_sigma = 0.2
    ou_mu = 0.0
    max_episode_length = 500
    init_w = 0.003
    epsilon = 50000


def _build(seed, bug=None):
    args = Args()
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    base = ContinuousCartPole()
    base.seed(seed)
    env = NormalizedEnv(base)

    nb_states = env.observation_space.shape[0]
    nb_actions = env.action_space.shape[0]
    agent = DDPG(nb_states, nb_actions, args, bug=bug)

    # main.train's loop state, one environment step per call
    agent.is_training = True
    loop = {"step": 0, "episode_steps": 0, "observation": None}
    max_episode_length = args.max_episode_length

    def env_step():
        # reset if it is the start of episode
        if loop["observation"] is None:
            loop["observation"] = deepcopy(env.reset())
            agent.reset(loop["observation"])
        observation = loop["observation"]
        step = loop["step"]

        # agent pick action ...
        if step <= args.warmup:
            action = agent.random_action()
        else:
            action = agent.select_action(observation)

        # env response with next_observation, reward, terminate_info
        observation2, reward, done, info = env.step(action)
        observation2 = deepcopy(observation2)
        if max_episode_length and loop["episode_steps"] >= max_episode_length -1:
            done = True

        # agent observe and update policy
        agent.observe(reward, observation2, done)
        value_loss = None
        if step > args.warmup :
            value_loss = agent.update_policy()

        # update
        loop["step"] += 1
        loop["episode_steps"] += 1
        observation = deepcopy(observation2)
        loop["observation"] = observation

        if done: # end of episode
            agent.memory.append(
                observation,
                agent.select_action(observation),
                0., False
            )

            # reset
            loop["observation"] = None
            loop["episode_steps"] = 0
        return value_loss

    while loop["step"] <= args.warmup:
        env_step()

    def train_step():
        return env_step()

    # the Program's batch: 64 transitions from the replay memory (sampled with the memory's own sampler)
    s, a, r, s2, t = agent.memory.sample_and_split(args.bsize)
    batch = ([to_tensor(s), to_tensor(a)], (s2, r, t))

    def loss_fn(q_batch, targets):
        """update_policy's critic loss on the critic's output for ``batch`` (the same lines)."""
        s2, r, t = targets
        return criterion(q_batch, agent.target_q(s2, r, t))

    return Program(name="ghliuddpg_cartpole", model=agent.critic, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.critic_optim, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the TD target bootstraps through terminal transitions: the terminal mask is left out of target_q_batch
    # (classic; the slip reported for another DDPG in https://github.com/seungeunrho/minimalRL/issues/32).
    Bug("terminal_mask_dropped", functools.partial(_build, bug="terminal_mask_dropped"), "learning_ledger",
        ("TASK",)),
    # self.critic.zero_grad() left out: the critic's gradients accumulate over the updates, its value-loss gradient
    # plus the policy loss's gradient that reaches it (classic).
    Bug("critic_zero_grad_dropped", functools.partial(_build, bug="critic_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
    # soft_update's arguments swapped: the trained networks are pulled toward the frozen targets (classic).
    Bug("soft_update_reversed", functools.partial(_build, bug="soft_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
]

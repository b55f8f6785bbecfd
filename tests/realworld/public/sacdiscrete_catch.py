"""Soft Actor-Critic for discrete actions (Christodoulou, 2019), Toshiki Watanabe's sac-discrete.pytorch: a
categorical policy and twinned Q-networks on Nature-DQN conv trunks over 4 stacked 84x84 frames, the soft target
``sum(pi * (min Q' - alpha log pi))`` with a hard-copied target critic, the policy loss ``mean(-E_pi[min Q] - alpha
H)``, the temperature learned on ``log_alpha`` toward 0.98 of the maximum entropy, four Adams (lr 3e-4) each
stepped by ``update_params``, a lazy frame replay memory, learning every 4 environment steps after warm-up.

Source: https://github.com/toshikwa/sac-discrete.pytorch
Commit: 40c9d246621e658750e0a03001325006da57f2d4
Files: sacd/agent/sacd.py, sacd/agent/base.py, sacd/model.py, sacd/utils.py, sacd/memory/base.py, config/sacd.yaml,
train.py
License: MIT (Copyright (c) 2020 Toshiki Watanabe; full text in LICENSES/toshikwa-sac-discrete.pytorch.txt)
Domain: RL, discrete soft actor-critic (off-policy, twin critics, learned entropy temperature, pixel observations)

Kept as written: ``model.py`` (``initialize_weights_he``, ``DQNBase``, ``QNetwork``, ``TwinnedQNetwork``,
``CateoricalPolicy``), ``SacdAgent`` (networks, the target copy and ``disable_gradients``, the four optimizers,
``target_entropy``, ``log_alpha``; ``explore``, ``update_target``, ``calc_current_q``, ``calc_target_q``,
``calc_critic_loss``, ``calc_policy_loss``, ``calc_entropy_loss``), ``BaseAgent``'s ``is_update``, the body of
``train_episode``'s step loop (random actions before ``start_steps``, reward clipping, memory append, learn every
``update_interval``, target update every ``target_update_interval``) and ``learn`` (critic, policy, entropy losses,
the four ``update_params``, ``alpha = log_alpha.exp()``), ``utils.update_params``, ``LazyMemory`` /
``LazyMultiStepMemory`` (multi_step 1), config/sacd.yaml's gamma, lr, multi_step, target_entropy_ratio,
update_interval, use_per False, dueling_net False.

Deviations from the original:
- Atari (``MsPacmanNoFrameskip-v4`` through ``make_pytorch_env``'s wrappers) is not here: the environment is a
  pixel "catch" game written in numpy (a ball falls down a 12x12 board from a random column, the 3 actions move a
  paddle left / stay / right, +1 for a catch and -1 for a miss end the episode), each board scaled to 84x84 uint8
  and the last 4 frames stacked as ``(4, 84, 84)``, as the Atari wrappers deliver; ``env.seed(seed)`` seeds it.
- sizes for 2 CPU cores: batch_size 64 -> 16, start_steps 20000 -> 200 (run in ``build``), memory_size 300000 ->
  5000, target_update_interval 8000 -> 40 environment steps; evaluation every ``eval_interval`` steps, the
  tensorboard writer, logging, model saving and the episode prints are dropped; CPU only.
- ``train_step`` runs environment steps of ``train_episode``'s loop (resetting at episode ends) until the next
  ``learn()``, and returns that update's Q1 loss. The Program's model is ``online_critic.Q1`` with ``q1_optim``, its
  batch one replay sample, its ``loss_fn`` the Q1 half of ``calc_critic_loss``; ``eval_fn`` is the mean return of
  ``exploit`` over 5 test episodes.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, SIM101, RUF059, C408

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical
from torch.nn import functional as F
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# ---- (port) a pixel environment in place of Atari ---------------------------------------------------------------

class _Box:
    def __init__(self, shape):
        self.shape = shape


class _Discrete:
    def __init__(self, n, rng):
        self.n = n
        self._rng = rng

    def sample(self):
        return int(self._rng.integers(self.n))


class CatchEnv:
    """A ball falls down a 12x12 board; the paddle on the bottom row catches it (+1) or misses (-1)."""
    N = 12

    def __init__(self):
        self._rng = np.random.default_rng(0)
        self.observation_space = _Box((4, 84, 84))
        self.action_space = _Discrete(3, self._rng)

    def seed(self, seed):
        self._rng = np.random.default_rng(seed)
        self.action_space = _Discrete(3, self._rng)

    def _frame(self):
        board = np.zeros((self.N, self.N), dtype=np.uint8)
        board[self.ball[0], self.ball[1]] = 255
        board[self.N - 1, max(self.paddle - 1, 0):self.paddle + 2] = 255
        return np.kron(board, np.ones((7, 7), dtype=np.uint8))

    def reset(self):
        self.ball = [0, int(self._rng.integers(self.N))]
        self.paddle = int(self._rng.integers(1, self.N - 1))
        f = self._frame()
        self.frames = [f, f, f, f]
        return np.stack(self.frames)

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + action - 1, 1, self.N - 2))
        self.ball[0] += 1
        done = self.ball[0] == self.N - 1
        reward = 0.0
        if done:
            reward = 1.0 if abs(self.ball[1] - self.paddle) <= 1 else -1.0
        self.frames = self.frames[1:] + [self._frame()]
        return np.stack(self.frames), reward, done, {}


# ---- sacd/model.py ----------------------------------------------------------------------------------------------

def initialize_weights_he(m):
    if isinstance(m, nn.Linear) or isinstance(m, nn.Conv2d):
        torch.nn.init.kaiming_uniform_(m.weight)
        if m.bias is not None:
            torch.nn.init.constant_(m.bias, 0)


class Flatten(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1)


class BaseNetwork(nn.Module):
    pass  # (port) save / load dropped


class DQNBase(BaseNetwork):

    def __init__(self, num_channels):
        super(DQNBase, self).__init__()

        self.net = nn.Sequential(
            nn.Conv2d(num_channels, 32, kernel_size=8, stride=4, padding=0),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2, padding=0),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1, padding=0),
            nn.ReLU(),
            Flatten(),
        ).apply(initialize_weights_he)

    def forward(self, states):
        return self.net(states)


class QNetwork(BaseNetwork):

    def __init__(self, num_channels, num_actions, shared=False,
                 dueling_net=False):
        super().__init__()

        if not shared:
            self.conv = DQNBase(num_channels)

        if not dueling_net:
            self.head = nn.Sequential(
                nn.Linear(7 * 7 * 64, 512),
                nn.ReLU(inplace=True),
                nn.Linear(512, num_actions))
        else:
            self.a_head = nn.Sequential(
                nn.Linear(7 * 7 * 64, 512),
                nn.ReLU(inplace=True),
                nn.Linear(512, num_actions))
            self.v_head = nn.Sequential(
                nn.Linear(7 * 7 * 64, 512),
                nn.ReLU(inplace=True),
                nn.Linear(512, 1))

        self.shared = shared
        self.dueling_net = dueling_net

    def forward(self, states):
        if not self.shared:
            states = self.conv(states)

        if not self.dueling_net:
            return self.head(states)
        else:
            a = self.a_head(states)
            v = self.v_head(states)
            return v + a - a.mean(1, keepdim=True)


class TwinnedQNetwork(BaseNetwork):
    def __init__(self, num_channels, num_actions, shared=False,
                 dueling_net=False):
        super().__init__()
        self.Q1 = QNetwork(num_channels, num_actions, shared, dueling_net)
        self.Q2 = QNetwork(num_channels, num_actions, shared, dueling_net)

    def forward(self, states):
        q1 = self.Q1(states)
        q2 = self.Q2(states)
        return q1, q2


class CateoricalPolicy(BaseNetwork):

    def __init__(self, num_channels, num_actions, shared=False):
        super().__init__()
        if not shared:
            self.conv = DQNBase(num_channels)

        self.head = nn.Sequential(
            nn.Linear(7 * 7 * 64, 512),
            nn.ReLU(inplace=True),
            nn.Linear(512, num_actions))

        self.shared = shared

    def act(self, states):
        if not self.shared:
            states = self.conv(states)

        action_logits = self.head(states)
        greedy_actions = torch.argmax(
            action_logits, dim=1, keepdim=True)
        return greedy_actions

    def sample(self, states):
        if not self.shared:
            states = self.conv(states)

        action_probs = F.softmax(self.head(states), dim=1)
        action_dist = Categorical(action_probs)
        actions = action_dist.sample().view(-1, 1)

        # Avoid numerical instability.
        z = (action_probs == 0.0).float() * 1e-8
        log_action_probs = torch.log(action_probs + z)

        return actions, action_probs, log_action_probs


# ---- sacd/utils.py, sacd/memory/base.py -------------------------------------------------------------------------

def update_params(optim, loss, retain_graph=False, bug=None):
    if bug != "zero_grad_dropped":
        optim.zero_grad()
    loss.backward(retain_graph=retain_graph)
    optim.step()


def disable_gradients(network):
    # Disable calculations of gradients.
    for param in network.parameters():
        param.requires_grad = False


class LazyMemory(dict):

    def __init__(self, capacity, state_shape, device):
        super(LazyMemory, self).__init__()
        self.capacity = int(capacity)
        self.state_shape = state_shape
        self.device = device
        self.reset()

    def reset(self):
        self['state'] = []
        self['next_state'] = []

        self['action'] = np.empty((self.capacity, 1), dtype=np.int64)
        self['reward'] = np.empty((self.capacity, 1), dtype=np.float32)
        self['done'] = np.empty((self.capacity, 1), dtype=np.float32)

        self._n = 0
        self._p = 0

    def append(self, state, action, reward, next_state, done,
               episode_done=None):
        self._append(state, action, reward, next_state, done)

    def _append(self, state, action, reward, next_state, done):
        self['state'].append(state)
        self['next_state'].append(next_state)
        self['action'][self._p] = action
        self['reward'][self._p] = reward
        self['done'][self._p] = done

        self._n = min(self._n + 1, self.capacity)
        self._p = (self._p + 1) % self.capacity

        self.truncate()

    def truncate(self):
        while len(self['state']) > self.capacity:
            del self['state'][0]
            del self['next_state'][0]

    def sample(self, batch_size):
        indices = np.random.randint(low=0, high=len(self), size=batch_size)
        return self._sample(indices, batch_size)

    def _sample(self, indices, batch_size):
        bias = -self._p if self._n == self.capacity else 0

        states = np.empty(
            (batch_size, *self.state_shape), dtype=np.uint8)
        next_states = np.empty(
            (batch_size, *self.state_shape), dtype=np.uint8)

        for i, index in enumerate(indices):
            _index = np.mod(index+bias, self.capacity)
            states[i, ...] = self['state'][_index]
            next_states[i, ...] = self['next_state'][_index]

        states = torch.ByteTensor(states).to(self.device).float() / 255.
        next_states = torch.ByteTensor(
            next_states).to(self.device).float() / 255.
        actions = torch.LongTensor(self['action'][indices]).to(self.device)
        rewards = torch.FloatTensor(self['reward'][indices]).to(self.device)
        dones = torch.FloatTensor(self['done'][indices]).to(self.device)

        return states, actions, rewards, next_states, dones

    def __len__(self):
        return self._n


class LazyMultiStepMemory(LazyMemory):

    def __init__(self, capacity, state_shape, device, gamma=0.99,
                 multi_step=3):
        super(LazyMultiStepMemory, self).__init__(
            capacity, state_shape, device)

        self.gamma = gamma
        self.multi_step = int(multi_step)
        assert self.multi_step == 1  # (port) MultiStepBuff not ported: sacd.yaml's multi_step is 1

    def append(self, state, action, reward, next_state, done):
        self._append(state, action, reward, next_state, done)


# ---- sacd/agent/base.py + sacd/agent/sacd.py --------------------------------------------------------------------

class SacdAgent:

    def __init__(self, env, test_env, num_steps=100000, batch_size=64,
                 lr=0.0003, memory_size=1000000, gamma=0.99, multi_step=1,
                 target_entropy_ratio=0.98, start_steps=20000,
                 update_interval=4, target_update_interval=8000,
                 use_per=False, dueling_net=False, max_episode_steps=27000, seed=0, bug=None):
        self.env = env
        self.test_env = test_env
        self.bug = bug

        # Set seed.
        torch.manual_seed(seed)
        np.random.seed(seed)
        self.env.seed(seed)
        self.test_env.seed(2**31-1-seed)

        self.device = torch.device("cpu")

        # LazyMemory efficiently stores FrameStacked states.
        self.memory = LazyMultiStepMemory(
            capacity=memory_size,
            state_shape=self.env.observation_space.shape,
            device=self.device, gamma=gamma, multi_step=multi_step)

        self.steps = 0
        self.learning_steps = 0
        self.episodes = 0
        self.num_steps = num_steps
        self.batch_size = batch_size
        self.gamma_n = gamma ** multi_step
        self.start_steps = start_steps
        self.update_interval = update_interval
        self.target_update_interval = target_update_interval
        self.use_per = use_per
        self.max_episode_steps = max_episode_steps

        # Define networks.
        self.policy = CateoricalPolicy(
            self.env.observation_space.shape[0], self.env.action_space.n
            ).to(self.device)
        self.online_critic = TwinnedQNetwork(
            self.env.observation_space.shape[0], self.env.action_space.n,
            dueling_net=dueling_net).to(device=self.device)
        self.target_critic = TwinnedQNetwork(
            self.env.observation_space.shape[0], self.env.action_space.n,
            dueling_net=dueling_net).to(device=self.device).eval()

        # Copy parameters of the learning network to the target network.
        self.target_critic.load_state_dict(self.online_critic.state_dict())

        # Disable gradient calculations of the target network.
        disable_gradients(self.target_critic)

        self.policy_optim = Adam(self.policy.parameters(), lr=lr)
        self.q1_optim = Adam(self.online_critic.Q1.parameters(), lr=lr)
        self.q2_optim = Adam(self.online_critic.Q2.parameters(), lr=lr)

        # Target entropy is -log(1/|A|) * ratio (= maximum entropy * ratio).
        self.target_entropy = \
            -np.log(1.0 / self.env.action_space.n) * target_entropy_ratio

        # We optimize log(alpha), instead of alpha.
        self.log_alpha = torch.zeros(1, requires_grad=True, device=self.device)
        self.alpha = self.log_alpha.exp()
        self.alpha_optim = Adam([self.log_alpha], lr=lr)

        # (port) the episode state of train_episode's loop, kept across train_step calls
        self._state = None
        self._episode_steps = 0
        self.last_q1_loss = None

    def is_update(self):
        return self.steps % self.update_interval == 0\
            and self.steps >= self.start_steps

    def explore(self, state):
        # Act with randomness.
        state = torch.ByteTensor(
            state[None, ...]).to(self.device).float() / 255.
        with torch.no_grad():
            action, _, _ = self.policy.sample(state)
        return action.item()

    def exploit(self, state):
        # Act without randomness.
        state = torch.ByteTensor(
            state[None, ...]).to(self.device).float() / 255.
        with torch.no_grad():
            action = self.policy.act(state)
        return action.item()

    def update_target(self):
        if self.bug == "target_copy_reversed":
            self.online_critic.load_state_dict(self.target_critic.state_dict())
            return
        self.target_critic.load_state_dict(self.online_critic.state_dict())

    def env_step(self):
        """(port) One iteration of ``train_episode``'s ``while`` loop (a new episode starts after ``done``)."""
        if self._state is None:
            self.episodes += 1
            self._episode_steps = 0
            self._state = self.env.reset()
        state = self._state

        if self.start_steps > self.steps:
            action = self.env.action_space.sample()
        else:
            action = self.explore(state)

        next_state, reward, done, _ = self.env.step(action)

        # Clip reward to [-1.0, 1.0].
        clipped_reward = max(min(reward, 1.0), -1.0)

        # To calculate efficiently, set priority=max_priority here.
        self.memory.append(state, action, clipped_reward, next_state, done)

        self.steps += 1
        self._episode_steps += 1
        state = next_state
        self._state = None if (done or self._episode_steps > self.max_episode_steps) else state

        learned = False
        if self.is_update():
            self.learn()
            learned = True

        if self.steps % self.target_update_interval == 0:
            self.update_target()
        return learned

    def calc_current_q(self, states, actions, rewards, next_states, dones):
        curr_q1, curr_q2 = self.online_critic(states)
        curr_q1 = curr_q1.gather(1, actions.long())
        curr_q2 = curr_q2.gather(1, actions.long())
        return curr_q1, curr_q2

    def calc_target_q(self, states, actions, rewards, next_states, dones):
        with torch.no_grad():
            _, action_probs, log_action_probs = self.policy.sample(next_states)
            next_q1, next_q2 = self.target_critic(next_states)
            next_q = (action_probs * (
                torch.min(next_q1, next_q2) - self.alpha * log_action_probs
                )).sum(dim=1, keepdim=True)

        assert rewards.shape == next_q.shape
        if self.bug == "done_mask_dropped":
            return rewards + self.gamma_n * next_q
        return rewards + (1.0 - dones) * self.gamma_n * next_q

    def calc_critic_loss(self, batch, weights):
        curr_q1, curr_q2 = self.calc_current_q(*batch)
        target_q = self.calc_target_q(*batch)

        # TD errors for updating priority weights
        errors = torch.abs(curr_q1.detach() - target_q)

        # We log means of Q to monitor training.
        mean_q1 = curr_q1.detach().mean().item()
        mean_q2 = curr_q2.detach().mean().item()

        # Critic loss is mean squared TD errors with priority weights.
        q1_loss = torch.mean((curr_q1 - target_q).pow(2) * weights)
        q2_loss = torch.mean((curr_q2 - target_q).pow(2) * weights)

        return q1_loss, q2_loss, errors, mean_q1, mean_q2

    def calc_policy_loss(self, batch, weights):
        states, actions, rewards, next_states, dones = batch

        # (Log of) probabilities to calculate expectations of Q and entropies.
        _, action_probs, log_action_probs = self.policy.sample(states)

        with torch.no_grad():
            # Q for every actions to calculate expectations of Q.
            q1, q2 = self.online_critic(states)
            q = torch.min(q1, q2)

        # Expectations of entropies.
        entropies = -torch.sum(
            action_probs * log_action_probs, dim=1, keepdim=True)

        # Expectations of Q.
        q = torch.sum(torch.min(q1, q2) * action_probs, dim=1, keepdim=True)

        # Policy objective is maximization of (Q + alpha * entropy) with
        # priority weights.
        policy_loss = (weights * (- q - self.alpha * entropies)).mean()

        return policy_loss, entropies.detach()

    def calc_entropy_loss(self, entropies, weights):
        assert not entropies.requires_grad

        # Intuitively, we increse alpha when entropy is less than target
        # entropy, vice versa.
        entropy_loss = -torch.mean(
            self.log_alpha * (self.target_entropy - entropies)
            * weights)
        return entropy_loss

    def learn(self):
        assert hasattr(self, 'q1_optim') and hasattr(self, 'q2_optim') and\
            hasattr(self, 'policy_optim') and hasattr(self, 'alpha_optim')

        self.learning_steps += 1

        batch = self.memory.sample(self.batch_size)
        # Set priority weights to 1 when we don't use PER.
        weights = 1.

        q1_loss, q2_loss, errors, mean_q1, mean_q2 = \
            self.calc_critic_loss(batch, weights)
        policy_loss, entropies = self.calc_policy_loss(batch, weights)
        entropy_loss = self.calc_entropy_loss(entropies, weights)

        update_params(self.q1_optim, q1_loss, bug=self.bug)
        update_params(self.q2_optim, q2_loss, bug=self.bug)
        update_params(self.policy_optim, policy_loss, bug=self.bug)
        update_params(self.alpha_optim, entropy_loss, bug=self.bug)

        self.alpha = self.log_alpha.exp()
        self.last_q1_loss = q1_loss.item()  # (port) the tensorboard scalars dropped


CONFIG = dict(  # config/sacd.yaml, sizes shrunk for 2 CPU cores (see the docstring)
    num_steps=300000, batch_size=16, lr=0.0003, memory_size=5000, gamma=0.99, multi_step=1,
    target_entropy_ratio=0.98, start_steps=200, update_interval=4, target_update_interval=40,
    use_per=False, dueling_net=False, max_episode_steps=27000)


def _build(seed, bug=None):
    env = CatchEnv()
    test_env = CatchEnv()
    agent = SacdAgent(env=env, test_env=test_env, seed=seed, bug=bug, **CONFIG)
    while agent.steps < agent.start_steps:  # the random warm-up of train_episode
        agent.env_step()

    def train_step():
        while not agent.env_step():
            pass
        return agent.last_q1_loss

    def loss_fn(curr_q1, target_q):
        return torch.mean((curr_q1 - target_q).pow(2) * 1.)

    np_state = np.random.get_state()
    batch = agent.memory.sample(agent.batch_size)
    np.random.set_state(np_state)
    states, actions = batch[0], batch[1]
    target_q = agent.calc_target_q(*batch)

    def eval_fn(model, _batch=None):
        returns = []
        for _ in range(5):
            state, done, ret = test_env.reset(), False, 0.0
            while not done:
                state, reward, done, _ = test_env.step(agent.exploit(state))
                ret += reward
            returns.append(ret)
        return float(np.mean(returns))

    q1 = agent.online_critic.Q1
    return Program(name="sacdiscrete_catch", model=q1, batch=(states, target_q),
                   loss_fn=lambda q, t: loss_fn(q.gather(1, actions.long()), t),
                   optimizer=agent.q1_optim, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the (1 - dones) mask dropped from the soft target (classic): terminal transitions bootstrap from the next
    # episode's first frames.
    Bug("done_mask_dropped", functools.partial(_build, bug="done_mask_dropped"), "learning_ledger", ("TASK",)),
    # update_target copies the target critic into the online critic (classic argument swap of load_state_dict):
    # every target update throws the critic's learning away.
    Bug("target_copy_reversed", functools.partial(_build, bug="target_copy_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
    # optim.zero_grad() dropped from update_params (classic, every optimizer alike): gradients accumulate.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

"""Quantile-regression DQN from ShangtongZhang's DeepRL: a ``QuantileNet`` (``FCBody`` 64-64 ReLU, 20 quantiles per
action, orthogonal ``layer_init``), a ``DQNActor`` stepping the task 4 times per update with linearly annealed
epsilon-greedy actions on the quantiles' mean, a ``UniformReplay``, and ``QuantileRegressionDQNAgent.compute_loss``
(target quantiles of the greedy next action from the target network, masked at episode ends, quantile Huber loss
against the quantile midpoints), RMSprop lr 1e-3, ``clip_grad_norm_(5)``, the target network copied every 200
updates.

Source: https://github.com/ShangtongZhang/DeepRL
Commit: c0968b5c046314af09944843cdf06f4100c6bb95
Files: examples.py (quantile_regression_dqn_feature), deep_rl/agent/QuantileRegressionDQN_agent.py,
deep_rl/agent/DQN_agent.py (DQNActor, DQNAgent.step), deep_rl/agent/BaseAgent.py (BaseActor), deep_rl/component/
replay.py (Storage, UniformReplay, ReplayWrapper), deep_rl/component/envs.py (DummyVecEnv, OriginalReturnWrapper),
deep_rl/network/ (QuantileNet, FCBody, layer_init), deep_rl/utils/ (torch_utils, schedule, normalizer, config)
License: MIT (Copyright (c) 2019 Shangtong Zhang; full text in LICENSES/ShangtongZhang-DeepRL.txt)
Domain: RL, distributional value-based (QR-DQN, replay, target network)

Kept as written: quantile_regression_dqn_feature's config (RMSprop 0.001, batch_size 10, memory_size 1e4,
LinearSchedule(1.0, 0.1, 1e4) exploration, discount 0.99, target_network_update_freq 200, exploration_steps 100,
num_quantiles 20, gradient_clip 5, sgd_update_frequency 4, the Config defaults n_step 1 and identity
``RescaleNormalizer``s); ``QuantileNet``, ``FCBody``, ``layer_init``; ``DQNActor._transition`` and
``QuantileRegressionDQNActor.compute_q``; ``BaseActor._sample``; ``UniformReplay`` (``feed``, ``sample``,
``valid_index``, ``construct_transition``); ``QuantileRegressionDQNAgent`` (``cumulative_density``,
``compute_loss``, ``reduce_loss``) and ``DQNAgent.step`` (feed, sample, loss, zero_grad, backward, clipping, step,
target copy); ``random_seed``, ``tensor``, ``to_np``, ``range_tensor``, ``huber``, ``epsilon_greedy``.

Deviations from the original:
- gym is not installed: ``Task('CartPole-v0')`` is replaced by ``CartPoleTask`` below, the cart-pole written out in
  ``_cartpole.py`` wrapped as ``DummyVecEnv`` + ``OriginalReturnWrapper`` do (one environment, reset when its
  episode ends, ``info['episodic_return']``); gym's old API ends an episode at the time limit with ``done=True``,
  so ``done`` is ``terminated or truncated``.
- the actor and the replay run in the main process (``async_actor=False``, ``ReplayWrapper(..., async=False)``): the
  original's ``async=True`` keyword does not parse on Python >= 3.7 and its subprocesses are not needed here; the
  ``mp.Lock`` is a ``threading.Lock``. ``PrioritizedReplay``, noisy nets and the LazyFrames branch are not used by
  this config and are not copied.
- ``run_steps`` is not run as a loop: at build time the agent steps until it has taken its 100 exploration steps
  (no update yet); ``train_step`` is one ``agent.step()`` (4 environment steps, one update) and returns the update's
  loss (``step`` returns nothing in the original). Logging, evaluation episodes and saving are dropped.
- the seed: ``random_seed(seed)`` as the repository's examples call it (the global numpy generator feeds the replay
  and epsilon-greedy, as written); the environment is seeded with ``seed``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: C408, C417, PLR0402, RUF007, SIM103, UP008
# (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import sys
import threading
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

DEVICE = torch.device("cpu")


# ---- deep_rl/utils ------------------------------------------------------------------------------------------------

class Config:
    DEVICE = DEVICE


def tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    x = np.asarray(x, dtype=np.float32)
    x = torch.from_numpy(x).to(Config.DEVICE)
    return x


def range_tensor(end):
    return torch.arange(end).long().to(Config.DEVICE)


def to_np(t):
    return t.cpu().detach().numpy()


def random_seed(seed=None):
    np.random.seed(seed)
    torch.manual_seed(np.random.randint(int(1e6)))


def huber(x, k=1.0):
    return torch.where(x.abs() < k, 0.5 * x.pow(2), k * (x.abs() - 0.5 * k))


def epsilon_greedy(epsilon, x):
    if len(x.shape) == 1:
        return np.random.randint(len(x)) if np.random.rand() < epsilon else np.argmax(x)
    elif len(x.shape) == 2:
        random_actions = np.random.randint(x.shape[1], size=x.shape[0])
        greedy_actions = np.argmax(x, axis=-1)
        dice = np.random.rand(x.shape[0])
        return np.where(dice < epsilon, random_actions, greedy_actions)


class LinearSchedule:
    def __init__(self, start, end=None, steps=None):
        if end is None:
            end = start
            steps = 1
        self.inc = (end - start) / float(steps)
        self.current = start
        self.end = end
        if end > start:
            self.bound = min
        else:
            self.bound = max

    def __call__(self, steps=1):
        val = self.current
        self.current = self.bound(self.current + self.inc * steps, self.end)
        return val


class RescaleNormalizer:
    def __init__(self, coef=1.0):
        self.read_only = False
        self.coef = coef

    def __call__(self, x):
        if not isinstance(x, torch.Tensor):
            x = np.asarray(x)
        return self.coef * x


# ---- deep_rl/component/envs.py (the cart-pole in place of gym) ------------------------------------------------------

class CartPoleTask:
    """``Task('CartPole-v0')``: DummyVecEnv over one OriginalReturnWrapper'd environment (reset on done)."""

    def __init__(self, seed):
        self.envs = [CartPole(seed)]
        self.total_rewards = [0.0]
        self.state_dim = 4
        self.action_dim = 2

    def reset(self):
        return [env.reset()[0] for env in self.envs]

    def step(self, actions):
        data = []
        for i in range(len(self.envs)):
            obs, rew, terminated, truncated, info = self.envs[i].step(int(actions[i]))
            done = terminated or truncated
            self.total_rewards[i] += rew
            if done:
                info['episodic_return'] = self.total_rewards[i]
                self.total_rewards[i] = 0
            else:
                info['episodic_return'] = None
            if done:
                obs = self.envs[i].reset()[0]
            data.append([obs, rew, done, info])
        obs, rew, done, info = zip(*data)
        return obs, np.asarray(rew), np.asarray(done), info


# ---- deep_rl/component/replay.py ----------------------------------------------------------------------------------

Transition = namedtuple('Transition', ['state', 'action', 'reward', 'next_state', 'mask'])


class Storage:
    def __init__(self, memory_size, keys=None):
        if keys is None:
            keys = []
        keys = keys + ['state', 'action', 'reward', 'mask',
                       'v', 'q', 'pi', 'log_pi', 'entropy',
                       'advantage', 'ret', 'q_a', 'log_pi_a',
                       'mean', 'next_state']
        self.keys = keys
        self.memory_size = memory_size
        self.reset()

    def reset(self):
        for key in self.keys:
            setattr(self, key, [])
        self.pos = 0
        self._size = 0

    def size(self):
        return self._size


class UniformReplay(Storage):
    TransitionCLS = Transition

    def __init__(self, memory_size, batch_size, n_step=1, discount=1, history_length=1, keys=None):
        super(UniformReplay, self).__init__(memory_size, keys)
        self.batch_size = batch_size
        self.n_step = n_step
        self.discount = discount
        self.history_length = history_length
        self.pos = 0
        self._size = 0

    def feed(self, data):
        for k, vs in data.items():
            if k not in self.keys:
                raise RuntimeError('Undefined key')
            storage = getattr(self, k)
            pos = self.pos
            size = self.size()
            for v in vs:
                if pos >= len(storage):
                    storage.append(v)
                    size += 1
                else:
                    storage[self.pos] = v
                pos = (pos + 1) % self.memory_size
        self.pos = pos
        self._size = size

    def sample(self, batch_size=None):
        if batch_size is None:
            batch_size = self.batch_size

        sampled_data = []
        while len(sampled_data) < batch_size:
            transition = self.construct_transition(np.random.randint(0, self.size()))
            if transition is not None:
                sampled_data.append(transition)
        sampled_data = zip(*sampled_data)
        sampled_data = list(map(lambda x: np.asarray(x), sampled_data))
        return Transition(*sampled_data)

    def valid_index(self, index):
        if index - self.history_length + 1 >= 0 and index + self.n_step < self.pos:
            return True
        if index - self.history_length + 1 >= self.pos and index + self.n_step < self.size():
            return True
        return False

    def construct_transition(self, index):
        if not self.valid_index(index):
            return None
        s_start = index - self.history_length + 1
        s_end = index
        if s_start < 0:
            raise RuntimeError('Invalid index')
        next_s_start = s_start + self.n_step
        next_s_end = s_end + self.n_step
        if s_end < self.pos and next_s_end >= self.pos:
            raise RuntimeError('Invalid index')

        state = [self.state[i] for i in range(s_start, s_end + 1)]
        next_state = [self.state[i] for i in range(next_s_start, next_s_end + 1)]
        action = self.action[s_end]
        reward = [self.reward[i] for i in range(s_end, s_end + self.n_step)]
        mask = [self.mask[i] for i in range(s_end, s_end + self.n_step)]
        if self.history_length == 1:
            # eliminate the extra dimension if no frame stack
            state = state[0]
            next_state = next_state[0]
        state = np.array(state)
        next_state = np.array(next_state)
        cum_r = 0
        cum_mask = 1
        for i in reversed(np.arange(self.n_step)):
            cum_r = reward[i] + mask[i] * self.discount * cum_r
            cum_mask = cum_mask and mask[i]
        return Transition(state=state, action=action, reward=cum_r, next_state=next_state, mask=cum_mask)


# ---- deep_rl/network ----------------------------------------------------------------------------------------------

def layer_init(layer, w_scale=1.0):
    nn.init.orthogonal_(layer.weight.data)
    layer.weight.data.mul_(w_scale)
    nn.init.constant_(layer.bias.data, 0)
    return layer


class FCBody(nn.Module):
    def __init__(self, state_dim, hidden_units=(64, 64), gate=F.relu):
        super(FCBody, self).__init__()
        dims = (state_dim,) + hidden_units
        self.layers = nn.ModuleList(
            [layer_init(nn.Linear(dim_in, dim_out)) for dim_in, dim_out in zip(dims[:-1], dims[1:])])

        self.gate = gate
        self.feature_dim = dims[-1]

    def forward(self, x):
        for layer in self.layers:
            x = self.gate(layer(x))
        return x


class QuantileNet(nn.Module):
    def __init__(self, action_dim, num_quantiles, body):
        super(QuantileNet, self).__init__()
        self.fc_quantiles = layer_init(nn.Linear(body.feature_dim, action_dim * num_quantiles))
        self.action_dim = action_dim
        self.num_quantiles = num_quantiles
        self.body = body
        self.to(Config.DEVICE)

    def forward(self, x):
        phi = self.body(tensor(x))
        quantiles = self.fc_quantiles(phi)
        quantiles = quantiles.view((-1, self.action_dim, self.num_quantiles))
        return dict(quantile=quantiles)


# ---- deep_rl/agent ------------------------------------------------------------------------------------------------

class DQNActor:
    """BaseActor with ``async_actor=False`` (``step`` is ``_sample``) and DQNActor's ``_transition``."""

    def __init__(self, config):
        self.config = config
        self._state = None
        self._task = None
        self._network = None
        self._total_steps = 0
        self._task = config.task_fn()

    def set_network(self, net):
        self._network = net

    def step(self):
        return self._sample()

    def _sample(self):
        transitions = []
        for _ in range(self.config.sgd_update_frequency):
            transition = self._transition()
            if transition is not None:
                transitions.append(transition)
        return transitions

    def compute_q(self, prediction):
        q_values = to_np(prediction['q'])
        return q_values

    def _transition(self):
        if self._state is None:
            self._state = self._task.reset()
        config = self.config
        with config.lock:
            prediction = self._network(config.state_normalizer(self._state))
        q_values = self.compute_q(prediction)

        if self._total_steps < config.exploration_steps:
            epsilon = 1
        else:
            epsilon = config.random_action_prob()
        action = epsilon_greedy(epsilon, q_values)
        next_state, reward, done, info = self._task.step(action)
        entry = [self._state, action, reward, next_state, done, info]
        self._total_steps += 1
        self._state = next_state
        return entry


class QuantileRegressionDQNActor(DQNActor):
    def __init__(self, config):
        super().__init__(config)

    def compute_q(self, prediction):
        q_values = prediction['quantile'].mean(-1)
        return to_np(q_values)


class QuantileRegressionDQNAgent:
    def __init__(self, config, bug=None):
        self.config = config
        self.bug = bug
        config.lock = threading.Lock()

        self.replay = config.replay_fn()
        self.actor = QuantileRegressionDQNActor(config)

        self.network = config.network_fn()
        self.target_network = config.network_fn()
        self.target_network.load_state_dict(self.network.state_dict())
        self.optimizer = config.optimizer_fn(self.network.parameters())

        self.actor.set_network(self.network)

        self.total_steps = 0
        self.batch_indices = range_tensor(config.batch_size)

        self.quantile_weight = 1.0 / self.config.num_quantiles
        self.cumulative_density = tensor(
            (2 * np.arange(self.config.num_quantiles) + 1) / (2.0 * self.config.num_quantiles)).view(1, -1)

    def compute_loss(self, transitions):
        states = self.config.state_normalizer(transitions.state)
        quantiles = self.network(states)['quantile']
        return self.quantile_loss(quantiles, transitions)

    def quantile_loss(self, quantiles, transitions):
        # (port) compute_loss's lines after the online network's forward, split out so loss_fn can reuse them
        next_states = self.config.state_normalizer(transitions.next_state)

        quantiles_next = self.target_network(next_states)['quantile'].detach()
        a_next = torch.argmax(quantiles_next.sum(-1), dim=-1)
        quantiles_next = quantiles_next[self.batch_indices, a_next, :]

        rewards = tensor(transitions.reward).unsqueeze(-1)
        masks = tensor(transitions.mask).unsqueeze(-1)
        if self.bug == "mask_dropped":
            quantiles_next = rewards + self.config.discount ** self.config.n_step * quantiles_next
        else:
            quantiles_next = rewards + self.config.discount ** self.config.n_step * masks * quantiles_next

        actions = tensor(transitions.action).long()
        quantiles = quantiles[self.batch_indices, actions, :]

        quantiles_next = quantiles_next.t().unsqueeze(-1)
        diff = quantiles_next - quantiles
        if self.bug == "quantile_indicator_reversed":
            loss = huber(diff) * (self.cumulative_density - (diff.detach() > 0).float()).abs()
        else:
            loss = huber(diff) * (self.cumulative_density - (diff.detach() < 0).float()).abs()
        return loss.sum(-1).mean(1)

    def reduce_loss(self, loss):
        return loss.mean()

    def step(self):
        config = self.config
        transitions = self.actor.step()
        for states, actions, rewards, next_states, dones, info in transitions:
            self.total_steps += 1
            self.replay.feed(dict(
                state=np.array([s for s in states]),
                action=actions,
                reward=[config.reward_normalizer(r) for r in rewards],
                mask=1 - np.asarray(dones, dtype=np.int32),
            ))

        loss = None
        if self.total_steps > self.config.exploration_steps:
            transitions = self.replay.sample()
            loss = self.compute_loss(transitions)

            loss = self.reduce_loss(loss)
            self.optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(self.network.parameters(), self.config.gradient_clip)
            with config.lock:
                self.optimizer.step()

        if self.total_steps / self.config.sgd_update_frequency % \
                self.config.target_network_update_freq == 0:
            self.target_network.load_state_dict(self.network.state_dict())
        return loss


# ---- examples.py: quantile_regression_dqn_feature -----------------------------------------------------------------

def _build(seed, bug=None):
    random_seed(seed)
    config = Config()
    config.n_step = 1
    config.state_normalizer = RescaleNormalizer()
    config.reward_normalizer = RescaleNormalizer()
    config.task_fn = lambda: CartPoleTask(seed)
    config.state_dim, config.action_dim = 4, 2
    config.optimizer_fn = lambda params: torch.optim.RMSprop(params, 0.001)
    config.network_fn = lambda: QuantileNet(config.action_dim, config.num_quantiles, FCBody(config.state_dim))

    config.batch_size = 10
    replay_kwargs = dict(
        memory_size=int(1e4),
        batch_size=config.batch_size)
    config.replay_fn = lambda: UniformReplay(**replay_kwargs)  # ReplayWrapper(UniformReplay, replay_kwargs, async=False)

    config.random_action_prob = LinearSchedule(1.0, 0.1, 1e4)
    config.discount = 0.99
    config.target_network_update_freq = 200
    config.exploration_steps = 100
    config.num_quantiles = 20
    config.gradient_clip = 5
    config.sgd_update_frequency = 4

    agent = QuantileRegressionDQNAgent(config, bug=bug)
    # (port) the exploration phase: steps without an update until the replay holds exploration_steps transitions
    while agent.total_steps <= config.exploration_steps - config.sgd_update_frequency:
        agent.step()

    first = agent.replay.sample()
    batch = (tensor(first.state), first)

    def loss_fn(outputs, transitions):
        return agent.reduce_loss(agent.quantile_loss(outputs['quantile'], transitions))

    def train_step():
        loss = agent.step()
        return loss.detach()

    return Program(name="deeprl_qrdqn", model=agent.network, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the episode-end mask left out of the target quantiles: the value bootstraps through terminal transitions (and
    # through the reset into the next episode's first state) (classic).
    Bug("mask_dropped", functools.partial(_build, bug="mask_dropped"), "learning_ledger", ("TASK",)),
    # the quantile-regression indicator reversed (``diff > 0`` for ``diff < 0``): every quantile is trained to
    # level 1 - tau, the quantiles come out in reverse order (classic sign slip of the quantile Huber loss, the same
    # slip as reported in https://github.com/ufal/npfl139/issues/17).
    Bug("quantile_indicator_reversed", functools.partial(_build, bug="quantile_indicator_reversed"),
        "learning_ledger", ("OBJECTIVE",)),
]

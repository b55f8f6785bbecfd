# ruff: noqa: UP008, UP039, PLR0402, RUF059
"""Double DQN on CartPole from mimoralea/gdrl (Grokking Deep Reinforcement Learning, chapter 9): the ``FCQ`` Q
network, the exponentially decaying epsilon-greedy training strategy, a numpy replay buffer, a target network
hard-copied every 10 steps, and the double-DQN target (the online network picks the next action, the target network
values it), ``0.5 * td_error**2`` with gradient-norm clipping and RMSprop; one optimization per environment step.

Source: https://github.com/mimoralea/gdrl
Commit: 9eb24f9867ba6e37937f2ea8286deeef68124e19
Files: ``notebooks/chapter_09/chapter-09.ipynb`` (``FCQ``, ``GreedyStrategy``, ``EGreedyExpStrategy``,
``ReplayBuffer``, ``DDQN``, the DDQN cell's settings)
License: BSD-3-Clause (Copyright (c) 2018, Miguel Morales; full text in LICENSES/mimoralea-gdrl.txt)
Domain: RL, value-based (double DQN: replay buffer, target network, epsilon-greedy with exponential decay)

Kept as written: ``FCQ`` (``_format``, ``forward``, ``load``), ``GreedyStrategy``, ``EGreedyExpStrategy``
(init 1.0, min 0.3, 20000 decay steps), ``ReplayBuffer`` (object arrays, ``np.vstack`` sampling without
replacement), ``DDQN.optimize_model`` (online argmax, detached target values, ``(1 - is_terminals)``, the halved
squared TD error, ``clip_grad_norm_`` with ``max_gradient_norm = inf``), ``interaction_step`` (time-limit
truncation not counted as a failure), ``update_network``, and the body of ``train``'s ``for step in count()`` loop
(warm-up of ``batch_size * n_warmup_batches`` samples, target copy when the total step count is a multiple of
``update_target_every_steps``); the DDQN cell's settings: FCQ (512, 128), RMSprop lr 0.0005, gamma 1.0,
``n_warmup_batches`` 5, ``update_target_every_steps`` 10.

Deviations from the original:
- gym's CartPole-v1 is replaced by the cart-pole of ``_cartpole.py`` (CartPole-v1's equations, constants and
  500-step limit), wrapped to gym < 0.26's interface that the notebook calls (``reset`` returns the state, ``step``
  four values with ``info['TimeLimit.truncated']`` as gym's ``TimeLimit`` sets it); seeded from ``seed``;
- sizes for 2 CPU cores: replay batch 64 -> 32 (``max_size`` 50000 -> 10000);
- ``train`` is split: its set-up lines run in ``setup`` at build time, and ``train_step`` is one pass of the inner
  ``for step in count()`` body (the interaction step, the optimization, the target copy), with the episode's
  end (``env.reset()``, new episode counters) run inside it; the buffer is filled at build time by interaction
  steps until the warm-up threshold is passed. The per-episode evaluation, checkpoints, statistics, printing and
  time limits are dropped;
- ``optimize_model`` returns ``value_loss`` (the original returns None) so the step has a loss to report; its
  target lines are moved, unchanged, into ``targets`` so the declared ``loss_fn`` computes the same target;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from itertools import count

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
from _cartpole import CartPole


class GymCartPole:
    """(port) gym < 0.26's CartPole-v1 interface over the helper: 4-tuple ``step``, ``TimeLimit.truncated``."""

    def __init__(self, seed):
        self.env = CartPole(seed)

    def reset(self):
        return self.env.reset()[0]

    def step(self, action):
        s, r, done, truncated, _ = self.env.step(int(action))
        info = {'TimeLimit.truncated': True} if truncated and not done else {}
        return s, r, done or truncated, info


class FCQ(nn.Module):
    def __init__(self,
                 input_dim,
                 output_dim,
                 hidden_dims=(32,32),
                 activation_fc=F.relu):
        super(FCQ, self).__init__()
        self.activation_fc = activation_fc

        self.input_layer = nn.Linear(input_dim, hidden_dims[0])

        self.hidden_layers = nn.ModuleList()
        for i in range(len(hidden_dims)-1):
            hidden_layer = nn.Linear(hidden_dims[i], hidden_dims[i+1])
            self.hidden_layers.append(hidden_layer)
        self.output_layer = nn.Linear(hidden_dims[-1], output_dim)

        device = "cpu"
        if torch.cuda.is_available():
            device = "cuda:0"
        self.device = torch.device(device)
        self.to(self.device)

    def _format(self, state):
        x = state
        if not isinstance(x, torch.Tensor):
            x = torch.tensor(x,
                             device=self.device,
                             dtype=torch.float32)
            x = x.unsqueeze(0)
        return x

    def forward(self, state):
        x = self._format(state)
        x = self.activation_fc(self.input_layer(x))
        for hidden_layer in self.hidden_layers:
            x = self.activation_fc(hidden_layer(x))
        x = self.output_layer(x)
        return x

    def load(self, experiences):
        states, actions, rewards, new_states, is_terminals = experiences
        states = torch.from_numpy(states).float().to(self.device)
        actions = torch.from_numpy(actions).long().to(self.device)
        new_states = torch.from_numpy(new_states).float().to(self.device)
        rewards = torch.from_numpy(rewards).float().to(self.device)
        is_terminals = torch.from_numpy(is_terminals).float().to(self.device)
        return states, actions, rewards, new_states, is_terminals


class GreedyStrategy():
    def __init__(self):
        self.exploratory_action_taken = False

    def select_action(self, model, state):
        with torch.no_grad():
            q_values = model(state).cpu().detach().data.numpy().squeeze()
            return np.argmax(q_values)


class EGreedyExpStrategy():
    def __init__(self, init_epsilon=1.0, min_epsilon=0.1, decay_steps=20000):
        self.epsilon = init_epsilon
        self.init_epsilon = init_epsilon
        self.decay_steps = decay_steps
        self.min_epsilon = min_epsilon
        self.epsilons = 0.01 / np.logspace(-2, 0, decay_steps, endpoint=False) - 0.01
        self.epsilons = self.epsilons * (init_epsilon - min_epsilon) + min_epsilon
        self.t = 0
        self.exploratory_action_taken = None

    def _epsilon_update(self):
        self.epsilon = self.min_epsilon if self.t >= self.decay_steps else self.epsilons[self.t]
        self.t += 1
        return self.epsilon

    def select_action(self, model, state):
        self.exploratory_action_taken = False
        with torch.no_grad():
            q_values = model(state).detach().cpu().data.numpy().squeeze()

        if np.random.rand() > self.epsilon:
            action = np.argmax(q_values)
        else:
            action = np.random.randint(len(q_values))

        self._epsilon_update()
        self.exploratory_action_taken = action != np.argmax(q_values)
        return action


class ReplayBuffer():
    def __init__(self,
                 max_size=10000,
                 batch_size=64):
        self.ss_mem = np.empty(shape=(max_size), dtype=np.ndarray)
        self.as_mem = np.empty(shape=(max_size), dtype=np.ndarray)
        self.rs_mem = np.empty(shape=(max_size), dtype=np.ndarray)
        self.ps_mem = np.empty(shape=(max_size), dtype=np.ndarray)
        self.ds_mem = np.empty(shape=(max_size), dtype=np.ndarray)

        self.max_size = max_size
        self.batch_size = batch_size
        self._idx = 0
        self.size = 0

    def store(self, sample):
        s, a, r, p, d = sample
        self.ss_mem[self._idx] = s
        self.as_mem[self._idx] = a
        self.rs_mem[self._idx] = r
        self.ps_mem[self._idx] = p
        self.ds_mem[self._idx] = d

        self._idx += 1
        self._idx = self._idx % self.max_size

        self.size += 1
        self.size = min(self.size, self.max_size)

    def sample(self, batch_size=None):
        if batch_size == None:
            batch_size = self.batch_size

        idxs = np.random.choice(
            self.size, batch_size, replace=False)
        experiences = np.vstack(self.ss_mem[idxs]), \
                      np.vstack(self.as_mem[idxs]), \
                      np.vstack(self.rs_mem[idxs]), \
                      np.vstack(self.ps_mem[idxs]), \
                      np.vstack(self.ds_mem[idxs])
        return experiences

    def __len__(self):
        return self.size


class DDQN():
    def __init__(self,
                 replay_buffer_fn,
                 value_model_fn,
                 value_optimizer_fn,
                 value_optimizer_lr,
                 max_gradient_norm,
                 training_strategy_fn,
                 evaluation_strategy_fn,
                 n_warmup_batches,
                 update_target_every_steps,
                 bug=None):
        self.replay_buffer_fn = replay_buffer_fn
        self.value_model_fn = value_model_fn
        self.value_optimizer_fn = value_optimizer_fn
        self.value_optimizer_lr = value_optimizer_lr
        self.max_gradient_norm = max_gradient_norm
        self.training_strategy_fn = training_strategy_fn
        self.evaluation_strategy_fn = evaluation_strategy_fn
        self.n_warmup_batches = n_warmup_batches
        self.update_target_every_steps = update_target_every_steps
        self.bug = bug

    def targets(self, experiences):
        states, actions, rewards, next_states, is_terminals = experiences
        batch_size = len(is_terminals)

        # argmax_a_q_sp = self.target_model(next_states).max(1)[1]
        argmax_a_q_sp = self.online_model(next_states).max(1)[1]
        q_sp = self.target_model(next_states).detach()
        max_a_q_sp = q_sp[
            np.arange(batch_size), argmax_a_q_sp].unsqueeze(1)
        if self.bug == "target_not_unsqueezed":
            max_a_q_sp = max_a_q_sp.squeeze(1)
        if self.bug == "terminal_mask_dropped":
            return rewards + (self.gamma * max_a_q_sp)
        target_q_sa = rewards + (self.gamma * max_a_q_sp * (1 - is_terminals))
        return target_q_sa

    def optimize_model(self, experiences):
        states, actions, rewards, next_states, is_terminals = experiences
        target_q_sa = self.targets(experiences)
        q_sa = self.online_model(states).gather(1, actions)

        td_error = q_sa - target_q_sa
        value_loss = td_error.pow(2).mul(0.5).mean()
        self.value_optimizer.zero_grad()
        value_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.online_model.parameters(),
                                       self.max_gradient_norm)
        self.value_optimizer.step()
        return value_loss.detach()

    def interaction_step(self, state, env):
        action = self.training_strategy.select_action(self.online_model, state)
        new_state, reward, is_terminal, info = env.step(action)
        is_truncated = 'TimeLimit.truncated' in info and info['TimeLimit.truncated']
        is_failure = is_terminal and not is_truncated
        experience = (state, action, reward, new_state, float(is_failure))

        self.replay_buffer.store(experience)
        self.episode_reward[-1] += reward
        self.episode_timestep[-1] += 1
        self.episode_exploration[-1] += int(self.training_strategy.exploratory_action_taken)
        return new_state, is_terminal

    def update_network(self):
        for target, online in zip(self.target_model.parameters(),
                                  self.online_model.parameters()):
            if self.bug == "update_network_reversed":
                online.data.copy_(target.data)
            else:
                target.data.copy_(online.data)

    def setup(self, make_env_fn, make_env_kargs, seed, gamma):
        """(port) The set-up lines of ``train``."""
        self.make_env_fn = make_env_fn
        self.make_env_kargs = make_env_kargs
        self.seed = seed
        self.gamma = gamma

        env = self.make_env_fn(**self.make_env_kargs, seed=self.seed)
        torch.manual_seed(self.seed) ; np.random.seed(self.seed)

        nS, nA = 4, 2  # (port) env.observation_space.shape[0], env.action_space.n of CartPole-v1
        self.episode_timestep = []
        self.episode_reward = []
        self.episode_exploration = []

        self.target_model = self.value_model_fn(nS, nA)
        self.online_model = self.value_model_fn(nS, nA)
        self.update_network()

        self.value_optimizer = self.value_optimizer_fn(self.online_model,
                                                       self.value_optimizer_lr)

        self.replay_buffer = self.replay_buffer_fn()
        self.training_strategy = self.training_strategy_fn()
        self.evaluation_strategy = self.evaluation_strategy_fn()
        return env

    def new_episode(self, env):
        """(port) The head of ``train``'s episode loop."""
        self.state, self.is_terminal = env.reset(), False
        self.episode_reward.append(0.0)
        self.episode_timestep.append(0.0)
        self.episode_exploration.append(0.0)

    def step(self, env):
        """(port) One pass of ``for step in count()`` in ``train``."""
        loss = None
        self.state, is_terminal = self.interaction_step(self.state, env)

        min_samples = self.replay_buffer.batch_size * self.n_warmup_batches
        if len(self.replay_buffer) > min_samples:
            experiences = self.replay_buffer.sample()
            experiences = self.online_model.load(experiences)
            loss = self.optimize_model(experiences)

        if np.sum(self.episode_timestep) % self.update_target_every_steps == 0:
            self.update_network()

        if is_terminal:
            self.new_episode(env)
        return loss


def _build(seed, bug=None):
    value_model_fn = lambda nS, nA: FCQ(nS, nA, hidden_dims=(512,128))
    value_optimizer_fn = lambda net, lr: optim.RMSprop(net.parameters(), lr=lr)
    value_optimizer_lr = 0.0005
    max_gradient_norm = float('inf')

    training_strategy_fn = lambda: EGreedyExpStrategy(init_epsilon=1.0,
                                                      min_epsilon=0.3,
                                                      decay_steps=20000)
    evaluation_strategy_fn = lambda: GreedyStrategy()

    replay_buffer_fn = lambda: ReplayBuffer(max_size=10000, batch_size=32)  # (port) 50000, 64
    n_warmup_batches = 5
    update_target_every_steps = 10

    agent = DDQN(replay_buffer_fn, value_model_fn, value_optimizer_fn, value_optimizer_lr, max_gradient_norm,
                 training_strategy_fn, evaluation_strategy_fn, n_warmup_batches, update_target_every_steps, bug=bug)
    make_env_fn, make_env_kargs = (lambda seed=None: GymCartPole(seed)), {}
    env = agent.setup(make_env_fn, make_env_kargs, seed, gamma=1.00)
    agent.new_episode(env)
    for _ in count():
        if agent.step(env) is not None:
            break

    experiences = agent.online_model.load(agent.replay_buffer.sample())

    def loss_fn(q_all, experiences):
        target_q_sa = agent.targets(experiences)
        q_sa = q_all.gather(1, experiences[1])
        return (q_sa - target_q_sa).pow(2).mul(0.5).mean()

    return Program(name="gdrl_ddqn", model=agent.online_model, batch=(experiences[0], experiences),
                   loss_fn=loss_fn, optimizer=agent.value_optimizer, train_step=lambda: agent.step(env))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the (1 - is_terminals) mask left out of the target, so a pole's fall is bootstrapped from the state
    # after it as if the episode went on.
    Bug("terminal_mask_dropped", functools.partial(_build, bug="terminal_mask_dropped"), "learning_ledger",
        ("TASK",)),
    # classic broadcast slip: the next-state values left [B] (no unsqueeze) against rewards [B, 1]: the target
    # broadcasts to [B, B] and every Q(s, a) is fitted to a mix of all the batch's targets.
    Bug("target_not_unsqueezed", functools.partial(_build, bug="target_not_unsqueezed"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: update_network's copy reversed, so every 10 steps the online network is reset to the target network
    # (its initial weights) and the optimizer's progress is thrown away.
    Bug("update_network_reversed", functools.partial(_build, bug="update_network_reversed"), "step_probe",
        ("input_layer.weight",)),
]

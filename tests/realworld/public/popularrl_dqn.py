"""DQN on CartPole from quantumiracle's Popular-RL-Algorithms: a 4-layer MLP Q-network and a target network copied
every 20 updates, epsilon-greedy with an exponentially decaying epsilon, a list replay buffer of per-step tensors,
learning from 2000 steps on; the target ``r + gamma * Q'`` uses the target network's max over non-terminal next
states only (zeros for terminal ones), standardized over the batch, and a smooth L1 loss, Adam.

Source: https://github.com/quantumiracle/Popular-RL-Algorithms
Commit: 3b814ea159f1fc0b521d6e0e699a7945f770f105
Files: ``dqn.py``
License: Apache-2.0 (full text in LICENSES/quantumiracle-Popular-RL-Algorithms.txt)
Domain: RL, value-based (DQN: replay buffer, target network, epsilon-greedy, standardized bootstrap targets)

Kept as written: the hyper-parameters (``BATCH_SIZE`` 128, ``REPLAY_BUFFER_SIZE`` 100000, ``REPLAY_START_SIZE``
2000, ``GAMMA`` 0.95, epsilon 1 -> 0.05 over a decay of 10000 frames, ``TARGET_UPDATE_INTERVAL`` 20, ``LR`` 1e-4),
``EpsilonScheduler``, ``QNetwork`` (64 hidden units, three ReLU layers), ``transition`` and ``replay_buffer``
(``torch.tensor([x])`` per field, ``random.sample``), ``DQN`` (``choose_action``, ``learn`` with its non-terminal
index selection, the batch standardization of ``Q_s_prime_a_prime``, ``smooth_l1_loss(target.detach(), Q_s_a)``,
zero_grad / backward / step, ``update_target`` by ``load_state_dict`` every 20 updates) and ``rollout``'s loop body
(choose an action, step the environment, ``r_buffer.add([s, s_, [a], [r], [done]])``, step the epsilon scheduler,
learn once the buffer holds more than ``REPLAY_START_SIZE`` steps, reset at the end of an episode).

Deviations from the original:
- gym is not installed: the environment is ``_cartpole.CartPole`` (CartPole-v1's dynamics in numpy, seeded with
  ``seed``); its gym >= 0.26 ``reset``/``step`` signatures are read back into the old API ``dqn.py`` uses
  (``s = env.reset()``, ``done`` = terminated or truncated at 500 steps, as CartPole-v1's TimeLimit gave it).
- ``random``, ``numpy`` and ``torch`` are seeded with ``seed``; ``device`` is the CPU.
- ``rollout`` is not one call that runs 10000 episodes: the build runs its loop until the first ``learn`` would
  happen (the 2000 warm-up steps, as written), and ``train_step`` is one iteration of its inner loop from there on
  (one environment step and one ``learn``), returning ``learn``'s loss; the episode prints, the log list and
  ``save_model`` are dropped.
- ``learn``'s next-state lines (non-terminal selection, target network max, standardization, ``rewards + GAMMA *
  Q_s_prime_a_prime``) are moved, unchanged, into a method ``target(sample)`` that ``learn`` calls, so that the
  Program's ``loss_fn`` builds the same target.
- the Program's batch is one ``BATCH_SIZE`` sample of the buffer, given as ``(states, sample)``; ``loss_fn`` is
  ``learn``'s loss on the Q-values of those states (the target from the sample, as ``learn`` builds it).
- the self-check runs 60 steps (``SELF_CHECK_STEPS``): at the original lr 1e-4 the loss on freshly sampled
  batches falls too slowly for 30 to show it.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, UP004, UP039, PLR0402, RUF059

from __future__ import annotations

import functools
import math
import pathlib
import random
import sys
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as f

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

# Hyper Parameters
MAX_EPI=10000
MAX_STEP = 10000
SAVE_INTERVAL = 20
TARGET_UPDATE_INTERVAL = 20

BATCH_SIZE = 128
REPLAY_BUFFER_SIZE = 100000
REPLAY_START_SIZE = 2000

GAMMA = 0.95
EPSILON = 0.05  # if not using epsilon scheduler, use a constant
EPSILON_START = 1.
EPSILON_END = 0.05
EPSILON_DECAY = 10000
LR = 1e-4                  # learning rate

SELF_CHECK_STEPS = 60  # (port) the 30 default steps are too few for lr 1e-4 on sampled batches

device = torch.device("cpu")  # (port) cuda if available


class EpsilonScheduler():
    def __init__(self, eps_start, eps_final, eps_decay):
        """A scheduler for epsilon-greedy strategy.

        :param eps_start: starting value of epsilon, default 1. as purely random policy
        :type eps_start: float
        :param eps_final: final value of epsilon
        :type eps_final: float
        :param eps_decay: number of timesteps from eps_start to eps_final
        :type eps_decay: int
        """
        self.eps_start = eps_start
        self.eps_final = eps_final
        self.eps_decay = eps_decay
        self.epsilon = self.eps_start
        self.ini_frame_idx = 0
        self.current_frame_idx = 0

    def reset(self, ):
        """ Reset the scheduler """
        self.ini_frame_idx = self.current_frame_idx

    def step(self, frame_idx):
        self.current_frame_idx = frame_idx
        delta_frame_idx = self.current_frame_idx - self.ini_frame_idx
        self.epsilon = self.eps_final + (self.eps_start - self.eps_final) * math.exp(-1. * delta_frame_idx / self.eps_decay)

    def get_epsilon(self):
        return self.epsilon


class QNetwork(nn.Module):
    def __init__(self, act_shape, obs_shape, hidden_units=64):
        super(QNetwork, self).__init__()
        in_dim = obs_shape[0]
        out_dim = act_shape

        self.linear = nn.Sequential(
            nn.Linear(in_dim, hidden_units),
            nn.ReLU(),
            nn.Linear(hidden_units, hidden_units),
            nn.ReLU(),
            nn.Linear(hidden_units, hidden_units),
            nn.ReLU(),
            nn.Linear(hidden_units, out_dim)
        )

    def forward(self, x):
        o = self.linear(x)
        return o


transition = namedtuple('transition', 'state, next_state, action, reward, is_terminal')
class replay_buffer:
    def __init__(self, buffer_size):
        self.buffer_size = buffer_size
        self.location = 0
        self.buffer = []

    def add(self, samples):
        # Append when the buffer is not full but overwrite when the buffer is full
        wrap_tensor = lambda x: torch.tensor([x])
        if len(self.buffer) < self.buffer_size:
            self.buffer.append(transition(*map(wrap_tensor, samples)))
        else:
            self.buffer[self.location] = transition(*map(wrap_tensor, samples))

        # Increment the buffer location
        self.location = (self.location + 1) % self.buffer_size

    def sample(self, batch_size):
        return random.sample(self.buffer, batch_size)


class _Space:  # (port) gym's spaces, what DQN.__init__ reads
    def __init__(self, n=None, shape=None):
        self.n, self.shape = n, shape


class DQN(object):
    def __init__(self, env, bug=None):
        self.action_shape = env.action_space.n
        self.obs_shape = env.observation_space.shape
        self.eval_net, self.target_net = QNetwork(self.action_shape, self.obs_shape).to(device), QNetwork(self.action_shape, self.obs_shape).to(device)
        self.learn_step_counter = 0                                     # for target updating
        self.optimizer = torch.optim.Adam(self.eval_net.parameters(), lr=LR)
        self.loss_func = nn.MSELoss()
        self.epsilon_scheduler = EpsilonScheduler(EPSILON_START, EPSILON_END, EPSILON_DECAY)
        self.updates = 0
        self.bug = bug

    def choose_action(self, x):
        # x = Variable(torch.unsqueeze(torch.FloatTensor(x), 0)).to(device)
        x = torch.unsqueeze(torch.FloatTensor(x), 0).to(device)
        # input only one sample
        # if np.random.uniform() > EPSILON:   # greedy
        epsilon = self.epsilon_scheduler.get_epsilon()
        if np.random.uniform() > epsilon:   # greedy
            actions_value = self.eval_net.forward(x)
            action = torch.max(actions_value, 1)[1].data.cpu().numpy()[0]     # return the argmax
            # print(action)
        else:   # random
            action = np.random.randint(0, self.action_shape)
        return action

    def target(self, sample):
        # (port) the target half of learn(), shared with the Program's loss_fn
        batch_samples = transition(*zip(*sample))
        next_states = torch.cat(batch_samples.next_state).float().to(device)
        rewards = torch.cat(batch_samples.reward).float().to(device)
        is_terminal = torch.cat(batch_samples.is_terminal).to(device)

        # Get the indices of next_states that are not terminal
        if self.bug == "terminal_mask_dropped":
            none_terminal_next_state_index = torch.arange(len(sample), dtype=torch.int64, device=device)
        else:
            none_terminal_next_state_index = torch.tensor([i for i, is_term in enumerate(is_terminal) if is_term == 0], dtype=torch.int64, device=device)
        # Select the indices of each row
        none_terminal_next_states = next_states.index_select(0, none_terminal_next_state_index)

        Q_s_prime_a_prime = torch.zeros(len(sample), 1, device=device)
        if len(none_terminal_next_states) != 0:
            Q_s_prime_a_prime[none_terminal_next_state_index] = self.target_net(none_terminal_next_states).detach().max(1)[0].unsqueeze(1)

        # Q_s_prime_a_prime = self.target_net(next_states).detach().max(1, keepdim=True)[0]  # this one is simpler regardless of terminal state
        Q_s_prime_a_prime = (Q_s_prime_a_prime-Q_s_prime_a_prime.mean())/ (Q_s_prime_a_prime.std() + 1e-5)  # normalization

        # Compute the target
        target = rewards + GAMMA * Q_s_prime_a_prime
        return target

    def learn(self, sample,):
        # Batch is a list of namedtuple's, the following operation returns samples grouped by keys
        batch_samples = transition(*zip(*sample))

        # states, next_states are of tensor (BATCH_SIZE, in_channel, 10, 10) - inline with pytorch NCHW format
        # actions, rewards, is_terminal are of tensor (BATCH_SIZE, 1)
        states = torch.cat(batch_samples.state).float().to(device)
        actions = torch.cat(batch_samples.action).to(device)
        # Obtain a batch of Q(S_t, A_t) and compute the forward pass.
        # Note: policy_network output Q-values for all the actions of a state, but all we need is the A_t taken at time t
        # in state S_t.  Thus we gather along the columns and get the Q-values corresponds to S_t, A_t.
        # Q_s_a is of size (BATCH_SIZE, 1).
        Q = self.eval_net(states)
        Q_s_a=Q.gather(1, actions)

        # (port) the next-state half of learn() is self.target(sample), the same lines
        target = self.target(sample)

        # Update with loss
        # loss = self.loss_func(target.detach(), Q_s_a)
        loss = f.smooth_l1_loss(target.detach(), Q_s_a)
        # Zero gradients, backprop, update the weights of policy_net
        if self.bug != "no_zero_grad":
            self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

        self.updates += 1
        if self.updates % TARGET_UPDATE_INTERVAL == 0:
            self.update_target()

        return loss.item()

    def update_target(self, ):
        """
        Update the target model when necessary.
        """
        if self.bug == "target_update_reversed":
            self.eval_net.load_state_dict(self.target_net.state_dict())
        else:
            self.target_net.load_state_dict(self.eval_net.state_dict())


class _OldApiCartPole:  # (port) gym < 0.26's reset/step, as dqn.py calls them
    def __init__(self, seed):
        self.env = CartPole(seed)
        self.action_space = _Space(n=2)
        self.observation_space = _Space(shape=(4,))

    def reset(self):
        s, _ = self.env.reset()
        return s

    def step(self, a):
        s_, r, terminated, truncated, info = self.env.step(int(a))
        return s_, r, terminated or truncated, info


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    env = _OldApiCartPole(seed)
    model = DQN(env, bug=bug)
    r_buffer = replay_buffer(REPLAY_BUFFER_SIZE)
    st = {"s": env.reset(), "total_step": 0, "epi_r": 0}

    def env_step():
        # one iteration of rollout()'s inner loop, without the learn
        s = st["s"]
        st["total_step"] += 1
        a = model.choose_action(s)
        s_, r, done, info = env.step(a)
        r_buffer.add([s,s_,[a],[r],[done]])
        model.epsilon_scheduler.step(st["total_step"])
        st["epi_r"] += r
        if done:
            st["s"], st["epi_r"] = env.reset(), 0
        else:
            st["s"] = s_

    # rollout(): the warm-up steps before the first learn
    while not (st["total_step"] >= REPLAY_START_SIZE and len(r_buffer.buffer) >= BATCH_SIZE):
        env_step()

    def train_step():
        s = st["s"]
        st["total_step"] += 1
        a = model.choose_action(s)
        s_, r, done, info = env.step(a)
        r_buffer.add([s,s_,[a],[r],[done]])
        model.epsilon_scheduler.step(st["total_step"])
        st["epi_r"] += r
        loss = None
        if st["total_step"] > REPLAY_START_SIZE and len(r_buffer.buffer) >= BATCH_SIZE:
            sample = r_buffer.sample(BATCH_SIZE)
            loss = model.learn(sample)
        if done:
            st["s"], st["epi_r"] = env.reset(), 0
        else:
            st["s"] = s_
        return loss

    sample = r_buffer.sample(BATCH_SIZE)
    states = torch.cat(transition(*zip(*sample)).state).float()

    def loss_fn(Q, sample):
        actions = torch.cat(transition(*zip(*sample)).action)
        Q_s_a = Q.gather(1, actions)
        return f.smooth_l1_loss(model.target(sample).detach(), Q_s_a)

    return Program(name="popularrl_dqn", model=model.eval_net, batch=(states, sample), loss_fn=loss_fn,
                   optimizer=model.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # every next state bootstrapped, terminal ones included (classic: the terminal mask dropped): the value of
    # the pole's fall is learned as if the episode went on.
    Bug("terminal_mask_dropped", functools.partial(_build, bug="terminal_mask_dropped"), "learning_ledger",
        ("TASK",)),
    # update_target's load_state_dict the wrong way round (classic): every 20 updates the online network is reset
    # to the target network's (initial) weights, so learning never accumulates. Every parameter is touched alike
    # (a hard, tau = 1, reversed target update): declared by its mechanism (README rule 6).
    Bug("target_update_reversed", functools.partial(_build, bug="target_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
    # self.optimizer.zero_grad() dropped from learn (classic). A whole-model step slip: declared by its mechanism
    # (README rule 6).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]

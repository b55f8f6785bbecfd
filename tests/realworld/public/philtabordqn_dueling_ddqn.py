# ruff: noqa: UP004, UP008, PLR0402, RUF059
"""Dueling Double DQN on frame stacks, from philtabor/Deep-Q-Learning-Paper-To-Code (``DuelingDDQN/``): a conv
network (8x8/4, 4x4/2, 3x3/1) with two fully connected layers and separate value and advantage heads; Q is
``V + A - mean(A)``; the double-DQN target takes the argmax action from the online network and its value from the
target network (zeroed at terminal states), MSE loss, RMSprop lr 1e-4, epsilon-greedy acting on the advantages with
a linear epsilon decay per learning step, hard target replacement every ``replace`` learning steps, one learning
step per environment step.

Source: https://github.com/philtabor/Deep-Q-Learning-Paper-To-Code
Commit: 64e0546d95ba313fb677f193abbdc38f463c4aa3
Files: ``DuelingDDQN/deep_q_network.py`` (``DuelingDeepQNetwork``), ``DuelingDDQN/dueling_ddqn_agent.py``
(``DuelingDDQNAgent``), ``DuelingDDQN/replay_memory.py`` (``ReplayBuffer``), ``DuelingDDQN/main_dueling_ddqn.py``
(the game loop), ``DuelingDDQN/utils.py`` (``StackFrames``, for the frame stack)
License: MIT (Copyright (c) 2019 Phil Tabor; full text in LICENSES/philtabor-Deep-Q-Learning-Paper-To-Code.txt)
Domain: RL, value-based (dueling double DQN, replay buffer, hard-copied target network, image observations)

Kept as written: ``DuelingDeepQNetwork`` (the three convolutions, ``calculate_conv_output_dims``, fc1/fc2, the V
and A heads, RMSprop and MSELoss owned by the network), ``DuelingDDQNAgent`` (``store_transition``,
``sample_memory``, ``choose_action`` (argmax of the advantages), ``replace_target_network``, ``decrement_epsilon``,
``learn`` line by line, including ``q_next[dones] = 0.0`` and ``loss(q_target, q_pred)``), ``ReplayBuffer``, the
game loop body (choose, step, store ``int(done)``, learn), and the hyperparameters gamma 0.99, epsilon 1.0, lr 1e-4,
batch_size 32, eps_min 0.1, eps_dec 1e-5.

Deviations from the original:
- Pong (``make_env('PongNoFrameskip-v4')``: 84x84 grayscale frames, 4 stacked, 6 actions) is replaced by a catch
  game written here (``Catch``): a ball falls one row per step down a 9x9 grid drawn as 36x36 frames, a 3-cell
  paddle on the bottom row moves left, stays or moves right, reward +1 when the ball is caught and -1 when it is
  missed, which ends the episode; frames are stacked 4 deep as ``StackFrames`` does; seeded from ``seed``;
- sizes for 2 CPU cores: frames 84x84 -> 36x36 (the convolutions are unchanged; their output is 64x1x1), fc1
  1024 -> 64, fc2 512 -> 64, mem_size 50000 -> 1000, replace 10000 -> 50;
- ``np.bool`` (removed from numpy) is ``bool`` and ``np.array([observation], copy=False, ...)`` is
  ``np.asarray`` (numpy 2 refuses ``copy=False`` when it must copy); checkpoints, plotting and printing are dropped;
- one ``train_step`` plays one episode of the loop (8 steps, each with its ``learn``) and returns the mean of that
  episode's losses (``learn`` returns its loss, which the original discards); ``build`` first plays until the
  memory holds a batch;
- the Program declares ``q_eval`` with a replay batch (states, and actions and targets from the initial networks);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import collections
import functools
import os
import pathlib
import sys

import numpy as np
import torch as T
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

FC1, FC2 = 64, 64  # (port) 1024, 512 upstream


class Catch:
    """(port) The environment: a catch game drawn as 36x36 frames, stacked 4 deep as StackFrames does."""

    GRID, CELL, STACK = 9, 4, 4

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.observation_space_shape = (self.STACK, self.GRID * self.CELL, self.GRID * self.CELL)
        self.n_actions = 3
        self.stack = collections.deque(maxlen=self.STACK)

    def _frame(self):
        f = np.zeros((self.GRID, self.GRID), dtype=np.float32)
        f[self.ball_row, self.ball_col] = 1.0
        f[self.GRID - 1, max(self.paddle - 1, 0):self.paddle + 2] = 1.0
        return np.kron(f, np.ones((self.CELL, self.CELL), dtype=np.float32))

    def reset(self):
        self.ball_row, self.ball_col = 0, int(self.rng.integers(self.GRID))
        self.paddle = int(self.rng.integers(1, self.GRID - 1))
        self.stack.clear()
        observation = self._frame()
        for _ in range(self.stack.maxlen):
            self.stack.append(observation)
        return np.array(self.stack)

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + action - 1, 1, self.GRID - 2))
        self.ball_row += 1
        done = self.ball_row == self.GRID - 1
        reward = (1.0 if abs(self.ball_col - self.paddle) <= 1 else -1.0) if done else 0.0
        self.stack.append(self._frame())
        return np.array(self.stack), reward, done, {}


# DuelingDDQN/deep_q_network.py
class DuelingDeepQNetwork(nn.Module):
    def __init__(self, lr, n_actions, name, input_dims, chkpt_dir):
        super(DuelingDeepQNetwork, self).__init__()

        self.checkpoint_dir = chkpt_dir
        self.checkpoint_file = os.path.join(self.checkpoint_dir, name)

        self.conv1 = nn.Conv2d(input_dims[0], 32, 8, stride=4)
        self.conv2 = nn.Conv2d(32, 64, 4, stride=2)
        self.conv3 = nn.Conv2d(64, 64, 3, stride=1)

        fc_input_dims = self.calculate_conv_output_dims(input_dims)

        self.fc1 = nn.Linear(fc_input_dims, FC1)
        self.fc2 = nn.Linear(FC1, FC2)
        self.V = nn.Linear(FC2, 1)
        self.A = nn.Linear(FC2, n_actions)

        self.optimizer = optim.RMSprop(self.parameters(), lr=lr)
        self.loss = nn.MSELoss()
        self.device = T.device('cpu')  # (port) 'cuda:0' if available upstream
        self.to(self.device)

    def calculate_conv_output_dims(self, input_dims):
        state = T.zeros(1, *input_dims)
        dims = self.conv1(state)
        dims = self.conv2(dims)
        dims = self.conv3(dims)
        return int(np.prod(dims.size()))

    def forward(self, state):
        conv1 = F.relu(self.conv1(state))
        conv2 = F.relu(self.conv2(conv1))
        conv3 = F.relu(self.conv3(conv2))
        conv_state = conv3.view(conv3.size()[0], -1)
        flat1 = F.relu(self.fc1(conv_state))
        flat2 = F.relu(self.fc2(flat1))

        V = self.V(flat2)
        A = self.A(flat2)

        return V, A


# DuelingDDQN/replay_memory.py
class ReplayBuffer(object):
    def __init__(self, max_size, input_shape, n_actions):
        self.mem_size = max_size
        self.mem_cntr = 0
        self.state_memory = np.zeros((self.mem_size, *input_shape),
                                     dtype=np.float32)
        self.new_state_memory = np.zeros((self.mem_size, *input_shape),
                                         dtype=np.float32)

        self.action_memory = np.zeros(self.mem_size, dtype=np.int64)
        self.reward_memory = np.zeros(self.mem_size, dtype=np.float32)
        self.terminal_memory = np.zeros(self.mem_size, dtype=bool)  # (port) np.bool upstream

    def store_transition(self, state, action, reward, state_, done):
        index = self.mem_cntr % self.mem_size
        self.state_memory[index] = state
        self.new_state_memory[index] = state_
        self.action_memory[index] = action
        self.reward_memory[index] = reward
        self.terminal_memory[index] = done
        self.mem_cntr += 1

    def sample_buffer(self, batch_size):
        max_mem = min(self.mem_cntr, self.mem_size)
        batch = np.random.choice(max_mem, batch_size, replace=False)

        states = self.state_memory[batch]
        actions = self.action_memory[batch]
        rewards = self.reward_memory[batch]
        states_ = self.new_state_memory[batch]
        terminal = self.terminal_memory[batch]

        return states, actions, rewards, states_, terminal


# DuelingDDQN/dueling_ddqn_agent.py
class DuelingDDQNAgent(object):
    def __init__(self, gamma, epsilon, lr, n_actions, input_dims,
                 mem_size, batch_size, eps_min=0.01, eps_dec=5e-7,
                 replace=1000,  algo=None, env_name=None, chkpt_dir='tmp/dqn', bug=None):
        self.gamma = gamma
        self.epsilon = epsilon
        self.lr = lr
        self.n_actions = n_actions
        self.input_dims = input_dims
        self.batch_size = batch_size
        self.eps_min = eps_min
        self.eps_dec = eps_dec
        self.replace_target_cnt = replace
        self.algo = algo
        self.env_name = env_name
        self.chkpt_dir = chkpt_dir
        self.action_space = [i for i in range(n_actions)]
        self.learn_step_counter = 0
        self.bug = bug

        self.memory = ReplayBuffer(mem_size, input_dims, n_actions)

        self.q_eval = DuelingDeepQNetwork(self.lr, self.n_actions,
                        input_dims=self.input_dims,
                        name=self.env_name+'_'+self.algo+'_q_eval',
                        chkpt_dir=self.chkpt_dir)
        self.q_next = DuelingDeepQNetwork(self.lr, self.n_actions,
                        input_dims=self.input_dims,
                        name=self.env_name+'_'+self.algo+'_q_next',
                        chkpt_dir=self.chkpt_dir)

    def store_transition(self, state, action, reward, state_, done):
        self.memory.store_transition(state, action, reward, state_, done)

    def sample_memory(self):
        state, action, reward, new_state, done = \
                                self.memory.sample_buffer(self.batch_size)

        states = T.tensor(state).to(self.q_eval.device)
        rewards = T.tensor(reward).to(self.q_eval.device)
        dones = T.tensor(done).to(self.q_eval.device)
        actions = T.tensor(action).to(self.q_eval.device)
        states_ = T.tensor(new_state).to(self.q_eval.device)

        return states, actions, rewards, states_, dones

    def choose_action(self, observation):
        if np.random.random() > self.epsilon:
            state = np.asarray([observation], dtype=np.float32)  # (port) np.array(..., copy=False) upstream
            state_tensor = T.tensor(state).to(self.q_eval.device)
            _, advantages = self.q_eval.forward(state_tensor)

            action = T.argmax(advantages).item()
        else:
            action = np.random.choice(self.action_space)

        return action

    def replace_target_network(self):
        if self.replace_target_cnt is not None and \
           self.learn_step_counter % self.replace_target_cnt == 0:
            self.q_next.load_state_dict(self.q_eval.state_dict())

    def decrement_epsilon(self):
        self.epsilon = self.epsilon - self.eps_dec \
                           if self.epsilon > self.eps_min else self.eps_min

    def learn(self):
        if self.memory.mem_cntr < self.batch_size:
            return

        if self.bug != "no_zero_grad":
            self.q_eval.optimizer.zero_grad()

        self.replace_target_network()

        states, actions, rewards, states_, dones = self.sample_memory()
        indices = np.arange(self.batch_size)

        V_s, A_s = self.q_eval.forward(states)
        V_s_, A_s_ = self.q_next.forward(states_)

        V_s_eval, A_s_eval = self.q_eval.forward(states_)

        if self.bug == "q_pred_not_indexed_by_row":
            q_pred = T.add(V_s,
                            (A_s - A_s.mean(dim=1, keepdim=True)))[:, actions]
        else:
            q_pred = T.add(V_s,
                            (A_s - A_s.mean(dim=1, keepdim=True)))[indices, actions]

        q_next = T.add(V_s_, (A_s_ - A_s_.mean(dim=1, keepdim=True)))

        q_eval = T.add(V_s_eval, (A_s_eval - A_s_eval.mean(dim=1,keepdim=True)))

        max_actions = T.argmax(q_eval, dim=1)
        if self.bug == "done_mask_after_target":
            q_target = rewards + self.gamma*q_next[indices, max_actions]
            q_next[dones] = 0.0
        else:
            q_next[dones] = 0.0

            q_target = rewards + self.gamma*q_next[indices, max_actions]

        loss = self.q_eval.loss(q_target, q_pred).to(self.q_eval.device)
        loss.backward()
        self.q_eval.optimizer.step()
        self.learn_step_counter += 1

        self.decrement_epsilon()
        return loss.item()  # (port) the original returns nothing


def _build(seed, bug=None):
    np.random.seed(seed)
    T.manual_seed(seed)
    env = Catch(seed)
    agent = DuelingDDQNAgent(gamma=0.99, epsilon=1.0, lr=0.0001,
                     input_dims=(env.observation_space_shape),
                     n_actions=env.n_actions, mem_size=1000, eps_min=0.1,
                     batch_size=32, replace=50, eps_dec=1e-5,
                     chkpt_dir='models/', algo='DuelingDDQNAgent',
                     env_name='Catch', bug=bug)  # (port) mem_size 50000, replace 10000 upstream

    def play_episode():
        # main_dueling_ddqn.py: one game of the loop
        losses = []
        done = False
        observation = env.reset()
        while not done:
            action = agent.choose_action(observation)
            observation_, reward, done, info = env.step(action)
            agent.store_transition(observation, action,
                                 reward, observation_, int(done))
            loss = agent.learn()
            if loss is not None:
                losses.append(loss)
            observation = observation_
        return losses

    while agent.memory.mem_cntr < agent.batch_size:
        play_episode()
    states, actions, rewards, states_, dones = agent.sample_memory()
    with T.no_grad():
        V_s_, A_s_ = agent.q_next(states_)
        q_next = V_s_ + A_s_ - A_s_.mean(dim=1, keepdim=True)
        q_next[dones] = 0.0
        q_target = rewards + agent.gamma * q_next.max(dim=1).values
    batch = (states, (actions, q_target))

    def train_step():
        return float(np.mean(play_episode()))

    def loss_fn(outputs, targets):
        V_s, A_s = outputs
        actions, q_target = targets
        q_pred = T.add(V_s, (A_s - A_s.mean(dim=1, keepdim=True)))[np.arange(len(actions)), actions]
        return agent.q_eval.loss(q_target, q_pred)

    return Program(name="philtabordqn_dueling_ddqn", model=agent.q_eval, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.q_eval.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # q_next[dones] = 0.0 written after the target is computed, so it zeroes nothing and every terminal transition
    # bootstraps from the next game's first frame (reported in a copy of this agent:
    # https://github.com/awill139/d3qn_pytorch/issues/1).
    Bug("done_mask_after_target", functools.partial(_build, bug="done_mask_after_target"), "learning_ledger",
        ("TASK",)),
    # classic: q_eval.optimizer.zero_grad() left out of learn, so the gradients of every learning step pile up.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
    # classic indexing slip: [:, actions] instead of [indices, actions] gives a [B, B] q_pred that MSELoss
    # broadcasts against the [B] targets: every state is fitted to every sampled action's target.
    Bug("q_pred_not_indexed_by_row", functools.partial(_build, bug="q_pred_not_indexed_by_row"), "learning_ledger",
        ("OBJECTIVE",)),
]

# ruff: noqa: UP004, UP008, PLR1730, RUF059
"""DQN on CartPole from ChenglongChen/pytorch-DRL: a single Q network (no target network) fitted by MSE to
``r + gamma * max_a Q(s', a).detach() * (1 - done)`` on replay batches, RMSprop, epsilon decaying with the number of
environment steps, a done penalty of -10, one environment step and one update per iteration.

Source: https://github.com/ChenglongChen/pytorch-DRL
Commit: 44b8f082ffb054c6dabead8971b66a7be4c1f9ff
Files: ``DQN.py`` (``DQN``), ``run_dqn.py`` (the constants and the ``while`` loop), ``common/Agent.py`` (``Agent``:
``__init__``, ``_take_one_step``), ``common/Memory.py`` (``ReplayMemory``), ``common/Model.py`` (``ActorNetwork``),
``common/utils.py`` (``identity``, ``to_tensor_var``)
License: MIT (Copyright (c) 2017 Chenglong Chen; full text in LICENSES/ChenglongChen-pytorch-DRL.txt)
Domain: RL, value-based (DQN with replay memory, no target network)

Kept as written: ``ActorNetwork`` (state -> 32 -> 32 -> actions, ReLU, identity output), ``ReplayMemory`` (list ring
buffer, ``random.sample``), ``Agent._take_one_step`` (epsilon-greedy action, ``done_penalty`` replaces the reward
at the end of an episode and the next state is written as zeros, the environment reset), ``DQN.train`` (gather of the
taken actions, ``next_q`` from the same network detached, ``target_q = reward_scale * r + gamma * next_q * (1 -
done)``, ``zero_grad`` / ``MSELoss`` / ``backward`` / optional clipping / ``step``), ``DQN.exploration_action``
(epsilon from 0.99 to 0.05 with decay 500 steps), RMSprop lr 1e-3, run_dqn's constants (memory 10000, batch 100,
gamma 0.99, done penalty -10, critic loss "mse", no gradient clipping, training from the first episode).

Deviations from the original:
- gym's CartPole-v0 is replaced by the cart-pole of ``_cartpole.py`` (same equations and constants, seeded) behind a
  small adapter with the gym < 0.26 interface the agent calls (``reset()`` returns the state, ``step`` a 4-tuple; the
  episode is cut at 200 steps, CartPole-v0's limit, and the cut reported as ``done`` as gym's TimeLimit did); the
  environment is the synthetic data.
- ``to_tensor_var`` drops the CUDA branch and reads ``np.long`` (gone from numpy) as ``np.int64``;
  ``nn.utils.clip_grad_norm`` is written ``clip_grad_norm_`` (the branch is off: ``MAX_GRAD_NORM = None``).
- the memory is filled with ``BATCH_SIZE`` exploratory steps when the program is built (the original trains from
  the first step on whatever the memory holds), so that every batch, and the Program's ``batch``, has 100
  transitions; ``random`` and ``numpy.random`` are seeded from ``seed`` (run_dqn seeds the environment with 2017).
- one ``train_step`` is one iteration of run_dqn's ``while`` loop (``interact()`` then ``train()``); ``train()``
  returns the loss (the original returns nothing); the periodic evaluation, the plots and the text files are dropped.
- ``loss_fn`` is the copied TD loss on the Program's fixed batch; ``eval_fn`` is ``Agent.evaluation`` (its loop
  written as one ``while``, the infos dropped; mean return
  over 3 greedy episodes on a second seeded cart-pole).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
from collections import namedtuple

import numpy as np
import torch as th
from torch import nn
from torch.optim import Adam, RMSprop

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

# run_dqn.py
MAX_STEPS = 10000  # None
MEMORY_CAPACITY = 10000
BATCH_SIZE = 100
CRITIC_LOSS = "mse"
MAX_GRAD_NORM = None
REWARD_DISCOUNTED_GAMMA = 0.99
EPSILON_START = 0.99
EPSILON_END = 0.05
EPSILON_DECAY = 500
DONE_PENALTY = -10.
EPISODE_LIMIT = 200  # (port) CartPole-v0's TimeLimit


class GymCartPole:
    """(port) the gym < 0.26 interface over ``_cartpole.CartPole``, with CartPole-v0's 200-step limit."""

    def __init__(self, seed):
        self.env = CartPole(seed)

    def reset(self):
        return self.env.reset()[0]

    def step(self, action):
        s, r, done, _, info = self.env.step(int(action))
        return s, r, done or self.env.steps >= EPISODE_LIMIT, info


# common/utils.py
def identity(x):
    return x


def to_tensor_var(x, use_cuda=True, dtype="float"):
    FloatTensor = th.FloatTensor
    LongTensor = th.LongTensor
    if dtype == "long":
        x = np.array(x, dtype=np.int64).tolist()
        return LongTensor(x)
    x = np.array(x, dtype=np.float64).tolist()
    return FloatTensor(x)


# common/Memory.py
Experience = namedtuple("Experience",
                        ("states", "actions", "rewards", "next_states", "dones"))


class ReplayMemory(object):
    """
    Replay memory buffer
    """
    def __init__(self, capacity):
        self.capacity = capacity
        self.memory = []
        self.position = 0

    def _push_one(self, state, action, reward, next_state=None, done=None):
        if len(self.memory) < self.capacity:
            self.memory.append(None)
        self.memory[self.position] = Experience(state, action, reward, next_state, done)
        self.position = (self.position + 1) % self.capacity

    def push(self, states, actions, rewards, next_states=None, dones=None):
        self._push_one(states, actions, rewards, next_states, dones)  # (port) the single-transition branch

    def sample(self, batch_size):
        if batch_size > len(self.memory):
            batch_size = len(self.memory)
        transitions = random.sample(self.memory, batch_size)
        batch = Experience(*zip(*transitions))
        return batch

    def __len__(self):
        return len(self.memory)


# common/Model.py
class ActorNetwork(nn.Module):
    """
    A network for actor
    """
    def __init__(self, state_dim, hidden_size, output_size, output_act):
        super(ActorNetwork, self).__init__()
        self.fc1 = nn.Linear(state_dim, hidden_size)
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.fc3 = nn.Linear(hidden_size, output_size)
        # activation function for the output
        self.output_act = output_act

    def __call__(self, state):
        out = nn.functional.relu(self.fc1(state))
        out = nn.functional.relu(self.fc2(out))
        out = self.output_act(self.fc3(out))
        return out


# common/Agent.py + DQN.py (the DQN subclass folded into the base class's attributes it uses)
class DQN(object):
    def __init__(self, env, state_dim, action_dim,
                 memory_capacity=10000, max_steps=10000,
                 reward_gamma=0.99, reward_scale=1., done_penalty=None,
                 actor_hidden_size=32, critic_loss="mse",
                 actor_lr=0.001, optimizer_type="rmsprop",
                 max_grad_norm=0.5, batch_size=100, episodes_before_train=100,
                 epsilon_start=0.9, epsilon_end=0.01, epsilon_decay=200, bug=None):
        self.env = env
        self.state_dim = state_dim
        self.action_dim = action_dim
        self.env_state = self.env.reset()
        self.n_episodes = 0
        self.n_steps = 0
        self.max_steps = max_steps
        self.reward_gamma = reward_gamma
        self.reward_scale = reward_scale
        self.done_penalty = done_penalty
        self.memory = ReplayMemory(memory_capacity)
        self.actor_hidden_size = actor_hidden_size
        self.critic_loss = critic_loss
        self.actor_lr = actor_lr
        self.optimizer_type = optimizer_type
        self.max_grad_norm = max_grad_norm
        self.batch_size = batch_size
        self.episodes_before_train = episodes_before_train
        self.epsilon_start = epsilon_start
        self.epsilon_end = epsilon_end
        self.epsilon_decay = epsilon_decay
        self.bug = bug

        self.actor = ActorNetwork(self.state_dim, self.actor_hidden_size,
                                  self.action_dim, identity)
        if self.optimizer_type == "adam":
            self.actor_optimizer = Adam(self.actor.parameters(), lr=self.actor_lr)
        elif self.optimizer_type == "rmsprop":
            self.actor_optimizer = RMSprop(self.actor.parameters(), lr=self.actor_lr)

    # agent interact with the environment to collect experience
    def interact(self):
        self._take_one_step()

    # take one step
    def _take_one_step(self):
        if (self.max_steps is not None) and (self.n_steps >= self.max_steps):
            self.env_state = self.env.reset()
            self.n_steps = 0
        state = self.env_state
        action = self.exploration_action(self.env_state)
        next_state, reward, done, _ = self.env.step(action)
        if done:
            if self.done_penalty is not None:
                reward = self.done_penalty
            next_state = [0] * len(state)
            self.env_state = self.env.reset()
            self.n_episodes += 1
            self.episode_done = True
        else:
            self.env_state = next_state
            self.episode_done = False
        self.n_steps += 1
        self.memory.push(state, action, reward, next_state, done)

    def tensors(self, batch):
        """(port) the first lines of ``train``: the sampled batch as tensors."""
        states_var = to_tensor_var(batch.states).view(-1, self.state_dim)
        actions_var = to_tensor_var(batch.actions, dtype="long").view(-1, 1)
        rewards_var = to_tensor_var(batch.rewards).view(-1, 1)
        next_states_var = to_tensor_var(batch.next_states).view(-1, self.state_dim)
        dones_var = to_tensor_var(batch.dones).view(-1, 1)
        return states_var, actions_var, rewards_var, next_states_var, dones_var

    def td_loss(self, q_all, actions_var, rewards_var, next_states_var, dones_var):
        """(port) the loss lines of ``train``, from ``self.actor(states_var)`` on."""
        current_q = q_all.gather(1, actions_var)
        if self.bug == "next_q_not_detached":
            next_state_action_values = self.actor(next_states_var)
        else:
            next_state_action_values = self.actor(next_states_var).detach()
        next_q = th.max(next_state_action_values, 1)[0].view(-1, 1)
        if self.bug == "dones_dropped":
            target_q = self.reward_scale * rewards_var + self.reward_gamma * next_q
        else:
            target_q = self.reward_scale * rewards_var + self.reward_gamma * next_q * (1. - dones_var)
        if self.critic_loss == "huber":
            return th.nn.functional.smooth_l1_loss(current_q, target_q)
        return th.nn.MSELoss()(current_q, target_q)

    # train on a sample batch
    def train(self):
        if self.n_episodes <= self.episodes_before_train:
            pass

        batch = self.memory.sample(self.batch_size)
        states_var, actions_var, rewards_var, next_states_var, dones_var = self.tensors(batch)

        # update value network
        self.actor_optimizer.zero_grad()
        loss = self.td_loss(self.actor(states_var), actions_var, rewards_var, next_states_var, dones_var)
        loss.backward()
        if self.bug == "zero_grad_after_backward":
            self.actor_optimizer.zero_grad()
        if self.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.actor.parameters(), self.max_grad_norm)
        self.actor_optimizer.step()
        return loss.item()  # (port) the original returns nothing

    # choose an action based on state with random noise added for exploration in training
    def exploration_action(self, state):
        epsilon = self.epsilon_end + (self.epsilon_start - self.epsilon_end) * \
                                  np.exp(-1. * self.n_steps / self.epsilon_decay)
        if np.random.rand() < epsilon:
            action = np.random.choice(self.action_dim)
        else:
            action = self.action(state)
        return action

    # choose an action based on state for execution
    def action(self, state):
        state_var = to_tensor_var([state])
        state_action_value_var = self.actor(state_var)
        state_action_value = state_action_value_var.data.numpy()[0]
        action = np.argmax(state_action_value)
        return action

    # evaluation the learned agent
    def evaluation(self, env, eval_episodes=10):
        rewards = []
        for i in range(eval_episodes):
            rewards_i = []
            state = env.reset()
            done = False
            while not done:
                action = self.action(state)
                state, reward, done, info = env.step(action)
                rewards_i.append(reward)
            rewards.append(rewards_i)
        return rewards


def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    th.manual_seed(seed)
    env = GymCartPole(seed)
    dqn = DQN(env=env, memory_capacity=MEMORY_CAPACITY,
              state_dim=4, action_dim=2,
              batch_size=BATCH_SIZE, max_steps=MAX_STEPS,
              done_penalty=DONE_PENALTY, critic_loss=CRITIC_LOSS,
              reward_gamma=REWARD_DISCOUNTED_GAMMA,
              epsilon_start=EPSILON_START, epsilon_end=EPSILON_END,
              epsilon_decay=EPSILON_DECAY, max_grad_norm=MAX_GRAD_NORM,
              episodes_before_train=0, bug=bug)
    for _ in range(BATCH_SIZE):  # (port) the memory filled before the first update
        dqn.interact()

    states_var, *targets = dqn.tensors(dqn.memory.sample(BATCH_SIZE))
    batch = (states_var, tuple(targets))

    def loss_fn(q_all, targets):
        return dqn.td_loss(q_all, *targets)

    def train_step():
        dqn.interact()
        return dqn.train()

    env_eval = GymCartPole(seed + 1)

    def eval_fn(model, _batch=None):
        with th.no_grad():
            rewards = dqn.evaluation(env_eval, 3)
        return float(np.mean([np.sum(r) for r in rewards]))

    return Program(name="pytorchdrl_dqn", model=dqn.actor, batch=batch, loss_fn=loss_fn,
                   optimizer=dqn.actor_optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the (1 - done) mask left out of the TD target: terminal transitions bootstrap from the zero state
    # written as their next state, and the done penalty no longer ends the return.
    Bug("dones_dropped", functools.partial(_build, bug="dones_dropped"), "learning_ledger", ("TASK",)),
    # classic detach slip: the bootstrap value is not detached, so the update also moves Q(s', .) towards the
    # target (a residual-gradient objective instead of the semi-gradient TD step of DQN).
    Bug("next_q_not_detached", functools.partial(_build, bug="next_q_not_detached"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: zero_grad between backward and step: the optimizer steps on zero gradients (README rule 6).
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

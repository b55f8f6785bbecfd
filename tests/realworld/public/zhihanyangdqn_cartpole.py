"""DQN with a replay buffer, a target network and epsilon decay on CartPole, from zhihanyang2022/pytorch-dqn.

Source: https://github.com/zhihanyang2022/pytorch-dqn
Commit: 2d1c2f68b08a95d39452b4213cef9aeb0ddb5eef
Files: ``params_pool.py``, ``replay_buffer.py``, ``train_cartpole.py``
License: MIT (Copyright (c) 2021 Zhihan; full text in LICENSES/zhihanyang2022-pytorch-dqn.txt)
Domain: RL, value-based (DQN: replay buffer, hard-copied target network, epsilon-greedy behaviour policy,
bootstrapped target ``r + gamma * Q_target(s', a') * mask`` with ``a'`` the greedy action of the prediction net
stored with the transition, MSE, Adam).

Kept as written: ``ParamsPool`` (the two 4-64-64-2 ``nn.Sequential`` Q networks, the target net in ``eval()``, Adam
over the prediction net with its default lr, ``update_q_prediction_net``, ``update_q_target_net``, the behaviour and
target policies, ``decay_epsilon`` with multiplier 0.99 and floor 0.05, gamma 0.95), ``ReplayBuffer`` (lists
trimmed to ``size``, ``sample`` indexing with ``np.random.randint``), and ``train_cartpole.py``'s loop body
(behaviour action from ``env.state``, ``env.step``, ``max_steps`` 200, the greedy next action, the mask, ``push``,
one ``update_q_prediction_net`` per environment step on a batch of 32, target copy every 10 episodes, epsilon decay
per episode).

Deviations from the original:
- gym's CartPole-v0 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations and constants,
  seeded); the environment is the synthetic data. Its ``state`` attribute plays gym's ``env.state``.
- ``np.random`` (the buffer's sampling and the behaviour policy's coin and random action) is a
  ``np.random.RandomState(seed)`` instance instead of the global module, so a build is reproducible.
- the buffer is filled at build time with 300 transitions played by the loop body without updates (the original
  updates from the very first transition); ``train_step`` is one pass of the inner ``while`` loop's body (one
  environment step, the push, one update), and the episode-end bookkeeping (target copy every 10 episodes, epsilon
  decay, ``env.reset()``) runs inside it when the episode ends.
- ``update_q_prediction_net`` returns its loss (the original returns None; it prints it when ``debug``) so the step
  has a loss to report; printing is dropped.
- ``sample`` wraps the lists of numpy states in ``np.array`` before ``torch.tensor`` (building a tensor from a list
  of arrays is very slow in current torch); ``env.step`` returns the five values of the helper's gym >= 0.26
  signature.
- the target line of ``update_q_prediction_net`` is moved, unchanged, into a ``targets`` method so that the
  declared ``loss_fn`` computes the same target.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import namedtuple

import numpy as np
import torch
from torch import nn, optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

FILL = 300

# ----- replay_buffer.py -----

Batch = namedtuple('Batch', 's a r s_prime a_prime mask')

class ReplayBuffer:

    def __init__(self, size, rng):
        self.states = []
        self.actions = []
        self.rewards = []
        self.next_states = []
        self.next_actions = []
        self.masks = []
        self.size = size
        self.random = rng

    def push(self, state, action, reward, next_state, next_action, mask):
        self.states.append(state)
        self.actions.append(action)
        self.rewards.append(reward)
        self.next_states.append(next_state)
        self.next_actions.append(next_action)
        self.masks.append(mask)

        # clean up bellman samples that are too old to use
        if len(self.states) > self.size:
            self.states = self.states[1:]
            self.actions = self.actions[1:]
            self.rewards = self.rewards[1:]
            self.next_states = self.next_states[1:]
            self.next_actions = self.next_actions[1:]
            self.masks = self.masks[1:]

    def sample(self, batch_size) -> Batch:
        idxs = self.random.randint(len(self.states), size=batch_size)
        s = torch.tensor(np.array(self.states))[idxs].float()
        a = torch.tensor(self.actions)[idxs].view(-1, 1).long()
        r = torch.tensor(self.rewards)[idxs].view(-1, 1).float()
        s_prime = torch.tensor(np.array(self.next_states))[idxs].float()
        a_prime = torch.tensor(self.next_actions)[idxs].view(-1, 1).long()
        mask = torch.tensor(self.masks)[idxs].view(-1, 1).long()
        return Batch(s, a, r, s_prime, a_prime, mask)

# ----- params_pool.py -----

class ParamsPool:

    def __init__(self, input_dim, num_actions, epsilon_multiplier=0.99, epsilon_min=0.05, gamma=0.95, rng=None,
                 bug=None):

        # ===== the Q prediction network =====

        self.q_prediction_net = nn.Sequential(
            nn.Linear(input_dim, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, num_actions),
        )

        # ===== the Q target network =====

        self.q_target_net = nn.Sequential(
            nn.Linear(input_dim, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, num_actions),
        )

        # ref: https://discuss.pytorch.org/t/how-the-pytorch-freeze-network-in-some-layers-only-the-rest-of-the-training/7088
        self.q_target_net.eval()

        # ===== optimizer =====

        # ref: https://pytorch.org/docs/stable/optim.html
        if bug == "optimizer_over_target_net":
            self.optim = optim.Adam(self.q_target_net.parameters())
        else:
            self.optim = optim.Adam(self.q_prediction_net.parameters())

        # ===== hyper-parameters =====

        self.num_actions = num_actions  # for action selection
        self.epsilon = 1.0
        self.epsilon_multiplier = epsilon_multiplier
        self.epsilon_min = epsilon_min
        self.gamma = gamma
        self.random = rng
        self.bug = bug

    def targets(self, batch):
        if self.bug == "mask_dropped":
            return batch.r + self.gamma * self.q_target_net(batch.s_prime).gather(1, batch.a_prime)
        return batch.r + self.gamma * self.q_target_net(batch.s_prime).gather(1, batch.a_prime) * batch.mask

    def update_q_prediction_net(self, batch: Batch, debug: bool=False) -> None:

        targets = self.targets(batch)

        predictions = self.q_prediction_net(batch.s).gather(1, batch.a)

        loss = torch.mean((targets - predictions) ** 2)
        if debug: print(float(loss))

        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        return loss

    def update_q_target_net(self) -> None:

        self.q_target_net.load_state_dict(self.q_prediction_net.state_dict())

    def act_using_behavior_policy(self, state: np.array) -> int:

        if self.random.uniform() < self.epsilon:
            return self.random.randint(self.num_actions)
        else:
            return self.act_using_target_policy(state)

    def act_using_target_policy(self, state: np.array) -> int:

        state = torch.tensor(state).unsqueeze(0).float()

        with torch.no_grad():
            q_values = self.q_prediction_net(state).numpy()

        return np.argmax(q_values)

    def decay_epsilon(self) -> None:
        if self.epsilon > self.epsilon_min:
            self.epsilon *= self.epsilon_multiplier

# ----- train_cartpole.py -----

target_network_update_duration = 10
max_steps = 200
batch_size = 32


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    buf = ReplayBuffer(size=10000, rng=rng)
    param = ParamsPool(input_dim=4, num_actions=2, rng=rng, bug=bug)
    env = CartPole(seed)
    env.reset()
    ep = {"e": 0, "total_steps": 0}

    def loop_body(update=True):
        # ===== getting the tuple (s, a, r, s', a') =====

        state = env.state
        action = param.act_using_behavior_policy(state)

        next_state, reward, done, _, _ = env.step(action)

        # logistics
        ep["total_steps"] += 1
        if ep["total_steps"] >= max_steps: done = True

        next_action = param.act_using_target_policy(next_state)

        mask = 0 if done else 1

        # ===== storing it to the buffer =====

        buf.push(state, action, reward, next_state, next_action, mask)

        # ===== update the parameters =====

        loss = param.update_q_prediction_net(buf.sample(batch_size=batch_size)) if update else None

        # ===== check done =====

        if done:
            # ===== after an episode =====
            if ep["e"] % target_network_update_duration == 0:
                param.update_q_target_net()
            param.decay_epsilon()
            ep["e"] += 1
            ep["total_steps"] = 0
            env.reset()
        return loss

    while len(buf.states) < FILL:
        loop_body(update=False)

    batch = buf.sample(batch_size=batch_size)

    def loss_fn(predictions_all, b):
        targets = param.targets(b)
        predictions = predictions_all.gather(1, b.a)
        return torch.mean((targets - predictions) ** 2)

    return Program(name="zhihanyangdqn_cartpole", model=param.q_prediction_net, batch=(batch.s, batch),
                   loss_fn=loss_fn, optimizer=param.optim, train_step=loop_body)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the terminal mask is left out of the bootstrapped target, so the value of the state after a fall
    # (and after the 200-step cut) is added to every terminal transition's target.
    Bug("mask_dropped", functools.partial(_build, bug="mask_dropped"), "learning_ledger", ("TASK",)),
    # classic copy-paste slip: Adam is built over the target network's parameters; the prediction net never moves.
    Bug("optimizer_over_target_net", functools.partial(_build, bug="optimizer_over_target_net"), "four_structures",
        ("0.weight",)),
]

# ruff: noqa: UP008, UP039, PLR0402
"""PPO on cart-pole (separate actor and critic, Monte-Carlo returns, probability ratio clipped at 0.2, minibatches
drawn by ``BatchSampler(SubsetRandomSampler)``, two Adam optimizers with gradient clipping), from sweetice's
Deep-reinforcement-learning-with-pytorch.

Source: https://github.com/sweetice/Deep-reinforcement-learning-with-pytorch, Commit:
7b9fac7e5e40ffdc6f7ccb8b0a81e7841370a996, Files: ``Char07 PPO/PPO_CartPole_v0.py``.
License: MIT (Copyright (c) 2018 Johnny He; full text in LICENSES/sweetice-Deep-reinforcement-learning-with-pytorch.txt).
Domain: RL, policy gradient (clipped PPO with a learned value baseline).

Kept as written: gamma 0.99, ``Transition``, ``Actor`` (num_state->100, softmax action head), ``Critic``
(num_state->100->1), ``PPO`` (clip_param 0.2, max_grad_norm 0.5, ppo_update_time 10, batch_size 32; Adam 1e-3 for
the actor, 3e-3 for the critic), ``select_action`` (Categorical sample; the stored ``a_log_prob`` field holds the
action's probability), ``update`` (discounted returns ``Gt`` built backwards over the buffer, 10 passes of shuffled
minibatches: advantage ``Gt - V`` detached, ratio ``new_prob / old_prob``, clipped surrogate, actor
zero_grad/backward/clip/step, critic ``F.mse_loss(Gt_index, V)`` zero_grad/backward/clip/step, buffer cleared) and
the loop (store each transition, at an episode's end update once the buffer holds ``batch_size`` transitions).

Deviations from the original:
- gym's unwrapped CartPole-v0 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations); the
  environment is the synthetic data. ``num_state`` / ``num_action`` are the constants 4 / 2.
- ``torch.manual_seed(seed)`` replaces the fixed seed 1; the sampler draws from a ``torch.Generator`` seeded from
  ``seed``. tensorboardX's ``SummaryWriter`` (the ``add_scalar`` calls), the ``../param`` directories, the
  parameter saving and the printing are dropped.
- ``main()``'s 1000-episode loop is not run. At build time episodes are played with ``select_action`` until the
  loop's update condition holds (an episode ends with at least ``batch_size`` transitions stored); that buffer is
  kept, and ``train_step`` refills the agent's buffer with it and runs ``update`` (one update on one fixed rollout
  per step, so the self-check's losses are comparable). ``update`` returns the mean over its minibatches of
  ``action_loss + value_loss`` (the original returns nothing).
- the Program's model is the actor (the policy PPO trains) with its optimizer and the clipped surrogate as loss;
  the critic and its optimizer are updated inside ``train_step`` as written.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from collections import namedtuple
from itertools import count

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical
from torch.utils.data.sampler import BatchSampler, SubsetRandomSampler

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

# Parameters
gamma = 0.99
num_state = 4
num_action = 2
Transition = namedtuple('Transition', ['state', 'action',  'a_log_prob', 'reward', 'next_state'])


class Actor(nn.Module):
    def __init__(self):
        super(Actor, self).__init__()
        self.fc1 = nn.Linear(num_state, 100)
        self.action_head = nn.Linear(100, num_action)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        action_prob = F.softmax(self.action_head(x), dim=1)
        return action_prob


class Critic(nn.Module):
    def __init__(self):
        super(Critic, self).__init__()
        self.fc1 = nn.Linear(num_state, 100)
        self.state_value = nn.Linear(100, 1)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        value = self.state_value(x)
        return value


class PPO():
    clip_param = 0.2
    max_grad_norm = 0.5
    ppo_update_time = 10
    buffer_capacity = 1000
    batch_size = 32

    def __init__(self, generator, bug=None):
        super(PPO, self).__init__()
        self.actor_net = Actor()
        self.critic_net = Critic()
        self.buffer = []
        self.counter = 0
        self.training_step = 0
        self.generator = generator
        self.bug = bug

        if bug == "actor_optimizer_over_critic":
            self.actor_optimizer = optim.Adam(self.critic_net.parameters(), 1e-3)
        else:
            self.actor_optimizer = optim.Adam(self.actor_net.parameters(), 1e-3)
        self.critic_net_optimizer = optim.Adam(self.critic_net.parameters(), 3e-3)

    def select_action(self, state):
        state = torch.from_numpy(state).float().unsqueeze(0)
        with torch.no_grad():
            action_prob = self.actor_net(state)
        c = Categorical(action_prob)
        action = c.sample()
        return action.item(), action_prob[:,action.item()].item()

    def store_transition(self, transition):
        self.buffer.append(transition)
        self.counter += 1

    def returns(self, reward):
        R = 0
        Gt = []
        for r in reward[::-1]:
            R = r + gamma * R
            if self.bug == "returns_appended_reversed":
                Gt.append(R)
            else:
                Gt.insert(0, R)
        return torch.tensor(Gt, dtype=torch.float)

    def surrogate(self, action_prob, old_action_log_prob, advantage):
        if self.bug == "ratio_of_probs_as_log_probs":
            ratio = torch.exp(action_prob - old_action_log_prob)
        else:
            ratio = (action_prob/old_action_log_prob)
        surr1 = ratio * advantage
        surr2 = torch.clamp(ratio, 1 - self.clip_param, 1 + self.clip_param) * advantage
        return -torch.min(surr1, surr2).mean()  # MAX->MIN desent

    def update(self, i_ep):
        state = torch.tensor(np.array([t.state for t in self.buffer]), dtype=torch.float)
        action = torch.tensor([t.action for t in self.buffer], dtype=torch.long).view(-1, 1)
        reward = [t.reward for t in self.buffer]
        # update: don't need next_state
        old_action_log_prob = torch.tensor([t.a_log_prob for t in self.buffer], dtype=torch.float).view(-1, 1)

        Gt = self.returns(reward)
        losses = []
        for i in range(self.ppo_update_time):
            for index in BatchSampler(SubsetRandomSampler(range(len(self.buffer)), generator=self.generator),
                                      self.batch_size, False):
                Gt_index = Gt[index].view(-1, 1)
                V = self.critic_net(state[index])
                delta = Gt_index - V
                advantage = delta.detach()
                # epoch iteration, PPO core!!!
                action_prob = self.actor_net(state[index]).gather(1, action[index]) # new policy

                # update actor network
                action_loss = self.surrogate(action_prob, old_action_log_prob[index], advantage)
                self.actor_optimizer.zero_grad()
                action_loss.backward()
                nn.utils.clip_grad_norm_(self.actor_net.parameters(), self.max_grad_norm)
                self.actor_optimizer.step()

                #update critic network
                value_loss = F.mse_loss(Gt_index, V)
                self.critic_net_optimizer.zero_grad()
                value_loss.backward()
                nn.utils.clip_grad_norm_(self.critic_net.parameters(), self.max_grad_norm)
                self.critic_net_optimizer.step()
                self.training_step += 1
                losses.append((action_loss + value_loss).detach())

        del self.buffer[:] # clear experience
        return torch.stack(losses).mean()


def collect(agent, seed):
    """main()'s episode loop until its update condition holds; returns the buffer it would update on."""
    env = CartPole(seed)
    for i_epoch in range(1000):
        state, _ = env.reset()
        for t in count():
            action, action_prob = agent.select_action(state)
            next_state, reward, done, _truncated, _ = env.step(action)
            trans = Transition(state, action, action_prob, reward, next_state)
            agent.store_transition(trans)
            state = next_state

            if done :
                if len(agent.buffer) >= agent.batch_size:
                    return list(agent.buffer), i_epoch
                break
    raise RuntimeError("no rollout")


def _build(seed, bug=None):
    torch.manual_seed(seed)
    agent = PPO(torch.Generator().manual_seed(seed), bug)
    rollout, i_epoch = collect(agent, seed)

    state = torch.tensor(np.array([t.state for t in rollout]), dtype=torch.float)
    action = torch.tensor([t.action for t in rollout], dtype=torch.long).view(-1, 1)
    old_prob = torch.tensor([t.a_log_prob for t in rollout], dtype=torch.float).view(-1, 1)
    Gt = agent.returns([t.reward for t in rollout]).view(-1, 1)
    with torch.no_grad():
        advantage = Gt - agent.critic_net(state)
    batch = (state, (action, old_prob, advantage))

    def loss_fn(probs, targets):
        action, old_prob, advantage = targets
        return agent.surrogate(probs.gather(1, action), old_prob, advantage)

    def train_step():
        agent.buffer[:] = rollout
        return agent.update(i_epoch)

    return Program(name="sweetice_ppo", model=agent.actor_net, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.actor_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the discounted returns are appended while walking the rewards backwards (``append`` for ``insert(0, ...)``):
    # the first transition gets the last step's return, advantages and value targets are reversed in time (classic).
    Bug("returns_appended_reversed", functools.partial(_build, bug="returns_appended_reversed"), "learning_ledger",
        ("TASK",)),
    # the stored field is named ``a_log_prob`` but holds a probability; reading it as a log-probability,
    # ``ratio = exp(new_prob - old_prob)`` replaces ``new_prob / old_prob`` (classic: the name misleads; the
    # surrogate no longer is the importance ratio).
    Bug("ratio_of_probs_as_log_probs", functools.partial(_build, bug="ratio_of_probs_as_log_probs"),
        "learning_ledger", ("OBJECTIVE",)),
    # the actor's Adam is built over ``critic_net.parameters()`` (classic copy-paste slip): the policy never moves.
    Bug("actor_optimizer_over_critic", functools.partial(_build, bug="actor_optimizer_over_critic"),
        "four_structures", ("fc1.weight",)),
]

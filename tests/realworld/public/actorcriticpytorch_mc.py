# ruff: noqa: PLR0402, UP008
"""Monte-Carlo actor-critic (shared body, policy and value heads, whole-episode update) from Actor-Critic-PyTorch.

Source: https://github.com/nikhilbarhate99/Actor-Critic-PyTorch, commit 01c833e83006be5762151a29f0719cc9c03c204d,
files ``model.py`` (ActorCritic, ``calculateLoss``, ``clearMemory``) and ``train.py`` (the loop).
License: BSD-3-Clause (Copyright (c) 2018, no holder named; the author is Nikhil Barhate; full text in
LICENSES/nikhilbarhate99-Actor-Critic-PyTorch.txt).

Kept as written: ``ActorCritic`` (``affine`` -> ReLU, ``action_layer`` with ``F.softmax`` and a ``Categorical``,
``value_layer``; the ``logprobs`` / ``state_values`` / ``rewards`` lists), ``calculateLoss`` (discounted rewards
built backwards with ``insert(0, ...)``, normalized by mean and std, per-step ``-logprob * advantage`` with
``advantage = reward - value.item()`` plus ``F.smooth_l1_loss(value, reward)``, summed), ``clearMemory``; train.py's
hyperparameters (gamma 0.99, lr 0.02, betas (0.9, 0.999), Adam over ``policy.parameters()``) and its update
(``zero_grad``, ``calculateLoss``, ``backward``, ``step``, ``clearMemory``) after every episode.

Deviations:
- gym's LunarLander-v2 (Box2D, not installable here) is replaced by the cart-pole written out in ``_cartpole.py``
  (seeded); the environment is the synthetic data. The layer sizes follow the environment: ``affine`` 8 -> 128
  becomes 4 -> 128 and ``action_layer`` 128 -> 4 becomes 128 -> 2 (the hidden width 128 is kept).
- train.py's endless episode loop is not run. One episode is played at build time with the initial policy
  (``forward`` as written, sampling from the seeded global torch generator), its states, actions and rewards are
  kept, and ``train_step`` replays the loop's update on that episode: the rewards go into ``policy.rewards``, each
  recorded state is passed through the policy with its recorded action, then the update as written. Replaying
  one episode makes the step repeatable.
- ``forward(state, action=None)``: with no action it runs as written (sample, append, ``action.item()``); given the
  recorded action(s) it returns ``(log_prob, state_value)`` of those actions without appending (``train_step``
  appends them as ``forward`` does), so the policy can also be called on the whole episode as a batch. The implicit
  softmax dimension of ``F.softmax(...)`` is written out (``dim=-1``: the same dimension for one state, the action
  dimension for a batch).
- the loop's printing, running reward, rendering, checkpoint saving and ``test()`` are dropped.
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
from torch.distributions import Categorical

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

# train.py's defaults
gamma = 0.99
lr = 0.02
betas = (0.9, 0.999)
OBS, ACTIONS = 4, 2  # LunarLander-v2: 8, 4


class ActorCritic(nn.Module):
    def __init__(self, bug=None):
        super(ActorCritic, self).__init__()
        self.affine = nn.Linear(OBS, 128)

        self.action_layer = nn.Linear(128, ACTIONS)
        self.value_layer = nn.Linear(128, 1)

        self.logprobs = []
        self.state_values = []
        self.rewards = []
        self.bug = bug

    def forward(self, state, action=None):
        if isinstance(state, np.ndarray):
            state = torch.from_numpy(state).float()
        state = F.relu(self.affine(state))

        state_value = self.value_layer(state)

        action_probs = F.softmax(self.action_layer(state), dim=-1)
        action_distribution = Categorical(action_probs)
        if action is not None:  # replaying a recorded episode
            return action_distribution.log_prob(action), state_value
        action = action_distribution.sample()

        self.logprobs.append(action_distribution.log_prob(action))
        self.state_values.append(state_value)

        return action.item()

    def calculateLoss(self, gamma=0.99):

        # calculating discounted rewards:
        rewards = []
        dis_reward = 0
        for reward in self.rewards[::-1]:
            dis_reward = reward + gamma * dis_reward
            if self.bug == "returns_not_reversed":
                rewards.append(dis_reward)
            else:
                rewards.insert(0, dis_reward)

        # normalizing the rewards:
        rewards = torch.tensor(rewards)
        rewards = (rewards - rewards.mean()) / (rewards.std())

        loss = 0
        for logprob, value, reward in zip(self.logprobs, self.state_values, rewards):
            if self.bug == "advantage_not_detached":
                advantage = reward - value
            else:
                advantage = reward - value.item()
            action_loss = -logprob * advantage
            value_loss = F.smooth_l1_loss(value, reward)
            loss += (action_loss + value_loss)
        return loss

    def clearMemory(self):
        del self.logprobs[:]
        del self.state_values[:]
        del self.rewards[:]


def play_episode(policy, seed):
    """train.py's inner loop with the initial policy: the episode's states, actions and rewards."""
    env = CartPole(seed)
    state, _ = env.reset()
    states, actions, rewards = [], [], []
    for _t in range(10000):
        states.append(state)
        with torch.no_grad():
            action = policy(state)
        actions.append(action)
        state, reward, done, truncated, _ = env.step(action)
        rewards.append(reward)
        if done or truncated:
            break
    policy.clearMemory()
    return np.stack(states), torch.tensor(actions), rewards


def _build(seed, bug=None):
    torch.manual_seed(seed)
    policy = ActorCritic(bug)
    optimizer = optim.Adam(policy.parameters(), lr=lr, betas=betas)
    states, actions, episode_rewards = play_episode(policy, seed)

    returns = []
    dis_reward = 0
    for reward in episode_rewards[::-1]:
        dis_reward = reward + gamma * dis_reward
        returns.insert(0, dis_reward)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std())
    batch = ({"state": torch.from_numpy(states).float(), "action": actions}, returns)

    def loss_fn(outputs, targets):
        logprobs, values = outputs
        values = values.squeeze(-1)
        advantage = targets - (values if bug == "advantage_not_detached" else values.detach())
        return (-logprobs * advantage).sum() + F.smooth_l1_loss(values, targets, reduction="sum")

    def train_step():
        policy.rewards.extend(episode_rewards)
        for state, action in zip(states, actions):
            logprob, state_value = policy(state, action)
            policy.logprobs.append(logprob)
            policy.state_values.append(state_value)

        # Updating the policy :
        optimizer.zero_grad()
        loss = policy.calculateLoss(gamma)
        loss.backward()
        optimizer.step()
        policy.clearMemory()
        return loss

    return Program(name="actorcriticpytorch_mc", model=policy, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # advantage = reward - value without .item(): the policy term's gradient flows into the critic, which is pushed
    # by -logprob * (reward - value) as well as fitted by its own smooth L1 term (classic actor-critic slip).
    Bug("advantage_not_detached", functools.partial(_build, bug="advantage_not_detached"), "learning_ledger",
        ("OBJECTIVE",)),
    # the discounted rewards appended instead of inserted at the front: computed from the last step backwards, the
    # returns come out in reverse time order and each step is credited with another step's return (classic).
    Bug("returns_not_reversed", functools.partial(_build, bug="returns_not_reversed"), "learning_ledger", ("TASK",)),
]

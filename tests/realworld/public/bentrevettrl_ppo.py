# ruff: noqa: F841, PLR0402, RUF059
"""PPO on CartPole from bentrevett/pytorch-rl (notebook 5): separate actor and critic MLPs (with dropout) in an
``ActorCritic`` module, one episode collected per update, normalized discounted returns, normalized advantages
``returns - values``, five PPO epochs over the episode with the clipped surrogate (summed) and a smooth-L1 value
loss, both backpropagated into one Adam over the whole policy; a greedy evaluation episode after each update.

Source: https://github.com/bentrevett/pytorch-rl
Commit: 7f43f3df8042e687daaad728b07b7e35d4e27415
Files: ``5 - Proximal Policy Optimization (PPO) [CartPole].ipynb``
License: MIT (Copyright (c) 2019 Ben Trevett; full text in LICENSES/bentrevett-pytorch-rl.txt)
Domain: RL, policy gradient (PPO-Clip with a learned baseline, one episode a batch)

Kept as written: ``MLP`` (fc -> dropout 0.5 -> relu -> fc, hidden 128), ``ActorCritic``, ``init_weights``
(Xavier normal, zero bias), Adam lr 0.01, ``train`` (``policy.train()``, the episode loop with the state appended
before ``env.step``, ``Categorical`` sampling), ``calculate_returns`` and ``calculate_advantages`` (both
normalized), ``update_policy`` (detached advantages, old log-probabilities and actions; ratio, clip 0.2, ``-min``
summed, ``smooth_l1_loss(returns, value_pred)``, one ``zero_grad``, two ``backward`` calls, one ``step``; 5 PPO
steps), ``evaluate`` (``policy.eval()``, greedy actions), and the loop body over episodes (``train`` then
``evaluate``); discount 0.99.

Deviations from the original:
- gym's CartPole-v1 (train and test environments) is replaced by the cart-pole of ``_cartpole.py`` (CartPole-v1's
  equations, constants and 500-step limit) wrapped to gym < 0.26's interface the notebook calls (``reset`` returns
  the state, ``step`` four values, ``done`` true at a fall or at the time limit); seeded from ``seed``;
- ``train_step`` is one pass of the loop over episodes (``train`` then ``evaluate``; the reward bookkeeping and
  printing are dropped) and returns ``value_loss`` as ``train`` returns it (the mean over the PPO steps);
- the Program declares the whole policy with the critic's smooth-L1 loss on the states and normalized returns of
  one episode played at build time with the initial policy (the actor trains inside the same step as written);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.distributions as distributions
import torch.nn.functional as F
from torch import nn, optim

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole


class GymCartPole:
    """(port) gym < 0.26's CartPole-v1 interface over the helper."""

    def __init__(self, seed):
        self.env = CartPole(seed)

    def reset(self):
        return self.env.reset()[0]

    def step(self, action):
        s, r, done, truncated, info = self.env.step(int(action))
        return s, r, done or truncated, info


class MLP(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, dropout = 0.5):
        super().__init__()

        self.fc_1 = nn.Linear(input_dim, hidden_dim)
        self.fc_2 = nn.Linear(hidden_dim, output_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.fc_1(x)
        x = self.dropout(x)
        x = F.relu(x)
        x = self.fc_2(x)
        return x


class ActorCritic(nn.Module):
    def __init__(self, actor, critic):
        super().__init__()

        self.actor = actor
        self.critic = critic

    def forward(self, state):

        action_pred = self.actor(state)
        value_pred = self.critic(state)

        return action_pred, value_pred


def init_weights(m):
    if type(m) == nn.Linear:
        torch.nn.init.xavier_normal_(m.weight)
        m.bias.data.fill_(0)


def train(env, policy, optimizer, discount_factor, ppo_steps, ppo_clip, bug=None):

    if bug != "train_mode_not_restored":
        policy.train()

    states = []
    actions = []
    log_prob_actions = []
    values = []
    rewards = []
    done = False
    episode_reward = 0

    state = env.reset()

    while not done:

        state = torch.FloatTensor(state).unsqueeze(0)

        #append state here, not after we get the next state from env.step()
        states.append(state)

        action_pred, value_pred = policy(state)

        action_prob = F.softmax(action_pred, dim = -1)

        dist = distributions.Categorical(action_prob)

        action = dist.sample()

        log_prob_action = dist.log_prob(action)

        state, reward, done, _ = env.step(action.item())

        actions.append(action)
        log_prob_actions.append(log_prob_action)
        values.append(value_pred)
        rewards.append(reward)

        episode_reward += reward

    states = torch.cat(states)
    actions = torch.cat(actions)
    log_prob_actions = torch.cat(log_prob_actions)
    values = torch.cat(values).squeeze(-1)

    returns = calculate_returns(rewards, discount_factor, bug=bug)
    advantages = calculate_advantages(returns, values)

    policy_loss, value_loss = update_policy(policy, states, actions, log_prob_actions, advantages, returns, optimizer,
                                            ppo_steps, ppo_clip, bug=bug)

    return policy_loss, value_loss, episode_reward


def calculate_returns(rewards, discount_factor, normalize = True, bug=None):

    returns = []
    R = 0

    for r in reversed(rewards):
        R = r + R * discount_factor
        if bug == "returns_not_reversed":
            returns.append(R)
        else:
            returns.insert(0, R)

    returns = torch.tensor(returns)

    if normalize:
        returns = (returns - returns.mean()) / returns.std()

    return returns


def calculate_advantages(returns, values, normalize = True):

    advantages = returns - values

    if normalize:

        advantages = (advantages - advantages.mean()) / advantages.std()

    return advantages


def update_policy(policy, states, actions, log_prob_actions, advantages, returns, optimizer, ppo_steps, ppo_clip,
                  bug=None):

    total_policy_loss = 0
    total_value_loss = 0

    advantages = advantages.detach()
    log_prob_actions = log_prob_actions.detach()
    actions = actions.detach()

    for _ in range(ppo_steps):

        #get new log prob of actions for all input states
        action_pred, value_pred = policy(states)
        if bug != "value_not_squeezed":
            value_pred = value_pred.squeeze(-1)
        action_prob = F.softmax(action_pred, dim = -1)
        dist = distributions.Categorical(action_prob)

        #new log prob using old actions
        new_log_prob_actions = dist.log_prob(actions)

        policy_ratio = (new_log_prob_actions - log_prob_actions).exp()

        policy_loss_1 = policy_ratio * advantages
        policy_loss_2 = torch.clamp(policy_ratio, min = 1.0 - ppo_clip, max = 1.0 + ppo_clip) * advantages

        policy_loss = - torch.min(policy_loss_1, policy_loss_2).sum()

        value_loss = F.smooth_l1_loss(returns, value_pred).sum()

        optimizer.zero_grad()

        policy_loss.backward()
        value_loss.backward()

        optimizer.step()

        total_policy_loss += policy_loss.item()
        total_value_loss += value_loss.item()

    return total_policy_loss / ppo_steps, total_value_loss / ppo_steps


def evaluate(env, policy):

    policy.eval()

    rewards = []
    done = False
    episode_reward = 0

    state = env.reset()

    while not done:

        state = torch.FloatTensor(state).unsqueeze(0)

        with torch.no_grad():

            action_pred, _ = policy(state)

            action_prob = F.softmax(action_pred, dim = -1)

        action = torch.argmax(action_prob, dim = -1)

        state, reward, done, _ = env.step(action.item())

        episode_reward += reward

    return episode_reward


def _episode_batch(policy, env, discount_factor):
    """(port) States and normalized returns of one episode played with the initial policy, for the Program."""
    states, rewards, state, done = [], [], env.reset(), False
    with torch.no_grad():
        while not done:
            states.append(torch.FloatTensor(state).unsqueeze(0))
            action = distributions.Categorical(F.softmax(policy(states[-1])[0], dim=-1)).sample()
            state, reward, done, _ = env.step(action.item())
            rewards.append(reward)
    return torch.cat(states), calculate_returns(rewards, discount_factor)


def _build(seed, bug=None):
    train_env = GymCartPole(seed)
    test_env = GymCartPole(seed + 1)
    np.random.seed(seed)
    torch.manual_seed(seed)

    INPUT_DIM = 4  # train_env.observation_space.shape[0]
    HIDDEN_DIM = 128
    OUTPUT_DIM = 2  # train_env.action_space.n

    actor = MLP(INPUT_DIM, HIDDEN_DIM, OUTPUT_DIM)
    critic = MLP(INPUT_DIM, HIDDEN_DIM, 1)

    policy = ActorCritic(actor, critic)
    policy.apply(init_weights)

    LEARNING_RATE = 0.01

    optimizer = optim.Adam(policy.parameters(), lr = LEARNING_RATE)

    DISCOUNT_FACTOR = 0.99
    PPO_STEPS = 5
    PPO_CLIP = 0.2

    states, returns = _episode_batch(policy, GymCartPole(seed + 1000), DISCOUNT_FACTOR)

    def train_step():
        policy_loss, value_loss, train_reward = train(train_env, policy, optimizer, DISCOUNT_FACTOR, PPO_STEPS,
                                                      PPO_CLIP, bug=bug)
        evaluate(test_env, policy)
        return value_loss

    def loss_fn(out, returns):
        return F.smooth_l1_loss(returns, out[1].squeeze(-1)).sum()

    return Program(name="bentrevettrl_ppo", model=policy, batch=(states, returns), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the discounted returns appended instead of inserted at the front, so the return of the episode's
    # last step goes with its first state (returns reversed against states, values and actions).
    Bug("returns_not_reversed", functools.partial(_build, bug="returns_not_reversed"), "learning_ledger", ("TASK",)),
    # classic: policy.train() left out of train, so after the first evaluate() the policy trains in eval mode with
    # its dropout off.
    Bug("train_mode_not_restored", functools.partial(_build, bug="train_mode_not_restored"), "step_probe",
        ("dropout",)),
    # classic broadcast slip: value_pred left [T, 1] against returns [T], so smooth_l1_loss broadcasts to [T, T] and
    # every value is fitted to the mean return (the shape slip of
    # https://github.com/RITCHIEHuang/DeepRL_Algorithms/issues/13).
    Bug("value_not_squeezed", functools.partial(_build, bug="value_not_squeezed"), "learning_ledger",
        ("OBJECTIVE",)),
]

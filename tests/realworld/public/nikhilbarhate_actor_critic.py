# ruff: noqa: UP008, PLR0402
"""Monte-Carlo actor-critic from nikhilbarhate99/Actor-Critic (``train.py``, ``model.py``): one shared hidden layer
with a softmax action head and a value head; the policy samples an action per step and stores its log-probability
and the state's value; at the end of every episode ``calculateLoss`` computes discounted returns, normalizes them,
and sums over the episode ``-log_prob * (return - value.item())`` plus ``smooth_l1_loss(value, return)``; one Adam
step per episode (lr 0.02, betas (0.9, 0.999)), then the memory is cleared.

Source: https://github.com/nikhilbarhate99/Actor-Critic
Commit: 01c833e83006be5762151a29f0719cc9c03c204d
Files: ``model.py`` (``ActorCritic``: ``forward``, ``calculateLoss``, ``clearMemory``), ``train.py`` (``train``)
License: BSD-3-Clause (full text in LICENSES/nikhilbarhate99-Actor-Critic.txt)
Domain: RL, on-policy actor-critic (Monte-Carlo returns, normalized, shared trunk, one update per episode)

Kept as written: ``ActorCritic`` (``affine`` 128 hidden units with ReLU, ``action_layer`` with ``F.softmax`` and a
``Categorical`` sample, ``value_layer``; the per-step lists ``logprobs``, ``state_values``, ``rewards``),
``calculateLoss`` (returns accumulated backwards and inserted at the front, normalized by mean and std, the
advantage from ``value.item()``, the smooth L1 value loss, the summed loss), ``clearMemory``, and ``train``'s loop
body (gamma 0.99, lr 0.02, betas (0.9, 0.999), an episode of at most 10000 steps, ``zero_grad``, ``calculateLoss``,
``backward``, ``step``, ``clearMemory``).

Deviations from the original:
- gym's LunarLander-v2 (Box2D) is not here: the cart-pole written out in numpy in ``_cartpole.py`` is the
  environment (the synthetic data, seeded from ``seed``), so ``affine`` takes 4 inputs instead of 8 and
  ``action_layer`` gives 2 actions instead of 4; its gym >= 0.26 ``reset``/``step`` signatures are unpacked where
  the original unpacks gym < 0.26's (``done or truncated`` ends the episode);
- ``random_seed`` 543 is the build's ``seed``; ``F.softmax`` gets ``dim=-1`` (the implicit-dim call warns; on the
  1-d logits it is the same axis);
- one ``train_step`` is one episode and its update (the loop body of ``for i_episode``), returning the loss; the
  running-reward printing, the model saving and the ``test`` call when solved are dropped; the loss summed over an
  episode is noisy at lr 0.02, so the module's self-check runs 25 episodes (``SELF_CHECK_STEPS``);
- the Program declares ``ValuePath`` (the policy's shared ``affine`` layer and ``value_layer`` on a batch of states,
  since ``forward`` takes one numpy state and returns an int) and a batch of states with their normalized returns
  collected at build time with the initial policy; ``loss_fn`` is the value head's smooth L1 on them; the
  optimizer is the original's, over every parameter of the ``ActorCritic``;
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

SELF_CHECK_STEPS = 25  # (port) the summed episode loss is noisy at lr 0.02; 25 episodes span its first fall
OBS_DIM, N_ACTIONS = 4, 2  # (port) cart-pole instead of LunarLander's 8 and 4


# model.py
class ActorCritic(nn.Module):
    def __init__(self, bug=None):
        super(ActorCritic, self).__init__()
        self.affine = nn.Linear(OBS_DIM, 128)

        self.action_layer = nn.Linear(128, N_ACTIONS)
        self.value_layer = nn.Linear(128, 1)

        self.logprobs = []
        self.state_values = []
        self.rewards = []
        self.bug = bug

    def forward(self, state):
        state = torch.from_numpy(state).float()
        state = F.relu(self.affine(state))

        state_value = self.value_layer(state)

        action_probs = F.softmax(self.action_layer(state), dim=-1)
        action_distribution = Categorical(action_probs)
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
            if self.bug == "returns_appended_not_prepended":
                rewards.append(dis_reward)
            else:
                rewards.insert(0, dis_reward)

        # normalizing the rewards:
        rewards = torch.tensor(rewards)
        rewards = (rewards - rewards.mean()) / (rewards.std())

        loss = 0
        for logprob, value, reward in zip(self.logprobs, self.state_values, rewards):
            if self.bug == "advantage_not_detached":
                advantage = reward - value.squeeze(-1)
            else:
                advantage = reward  - value.item()
            action_loss = -logprob * advantage
            value_loss = F.smooth_l1_loss(value, reward)
            loss += (action_loss + value_loss)
        return loss

    def clearMemory(self):
        del self.logprobs[:]
        del self.state_values[:]
        del self.rewards[:]


class ValuePath(nn.Module):
    """(port) The policy's value path on a batch of states (``forward`` takes one numpy state and returns an int)."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, states):
        return self.policy.value_layer(F.relu(self.policy.affine(states)))


def _value_batch(policy, env, gamma, n=256):
    """(port) States visited by the initial policy and their normalized discounted returns, per episode."""
    states, targets = [], []
    with torch.no_grad():
        while len(states) < n:
            state, _ = env.reset()
            ep_states, ep_rewards = [], []
            for _t in range(10000):
                probs = F.softmax(policy.action_layer(F.relu(policy.affine(torch.from_numpy(state)))), dim=-1)
                action = int(Categorical(probs).sample())
                ep_states.append(state)
                state, reward, done, truncated, _ = env.step(action)
                ep_rewards.append(reward)
                if done or truncated:
                    break
            ret, rets = 0.0, []
            for r in ep_rewards[::-1]:
                ret = r + gamma * ret
                rets.insert(0, ret)
            rets = torch.tensor(rets)
            states += ep_states
            targets.append((rets - rets.mean()) / rets.std())
    return torch.tensor(np.array(states[:n])), torch.cat(targets)[:n].unsqueeze(1)


def _build(seed, bug=None):
    gamma = 0.99
    lr = 0.02
    betas = (0.9, 0.999)
    random_seed = seed  # (port) 543 in train.py

    torch.manual_seed(random_seed)

    env = CartPole(random_seed)  # (port) gym.make('LunarLander-v2'); env.seed(random_seed)

    policy = ActorCritic(bug=bug)
    optimizer = optim.Adam(policy.parameters(), lr=lr, betas=betas)
    batch = _value_batch(policy, CartPole(seed + 1000), gamma)

    def train_step():
        state, _ = env.reset()
        for _t in range(10000):
            action = policy(state)
            state, reward, done, truncated, _ = env.step(action)
            policy.rewards.append(reward)
            if done or truncated:
                break

        # Updating the policy :
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        loss = policy.calculateLoss(gamma)
        loss.backward()
        optimizer.step()
        policy.clearMemory()
        return loss.item()

    def loss_fn(out, target):
        return F.smooth_l1_loss(out, target)

    return Program(name="nikhilbarhate_actor_critic", model=ValuePath(policy), batch=batch, loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the discounted return appended instead of inserted at the front, so the returns run in reverse time
    # order against the stored log-probabilities and values (each step is credited with another step's return).
    Bug("returns_appended_not_prepended", functools.partial(_build, bug="returns_appended_not_prepended"),
        "learning_ledger", ("TASK",)),
    # classic: the advantage keeps the value's graph (``value`` for ``value.item()``), so the policy-gradient term
    # also pushes the shared trunk and the value head, towards values that make the sampled actions' terms small.
    Bug("advantage_not_detached", functools.partial(_build, bug="advantage_not_detached"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: optimizer.zero_grad() left out of the episode loop, every update adds all earlier episodes' gradients.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]

# ruff: noqa: PLR0402, UP008
"""PPO with a clipped objective, Monte-Carlo returns and separate actor/critic networks, from PPO-PyTorch.

Source: https://github.com/nikhilbarhate99/PPO-PyTorch, commit 728cce83d7ab628fe2634eabcdf3239997eb81dd,
files ``PPO.py`` (RolloutBuffer, ActorCritic, PPO) and ``train.py`` (the loop), with the CartPole-v1 hyperparameters
of ``PPO_preTrained/README.md``. License: MIT (Copyright (c) 2018 Nikhil Barhate; full text in
LICENSES/nikhilbarhate99-PPO-PyTorch.txt).

Kept as written: ``RolloutBuffer``; ``ActorCritic`` (actor 4-64-64-2 Tanh + Softmax, critic 4-64-64-1, ``act``,
``evaluate``; the continuous branch is kept but unused); ``PPO`` (Adam with two param groups lr_actor 0.0003 /
lr_critic 0.001, ``policy_old`` loaded from ``policy``, ``MSELoss``, ``select_action``, ``update``: discounted returns
reset at terminals, normalized, advantages from the buffer's state values, the clipped surrogate
``-min(surr1, surr2) + 0.5 * MSE - 0.01 * entropy``, then the ``policy_old`` sync and the buffer clear);
eps_clip 0.2, gamma 0.99; train.py's loop body (``select_action``, rewards and terminals into the buffer,
``update()`` every ``update_timestep`` steps).

Deviations:
- gym's CartPole-v1 is replaced by the cart-pole written out in ``_cartpole.py`` (same equations and constants,
  seeded); the environment is the synthetic data.
- sizes for 2 CPU cores: max_ep_len 400 -> 32, so update_timestep (max_ep_len * 4) 1600 -> 128; K_epochs 40 -> 10.
- the device banner printed at import and the logging/checkpoint/plot code of train.py are dropped (device: cpu);
  ``env.step`` returns five values (gym >= 0.26), unpacked as https://github.com/nikhilbarhate99/PPO-PyTorch/issues/64
  proposes (train.py unpacks four).
- the training loop runs once at build time, collecting ``update_timestep`` transitions into the buffer with
  ``policy_old``; ``train_step`` refills the buffer with that rollout and calls ``update()`` (one PPO update of
  K_epochs optimizer steps), so the step can be replayed.
- ``ActorCritic.forward(state, action)`` is added (the original raises NotImplementedError): it returns
  ``evaluate(state, action)`` so the policy can be called on a batch; ``loss_fn`` recomputes ``update()``'s loss
  from its outputs and the buffer's old log-probabilities, returns and advantages.
- ``update()`` returns its last ``loss.mean()`` (the original returns nothing); its first lines (the discounted,
  normalized returns) are moved unchanged into ``discounted_returns`` so the batch can be built the same way.
- methods this run never calls (``set_action_std``, ``decay_action_std``, ``save``, ``load``) are left out.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import torch
import torch.nn as nn
from torch.distributions import Categorical, MultivariateNormal

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _cartpole import CartPole

device = torch.device('cpu')

# CartPole-v1 (PPO_preTrained/README.md), sizes scaled down
max_ep_len = 32
update_timestep = max_ep_len * 4
K_epochs = 10
eps_clip = 0.2
gamma = 0.99
lr_actor = 0.0003
lr_critic = 0.001


################################## PPO Policy ##################################
class RolloutBuffer:
    def __init__(self):
        self.actions = []
        self.states = []
        self.logprobs = []
        self.rewards = []
        self.state_values = []
        self.is_terminals = []

    def clear(self):
        del self.actions[:]
        del self.states[:]
        del self.logprobs[:]
        del self.rewards[:]
        del self.state_values[:]
        del self.is_terminals[:]


class ActorCritic(nn.Module):
    def __init__(self, state_dim, action_dim, has_continuous_action_space, action_std_init):
        super(ActorCritic, self).__init__()

        self.has_continuous_action_space = has_continuous_action_space

        if has_continuous_action_space:
            self.action_dim = action_dim
            self.action_var = torch.full((action_dim,), action_std_init * action_std_init).to(device)
        # actor
        if has_continuous_action_space :
            self.actor = nn.Sequential(
                            nn.Linear(state_dim, 64),
                            nn.Tanh(),
                            nn.Linear(64, 64),
                            nn.Tanh(),
                            nn.Linear(64, action_dim),
                            nn.Tanh()
                        )
        else:
            self.actor = nn.Sequential(
                            nn.Linear(state_dim, 64),
                            nn.Tanh(),
                            nn.Linear(64, 64),
                            nn.Tanh(),
                            nn.Linear(64, action_dim),
                            nn.Softmax(dim=-1)
                        )
        # critic
        self.critic = nn.Sequential(
                        nn.Linear(state_dim, 64),
                        nn.Tanh(),
                        nn.Linear(64, 64),
                        nn.Tanh(),
                        nn.Linear(64, 1)
                    )

    def forward(self, state, action):
        return self.evaluate(state, action)

    def act(self, state):

        if self.has_continuous_action_space:
            action_mean = self.actor(state)
            cov_mat = torch.diag(self.action_var).unsqueeze(dim=0)
            dist = MultivariateNormal(action_mean, cov_mat)
        else:
            action_probs = self.actor(state)
            dist = Categorical(action_probs)

        action = dist.sample()
        action_logprob = dist.log_prob(action)
        state_val = self.critic(state)

        return action.detach(), action_logprob.detach(), state_val.detach()

    def evaluate(self, state, action):

        if self.has_continuous_action_space:
            action_mean = self.actor(state)

            action_var = self.action_var.expand_as(action_mean)
            cov_mat = torch.diag_embed(action_var).to(device)
            dist = MultivariateNormal(action_mean, cov_mat)

            # For Single Action Environments.
            if self.action_dim == 1:
                action = action.reshape(-1, self.action_dim)
        else:
            action_probs = self.actor(state)
            dist = Categorical(action_probs)
        action_logprobs = dist.log_prob(action)
        dist_entropy = dist.entropy()
        state_values = self.critic(state)

        return action_logprobs, state_values, dist_entropy


def discounted_returns(buffer, gamma, bug=None):
    """update()'s Monte-Carlo estimate of returns, normalized."""
    rewards = []
    discounted_reward = 0
    for reward, is_terminal in zip(reversed(buffer.rewards), reversed(buffer.is_terminals)):
        if is_terminal and bug != "reward_leak":
            discounted_reward = 0
        discounted_reward = reward + (gamma * discounted_reward)
        rewards.insert(0, discounted_reward)

    # Normalizing the rewards
    rewards = torch.tensor(rewards, dtype=torch.float32).to(device)
    rewards = (rewards - rewards.mean()) / (rewards.std() + 1e-7)
    return rewards


class PPO:
    def __init__(self, state_dim, action_dim, lr_actor, lr_critic, gamma, K_epochs, eps_clip, has_continuous_action_space,
                 action_std_init=0.6, bug=None):

        self.has_continuous_action_space = has_continuous_action_space

        if has_continuous_action_space:
            self.action_std = action_std_init

        self.gamma = gamma
        self.eps_clip = eps_clip
        self.K_epochs = K_epochs
        self.bug = bug

        self.buffer = RolloutBuffer()

        self.policy = ActorCritic(state_dim, action_dim, has_continuous_action_space, action_std_init).to(device)
        self.optimizer = torch.optim.Adam([
                        {'params': self.policy.actor.parameters(), 'lr': lr_actor},
                        {'params': self.policy.critic.parameters(), 'lr': lr_critic}
                    ])

        self.policy_old = ActorCritic(state_dim, action_dim, has_continuous_action_space, action_std_init).to(device)
        self.policy_old.load_state_dict(self.policy.state_dict())

        self.MseLoss = nn.MSELoss()

    def select_action(self, state):

        if self.has_continuous_action_space:
            with torch.no_grad():
                state = torch.FloatTensor(state).to(device)
                action, action_logprob, state_val = self.policy_old.act(state)

            self.buffer.states.append(state)
            self.buffer.actions.append(action)
            self.buffer.logprobs.append(action_logprob)
            self.buffer.state_values.append(state_val)

            return action.detach().cpu().numpy().flatten()
        else:
            with torch.no_grad():
                state = torch.FloatTensor(state).to(device)
                action, action_logprob, state_val = self.policy_old.act(state)

            self.buffer.states.append(state)
            self.buffer.actions.append(action)
            self.buffer.logprobs.append(action_logprob)
            self.buffer.state_values.append(state_val)

            return action.item()

    def update(self):
        # Monte Carlo estimate of returns
        rewards = discounted_returns(self.buffer, self.gamma, self.bug)

        # convert list to tensor
        old_states = torch.squeeze(torch.stack(self.buffer.states, dim=0)).detach().to(device)
        old_actions = torch.squeeze(torch.stack(self.buffer.actions, dim=0)).detach().to(device)
        old_logprobs = torch.squeeze(torch.stack(self.buffer.logprobs, dim=0)).detach().to(device)
        old_state_values = torch.squeeze(torch.stack(self.buffer.state_values, dim=0)).detach().to(device)

        # calculate advantages
        advantages = rewards.detach() - old_state_values.detach()

        # Optimize policy for K epochs
        for _ in range(self.K_epochs):

            # Evaluating old actions and values
            logprobs, state_values, dist_entropy = self.policy.evaluate(old_states, old_actions)

            # match state_values tensor dimensions with rewards tensor
            state_values = torch.squeeze(state_values)
            if self.bug == "critic_on_buffer_values":
                state_values = old_state_values

            # Finding the ratio (pi_theta / pi_theta__old)
            ratios = torch.exp(logprobs - old_logprobs.detach())

            # Finding Surrogate Loss
            surr1 = ratios * advantages
            surr2 = torch.clamp(ratios, 1-self.eps_clip, 1+self.eps_clip) * advantages

            # final loss of clipped objective PPO
            loss = -torch.min(surr1, surr2) + 0.5 * self.MseLoss(state_values, rewards) - 0.01 * dist_entropy

            # take gradient step
            self.optimizer.zero_grad()
            loss.mean().backward()
            self.optimizer.step()

        # Copy new weights into old policy
        self.policy_old.load_state_dict(self.policy.state_dict())

        # clear buffer
        self.buffer.clear()
        return loss.mean()


def collect(ppo_agent, seed):
    """train.py's loop until the first update: episodes of at most max_ep_len steps, update_timestep steps in all."""
    env = CartPole(seed)
    time_step = 0
    while time_step < update_timestep:
        state, _ = env.reset()
        for t in range(1, max_ep_len + 1):
            action = ppo_agent.select_action(state)
            state, reward, done, _, _ = env.step(action)
            ppo_agent.buffer.rewards.append(reward)
            ppo_agent.buffer.is_terminals.append(done)
            time_step += 1
            if done or time_step == update_timestep:
                break


def _build(seed, bug=None):
    torch.manual_seed(seed)
    ppo_agent = PPO(4, 2, lr_actor, lr_critic, gamma, K_epochs, eps_clip, False, bug=bug)
    collect(ppo_agent, seed)
    buf = ppo_agent.buffer
    saved = {k: list(getattr(buf, k)) for k in ("actions", "states", "logprobs", "rewards", "state_values", "is_terminals")}

    rewards = discounted_returns(buf, gamma, bug)
    old_states = torch.squeeze(torch.stack(buf.states, dim=0)).detach()
    old_actions = torch.squeeze(torch.stack(buf.actions, dim=0)).detach()
    old_logprobs = torch.squeeze(torch.stack(buf.logprobs, dim=0)).detach()
    old_state_values = torch.squeeze(torch.stack(buf.state_values, dim=0)).detach()
    advantages = rewards.detach() - old_state_values.detach()
    batch = ({"state": old_states, "action": old_actions}, (old_logprobs, rewards, advantages))
    mse = nn.MSELoss()

    def loss_fn(outputs, targets):
        logprobs, state_values, dist_entropy = outputs
        old_logprobs, rewards, advantages = targets
        state_values = torch.squeeze(state_values)
        if bug == "critic_on_buffer_values":
            state_values = old_state_values
        ratios = torch.exp(logprobs - old_logprobs.detach())
        surr1 = ratios * advantages
        surr2 = torch.clamp(ratios, 1 - eps_clip, 1 + eps_clip) * advantages
        loss = -torch.min(surr1, surr2) + 0.5 * mse(state_values, rewards) - 0.01 * dist_entropy
        return loss.mean()

    def train_step():
        for k, v in saved.items():
            getattr(ppo_agent.buffer, k).extend(v)
        return ppo_agent.update()

    return Program(name="ppopytorch_ppo", model=ppo_agent.policy, batch=batch, loss_fn=loss_fn,
                   optimizer=ppo_agent.optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # returns leak across episodes: the discounted sum is not reset at terminal steps
    # (https://github.com/nikhilbarhate99/PPO-PyTorch/issues/8, fixed in fd5381d).
    Bug("reward_leak", functools.partial(_build, bug="reward_leak"), "learning_ledger", ("TASK",)),
    # the value loss is taken on the buffer's detached state values: the critic never trains, the symptom reported in
    # https://github.com/nikhilbarhate99/PPO-PyTorch/issues/35 ("the network critic values' weights never change").
    Bug("critic_on_buffer_values", functools.partial(_build, bug="critic_on_buffer_values"), "step_probe",
        ("critic.0.weight",)),
]

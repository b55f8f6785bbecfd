# ruff: noqa: UP004, UP008, PLR0402, RUF059
"""Soft Actor-Critic with automatic entropy tuning: a tanh-squashed Gaussian policy (reparameterized samples), twin
soft Q networks with a Polyak-averaged target, and a learned temperature ``alpha`` driven toward the target entropy
``-dim(A)``, trained off-policy from a replay memory on a continuous-control task.

Source: https://github.com/pranz24/pytorch-soft-actor-critic
Commit: c1805660b3961694be54079a355155a5cad492f5
Files: sac.py (SAC), model.py (weights_init_, QNetwork, GaussianPolicy), utils.py (soft_update, hard_update),
replay_memory.py (ReplayMemory), main.py (arguments, seeding, the training loop)
License: MIT (Copyright (c) 2018 Pranjal Tandon; full text in LICENSES/pranz24-pytorch-soft-actor-critic.txt)
Domain: RL, continuous actor-critic (SAC, automatic entropy tuning)

Kept as written: QNetwork (twin 256-256 heads, xavier init), GaussianPolicy (mean / clamped log-std heads,
``rsample``, tanh squashing with action scale and bias, the log-prob correction), SAC.__init__ and
``update_parameters`` (soft Bellman target with ``min(Q1', Q2') - alpha * log_pi'`` and the mask, summed MSE of both
heads, policy loss ``alpha * log_pi - min(Q1, Q2)``, the alpha loss on ``log_alpha``, ``alpha = log_alpha.exp()``,
``soft_update`` every ``target_update_interval``), ReplayMemory (``random.sample``), main.py's defaults (policy
Gaussian, gamma 0.99, tau 0.005, lr 3e-4, alpha 0.2, batch_size 256, hidden_size 256, updates_per_step 1,
target_update_interval 1) with ``--automatic_entropy_tuning True`` (one of the script's documented options), and its
loop body: random actions for ``start_steps``, ``select_action`` afterwards, updates once ``len(memory) >
batch_size``, ``mask = 1 if episode_steps == env._max_episode_steps else float(not done)``, ``memory.push``.

Deviations from the original:
- gym's MuJoCo HalfCheetah-v2 is replaced by the continuous-force cart-pole written out in numpy in
  ``_continuous_control.py`` (CartPole-v1's equations, force ``10 * a`` for ``a`` in [-1, 1], terminal states when the
  pole falls, 500-step time limit; gym < 0.26 interface).
- sizes for 2 CPU cores: start_steps 10000 -> 1000, num_steps 1000001 -> unbounded; ``train_step`` runs the loop
  body until it has made one ``update_parameters`` call (the steps before the first update, while ``len(memory) <=
  batch_size``, run at build time) and returns that update's ``critic_1_loss + critic_2_loss``.
- tensorboard (SummaryWriter), printing, the evaluation episodes every 10th episode and checkpointing are dropped; no
  GPU (``args.cuda`` False).
- ``action_space`` is the environment's ``Box`` (``shape``, ``high``, ``low``, ``sample``) instead of gym's.
- only the Gaussian policy is ported: the Deterministic branch of ``SAC.__init__`` raises, ``DeterministicPolicy``,
  ``ValueNetwork``, the checkpoint/buffer save-load methods and utils' unused helpers are left out.
- the loop yields once (None) at build time, after the push that brings the memory past ``batch_size``, so the
  build stops just before the first update.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import itertools
import pathlib
import random
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole

# ---------------------------------------------------------------- model.py
LOG_SIG_MAX = 2
LOG_SIG_MIN = -20
epsilon = 1e-6

# Initialize Policy weights
def weights_init_(m):
    if isinstance(m, nn.Linear):
        torch.nn.init.xavier_uniform_(m.weight, gain=1)
        torch.nn.init.constant_(m.bias, 0)


class QNetwork(nn.Module):
    def __init__(self, num_inputs, num_actions, hidden_dim):
        super(QNetwork, self).__init__()

        # Q1 architecture
        self.linear1 = nn.Linear(num_inputs + num_actions, hidden_dim)
        self.linear2 = nn.Linear(hidden_dim, hidden_dim)
        self.linear3 = nn.Linear(hidden_dim, 1)

        # Q2 architecture
        self.linear4 = nn.Linear(num_inputs + num_actions, hidden_dim)
        self.linear5 = nn.Linear(hidden_dim, hidden_dim)
        self.linear6 = nn.Linear(hidden_dim, 1)

        self.apply(weights_init_)

    def forward(self, state, action):
        xu = torch.cat([state, action], 1)

        x1 = F.relu(self.linear1(xu))
        x1 = F.relu(self.linear2(x1))
        x1 = self.linear3(x1)

        x2 = F.relu(self.linear4(xu))
        x2 = F.relu(self.linear5(x2))
        x2 = self.linear6(x2)

        return x1, x2


class GaussianPolicy(nn.Module):
    def __init__(self, num_inputs, num_actions, hidden_dim, action_space=None):
        super(GaussianPolicy, self).__init__()

        self.linear1 = nn.Linear(num_inputs, hidden_dim)
        self.linear2 = nn.Linear(hidden_dim, hidden_dim)

        self.mean_linear = nn.Linear(hidden_dim, num_actions)
        self.log_std_linear = nn.Linear(hidden_dim, num_actions)

        self.apply(weights_init_)

        # action rescaling
        if action_space is None:
            self.action_scale = torch.tensor(1.)
            self.action_bias = torch.tensor(0.)
        else:
            self.action_scale = torch.FloatTensor(
                (action_space.high - action_space.low) / 2.)
            self.action_bias = torch.FloatTensor(
                (action_space.high + action_space.low) / 2.)

    def forward(self, state):
        x = F.relu(self.linear1(state))
        x = F.relu(self.linear2(x))
        mean = self.mean_linear(x)
        log_std = self.log_std_linear(x)
        log_std = torch.clamp(log_std, min=LOG_SIG_MIN, max=LOG_SIG_MAX)
        return mean, log_std

    def sample(self, state):
        mean, log_std = self.forward(state)
        std = log_std.exp()
        normal = Normal(mean, std)
        x_t = normal.rsample()  # for reparameterization trick (mean + std * N(0,1))
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t)
        # Enforcing Action Bound
        log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + epsilon)
        log_prob = log_prob.sum(1, keepdim=True)
        mean = torch.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean

    def to(self, device):
        self.action_scale = self.action_scale.to(device)
        self.action_bias = self.action_bias.to(device)
        return super(GaussianPolicy, self).to(device)


# ---------------------------------------------------------------- utils.py
def soft_update(target, source, tau):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(target_param.data * (1.0 - tau) + param.data * tau)

def hard_update(target, source):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(param.data)


# ---------------------------------------------------------------- replay_memory.py
class ReplayMemory:
    def __init__(self, capacity, seed):
        random.seed(seed)
        self.capacity = capacity
        self.buffer = []
        self.position = 0

    def push(self, state, action, reward, next_state, done):
        if len(self.buffer) < self.capacity:
            self.buffer.append(None)
        self.buffer[self.position] = (state, action, reward, next_state, done)
        self.position = (self.position + 1) % self.capacity

    def sample(self, batch_size):
        batch = random.sample(self.buffer, batch_size)
        state, action, reward, next_state, done = map(np.stack, zip(*batch))
        return state, action, reward, next_state, done

    def __len__(self):
        return len(self.buffer)


# ---------------------------------------------------------------- sac.py
class SAC(object):
    def __init__(self, num_inputs, action_space, args):

        self.gamma = args.gamma
        self.tau = args.tau
        self.alpha = args.alpha

        self.policy_type = args.policy
        self.target_update_interval = args.target_update_interval
        self.automatic_entropy_tuning = args.automatic_entropy_tuning
        self.bug = args.bug

        self.device = torch.device("cuda" if args.cuda else "cpu")

        self.critic = QNetwork(num_inputs, action_space.shape[0], args.hidden_size).to(device=self.device)
        self.critic_optim = Adam(self.critic.parameters(), lr=args.lr)

        self.critic_target = QNetwork(num_inputs, action_space.shape[0], args.hidden_size).to(self.device)
        hard_update(self.critic_target, self.critic)

        if self.policy_type == "Gaussian":
            # Target Entropy = −dim(A) (e.g. , -6 for HalfCheetah-v2) as given in the paper
            if self.automatic_entropy_tuning is True:
                self.target_entropy = -torch.prod(torch.Tensor(action_space.shape).to(self.device)).item()
                self.log_alpha = torch.zeros(1, requires_grad=True, device=self.device)
                self.alpha_optim = Adam([self.log_alpha], lr=args.lr)

            self.policy = GaussianPolicy(num_inputs, action_space.shape[0], args.hidden_size, action_space).to(self.device)
            self.policy_optim = Adam(self.policy.parameters(), lr=args.lr)

        else:
            raise NotImplementedError("(port) the Deterministic policy branch is not ported")

    def select_action(self, state, evaluate=False):
        state = torch.FloatTensor(state).to(self.device).unsqueeze(0)
        if evaluate is False:
            action, _, _ = self.policy.sample(state)
        else:
            _, _, action = self.policy.sample(state)
        return action.detach().cpu().numpy()[0]

    def update_parameters(self, memory, batch_size, updates):
        # Sample a batch from memory
        state_batch, action_batch, reward_batch, next_state_batch, mask_batch = memory.sample(batch_size=batch_size)

        state_batch = torch.FloatTensor(state_batch).to(self.device)
        next_state_batch = torch.FloatTensor(next_state_batch).to(self.device)
        action_batch = torch.FloatTensor(action_batch).to(self.device)
        reward_batch = torch.FloatTensor(reward_batch).to(self.device).unsqueeze(1)
        mask_batch = torch.FloatTensor(mask_batch).to(self.device).unsqueeze(1)

        with torch.no_grad():
            next_state_action, next_state_log_pi, _ = self.policy.sample(next_state_batch)
            qf1_next_target, qf2_next_target = self.critic_target(next_state_batch, next_state_action)
            min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - self.alpha * next_state_log_pi
            if self.bug == "mask_removed":
                # https://github.com/pranz24/pytorch-soft-actor-critic/issues/42 asks whether the mask is needed
                # (the paper's target is r + gamma * V(s')); without it terminal states bootstrap
                next_q_value = reward_batch + self.gamma * (min_qf_next_target)
            else:
                next_q_value = reward_batch + mask_batch * self.gamma * (min_qf_next_target)
        qf1, qf2 = self.critic(state_batch, action_batch)  # Two Q-functions to mitigate positive bias in the policy improvement step
        qf1_loss = F.mse_loss(qf1, next_q_value)  # JQ = 𝔼(st,at)~D[0.5(Q1(st,at) - r(st,at) - γ(𝔼st+1~p[V(st+1)]))^2]
        qf2_loss = F.mse_loss(qf2, next_q_value)  # JQ = 𝔼(st,at)~D[0.5(Q1(st,at) - r(st,at) - γ(𝔼st+1~p[V(st+1)]))^2]
        qf_loss = qf1_loss + qf2_loss

        self.critic_optim.zero_grad()
        qf_loss.backward()
        self.critic_optim.step()

        pi, log_pi, _ = self.policy.sample(state_batch)

        qf1_pi, qf2_pi = self.critic(state_batch, pi)
        min_qf_pi = torch.min(qf1_pi, qf2_pi)

        policy_loss = ((self.alpha * log_pi) - min_qf_pi).mean() # Jπ = 𝔼st∼D,εt∼N[α * logπ(f(εt;st)|st) − Q(st,f(εt;st))]

        self.policy_optim.zero_grad()
        policy_loss.backward()
        self.policy_optim.step()

        if self.automatic_entropy_tuning:
            alpha_loss = -(self.log_alpha * (log_pi + self.target_entropy).detach()).mean()

            self.alpha_optim.zero_grad()
            alpha_loss.backward()
            self.alpha_optim.step()

            self.alpha = self.log_alpha.exp()
            alpha_tlogs = self.alpha.clone() # For TensorboardX logs
        else:
            alpha_loss = torch.tensor(0.).to(self.device)
            alpha_tlogs = torch.tensor(self.alpha) # For TensorboardX logs


        if updates % self.target_update_interval == 0:
            if self.bug == "soft_update_args_swapped":
                # soft_update(target, source, tau) called as (source, target): the online critic is pulled toward the
                # target, which never moves
                soft_update(self.critic, self.critic_target, self.tau)
            else:
                soft_update(self.critic_target, self.critic, self.tau)

        return qf1_loss.item(), qf2_loss.item(), policy_loss.item(), alpha_loss.item(), alpha_tlogs.item()


# ---------------------------------------------------------------- main.py
def _build(seed, bug=None):
    args = types.SimpleNamespace(env_name="ContinuousCartPole", policy="Gaussian", eval=True, gamma=0.99, tau=0.005,
                                 lr=0.0003, alpha=0.2, automatic_entropy_tuning=True, seed=seed, batch_size=256,
                                 num_steps=None, hidden_size=256, updates_per_step=1, start_steps=1000,
                                 target_update_interval=1, replay_size=1000000, cuda=False, bug=bug)

    # Environment
    env = ContinuousCartPole()
    env.seed(args.seed)
    env.action_space.seed(args.seed)

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    # Agent
    agent = SAC(env.observation_space.shape[0], env.action_space, args)

    # Memory
    memory = ReplayMemory(args.replay_size, args.seed)

    def loop():
        # Training Loop
        total_numsteps = 0
        updates = 0

        for i_episode in itertools.count(1):
            episode_reward = 0
            episode_steps = 0
            done = False
            state = env.reset()

            while not done:
                if args.start_steps > total_numsteps:
                    action = env.action_space.sample()  # Sample random action
                else:
                    action = agent.select_action(state)  # Sample action from policy

                if len(memory) > args.batch_size:
                    # Number of updates per step in environment
                    for i in range(args.updates_per_step):
                        # Update parameters of all the networks
                        critic_1_loss, critic_2_loss, policy_loss, ent_loss, alpha = agent.update_parameters(memory, args.batch_size, updates)
                        updates += 1
                        yield critic_1_loss + critic_2_loss

                next_state, reward, done, _ = env.step(action) # Step
                episode_steps += 1
                total_numsteps += 1
                episode_reward += reward

                # Ignore the "done" signal if it comes from hitting the time horizon.
                # (https://github.com/openai/spinningup/blob/master/spinup/algos/sac/sac.py)
                mask = 1 if episode_steps == env._max_episode_steps else float(not done)

                memory.push(state, action, reward, next_state, mask) # Append transition to memory

                state = next_state
                if len(memory) == args.batch_size + 1 and updates == 0:
                    yield None  # (port) the build stops here, before the first update

    steps = loop()
    while next(steps) is not None:
        pass

    state_batch, action_batch, reward_batch, next_state_batch, mask_batch = (
        torch.FloatTensor(a) for a in memory.sample(batch_size=args.batch_size))
    batch = ({"state": state_batch, "action": action_batch},
             (reward_batch.unsqueeze(1), next_state_batch, mask_batch.unsqueeze(1)))

    def loss_fn(outputs, targets):
        """update_parameters()'s critic loss on the critic's outputs for ``batch`` (the same lines)."""
        qf1, qf2 = outputs
        reward_batch, next_state_batch, mask_batch = targets
        with torch.no_grad():
            next_state_action, next_state_log_pi, _ = agent.policy.sample(next_state_batch)
            qf1_next_target, qf2_next_target = agent.critic_target(next_state_batch, next_state_action)
            min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - agent.alpha * next_state_log_pi
            if bug == "mask_removed":
                next_q_value = reward_batch + agent.gamma * (min_qf_next_target)
            else:
                next_q_value = reward_batch + mask_batch * agent.gamma * (min_qf_next_target)
        return F.mse_loss(qf1, next_q_value) + F.mse_loss(qf2, next_q_value)

    return Program(name="pytorchsac_sac", model=agent.critic, batch=batch, loss_fn=loss_fn,
                   optimizer=agent.critic_optim, train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
    # the mask left out of the soft Bellman target, as https://github.com/pranz24/pytorch-soft-actor-critic/issues/42
    # asks ("Does removing the mask batch here affect the performance?" -- "It does"): terminal states bootstrap.
    Bug("mask_removed", functools.partial(_build, bug="mask_removed"), "learning_ledger", ("TASK",)),
    # soft_update's target and source swapped (classic argument-order slip): after each optimizer step the critic is
    # dragged toward a target network that never moves.
    Bug("soft_update_args_swapped", functools.partial(_build, bug="soft_update_args_swapped"), "step_probe",
        ("linear1.weight",)),
]

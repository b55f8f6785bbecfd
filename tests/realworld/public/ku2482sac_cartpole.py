# ruff: noqa: B006, RUF059
"""Soft actor-critic from ku2482/soft-actor-critic.pytorch (with the rltorch pieces it imports): a tanh-squashed
Gaussian policy, twinned Q networks with one Adam each, a Polyak-averaged target critic, automatic entropy tuning
on ``log_alpha``, a numpy replay memory, time-limit cuts not stored as terminal, one update per environment step.

Source: https://github.com/ku2482/soft-actor-critic.pytorch (+ https://github.com/ku2482/rltorch)
Commit: 1688d3595817d85c2bcd279bb8ec71221b502899 (rltorch: 7819af49d95bfa268e00413a7606564b0e7286a7)
Files: ``code/agent.py`` (``SacAgent``), ``code/model.py``, ``code/utils.py``, ``code/main.py`` (configs); rltorch
``rltorch/network/builder.py`` (``create_linear_network``), ``rltorch/memory/base.py``, ``multi_step.py`` (these and
``code/model.py``, ``code/utils.py`` in ``_ku2482sac_lib.py``)
License: MIT (Copyright (c) 2020 Toshiki Watanabe; rltorch: MIT, Copyright (c) 2019 Toshiki Watanabe; full texts in
LICENSES/ku2482-soft-actor-critic.pytorch.txt and LICENSES/ku2482-rltorch.txt)
Domain: RL, continuous actor-critic (SAC: twin critics, clipped double-Q target with entropy, learned temperature)

Kept as written: ``QNetwork``, ``TwinnedQNetwork``, ``GaussianPolicy`` (``sample``: ``rsample``, tanh, the
log-det correction with eps 1e-6, entropies), ``create_linear_network`` (xavier-uniform, zero bias),
``Memory``/``MultiStepMemory`` with ``multi_step`` 1, ``SacAgent.__init__`` (target critic in eval mode without
gradients, Adam per network lr 3e-4, target entropy ``-|A|``, ``log_alpha`` at 0), ``act``, ``explore``,
``calc_current_q``, ``calc_target_q``, ``learn`` (soft update first, critic losses, ``update_params`` for Q1, Q2,
the policy and the temperature, ``alpha = log_alpha.exp()``), ``calc_critic_loss``,
``calc_policy_loss``, ``calc_entropy_loss``, ``update_params``, ``soft_update``, ``hard_update``, ``grad_false``,
and the body of ``train_episode``'s ``while not done`` loop (masked done at the time horizon); main.py's configs
(gamma 0.99, tau 0.005, entropy tuning, no PER, no grad clip, one update per step, target update every step).

Deviations from the original:
- gym's HalfCheetah-v2 (MuJoCo) is replaced by the continuous-force cart-pole of ``_continuous_control.py``
  (actions in [-1, 1] as HalfCheetah's; terminal when the pole falls, 500-step limit); seeded from ``seed``;
- sizes for 2 CPU cores: hidden units [256, 256] -> [64, 64], batch 256 -> 32, memory 1e6 -> 1e4, start_steps
  10000 -> 300 (the random-action warm-up runs at build time);
- ``train_episode``'s loop body yields after each environment step (``train_step`` is one pass: act, step,
  append, learn) and ``learn`` returns ``q1_loss``; the tensorboard writer, logging, the evaluation every 10000
  steps (not reached), printing and model saving are dropped; ``RunningMeanStats`` and PER are not used;
- ``policy_loss, entropies = self.calc_policy_loss(batch, weights)`` is moved after the two critic updates in
  ``learn``: as written it raises under PyTorch >= 1.5 (the policy loss backpropagates through critic weights the
  Q optimizers changed in place); the move is the fix given in
  https://github.com/toshikwa/soft-actor-critic.pytorch/issues/1 (the author: "torch==1.3.1 would work well");
- ``np.random`` (the memory's sampling) is the global module seeded in ``__init__`` as written;
- the Program declares ``critic.Q1`` with ``q1_optim`` and the critic loss of ``calc_critic_loss`` on one replay
  batch sampled at build time (the other networks train inside the same step as written);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole
from _ku2482sac_lib import GaussianPolicy, MultiStepMemory, TwinnedQNetwork, grad_false, hard_update, soft_update, update_params

HIDDEN, BATCH, MEMORY, START = [64, 64], 32, 1e4, 300  # (port) [256, 256], 256, 1e6, 10000


# code/agent.py
class SacAgent:

    def __init__(self, env, num_steps=3000000, batch_size=256,
                 lr=0.0003, hidden_units=[256, 256], memory_size=1e6,
                 gamma=0.99, tau=0.005, entropy_tuning=True, ent_coef=0.2,
                 multi_step=1, grad_clip=None, updates_per_step=1,
                 start_steps=10000, target_update_interval=1, cuda=True, seed=0, bug=None):
        self.env = env
        self.bug = bug

        torch.manual_seed(seed)
        np.random.seed(seed)
        self.env.seed(seed)
        self.env.action_space.seed(seed)  # (port) gym seeds the action space with the env

        self.device = torch.device(
            "cuda" if cuda and torch.cuda.is_available() else "cpu")
        self._networks(hidden_units, lr)  # (port) the next lines of __init__, moved into a method for length

        if entropy_tuning:
            # Target entropy is -|A|.
            self.target_entropy = -torch.prod(torch.Tensor(
                self.env.action_space.shape).to(self.device)).item()
            # We optimize log(alpha), instead of alpha.
            self.log_alpha = torch.zeros(
                1, requires_grad=True, device=self.device)
            self.alpha = self.log_alpha.exp()
            self.alpha_optim = Adam([self.log_alpha], lr=lr)
        else:
            # fixed alpha
            self.alpha = torch.tensor(ent_coef).to(self.device)

        # replay memory without prioritied experience replay
        self.memory = MultiStepMemory(
            memory_size, self.env.observation_space.shape,
            self.env.action_space.shape, self.device, gamma, multi_step)

        self.steps = 0
        self.learning_steps = 0
        self.episodes = 0
        self.num_steps = num_steps
        self.tau = tau
        self.batch_size = batch_size
        self.start_steps = start_steps
        self.gamma_n = gamma ** multi_step
        self.entropy_tuning = entropy_tuning
        self.grad_clip = grad_clip
        self.updates_per_step = updates_per_step
        self.target_update_interval = target_update_interval

    def _networks(self, hidden_units, lr):
        self.policy = GaussianPolicy(
            self.env.observation_space.shape[0],
            self.env.action_space.shape[0],
            hidden_units=hidden_units).to(self.device)
        self.critic = TwinnedQNetwork(
            self.env.observation_space.shape[0],
            self.env.action_space.shape[0],
            hidden_units=hidden_units).to(self.device)
        self.critic_target = TwinnedQNetwork(
            self.env.observation_space.shape[0],
            self.env.action_space.shape[0],
            hidden_units=hidden_units).to(self.device).eval()

        # copy parameters of the learning network to the target network
        hard_update(self.critic_target, self.critic)
        # disable gradient calculations of the target network
        grad_false(self.critic_target)

        self.policy_optim = Adam(self.policy.parameters(), lr=lr)
        self.q1_optim = Adam(self.critic.Q1.parameters(), lr=lr)
        self.q2_optim = Adam(self.critic.Q2.parameters(), lr=lr)

    def run(self):
        while True:
            yield from self.train_episode()
            if self.steps > self.num_steps:
                break

    def is_update(self):
        return len(self.memory) > self.batch_size and\
            self.steps >= self.start_steps

    def act(self, state):
        if self.start_steps > self.steps:
            action = self.env.action_space.sample()
        else:
            action = self.explore(state)
        return action

    def explore(self, state):
        # act with randomness
        state = torch.FloatTensor(state).unsqueeze(0).to(self.device)
        with torch.no_grad():
            action, _, _ = self.policy.sample(state)
        return action.cpu().numpy().reshape(-1)

    def calc_current_q(self, states, actions, rewards, next_states, dones):
        curr_q1, curr_q2 = self.critic(states, actions)
        return curr_q1, curr_q2

    def calc_target_q(self, states, actions, rewards, next_states, dones):
        with torch.no_grad():
            next_actions, next_entropies, _ = self.policy.sample(next_states)
            next_q1, next_q2 = self.critic_target(next_states, next_actions)
            next_q = torch.min(next_q1, next_q2) + self.alpha * next_entropies

        if self.bug == "dones_dropped":
            return rewards + self.gamma_n * next_q
        target_q = rewards + (1.0 - dones) * self.gamma_n * next_q

        return target_q

    def train_episode(self):
        self.episodes += 1
        episode_reward = 0.
        episode_steps = 0
        done = False
        state = self.env.reset()

        while not done:
            action = self.act(state)
            next_state, reward, done, _ = self.env.step(action)
            self.steps += 1
            episode_steps += 1
            episode_reward += reward

            # ignore done if the agent reach time horizons
            # (set done=True only when the agent fails)
            if episode_steps >= self.env._max_episode_steps:
                masked_done = False
            else:
                masked_done = done

            # We need to give true done signal with addition to masked done
            # signal to calculate multi-step rewards.
            self.memory.append(
                state, action, reward, next_state, masked_done,
                episode_done=done)

            loss = None  # (port)
            if self.is_update():
                for _ in range(self.updates_per_step):
                    loss = self.learn()

            state = next_state
            yield loss  # (port) one environment step per train_step

    def learn(self):
        self.learning_steps += 1
        if self.learning_steps % self.target_update_interval == 0:
            if self.bug == "soft_update_reversed":
                soft_update(self.critic, self.critic_target, self.tau)
            else:
                soft_update(self.critic_target, self.critic, self.tau)

        batch = self.memory.sample(self.batch_size)
        # set priority weights to 1 when we don't use PER.
        weights = 1.

        q1_loss, q2_loss, errors, mean_q1, mean_q2 =\
            self.calc_critic_loss(batch, weights)

        update_params(
            self.q1_optim, self.critic.Q1, q1_loss, self.grad_clip)
        update_params(
            self.q2_optim, self.critic.Q2, q2_loss, self.grad_clip)
        # (port) moved after the critic updates, the fix of toshikwa/soft-actor-critic.pytorch#1
        policy_loss, entropies = self.calc_policy_loss(batch, weights)
        update_params(
            self.policy_optim, self.policy, policy_loss, self.grad_clip)

        if self.entropy_tuning:
            entropy_loss = self.calc_entropy_loss(entropies, weights)
            update_params(self.alpha_optim, None, entropy_loss)
            self.alpha = self.log_alpha.exp()
        return q1_loss.detach()  # (port)

    def calc_critic_loss(self, batch, weights):
        curr_q1, curr_q2 = self.calc_current_q(*batch)
        target_q = self.calc_target_q(*batch)

        # TD errors for updating priority weights
        errors = torch.abs(curr_q1.detach() - target_q)
        # We log means of Q to monitor training.
        mean_q1 = curr_q1.detach().mean().item()
        mean_q2 = curr_q2.detach().mean().item()

        # Critic loss is mean squared TD errors with priority weights.
        q1_loss = torch.mean((curr_q1 - target_q).pow(2) * weights)
        q2_loss = torch.mean((curr_q2 - target_q).pow(2) * weights)
        return q1_loss, q2_loss, errors, mean_q1, mean_q2

    def calc_policy_loss(self, batch, weights):
        states, actions, rewards, next_states, dones = batch

        # We re-sample actions to calculate expectations of Q.
        sampled_action, entropy, _ = self.policy.sample(states)
        if self.bug == "policy_on_buffer_actions":
            sampled_action = actions
        # expectations of Q with clipped double Q technique
        q1, q2 = self.critic(states, sampled_action)
        q = torch.min(q1, q2)

        # Policy objective is maximization of (Q + alpha * entropy) with
        # priority weights.
        policy_loss = torch.mean((- q - self.alpha * entropy) * weights)
        return policy_loss, entropy

    def calc_entropy_loss(self, entropy, weights):
        # Intuitively, we increse alpha when entropy is less than target
        # entropy, vice versa.
        entropy_loss = -torch.mean(
            self.log_alpha * (self.target_entropy - entropy).detach()
            * weights)
        return entropy_loss


def _build(seed, bug=None):
    configs = {
        'num_steps': 3000000,
        'batch_size': BATCH,
        'lr': 0.0003,
        'hidden_units': HIDDEN,
        'memory_size': MEMORY,
        'gamma': 0.99,
        'tau': 0.005,
        'entropy_tuning': True,
        'ent_coef': 0.2,  # It's ignored when entropy_tuning=True.
        'multi_step': 1,
        'grad_clip': None,
        'updates_per_step': 1,
        'start_steps': START,
        'target_update_interval': 1,
        'cuda': False,
        'seed': seed
    }
    env = ContinuousCartPole()
    agent = SacAgent(env=env, bug=bug, **configs)
    steps = agent.run()
    while next(steps) is None:
        pass

    batch = agent.memory.sample(agent.batch_size)
    states, actions = batch[0], batch[1]

    def loss_fn(curr_q1, batch):
        target_q = agent.calc_target_q(*batch)
        return torch.mean((curr_q1 - target_q).pow(2) * 1.)

    return Program(name="ku2482sac_cartpole", model=agent.critic.Q1, batch=(torch.cat([states, actions], dim=1), batch),
                   loss_fn=loss_fn, optimizer=agent.q1_optim, train_step=lambda: next(steps))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the (1 - dones) mask left out of calc_target_q, so a fall is bootstrapped from the state after it.
    Bug("dones_dropped", functools.partial(_build, bug="dones_dropped"), "learning_ledger", ("TASK",)),
    # classic: soft_update's arguments swapped, so the critics are pulled toward the frozen target copy each step
    # (and the target never moves).
    Bug("soft_update_reversed", functools.partial(_build, bug="soft_update_reversed"), "step_probe", ("Q.0.weight",),
        kind="step.soft_update_reversed"),
    # classic: the policy loss evaluated on the buffer's actions instead of the re-sampled ones, so no gradient of Q
    # reaches the policy (only the entropy term trains it).
    Bug("policy_on_buffer_actions", functools.partial(_build, bug="policy_on_buffer_actions"), "learning_ledger",
        ("DEPENDENCY",)),
]

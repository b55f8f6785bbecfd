"""GAIL with PPO on a continuous-control task, from toshikwa/gail-airl-ppo.pytorch.

Source: https://github.com/toshikwa/gail-airl-ppo.pytorch, commit 4e13a23454600a16d5aeeeb4c09338308115455e, files
``train_imitation.py``, ``gail_airl_ppo/algo/gail.py``, ``gail_airl_ppo/algo/ppo.py``, ``gail_airl_ppo/algo/base.py``,
``gail_airl_ppo/network/`` (``disc.py``, ``policy.py``, ``value.py``, ``utils.py``), ``gail_airl_ppo/buffer.py``,
``gail_airl_ppo/env.py``, ``gail_airl_ppo/trainer.py``. License: MIT (Copyright (c) 2020 Toshiki Watanabe; full
text in LICENSES/toshikwa-gail-airl-ppo.pytorch.txt).

Kept as written: ``GAIL`` (discriminator of tanh layers (100, 100) over ``cat([states, actions])``, Adam lr 3e-4,
``update``: epoch_disc 10 discriminator steps on batch_size 64 samples of the policy's rollout and of the expert's
buffer, ``update_disc``'s ``-logsigmoid(-logits_pi) - logsigmoid(logits_exp)``, the rewards
``-logsigmoid(-D)``, then ``update_ppo``), ``PPO`` (``StateIndependentPolicy`` and ``StateFunction`` with tanh
layers (64, 64), Adam lr 3e-4 each, ``calculate_gae`` with gamma 0.995 and lambd 0.97, clipped surrogate with
clip_eps 0.2, coef_ent 0.0, ``clip_grad_norm_`` 10.0, ``step``'s mask at the time limit), the network utilities
(``build_mlp``, ``reparameterize``, ``calculate_log_pi``, ``evaluate_lop_pi``), ``RolloutBuffer``,
``SerializedBuffer``'s sampling, ``NormalizedEnv`` (actions scaled by the action bound) and the trainer's step loop.

Deviations:
- gym's Hopper-v3 is replaced by the numpy pendulum of ``_continuous_control.py`` (Pendulum-v1's equations, seeded)
  behind ``NormalizedEnv``.
- no expert checkpoint: the expert buffer (``SerializedBuffer``'s tensors, collect_demo.py's format) holds 2000
  transitions of a written-out controller, ``a = clip(-2 sin(th) - 0.5 th_dot, -1, 1)`` in the normalized action
  space: the synthetic data with the learnable rule the discriminator has to tell apart from the policy's.
- sizes for 2 CPU cores: rollout_length 50000 -> 64, epoch_ppo 50 -> 5. ``train_step`` runs the trainer's loop
  for one rollout (rollout_length calls of ``algo.step``) and then ``algo.update``, and returns the last
  discriminator loss (``update_disc`` logs it and returns nothing).
- ``np.random`` in the buffers comes from a ``numpy.random.default_rng(seed)`` instance; the tensorboard
  ``writer`` is a stub that drops the scalars; evaluation and model saving are dropped; ``device`` is the CPU.
- the Program: the discriminator (behind ``_ConcatInput``, which splits one ``cat([states, actions])`` input back
  into the two arguments of ``GAILDiscrim.forward``), its optimizer and its loss on a batch of initial-policy and
  expert pairs.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

ROLLOUT_LENGTH = 64  # train_imitation.py: 50000
EPOCH_PPO = 5  # GAIL's default: 50
N_EXPERT = 2000


def build_mlp(input_dim, output_dim, hidden_units=[64, 64],  # noqa: B006
              hidden_activation=nn.Tanh(), output_activation=None):  # noqa: B008
    layers = []
    units = input_dim
    for next_units in hidden_units:
        layers.append(nn.Linear(units, next_units))
        layers.append(hidden_activation)
        units = next_units
    layers.append(nn.Linear(units, output_dim))
    if output_activation is not None:
        layers.append(output_activation)
    return nn.Sequential(*layers)


def calculate_log_pi(log_stds, noises, actions):
    gaussian_log_probs = (-0.5 * noises.pow(2) - log_stds).sum(
        dim=-1, keepdim=True) - 0.5 * math.log(2 * math.pi) * log_stds.size(-1)

    return gaussian_log_probs - torch.log(
        1 - actions.pow(2) + 1e-6).sum(dim=-1, keepdim=True)


def reparameterize(means, log_stds):
    noises = torch.randn_like(means)
    us = means + noises * log_stds.exp()
    actions = torch.tanh(us)
    return actions, calculate_log_pi(log_stds, noises, actions)


def atanh(x):
    return 0.5 * (torch.log(1 + x + 1e-6) - torch.log(1 - x + 1e-6))


def evaluate_lop_pi(means, log_stds, actions):
    noises = (atanh(actions) - means) / (log_stds.exp() + 1e-8)
    return calculate_log_pi(log_stds, noises, actions)


class StateIndependentPolicy(nn.Module):

    def __init__(self, state_shape, action_shape, hidden_units=(64, 64),
                 hidden_activation=nn.Tanh()):  # noqa: B008
        super().__init__()

        self.net = build_mlp(
            input_dim=state_shape[0],
            output_dim=action_shape[0],
            hidden_units=hidden_units,
            hidden_activation=hidden_activation
        )
        self.log_stds = nn.Parameter(torch.zeros(1, action_shape[0]))

    def forward(self, states):
        return torch.tanh(self.net(states))

    def sample(self, states):
        return reparameterize(self.net(states), self.log_stds)

    def evaluate_log_pi(self, states, actions):
        return evaluate_lop_pi(self.net(states), self.log_stds, actions)


class StateFunction(nn.Module):

    def __init__(self, state_shape, hidden_units=(64, 64),
                 hidden_activation=nn.Tanh()):  # noqa: B008
        super().__init__()

        self.net = build_mlp(
            input_dim=state_shape[0],
            output_dim=1,
            hidden_units=hidden_units,
            hidden_activation=hidden_activation
        )

    def forward(self, states):
        return self.net(states)


class GAILDiscrim(nn.Module):

    def __init__(self, state_shape, action_shape, hidden_units=(100, 100),
                 hidden_activation=nn.Tanh()):  # noqa: B008
        super().__init__()

        self.net = build_mlp(
            input_dim=state_shape[0] + action_shape[0],
            output_dim=1,
            hidden_units=hidden_units,
            hidden_activation=hidden_activation
        )

    def forward(self, states, actions):
        return self.net(torch.cat([states, actions], dim=-1))

    def calculate_reward(self, states, actions):
        # PPO(GAIL) is to maximize E_{\pi} [-log(1 - D)].
        with torch.no_grad():
            return -F.logsigmoid(-self.forward(states, actions))


class SerializedBuffer:

    def __init__(self, tmp, device, rng):
        self.buffer_size = self._n = tmp['state'].size(0)
        self.device = device
        self.rng = rng

        self.states = tmp['state'].clone().to(self.device)
        self.actions = tmp['action'].clone().to(self.device)
        self.rewards = tmp['reward'].clone().to(self.device)
        self.dones = tmp['done'].clone().to(self.device)
        self.next_states = tmp['next_state'].clone().to(self.device)

    def sample(self, batch_size):
        idxes = self.rng.integers(low=0, high=self._n, size=batch_size)
        return (
            self.states[idxes],
            self.actions[idxes],
            self.rewards[idxes],
            self.dones[idxes],
            self.next_states[idxes]
        )


class RolloutBuffer:

    def __init__(self, buffer_size, state_shape, action_shape, device, rng, mix=1):
        self._n = 0
        self._p = 0
        self.mix = mix
        self.buffer_size = buffer_size
        self.total_size = mix * buffer_size
        self.rng = rng

        self.states = torch.empty(
            (self.total_size, *state_shape), dtype=torch.float, device=device)
        self.actions = torch.empty(
            (self.total_size, *action_shape), dtype=torch.float, device=device)
        self.rewards = torch.empty(
            (self.total_size, 1), dtype=torch.float, device=device)
        self.dones = torch.empty(
            (self.total_size, 1), dtype=torch.float, device=device)
        self.log_pis = torch.empty(
            (self.total_size, 1), dtype=torch.float, device=device)
        self.next_states = torch.empty(
            (self.total_size, *state_shape), dtype=torch.float, device=device)

    def append(self, state, action, reward, done, log_pi, next_state):
        self.states[self._p].copy_(torch.from_numpy(state))
        self.actions[self._p].copy_(torch.from_numpy(action))
        self.rewards[self._p] = float(reward)
        self.dones[self._p] = float(done)
        self.log_pis[self._p] = float(log_pi)
        self.next_states[self._p].copy_(torch.from_numpy(next_state))

        self._p = (self._p + 1) % self.total_size
        self._n = min(self._n + 1, self.total_size)

    def get(self):
        assert self._p % self.buffer_size == 0
        start = (self._p - self.buffer_size) % self.total_size
        idxes = slice(start, start + self.buffer_size)
        return (
            self.states[idxes],
            self.actions[idxes],
            self.rewards[idxes],
            self.dones[idxes],
            self.log_pis[idxes],
            self.next_states[idxes]
        )

    def sample(self, batch_size):
        assert self._p % self.buffer_size == 0
        idxes = self.rng.integers(low=0, high=self._n, size=batch_size)
        return (
            self.states[idxes],
            self.actions[idxes],
            self.rewards[idxes],
            self.dones[idxes],
            self.log_pis[idxes],
            self.next_states[idxes]
        )


def calculate_gae(values, rewards, dones, next_values, gamma, lambd):
    # Calculate TD errors.
    deltas = rewards + gamma * next_values * (1 - dones) - values
    # Initialize gae.
    gaes = torch.empty_like(rewards)

    # Calculate gae recursively from behind.
    gaes[-1] = deltas[-1]
    for t in reversed(range(rewards.size(0) - 1)):
        gaes[t] = deltas[t] + gamma * lambd * (1 - dones[t]) * gaes[t + 1]

    return gaes + values, (gaes - gaes.mean()) / (gaes.std() + 1e-8)


class _Writer:  # (port) tensorboard's SummaryWriter, dropped
    def add_scalar(self, *args, **kwargs):
        pass


class PPO:

    def __init__(self, state_shape, action_shape, device, seed, rng, gamma=0.995,
                 rollout_length=2048, mix_buffer=20, lr_actor=3e-4,
                 lr_critic=3e-4, units_actor=(64, 64), units_critic=(64, 64),
                 epoch_ppo=10, clip_eps=0.2, lambd=0.97, coef_ent=0.0,
                 max_grad_norm=10.0):
        # Algorithm.__init__
        torch.manual_seed(seed)
        self.learning_steps = 0
        self.state_shape = state_shape
        self.action_shape = action_shape
        self.device = device
        self.gamma = gamma

        # Rollout buffer.
        self.buffer = RolloutBuffer(
            buffer_size=rollout_length,
            state_shape=state_shape,
            action_shape=action_shape,
            device=device,
            rng=rng,
            mix=mix_buffer
        )

        # Actor.
        self.actor = StateIndependentPolicy(
            state_shape=state_shape,
            action_shape=action_shape,
            hidden_units=units_actor,
            hidden_activation=nn.Tanh()
        ).to(device)

        # Critic.
        self.critic = StateFunction(
            state_shape=state_shape,
            hidden_units=units_critic,
            hidden_activation=nn.Tanh()
        ).to(device)

        self.optim_actor = Adam(self.actor.parameters(), lr=lr_actor)
        self.optim_critic = Adam(self.critic.parameters(), lr=lr_critic)

        self.learning_steps_ppo = 0
        self.rollout_length = rollout_length
        self.epoch_ppo = epoch_ppo
        self.clip_eps = clip_eps
        self.lambd = lambd
        self.coef_ent = coef_ent
        self.max_grad_norm = max_grad_norm

    def explore(self, state):
        state = torch.tensor(state, dtype=torch.float, device=self.device)
        with torch.no_grad():
            action, log_pi = self.actor.sample(state.unsqueeze_(0))
        return action.cpu().numpy()[0], log_pi.item()

    def is_update(self, step):
        return step % self.rollout_length == 0

    def step(self, env, state, t, step):
        t += 1

        action, log_pi = self.explore(state)
        next_state, reward, done, _ = env.step(action)
        mask = False if t == env._max_episode_steps else done

        self.buffer.append(state, action, reward, mask, log_pi, next_state)

        if done:
            t = 0
            next_state = env.reset()

        return next_state, t

    def update_ppo(self, states, actions, rewards, dones, log_pis, next_states,
                   writer):
        with torch.no_grad():
            values = self.critic(states)
            next_values = self.critic(next_states)

        targets, gaes = calculate_gae(
            values, rewards, dones, next_values, self.gamma, self.lambd)

        for _ in range(self.epoch_ppo):
            self.learning_steps_ppo += 1
            self.update_critic(states, targets, writer)
            self.update_actor(states, actions, log_pis, gaes, writer)

    def update_critic(self, states, targets, writer):
        loss_critic = (self.critic(states) - targets).pow_(2).mean()

        self.optim_critic.zero_grad()
        loss_critic.backward(retain_graph=False)
        nn.utils.clip_grad_norm_(self.critic.parameters(), self.max_grad_norm)
        self.optim_critic.step()

    def update_actor(self, states, actions, log_pis_old, gaes, writer):
        log_pis = self.actor.evaluate_log_pi(states, actions)
        entropy = -log_pis.mean()

        ratios = (log_pis - log_pis_old).exp_()
        loss_actor1 = -ratios * gaes
        loss_actor2 = -torch.clamp(
            ratios,
            1.0 - self.clip_eps,
            1.0 + self.clip_eps
        ) * gaes
        loss_actor = torch.max(loss_actor1, loss_actor2).mean()

        self.optim_actor.zero_grad()
        (loss_actor - self.coef_ent * entropy).backward(retain_graph=False)
        nn.utils.clip_grad_norm_(self.actor.parameters(), self.max_grad_norm)
        self.optim_actor.step()


class GAIL(PPO):

    def __init__(self, buffer_exp, state_shape, action_shape, device, seed, rng,
                 gamma=0.995, rollout_length=50000, mix_buffer=1,
                 batch_size=64, lr_actor=3e-4, lr_critic=3e-4, lr_disc=3e-4,
                 units_actor=(64, 64), units_critic=(64, 64),
                 units_disc=(100, 100), epoch_ppo=50, epoch_disc=10,
                 clip_eps=0.2, lambd=0.97, coef_ent=0.0, max_grad_norm=10.0, bug=None):
        super().__init__(
            state_shape, action_shape, device, seed, rng, gamma, rollout_length,
            mix_buffer, lr_actor, lr_critic, units_actor, units_critic,
            epoch_ppo, clip_eps, lambd, coef_ent, max_grad_norm
        )
        self.bug = bug

        # Expert's buffer.
        self.buffer_exp = buffer_exp

        # Discriminator.
        self.disc = GAILDiscrim(
            state_shape=state_shape,
            action_shape=action_shape,
            hidden_units=units_disc,
            hidden_activation=nn.Tanh()
        ).to(device)

        self.learning_steps_disc = 0
        self.optim_disc = Adam(self.disc.parameters(), lr=lr_disc)
        self.batch_size = batch_size
        self.epoch_disc = epoch_disc
        self.last_loss_disc = None

    def update(self, writer):
        self.learning_steps += 1

        for _ in range(self.epoch_disc):
            self.learning_steps_disc += 1

            # Samples from current policy's trajectories.
            states, actions = self.buffer.sample(self.batch_size)[:2]
            # Samples from expert's demonstrations.
            if self.bug == "expert_pairs_unpaired":
                states_exp = self.buffer_exp.sample(self.batch_size)[0]
                actions_exp = self.buffer_exp.sample(self.batch_size)[1]
            else:
                states_exp, actions_exp = \
                    self.buffer_exp.sample(self.batch_size)[:2]
            # Update discriminator.
            self.update_disc(states, actions, states_exp, actions_exp, writer)

        # We don't use reward signals here,
        states, actions, _, dones, log_pis, next_states = self.buffer.get()

        # Calculate rewards.
        rewards = self.disc.calculate_reward(states, actions)

        # Update PPO using estimated rewards.
        self.update_ppo(
            states, actions, rewards, dones, log_pis, next_states, writer)

    def disc_loss(self, logits_pi, logits_exp):
        # Discriminator is to maximize E_{\pi} [log(1 - D)] + E_{exp} [log(D)].
        loss_pi = -F.logsigmoid(-logits_pi).mean()
        if self.bug == "expert_term_sign_copied":
            loss_exp = -F.logsigmoid(-logits_exp).mean()
        else:
            loss_exp = -F.logsigmoid(logits_exp).mean()
        loss_disc = loss_pi + loss_exp
        return loss_disc

    def update_disc(self, states, actions, states_exp, actions_exp, writer):
        # Output of discriminator is (-inf, inf), not [0, 1].
        logits_pi = self.disc(states, actions)
        logits_exp = self.disc(states_exp, actions_exp)

        loss_disc = self.disc_loss(logits_pi, logits_exp)

        if self.bug != "disc_zero_grad_dropped":
            self.optim_disc.zero_grad()
        loss_disc.backward()
        self.optim_disc.step()
        self.last_loss_disc = loss_disc.detach()


class NormalizedEnv:  # gail_airl_ppo/env.py's wrapper, over the numpy pendulum (no gym.Wrapper here)

    def __init__(self, env):
        self.env = env
        self._max_episode_steps = env._max_episode_steps
        self.observation_space = env.observation_space
        self.action_space = env.action_space

        self.scale = env.action_space.high.copy()
        self.action_space.high /= self.scale
        self.action_space.low /= self.scale

    def seed(self, seed):
        self.env.seed(seed)

    def reset(self):
        return self.env.reset()

    def step(self, action):
        return self.env.step(action * self.scale)


def collect_expert(seed):
    """The expert buffer (a deviation, see the docstring): a written-out pendulum controller."""
    env = NormalizedEnv(Pendulum())
    env.seed(seed + 7)
    states, actions, rewards, dones, next_states = [], [], [], [], []
    state = env.reset()
    t = 0
    while len(states) < N_EXPERT:
        t += 1
        action = np.clip(-2.0 * state[1:2] - 0.5 * state[2:3], -1.0, 1.0).astype(np.float32)
        next_state, reward, done, _ = env.step(action)
        states.append(state)
        actions.append(action)
        rewards.append([reward])
        dones.append([float(done and t != env._max_episode_steps)])
        next_states.append(next_state)
        if done:
            t = 0
            next_state = env.reset()
        state = next_state
    return {'state': torch.tensor(np.array(states), dtype=torch.float),
            'action': torch.tensor(np.array(actions), dtype=torch.float),
            'reward': torch.tensor(np.array(rewards), dtype=torch.float),
            'done': torch.tensor(np.array(dones), dtype=torch.float),
            'next_state': torch.tensor(np.array(next_states), dtype=torch.float)}


def _build(seed, bug=None):
    rng = np.random.default_rng(seed)
    device = torch.device("cpu")
    env = NormalizedEnv(Pendulum())
    buffer_exp = SerializedBuffer(collect_expert(seed), device=device, rng=rng)

    algo = GAIL(
        buffer_exp=buffer_exp,
        state_shape=env.observation_space.shape,
        action_shape=env.action_space.shape,
        device=device,
        seed=seed,
        rng=rng,
        rollout_length=ROLLOUT_LENGTH,
        epoch_ppo=EPOCH_PPO,
        bug=bug,
    )
    writer = _Writer()

    # Trainer.train, up to the loop
    env.seed(seed)
    loop = {"t": 0, "state": env.reset(), "step": 0}

    def train_step():
        while True:
            loop["step"] += 1
            # Pass to the algorithm to update state and episode timestep.
            loop["state"], loop["t"] = algo.step(env, loop["state"], loop["t"], loop["step"])

            # Update the algorithm whenever ready.
            if algo.is_update(loop["step"]):
                algo.update(writer)
                return algo.last_loss_disc

    # the Program's batch: one rollout of the initial policy and expert pairs
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        states_pi = buffer_exp.states[torch.randperm(N_EXPERT, generator=g)[:64]]
        actions_pi = algo.actor.sample(states_pi)[0]
    states_exp, actions_exp = buffer_exp.states[:64], buffer_exp.actions[:64]
    batch = ((torch.cat([states_pi, states_exp]), torch.cat([actions_pi, actions_exp])),
             torch.cat([torch.zeros(64, 1), torch.ones(64, 1)]))

    def loss_fn(logits, is_expert):
        mask = is_expert.bool().squeeze(1)
        return algo.disc_loss(logits[~mask], logits[mask])

    batch = (torch.cat(batch[0], dim=-1), batch[1])
    model = _ConcatInput(algo.disc)

    return Program(name="gailairlppo_gail", model=model, batch=batch, loss_fn=loss_fn,
                   optimizer=algo.optim_disc, train_step=train_step)


class _ConcatInput(nn.Module):
    """(port) GAILDiscrim.forward takes (states, actions); the Program's model takes their concatenation."""

    def __init__(self, disc):
        super().__init__()
        self.disc = disc

    def forward(self, states_actions):
        return self.disc(states_actions[..., :-1], states_actions[..., -1:])


build = functools.partial(_build, bug=None)

BUGS = [
    # the expert's states and actions drawn by two separate ``sample`` calls (classic): the expert pairs are
    # unpaired, so the discriminator learns the marginals, not the expert's rule.
    Bug("expert_pairs_unpaired", functools.partial(_build, bug="expert_pairs_unpaired"), "learning_ledger",
        ("TASK",)),
    # copy-paste slip in update_disc: the expert term written like the policy's, ``-logsigmoid(-logits_exp)``, so
    # both are pushed towards "policy" and the discriminator separates nothing.
    Bug("expert_term_sign_copied", functools.partial(_build, bug="expert_term_sign_copied"), "learning_ledger",
        ("OBJECTIVE",)),
    # self.optim_disc.zero_grad() dropped from update_disc (classic): the discriminator's gradients pile up;
    # every discriminator parameter alike: declared by its mechanism (README rule 6).
    Bug("disc_zero_grad_dropped", functools.partial(_build, bug="disc_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

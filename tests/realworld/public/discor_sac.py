# ruff: noqa: SIM101, B006, RUF059, UP034
"""DisCor (distribution correction for Q-learning) over SAC, from toshikwa/discor.pytorch.

Source: https://github.com/toshikwa/discor.pytorch, commit 24fca755256f3b3646ad95fdd97cf2e8d5cae05e, files
``train.py``, ``config/mujoco.yaml``, ``discor/agent.py``, ``discor/algorithm/base.py``, ``discor/algorithm/sac.py``,
``discor/algorithm/discor.py``, ``discor/network.py``, ``discor/replay_buffer.py``, ``discor/utils.py``.
License: MIT (Copyright (c) 2020 Toshiki Watanabe; full text in LICENSES/toshikwa-discor.pytorch.txt).

Kept as written: ``DisCor`` (twinned error networks and their target copies, Adam error_lr 3e-4, ``tau_init``
10.0, the self-normalized importance weights ``softmax(-(1 - d) gamma err'(s', a') / tau, dim=0)`` weighting the Q
losses, the error targets ``|Q - target| + (1 - d) gamma err'``, the soft updates of tau1/tau2 and of the target
error networks), ``SAC`` (``GaussianPolicy`` with tanh squashing and entropies, twinned Q networks, clipped double
Q, learned ``log_alpha`` with target entropy -|A|, Adam lrs 3e-4, gamma 0.99, nstep 1, target_update_coef 0.005),
the networks (xavier-initialized ReLU MLPs), ``update_params``, ``soft_update``, the nstep-1 path of
``ReplayBuffer`` and the agent's episode loop (random actions for ``start_steps``, the done mask ignoring time
limits, ``update_online_networks`` then ``update_target_networks`` every step).

Deviations:
- gym / metaworld tasks are replaced by the numpy pendulum of ``_continuous_control.py`` (Pendulum-v1's equations,
  seeded; actions in [-1, 1] scaled by the torque bound, as the repository's MuJoCo tasks have unit bounds).
- sizes for 2 CPU cores: hidden units [256, 256] -> [64, 64] (policy and Q), error networks [256, 256, 256] ->
  [64, 64, 64], batch_size 256 -> 64, memory_size 10**6 -> 10**4, start_steps 10000 -> 400 (filled at build time
  with the random actions of the loop).
- ``Agent.train_episode``'s loop is driven one environment step at a time: ``train_step`` runs one pass of its body
  (act, step, append, ``update_online_networks``, ``update_target_networks``) and returns the Q loss
  (``update_q_functions`` logs it). Evaluation, logging, printing and model saving are dropped.
- ``np.random`` calls come from a ``numpy.random.default_rng(seed)`` instance; the tensorboard writer is a stub;
  ``device`` is the CPU.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn
from torch.distributions import Normal
from torch.nn import functional as F
from torch.optim import Adam

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

BATCH_SIZE = 64  # config/mujoco.yaml: 256
MEMORY_SIZE = 10000  # 1000000
START_STEPS = 400  # 10000
HIDDEN = [64, 64]  # [256, 256]
ERROR_HIDDEN = [64, 64, 64]  # [256, 256, 256]


def initialize_weights_xavier(m, gain=1.0):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight, gain=gain)
        if m.bias is not None:
            nn.init.constant_(m.bias, 0)


def create_linear_network(input_dim, output_dim, hidden_units=[],
                          hidden_activation=nn.ReLU(), output_activation=None,  # noqa: B008
                          initializer=initialize_weights_xavier):
    assert isinstance(input_dim, int) and isinstance(output_dim, int)
    assert isinstance(hidden_units, list) or isinstance(hidden_units, list)

    layers = []
    units = input_dim
    for next_units in hidden_units:
        layers.append(nn.Linear(units, next_units))
        layers.append(hidden_activation)
        units = next_units

    layers.append(nn.Linear(units, output_dim))
    if output_activation is not None:
        layers.append(output_activation)

    return nn.Sequential(*layers).apply(initialize_weights_xavier)


class StateActionFunction(nn.Module):

    def __init__(self, state_dim, action_dim, hidden_units=[256, 256]):
        super().__init__()

        self.net = create_linear_network(
            input_dim=state_dim+action_dim,
            output_dim=1,
            hidden_units=hidden_units)

    def forward(self, x):
        return self.net(x)


class TwinnedStateActionFunction(nn.Module):

    def __init__(self, state_dim, action_dim, hidden_units=[256, 256]):
        super().__init__()

        self.net1 = StateActionFunction(state_dim, action_dim, hidden_units)
        self.net2 = StateActionFunction(state_dim, action_dim, hidden_units)

    def forward(self, states, actions):
        assert states.dim() == 2 and actions.dim() == 2

        x = torch.cat([states, actions], dim=1)
        value1 = self.net1(x)
        value2 = self.net2(x)
        return value1, value2


class GaussianPolicy(nn.Module):
    LOG_STD_MAX = 2
    LOG_STD_MIN = -20

    def __init__(self, state_dim, action_dim, hidden_units=[256, 256]):
        super().__init__()

        self.net = create_linear_network(
            input_dim=state_dim,
            output_dim=2*action_dim,
            hidden_units=hidden_units)

    def forward(self, states):
        assert states.dim() == 2

        # Calculate means and stds of actions.
        means, log_stds = torch.chunk(self.net(states), 2, dim=-1)
        log_stds = torch.clamp(
            log_stds, min=self.LOG_STD_MIN, max=self.LOG_STD_MAX)
        stds = log_stds.exp_()

        # Gaussian distributions.
        normals = Normal(means, stds)

        # Sample actions.
        xs = normals.rsample()
        actions = torch.tanh(xs)

        # Calculate entropies.
        log_probs = normals.log_prob(xs) - torch.log(1 - actions.pow(2) + 1e-6)
        entropies = -log_probs.sum(dim=1, keepdim=True)

        return actions, entropies, torch.tanh(means)


def update_params(optim, loss, retain_graph=False):
    optim.zero_grad()
    loss.backward(retain_graph=retain_graph)
    optim.step()


def disable_gradients(network):
    for param in network.parameters():
        param.requires_grad = False


def _soft_update(target, source, tau):
    target.data.copy_(target.data * (1.0 - tau) + source.data * tau)


def soft_update(target, source, tau):
    assert isinstance(target, nn.Module) or isinstance(target, torch.Tensor)

    if isinstance(target, nn.Module):
        for t, s in zip(target.parameters(), source.parameters()):
            _soft_update(t, s, tau)

    elif isinstance(target, torch.Tensor):
        _soft_update(target, source, tau)

    else:
        raise NotImplementedError


class ReplayBuffer:  # the nstep == 1 path

    def __init__(self, memory_size, state_shape, action_shape, rng, gamma=0.99,
                 nstep=1):
        self._memory_size = memory_size
        self._state_shape = state_shape
        self._action_shape = action_shape
        self._gamma = gamma
        self._nstep = nstep
        self.rng = rng

        self._n = 0
        self._p = 0

        self._states = np.empty(
            (self._memory_size, ) + self._state_shape, dtype=np.float32)
        self._next_states = np.empty(
            (self._memory_size, ) + self._state_shape, dtype=np.float32)
        self._actions = np.empty(
            (self._memory_size, ) + self._action_shape, dtype=np.float32)

        self._rewards = np.empty((self._memory_size, 1), dtype=np.float32)
        self._dones = np.empty((self._memory_size, 1), dtype=np.float32)

    def append(self, state, action, reward, next_state, done,
               episode_done=None):
        self._append(state, action, reward, next_state, done)

    def _append(self, state, action, reward, next_state, done):
        self._states[self._p, ...] = state
        self._actions[self._p, ...] = action
        self._rewards[self._p, ...] = reward
        self._next_states[self._p, ...] = next_state
        self._dones[self._p, ...] = done

        self._n = min(self._n + 1, self._memory_size)
        self._p = (self._p + 1) % self._memory_size

    def sample(self, batch_size, device=torch.device('cpu')):  # noqa: B008
        assert isinstance(batch_size, int) and batch_size > 0

        idxes = self.rng.integers(low=0, high=self._n, size=batch_size)
        return self._sample_batch(idxes, batch_size, device)

    def _sample_batch(self, idxes, batch_size, device):
        states = torch.tensor(
            self._states[idxes], dtype=torch.float, device=device)
        actions = torch.tensor(
            self._actions[idxes], dtype=torch.float, device=device)
        rewards = torch.tensor(
            self._rewards[idxes], dtype=torch.float, device=device)
        dones = torch.tensor(
            self._dones[idxes], dtype=torch.float, device=device)
        next_states = torch.tensor(
            self._next_states[idxes], dtype=torch.float, device=device)

        return states, actions, rewards, next_states, dones

    def __len__(self):
        return self._n


class DisCor:
    """SAC (``discor/algorithm/sac.py``) and DisCor's additions, the subclass's overrides applied."""

    def __init__(self, state_dim, action_dim, device, gamma=0.99, nstep=1,
                 policy_lr=0.0003, q_lr=0.0003, entropy_lr=0.0003,
                 error_lr=0.0003, policy_hidden_units=[256, 256],
                 q_hidden_units=[256, 256], error_hidden_units=[256, 256, 256],
                 tau_init=10.0, target_update_coef=0.005,
                 log_interval=10, seed=0, bug=None):
        self.bug = bug
        # Algorithm.__init__
        torch.manual_seed(seed)
        self._learning_steps = 0
        self._state_dim = state_dim
        self._action_dim = action_dim
        self._device = device
        self._gamma = gamma
        self._nstep = nstep
        self._discount = gamma ** nstep
        self._log_interval = log_interval

        # SAC.__init__
        self._policy_net = GaussianPolicy(
            state_dim=self._state_dim,
            action_dim=self._action_dim,
            hidden_units=policy_hidden_units
            ).to(self._device)
        self._online_q_net = TwinnedStateActionFunction(
            state_dim=self._state_dim,
            action_dim=self._action_dim,
            hidden_units=q_hidden_units
            ).to(self._device)
        self._target_q_net = TwinnedStateActionFunction(
            state_dim=self._state_dim,
            action_dim=self._action_dim,
            hidden_units=q_hidden_units
            ).to(self._device).eval()

        # Copy parameters of the learning network to the target network.
        self._target_q_net.load_state_dict(self._online_q_net.state_dict())

        # Disable gradient calculations of the target network.
        disable_gradients(self._target_q_net)

        # Optimizers.
        self._policy_optim = Adam(self._policy_net.parameters(), lr=policy_lr)
        self._q_optim = Adam(self._online_q_net.parameters(), lr=q_lr)

        # Target entropy is -|A|.
        self._target_entropy = -float(self._action_dim)

        # We optimize log(alpha), instead of alpha.
        self._log_alpha = torch.zeros(
            1, device=self._device, requires_grad=True)
        self._alpha = self._log_alpha.detach().exp()
        self._alpha_optim = Adam([self._log_alpha], lr=entropy_lr)

        self._target_update_coef = target_update_coef

        # DisCor.__init__: build error networks.
        self._online_error_net = TwinnedStateActionFunction(
            state_dim=state_dim,
            action_dim=action_dim,
            hidden_units=error_hidden_units
            ).to(device=self._device)
        self._target_error_net = TwinnedStateActionFunction(
            state_dim=state_dim,
            action_dim=action_dim,
            hidden_units=error_hidden_units
            ).to(device=self._device).eval()

        # Copy parameters of the learning network to the target network.
        self._target_error_net.load_state_dict(
            self._online_error_net.state_dict())

        # Disable gradient calculations of the target network.
        disable_gradients(self._target_error_net)

        self._error_optim = Adam(
            self._online_error_net.parameters(), lr=error_lr)

        self._tau1 = torch.tensor(
            tau_init, device=self._device, requires_grad=False)
        self._tau2 = torch.tensor(
            tau_init, device=self._device, requires_grad=False)
        self.last_q_loss = None

    @property
    def gamma(self):
        return self._gamma

    def explore(self, state):
        state = torch.tensor(
            state[None, ...].copy(), dtype=torch.float, device=self._device)
        with torch.no_grad():
            action, _, _ = self._policy_net(state)
        action = action.cpu().numpy()[0]
        return action

    def update_target_networks(self):
        # SAC's
        if self.bug == "soft_update_reversed":
            soft_update(
                self._online_q_net, self._target_q_net, self._target_update_coef)
        else:
            soft_update(
                self._target_q_net, self._online_q_net, self._target_update_coef)
        # DisCor's
        soft_update(
            self._target_error_net, self._online_error_net,
            self._target_update_coef)

    def update_online_networks(self, batch, writer):
        self._learning_steps += 1
        self.update_policy_and_entropy(batch, writer)
        self.update_q_functions_and_error_models(batch, writer)

    def update_policy_and_entropy(self, batch, writer):
        states, actions, rewards, next_states, dones = batch

        # Update policy.
        policy_loss, entropies = self.calc_policy_loss(states)
        update_params(self._policy_optim, policy_loss)

        # Update the entropy coefficient.
        entropy_loss = self.calc_entropy_loss(entropies)
        update_params(self._alpha_optim, entropy_loss)
        self._alpha = self._log_alpha.detach().exp()

    def calc_policy_loss(self, states):
        # Resample actions to calculate expectations of Q.
        sampled_actions, entropies, _ = self._policy_net(states)

        # Expectations of Q with clipped double Q technique.
        qs1, qs2 = self._online_q_net(states, sampled_actions)
        qs = torch.min(qs1, qs2)

        # Policy objective is maximization of (Q + alpha * entropy).
        assert qs.shape == entropies.shape
        policy_loss = torch.mean((- qs - self._alpha * entropies))

        return policy_loss, entropies.detach_()

    def calc_entropy_loss(self, entropies):
        assert not entropies.requires_grad

        # Intuitively, we increse alpha when entropy is less than target
        # entropy, vice versa.
        entropy_loss = -torch.mean(
            self._log_alpha * (self._target_entropy - entropies))
        return entropy_loss

    def update_q_functions(self, batch, writer, imp_ws1=None, imp_ws2=None):
        states, actions, rewards, next_states, dones = batch

        # Calculate current and target Q values.
        curr_qs1, curr_qs2 = self.calc_current_qs(states, actions)
        target_qs = self.calc_target_qs(rewards, next_states, dones)

        # Update Q functions.
        q_loss, mean_q1, mean_q2 = \
            self.calc_q_loss(curr_qs1, curr_qs2, target_qs, imp_ws1, imp_ws2)
        update_params(self._q_optim, q_loss)
        self.last_q_loss = q_loss.detach()

        # Return there values for DisCor algorithm.
        return curr_qs1.detach(), curr_qs2.detach(), target_qs

    def calc_current_qs(self, states, actions):
        curr_qs1, curr_qs2 = self._online_q_net(states, actions)
        return curr_qs1, curr_qs2

    def calc_target_qs(self, rewards, next_states, dones):
        with torch.no_grad():
            next_actions, next_entropies, _ = self._policy_net(next_states)
            next_qs1, next_qs2 = self._target_q_net(next_states, next_actions)
            next_qs = \
                torch.min(next_qs1, next_qs2) + self._alpha * next_entropies

        assert rewards.shape == next_qs.shape
        target_qs = rewards + (1.0 - dones) * self._discount * next_qs

        return target_qs

    def calc_q_loss(self, curr_qs1, curr_qs2, target_qs, imp_ws1=None,
                    imp_ws2=None):
        assert imp_ws1 is None or imp_ws1.shape == curr_qs1.shape
        assert imp_ws2 is None or imp_ws2.shape == curr_qs2.shape
        assert not target_qs.requires_grad
        assert curr_qs1.shape == target_qs.shape

        # Q loss is mean squared TD errors with importance weights.
        if imp_ws1 is None:
            q1_loss = torch.mean((curr_qs1 - target_qs).pow(2))
            q2_loss = torch.mean((curr_qs2 - target_qs).pow(2))

        else:
            q1_loss = torch.sum((curr_qs1 - target_qs).pow(2) * imp_ws1)
            q2_loss = torch.sum((curr_qs2 - target_qs).pow(2) * imp_ws2)

        # Mean Q values for logging.
        mean_q1 = curr_qs1.detach().mean().item()
        mean_q2 = curr_qs2.detach().mean().item()

        return q1_loss + q2_loss, mean_q1, mean_q2

    def update_q_functions_and_error_models(self, batch, writer):
        states, actions, rewards, next_states, dones = batch

        # Calculate importance weights.
        imp_ws1, imp_ws2 = self.calc_importance_weights(next_states, dones)

        # Update Q functions.
        curr_qs1, curr_qs2, target_qs = \
            self.update_q_functions(batch, writer, imp_ws1, imp_ws2)

        # Calculate current and target errors, as well as importance weights.
        curr_errs1, curr_errs2 = self.calc_current_errors(states, actions)
        target_errs1, target_errs2 = self.calc_target_errors(
            next_states, dones, curr_qs1, curr_qs2, target_qs)

        # Update error models.
        err_loss = self.calc_error_loss(
            curr_errs1, curr_errs2, target_errs1, target_errs2)
        update_params(self._error_optim, err_loss)

    def calc_importance_weights(self, next_states, dones):
        with torch.no_grad():
            next_actions, _, _ = self._policy_net(next_states)
            next_errs1, next_errs2 = \
                self._target_error_net(next_states, next_actions)

        # Terms inside the exponent of importance weights.
        x1 = -(1.0 - dones) * self._gamma * next_errs1 / self._tau1
        x2 = -(1.0 - dones) * self._gamma * next_errs2 / self._tau2

        # Calculate self-normalized importance weights.
        if self.bug == "importance_softmax_over_last_dim":
            imp_ws1 = F.softmax(x1, dim=-1)
            imp_ws2 = F.softmax(x2, dim=-1)
        else:
            imp_ws1 = F.softmax(x1, dim=0)
            imp_ws2 = F.softmax(x2, dim=0)

        return imp_ws1, imp_ws2

    def calc_current_errors(self, states, actions):
        curr_errs1, curr_errs2 = self._online_error_net(states, actions)
        return curr_errs1, curr_errs2

    def calc_target_errors(self, next_states, dones, curr_qs1, curr_qs2,
                           target_qs):
        # Calculate targets of the cumulative sum of discounted Bellman errors,
        # which is 'Delta' in the paper.
        with torch.no_grad():
            next_actions, _, _ = self._policy_net(next_states)
            next_errs1, next_errs2 = \
                self._target_error_net(next_states, next_actions)

            target_errs1 = (curr_qs1 - target_qs).abs() + \
                (1.0 - dones) * self._gamma * next_errs1
            target_errs2 = (curr_qs2 - target_qs).abs() + \
                (1.0 - dones) * self._gamma * next_errs2

        return target_errs1, target_errs2

    def calc_error_loss(self, curr_errs1, curr_errs2, target_errs1,
                        target_errs2):
        err1_loss = torch.mean((curr_errs1 - target_errs1).pow(2))
        err2_loss = torch.mean((curr_errs2 - target_errs2).pow(2))

        soft_update(
            self._tau1, curr_errs1.detach().mean(), self._target_update_coef)
        soft_update(
            self._tau2, curr_errs2.detach().mean(), self._target_update_coef)

        return err1_loss + err2_loss


class _Writer:  # (port) tensorboard's SummaryWriter, dropped
    def add_scalar(self, *args, **kwargs):
        pass


class UnitActionPendulum:
    """(port) the pendulum with actions in [-1, 1] (scaled by the torque bound), as the MuJoCo tasks have."""

    def __init__(self):
        self.env = Pendulum()
        self._max_episode_steps = self.env._max_episode_steps
        self.observation_space = self.env.observation_space
        self.scale = self.env.action_space.high.copy()
        self.action_space = type(self.env.action_space)(-1.0, 1.0, (1,))

    def seed(self, seed):
        self.env.seed(seed)
        self.action_space.seed(seed)

    def reset(self):
        return self.env.reset()

    def step(self, action):
        return self.env.step(np.asarray(action) * self.scale)


def _build(seed, bug=None):
    rng = np.random.default_rng(seed)
    device = torch.device("cpu")
    env = UnitActionPendulum()
    env.seed(seed)
    algo = DisCor(
        state_dim=env.observation_space.shape[0],
        action_dim=env.action_space.shape[0],
        device=device, seed=seed, gamma=0.99, nstep=1, policy_lr=0.0003, q_lr=0.0003, entropy_lr=0.0003,
        policy_hidden_units=HIDDEN, q_hidden_units=HIDDEN, target_update_coef=0.005, log_interval=10,
        error_lr=0.0003, error_hidden_units=ERROR_HIDDEN, tau_init=10.0, bug=bug)
    replay_buffer = ReplayBuffer(
        memory_size=MEMORY_SIZE,
        state_shape=env.observation_space.shape,
        action_shape=env.action_space.shape,
        rng=rng,
        gamma=algo.gamma, nstep=1)
    writer = _Writer()

    loop = {"steps": 0, "episode_steps": 0, "state": env.reset()}

    def one_env_step():
        """One pass of Agent.train_episode's loop body; returns whether the networks were updated."""
        state = loop["state"]
        if START_STEPS > loop["steps"]:
            action = env.action_space.sample()
        else:
            action = algo.explore(state)

        next_state, reward, done, _ = env.step(action)

        # Set done=True only when the agent fails, ignoring done signal
        # if the agent reach time horizons.
        if loop["episode_steps"] + 1 >= env._max_episode_steps:
            masked_done = False
        else:
            masked_done = done

        replay_buffer.append(
            state, action, reward, next_state, masked_done,
            episode_done=done)

        loop["steps"] += 1
        loop["episode_steps"] += 1
        loop["state"] = next_state

        updated = False
        if loop["steps"] >= START_STEPS:
            # Update online networks.
            batch = replay_buffer.sample(
                BATCH_SIZE, device)
            algo.update_online_networks(batch, writer)
            updated = True

            # Update target networks.
            algo.update_target_networks()

        if done:
            loop["episode_steps"] = 0
            loop["state"] = env.reset()
        return updated

    while loop["steps"] < START_STEPS - 1:
        one_env_step()

    def train_step():
        one_env_step()
        return algo.last_q_loss

    states, actions, rewards, next_states, dones = replay_buffer.sample(BATCH_SIZE, device)
    batch = ({"states": states, "actions": actions}, (rewards, next_states, dones))

    def loss_fn(outputs, targets):
        """update_q_functions_and_error_models's Q loss on the Q network's outputs for ``batch`` (the same lines)."""
        curr_qs1, curr_qs2 = outputs
        rewards, next_states, dones = targets
        imp_ws1, imp_ws2 = algo.calc_importance_weights(next_states, dones)
        target_qs = algo.calc_target_qs(rewards, next_states, dones)
        return algo.calc_q_loss(curr_qs1, curr_qs2, target_qs, imp_ws1, imp_ws2)[0]

    return Program(name="discor_sac", model=algo._online_q_net, batch=batch, loss_fn=loss_fn,
                   optimizer=algo._q_optim, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the self-normalized importance weights taken over the last axis of the [B, 1] terms instead of the batch
    # (classic softmax-dim slip): every weight is 1, the Q loss becomes an unweighted sum and DisCor's correction
    # is gone.
    Bug("importance_softmax_over_last_dim", functools.partial(_build, bug="importance_softmax_over_last_dim"),
        "learning_ledger", ("OBJECTIVE",)),
    # soft_update's target and source swapped for the Q networks (classic): the online Q network is dragged towards
    # the frozen target copy every step. Every Q parameter alike: declared by its mechanism (README rule 6).
    Bug("soft_update_reversed", functools.partial(_build, bug="soft_update_reversed"), "step_probe", (),
        kind="step.soft_update_reversed"),
]

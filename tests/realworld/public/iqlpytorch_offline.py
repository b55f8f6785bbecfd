# ruff: noqa: PLR0402, RUF015, RUF059
"""Implicit Q-Learning (Kostrikov, Nair & Levine): offline RL from a fixed dataset of transitions, with a value
function fitted to the target Q by expectile regression (``asymmetric_l2_loss`` at tau 0.7), twin Q functions
regressed on ``r + gamma * (1 - terminal) * V(s')``, a Polyak-averaged target Q, and a Gaussian policy extracted by
advantage-weighted behaviour cloning (``exp(beta * adv)`` clamped at 100) under a cosine learning-rate schedule.

Source: https://github.com/gwthomas/IQL-PyTorch
Commit: 71ea1aa313bb9d4bc4526bbb1824c9d6f4a46b92
Files: ``src/iql.py`` (``asymmetric_l2_loss``, ``ImplicitQLearning``), ``src/value_functions.py`` (``TwinQ``,
``ValueFunction``), ``src/policy.py`` (``GaussianPolicy``), ``src/util.py`` (``mlp``, ``Squeeze``,
``update_exponential_moving_average``, ``torchify``, ``sample_batch``, ``set_seed``), ``main.py`` (the argument
defaults, ``get_env_and_dataset`` and the training loop).
License: MIT (Copyright (c) 2021 Garrett Thomas; full text in LICENSES/gwthomas-IQL-PyTorch.txt)
Domain: RL, offline (IQL: expectile value regression, twin Q, advantage-weighted regression policy)

Kept as written: ``mlp`` (ReLU hidden layers, optional output activation, ``Squeeze(-1)``), ``TwinQ`` (two Q MLPs
on ``cat([state, action])``, ``forward`` the minimum), ``ValueFunction``, ``GaussianPolicy`` (mean MLP, a free
``log_std`` clamped to [-5, 2], ``MultivariateNormal`` with a diagonal ``scale_tril``), ``ImplicitQLearning``
(deep-copied frozen target Q; one Adam per network from ``optimizer_factory``; ``CosineAnnealingLR`` over
``max_steps`` on the policy's optimizer) and its ``update`` body line for line (the target Q and ``V(s')`` under
``no_grad``, the expectile value loss, the Q loss averaged over both heads against the detached ``next_v``, the EMA
of the target with alpha 0.005, the advantage-weighted ``-log_prob`` policy loss, ``zero_grad(set_to_none=True)``
before each backward), main.py's defaults (discount 0.99, lr 3e-4, tau 0.7, beta 3.0, batch_size 256, a Gaussian
policy) and its loop (``iql.update(**sample_batch(dataset, args.batch_size))`` once per step).

Deviations from the original:
- D4RL and MuJoCo are not available: ``get_env_and_dataset`` builds the dataset by running the numpy
  ``ContinuousCartPole`` of ``_continuous_control.py`` (seeded) under a fixed, noisy linear controller (a mediocre
  behaviour policy, so the data holds falls), 2000 transitions in the dict ``d4rl.qlearning_dataset`` returns
  (``observations``, ``actions``, ``next_observations``, ``rewards``, ``terminals``: a fall is terminal, the time
  limit is not). The environment's name matches none of main.py's reward rescalings, so the rewards stay as
  recorded (as for any other D4RL task); ``torchify`` then turns every array into a float32 tensor.
- sizes for 2 CPU cores: hidden_dim 256 -> 64 (n_hidden 2 kept); ``n_steps`` (the cosine schedule's
  ``max_steps``) 10**6 -> 1000.
- ``update`` returns the step's Q loss (the original returns nothing); the ``trange`` loop, ``Log``, the periodic
  evaluation in the environment (``eval_policy``, D4RL's normalized score) and ``torch.save`` are dropped. The
  device is the CPU; ``set_seed`` is called with the seed and no environment.
- the Program's model is the twin Q function (``iql.qf``, wrapped in ``TwinQBoth`` whose ``forward`` is ``qf.both``,
  since the loss uses both heads and ``TwinQ.forward`` their minimum) with its optimizer, its batch one
  ``sample_batch`` draw; ``loss_fn`` is ``update``'s Q loss on that draw (the same lines, with the value function as
  it stands; the target's lines are repeated in ``q_targets``).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import MultivariateNormal
from torch.optim.lr_scheduler import CosineAnnealingLR

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole

DATASET = 2000
HIDDEN_DIM = 64  # (port) 256
N_STEPS = 1000  # (port) 10**6

# ---- src/util.py -------------------------------------------------------------------------------------------------

DEFAULT_DEVICE = torch.device('cpu')  # (port) 'cuda' if torch.cuda.is_available() else 'cpu'


class Squeeze(nn.Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.squeeze(dim=self.dim)


def mlp(dims, activation=nn.ReLU, output_activation=None, squeeze_output=False):
    n_dims = len(dims)
    assert n_dims >= 2, 'MLP requires at least two dims (input and output)'

    layers = []
    for i in range(n_dims - 2):
        layers.append(nn.Linear(dims[i], dims[i+1]))
        layers.append(activation())
    layers.append(nn.Linear(dims[-2], dims[-1]))
    if output_activation is not None:
        layers.append(output_activation())
    if squeeze_output:
        assert dims[-1] == 1
        layers.append(Squeeze(-1))
    net = nn.Sequential(*layers)
    net.to(dtype=torch.float32)
    return net


def update_exponential_moving_average(target, source, alpha):
    for target_param, source_param in zip(target.parameters(), source.parameters()):
        target_param.data.mul_(1. - alpha).add_(source_param.data, alpha=alpha)


def torchify(x):
    x = torch.from_numpy(x)
    if x.dtype is torch.float64:
        x = x.float()
    x = x.to(device=DEFAULT_DEVICE)
    return x


# dataset is a dict, values of which are tensors of same first dimension
def sample_batch(dataset, batch_size):
    k = list(dataset.keys())[0]
    n, device = len(dataset[k]), dataset[k].device
    for v in dataset.values():
        assert len(v) == n, 'Dataset values must have same length'
    indices = torch.randint(low=0, high=n, size=(batch_size,), device=device)
    return {k: v[indices] for k, v in dataset.items()}


def set_seed(seed, env=None):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    np.random.seed(seed)
    random.seed(seed)
    if env is not None:
        env.seed(seed)


# ---- src/value_functions.py --------------------------------------------------------------------------------------

class TwinQ(nn.Module):
    def __init__(self, state_dim, action_dim, hidden_dim=256, n_hidden=2):
        super().__init__()
        dims = [state_dim + action_dim, *([hidden_dim] * n_hidden), 1]
        self.q1 = mlp(dims, squeeze_output=True)
        self.q2 = mlp(dims, squeeze_output=True)

    def both(self, state, action):
        sa = torch.cat([state, action], 1)
        return self.q1(sa), self.q2(sa)

    def forward(self, state, action):
        return torch.min(*self.both(state, action))


class ValueFunction(nn.Module):
    def __init__(self, state_dim, hidden_dim=256, n_hidden=2):
        super().__init__()
        dims = [state_dim, *([hidden_dim] * n_hidden), 1]
        self.v = mlp(dims, squeeze_output=True)

    def forward(self, state):
        return self.v(state)


# ---- src/policy.py -----------------------------------------------------------------------------------------------

LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0


class GaussianPolicy(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden_dim=256, n_hidden=2):
        super().__init__()
        self.net = mlp([obs_dim, *([hidden_dim] * n_hidden), act_dim])
        self.log_std = nn.Parameter(torch.zeros(act_dim, dtype=torch.float32))

    def forward(self, obs):
        mean = self.net(obs)
        std = torch.exp(self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX))
        scale_tril = torch.diag(std)
        return MultivariateNormal(mean, scale_tril=scale_tril)

    def act(self, obs, deterministic=False, enable_grad=False):
        with torch.set_grad_enabled(enable_grad):
            dist = self(obs)
            return dist.mean if deterministic else dist.sample()


# ---- src/iql.py --------------------------------------------------------------------------------------------------

EXP_ADV_MAX = 100.


def asymmetric_l2_loss(u, tau):
    return torch.mean(torch.abs(tau - (u < 0).float()) * u**2)


class ImplicitQLearning(nn.Module):
    def __init__(self, qf, vf, policy, optimizer_factory, max_steps,
                 tau, beta, discount=0.99, alpha=0.005, bug=None):
        super().__init__()
        self.qf = qf.to(DEFAULT_DEVICE)
        self.q_target = copy.deepcopy(qf).requires_grad_(False).to(DEFAULT_DEVICE)
        self.vf = vf.to(DEFAULT_DEVICE)
        self.policy = policy.to(DEFAULT_DEVICE)
        self.v_optimizer = optimizer_factory(self.vf.parameters())
        self.q_optimizer = optimizer_factory(self.qf.parameters())
        self.policy_optimizer = optimizer_factory(self.policy.parameters())
        self.policy_lr_schedule = CosineAnnealingLR(self.policy_optimizer, max_steps)
        self.tau = tau
        self.beta = beta
        self.discount = discount
        self.alpha = alpha
        self.bug = bug

    def q_targets(self, next_observations, rewards, terminals):
        """(port) ``update``'s Q target, the same lines, shared with the Program's ``loss_fn``."""
        with torch.no_grad():
            next_v = self.vf(next_observations)
        if self.bug == "terminals_dropped":
            return rewards + self.discount * next_v.detach()
        return rewards + (1. - terminals.float()) * self.discount * next_v.detach()

    def update(self, observations, actions, next_observations, rewards, terminals):
        with torch.no_grad():
            target_q = self.q_target(observations, actions)
            next_v = self.vf(next_observations)

        # v, next_v = compute_batched(self.vf, [observations, next_observations])

        # Update value function
        v = self.vf(observations)
        adv = target_q - v
        v_loss = asymmetric_l2_loss(adv, self.tau)
        self.v_optimizer.zero_grad(set_to_none=True)
        v_loss.backward()
        self.v_optimizer.step()

        # Update Q function
        if self.bug == "terminals_dropped":
            targets = rewards + self.discount * next_v.detach()
        else:
            targets = rewards + (1. - terminals.float()) * self.discount * next_v.detach()
        qs = self.qf.both(observations, actions)
        q_loss = sum(F.mse_loss(q, targets) for q in qs) / len(qs)
        if self.bug != "q_zero_grad_dropped":
            self.q_optimizer.zero_grad(set_to_none=True)
        q_loss.backward()
        self.q_optimizer.step()

        # Update target Q network
        if self.bug == "ema_arguments_swapped":
            update_exponential_moving_average(self.qf, self.q_target, self.alpha)
        else:
            update_exponential_moving_average(self.q_target, self.qf, self.alpha)

        # Update policy
        exp_adv = torch.exp(self.beta * adv.detach()).clamp(max=EXP_ADV_MAX)
        policy_out = self.policy(observations)
        if isinstance(policy_out, torch.distributions.Distribution):
            bc_losses = -policy_out.log_prob(actions)
        elif torch.is_tensor(policy_out):
            assert policy_out.shape == actions.shape
            bc_losses = torch.sum((policy_out - actions)**2, dim=1)
        else:
            raise NotImplementedError
        policy_loss = torch.mean(exp_adv * bc_losses)
        self.policy_optimizer.zero_grad(set_to_none=True)
        policy_loss.backward()
        self.policy_optimizer.step()
        self.policy_lr_schedule.step()
        return q_loss.item()  # (port) the original returns nothing


class TwinQBoth(nn.Module):
    """(port) ``qf.both`` as a module call, for the Program: the same ``TwinQ`` (its parameters under ``qf.``)."""

    def __init__(self, qf):
        super().__init__()
        self.qf = qf

    def forward(self, state, action):
        return self.qf.both(state, action)


# ---- main.py -----------------------------------------------------------------------------------------------------

def qlearning_dataset(env, rng, gaussian_std=0.3):
    """(port) stands in for ``d4rl.qlearning_dataset(env)``: transitions of a noisy fixed linear controller."""
    max_action = float(env.action_space.high[0])
    obs, acts, next_obs, rews, terms = [], [], [], [], []
    state, steps = env.reset(), 0
    for _ in range(DATASET):
        x_dot, theta, theta_dot = state[1], state[2], state[3]
        action = np.clip(np.array([-(theta * 10 + theta_dot * 2 + x_dot * 0.5)])
                         + rng.normal(0, max_action * gaussian_std, size=1), -max_action, max_action)
        next_state, reward, done, _ = env.step(action)
        steps += 1
        obs.append(state)
        acts.append(action)
        next_obs.append(next_state)
        rews.append(reward)
        terms.append(float(done and steps < env._max_episode_steps))
        state = next_state
        if done:
            state, steps = env.reset(), 0
    return {"observations": np.array(obs, dtype=np.float32), "actions": np.array(acts, dtype=np.float32),
            "next_observations": np.array(next_obs, dtype=np.float32), "rewards": np.array(rews, dtype=np.float32),
            "terminals": np.array(terms, dtype=np.float32)}


def get_env_and_dataset(env_name, seed):
    env = ContinuousCartPole()  # (port) gym.make(env_name)
    env.seed(seed)
    dataset = qlearning_dataset(env, np.random.default_rng(seed))  # (port) d4rl.qlearning_dataset(env)

    if any(s in env_name for s in ('halfcheetah', 'hopper', 'walker2d')):
        raise NotImplementedError  # (port) return_range rescaling: not reached for this dataset
    elif 'antmaze' in env_name:
        dataset['rewards'] -= 1.

    for k, v in dataset.items():
        dataset[k] = torchify(v)

    return env, dataset


def _build(seed, bug=None):
    env, dataset = get_env_and_dataset('cartpole-noisy-v0', seed)
    obs_dim = dataset['observations'].shape[1]
    act_dim = dataset['actions'].shape[1]   # this assume continuous actions
    set_seed(seed)

    policy = GaussianPolicy(obs_dim, act_dim, hidden_dim=HIDDEN_DIM, n_hidden=2)

    iql = ImplicitQLearning(
        qf=TwinQ(obs_dim, act_dim, hidden_dim=HIDDEN_DIM, n_hidden=2),
        vf=ValueFunction(obs_dim, hidden_dim=HIDDEN_DIM, n_hidden=2),
        policy=policy,
        optimizer_factory=lambda params: torch.optim.Adam(params, lr=3e-4),
        max_steps=N_STEPS,
        tau=0.7,
        beta=3.0,
        alpha=0.005,
        discount=0.99,
        bug=bug,
    )
    batch_size = 256

    def train_step():
        return iql.update(**sample_batch(dataset, batch_size))

    b = sample_batch(dataset, batch_size)
    batch = ((b['observations'], b['actions']), (b['next_observations'], b['rewards'], b['terminals']))

    def loss_fn(qs, targets):
        """``update``'s Q loss on both heads' outputs for ``batch`` (the same lines)."""
        targets = iql.q_targets(*targets)
        return sum(F.mse_loss(q, targets) for q in qs) / len(qs)

    return Program(name="iqlpytorch_offline", model=TwinQBoth(iql.qf), batch=batch, loss_fn=loss_fn,
                   optimizer=iql.q_optimizer, train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``(1 - terminals)`` left out of the Q target (classic): the value bootstraps through the pole's fall.
    Bug("terminals_dropped", functools.partial(_build, bug="terminals_dropped"), "learning_ledger", ("TASK",)),
    # ``update_exponential_moving_average(self.qf, self.q_target, ...)`` (classic argument swap): the trained Q is
    # pulled towards its frozen copy after every step instead of the copy tracking it.
    Bug("ema_arguments_swapped", functools.partial(_build, bug="ema_arguments_swapped"), "step_probe", (),
        kind="step.soft_update_reversed"),
    # the Q optimizer's ``zero_grad`` left out (classic): every Q step applies the sum of all past gradients.
    # Every Q parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("q_zero_grad_dropped", functools.partial(_build, bug="q_zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

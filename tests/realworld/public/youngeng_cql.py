# ruff: noqa: UP004, C408, SIM118
"""CQL(H) on SAC from young-geng/CQL's ``SimpleSAC``: tanh-Gaussian policy, two Q functions under one Adam, soft target
Qs, entropy tuning, and the penalty ``logsumexp`` of Q over 10 random / current / next-policy actions minus Q(data) x 5.

Source: https://github.com/young-geng/CQL
Commit: 21efac46faadef7d24ecf03a8091ab9cc3a613fd
Files: ``SimpleSAC/conservative_sac.py``, ``SimpleSAC/model.py``, ``SimpleSAC/replay_buffer.py``,
``SimpleSAC/conservative_sac_main.py``
License: MIT (Copyright (c) 2020 Xinyang Geng; full text in LICENSES/young-geng-CQL.txt)
Domain: offline RL (CQL on SAC, continuous actions, fixed dataset)

Kept as written: the default config (discount 0.99, entropy tuning, no entropy backup, lr 3e-4, soft target rate
5e-3 every step, 10 CQL actions, importance sampling, no Lagrange, temperature 1, min-Q weight 5, no clipping),
``train``'s order (alpha, policy, Q updates, soft target update), the networks (last layer xavier gain 1e-2,
``TanhTransform(cache_size=1)``, ``Scalar`` log-std multiplier/offset, ``multiple_action_q_function``), ``main``'s
set-up (deepcopy targets, target entropy ``-action_dim``, actions clipped to 0.999, reward scale 1 / bias 0,
``subsample_batch`` then ``batch_to_torch`` every step).

Deviations from the original:
- no d4rl / gym: the dataset (``get_d4rl_dataset``'s dict) is made from ``seed``: 30 episodes (cut at 100 steps) of
  the continuous cart-pole of ``_continuous_control.py`` under a behavior policy ``clip(g * 4 (k . s) + (1 - g) *
  noise, -1, 1)`` of per-episode quality ``g``; a fall is a terminal, the 100-step cut is not (as d4rl's timeouts);
- sizes for 2 CPU cores: arch '256-256' -> '64-64', batch_size 256 -> 32; CPU; ``ConfigDict`` -> a namespace; the
  self-check runs 150 steps (the conservative penalty dominates the Q loss and falls after ~80 steps);
- branches the config leaves off are dropped (orthogonal init, ``no_tanh``, Lagrange, max-target backup, the BC
  epochs); ``train``'s CQL branch is moved as written into ``_cql_qf_loss`` and its TD target into ``td_target``;
  ``train`` returns ``qf_loss`` next to fewer metrics; evaluation rollouts, logging and saving are dropped;
- ``train_step`` is one iteration of ``main``'s inner loop; the Program declares ``qf1`` with the Q optimizer and
  ``qf1``'s TD loss (the same lines) on one subsampled batch;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import random
import sys
import types
from copy import deepcopy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal
from torch.distributions.transformed_distribution import TransformedDistribution
from torch.distributions.transforms import TanhTransform

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole

SELF_CHECK_STEPS = 150


# SimpleSAC/model.py
def extend_and_repeat(tensor, dim, repeat):
    # Extend and repeast the tensor along dim axie and repeat it
    ones_shape = [1 for _ in range(tensor.ndim + 1)]
    ones_shape[dim] = repeat
    return torch.unsqueeze(tensor, dim) * tensor.new_ones(ones_shape)


def soft_target_update(network, target_network, soft_target_update_rate):
    target_network_params = {k: v for k, v in target_network.named_parameters()}
    for k, v in network.named_parameters():
        target_network_params[k].data = (1 - soft_target_update_rate) * target_network_params[k].data + soft_target_update_rate * v.data


def multiple_action_q_function(forward):
    # Forward the q function with multiple actions on each state, to be used as a decorator
    def wrapped(self, observations, actions, **kwargs):
        multiple_actions = False
        batch_size = observations.shape[0]
        if actions.ndim == 3 and observations.ndim == 2:
            multiple_actions = True
            observations = extend_and_repeat(observations, 1, actions.shape[1]).reshape(-1, observations.shape[-1])
            actions = actions.reshape(-1, actions.shape[-1])
        q_values = forward(self, observations, actions, **kwargs)
        if multiple_actions:
            q_values = q_values.reshape(batch_size, -1)
        return q_values
    return wrapped


class FullyConnectedNetwork(nn.Module):
    def __init__(self, input_dim, output_dim, arch='256-256', orthogonal_init=False):
        super().__init__()
        d = input_dim
        modules = []
        hidden_sizes = [int(h) for h in arch.split('-')]
        for hidden_size in hidden_sizes:
            fc = nn.Linear(d, hidden_size)
            modules.append(fc)
            modules.append(nn.ReLU())
            d = hidden_size
        last_fc = nn.Linear(d, output_dim)
        nn.init.xavier_uniform_(last_fc.weight, gain=1e-2)
        nn.init.constant_(last_fc.bias, 0.0)
        modules.append(last_fc)
        self.network = nn.Sequential(*modules)

    def forward(self, input_tensor):
        return self.network(input_tensor)


class ReparameterizedTanhGaussian(nn.Module):
    def __init__(self, log_std_min=-20.0, log_std_max=2.0, no_tanh=False):  # (port) only the tanh branch kept
        super().__init__()
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max

    def forward(self, mean, log_std, deterministic=False):
        log_std = torch.clamp(log_std, self.log_std_min, self.log_std_max)
        std = torch.exp(log_std)
        action_distribution = TransformedDistribution(Normal(mean, std), TanhTransform(cache_size=1))
        if deterministic:
            action_sample = torch.tanh(mean)
        else:
            action_sample = action_distribution.rsample()
        log_prob = torch.sum(action_distribution.log_prob(action_sample), dim=-1)
        return action_sample, log_prob


class TanhGaussianPolicy(nn.Module):
    def __init__(self, observation_dim, action_dim, arch='256-256',
                 log_std_multiplier=1.0, log_std_offset=-1.0,
                 orthogonal_init=False, no_tanh=False):
        super().__init__()
        self.action_dim = action_dim
        self.base_network = FullyConnectedNetwork(observation_dim, 2 * action_dim, arch, orthogonal_init)
        self.log_std_multiplier = Scalar(log_std_multiplier)
        self.log_std_offset = Scalar(log_std_offset)
        self.tanh_gaussian = ReparameterizedTanhGaussian(no_tanh=no_tanh)

    def forward(self, observations, deterministic=False, repeat=None):
        if repeat is not None:
            observations = extend_and_repeat(observations, 1, repeat)
        base_network_output = self.base_network(observations)
        mean, log_std = torch.split(base_network_output, self.action_dim, dim=-1)
        log_std = self.log_std_multiplier() * log_std + self.log_std_offset()
        return self.tanh_gaussian(mean, log_std, deterministic)


class FullyConnectedQFunction(nn.Module):
    def __init__(self, observation_dim, action_dim, arch='256-256', orthogonal_init=False):
        super().__init__()
        self.network = FullyConnectedNetwork(observation_dim + action_dim, 1, arch, orthogonal_init)

    @multiple_action_q_function
    def forward(self, observations, actions):
        input_tensor = torch.cat([observations, actions], dim=-1)
        return torch.squeeze(self.network(input_tensor), dim=-1)


class Scalar(nn.Module):
    def __init__(self, init_value):
        super().__init__()
        self.constant = nn.Parameter(torch.tensor(init_value, dtype=torch.float32))

    def forward(self):
        return self.constant


# SimpleSAC/conservative_sac.py
class ConservativeSAC(object):

    @staticmethod
    def get_default_config(updates=None):
        config = types.SimpleNamespace()  # (port) ml_collections.ConfigDict, same keys and values
        config.discount = 0.99
        config.alpha_multiplier = 1.0
        config.use_automatic_entropy_tuning = True
        config.backup_entropy = False
        config.target_entropy = 0.0
        config.policy_lr = 3e-4
        config.qf_lr = 3e-4
        config.optimizer_type = 'adam'
        config.soft_target_update_rate = 5e-3
        config.target_update_period = 1
        config.use_cql = True
        config.cql_n_actions = 10
        config.cql_importance_sample = True
        config.cql_lagrange = False
        config.cql_target_action_gap = 1.0
        config.cql_temp = 1.0
        config.cql_min_q_weight = 5.0
        config.cql_max_target_backup = False
        config.cql_clip_diff_min = -np.inf
        config.cql_clip_diff_max = np.inf
        if updates is not None:
            config.__dict__.update(updates)
        return config

    def __init__(self, config, policy, qf1, qf2, target_qf1, target_qf2, bug=None):
        self.config = ConservativeSAC.get_default_config(config)
        self.policy = policy
        self.qf1 = qf1
        self.qf2 = qf2
        self.target_qf1 = target_qf1
        self.target_qf2 = target_qf2
        self.bug = bug
        optimizer_class = {'adam': torch.optim.Adam, 'sgd': torch.optim.SGD}[self.config.optimizer_type]
        self.policy_optimizer = optimizer_class(self.policy.parameters(), self.config.policy_lr)
        self.qf_optimizer = optimizer_class(list(self.qf1.parameters()) + list(self.qf2.parameters()), self.config.qf_lr)
        if self.config.use_automatic_entropy_tuning:
            self.log_alpha = Scalar(0.0)
            self.alpha_optimizer = optimizer_class(self.log_alpha.parameters(), lr=self.config.policy_lr)
        else:
            self.log_alpha = None
        self.update_target_network(1.0)
        self._total_steps = 0

    def update_target_network(self, soft_target_update_rate):
        if self.bug == "soft_update_args_swapped" and soft_target_update_rate < 1.0:
            soft_target_update(self.target_qf1, self.qf1, soft_target_update_rate)
            soft_target_update(self.target_qf2, self.qf2, soft_target_update_rate)
            return
        soft_target_update(self.qf1, self.target_qf1, soft_target_update_rate)
        soft_target_update(self.qf2, self.target_qf2, soft_target_update_rate)

    def td_target(self, rewards, next_observations, dones):
        """(port) ``train``'s TD target lines (the non-max-backup branch), shared with the Program's loss_fn."""
        new_next_actions, next_log_pi = self.policy(next_observations)
        target_q_values = torch.min(self.target_qf1(next_observations, new_next_actions),
                                    self.target_qf2(next_observations, new_next_actions))
        if self.config.backup_entropy:
            target_q_values = target_q_values - self.log_alpha().exp() * next_log_pi
        if self.bug == "done_mask_dropped":
            return rewards + self.config.discount * target_q_values
        return rewards + (1. - dones) * self.config.discount * target_q_values

    def _cql_qf_loss(self, observations, actions, next_observations, q1_pred, q2_pred):
        batch_size = actions.shape[0]
        action_dim = actions.shape[-1]
        cql_random_actions = actions.new_empty((batch_size, self.config.cql_n_actions, action_dim), requires_grad=False).uniform_(-1, 1)
        cql_current_actions, cql_current_log_pis = self.policy(observations, repeat=self.config.cql_n_actions)
        cql_next_actions, cql_next_log_pis = self.policy(next_observations, repeat=self.config.cql_n_actions)
        cql_current_actions, cql_current_log_pis = cql_current_actions.detach(), cql_current_log_pis.detach()
        cql_next_actions, cql_next_log_pis = cql_next_actions.detach(), cql_next_log_pis.detach()
        cql_q1_rand = self.qf1(observations, cql_random_actions)
        cql_q2_rand = self.qf2(observations, cql_random_actions)
        cql_q1_current_actions = self.qf1(observations, cql_current_actions)
        cql_q2_current_actions = self.qf2(observations, cql_current_actions)
        cql_q1_next_actions = self.qf1(observations, cql_next_actions)
        cql_q2_next_actions = self.qf2(observations, cql_next_actions)
        if self.config.cql_importance_sample:
            random_density = np.log(0.5 ** action_dim)
            cql_cat_q1 = torch.cat([cql_q1_rand - random_density, cql_q1_next_actions - cql_next_log_pis.detach(),
                                    cql_q1_current_actions - cql_current_log_pis.detach()], dim=1)
            cql_cat_q2 = torch.cat([cql_q2_rand - random_density, cql_q2_next_actions - cql_next_log_pis.detach(),
                                    cql_q2_current_actions - cql_current_log_pis.detach()], dim=1)
        cql_qf1_ood = torch.logsumexp(cql_cat_q1 / self.config.cql_temp, dim=1) * self.config.cql_temp
        cql_qf2_ood = torch.logsumexp(cql_cat_q2 / self.config.cql_temp, dim=1) * self.config.cql_temp
        """Subtract the log likelihood of data"""
        if self.bug == "cql_diff_sign_flipped":
            cql_qf1_ood, q1_pred, cql_qf2_ood, q2_pred = q1_pred, cql_qf1_ood, q2_pred, cql_qf2_ood
        cql_qf1_diff = torch.clamp(cql_qf1_ood - q1_pred, self.config.cql_clip_diff_min, self.config.cql_clip_diff_max).mean()
        cql_qf2_diff = torch.clamp(cql_qf2_ood - q2_pred, self.config.cql_clip_diff_min, self.config.cql_clip_diff_max).mean()
        cql_min_qf1_loss = cql_qf1_diff * self.config.cql_min_q_weight
        cql_min_qf2_loss = cql_qf2_diff * self.config.cql_min_q_weight
        return cql_min_qf1_loss + cql_min_qf2_loss

    def train(self, batch, bc=False):
        self._total_steps += 1
        observations = batch['observations']
        actions = batch['actions']
        rewards = batch['rewards']
        next_observations = batch['next_observations']
        dones = batch['dones']
        new_actions, log_pi = self.policy(observations)
        alpha_loss = -(self.log_alpha() * (log_pi + self.config.target_entropy).detach()).mean()
        alpha = self.log_alpha().exp() * self.config.alpha_multiplier
        """ Policy loss """
        q_new_actions = torch.min(self.qf1(observations, new_actions), self.qf2(observations, new_actions))
        policy_loss = (alpha*log_pi - q_new_actions).mean()
        """ Q function loss """
        q1_pred = self.qf1(observations, actions)
        q2_pred = self.qf2(observations, actions)
        td_target = self.td_target(rewards, next_observations, dones)
        qf1_loss = F.mse_loss(q1_pred, td_target.detach())
        qf2_loss = F.mse_loss(q2_pred, td_target.detach())
        ### CQL
        qf_loss = qf1_loss + qf2_loss + self._cql_qf_loss(observations, actions, next_observations, q1_pred, q2_pred)
        if self.config.use_automatic_entropy_tuning:
            self.alpha_optimizer.zero_grad()
            alpha_loss.backward()
            self.alpha_optimizer.step()
        self.policy_optimizer.zero_grad()
        policy_loss.backward()
        self.policy_optimizer.step()
        self.qf_optimizer.zero_grad()
        qf_loss.backward()
        self.qf_optimizer.step()
        if self.total_steps % self.config.target_update_period == 0:
            self.update_target_network(self.config.soft_target_update_rate)
        metrics = dict(policy_loss=policy_loss.item(), qf1_loss=qf1_loss.item(), qf2_loss=qf2_loss.item(),
                       alpha_loss=alpha_loss.item(), alpha=alpha.item(), total_steps=self.total_steps)
        return metrics, qf_loss.detach()  # (port) the step's loss next to the metrics

    @property
    def total_steps(self):
        return self._total_steps


# SimpleSAC/replay_buffer.py
def index_batch(batch, indices):
    indexed = {}
    for key in batch.keys():
        indexed[key] = batch[key][indices, ...]
    return indexed


def subsample_batch(batch, size):
    indices = np.random.randint(batch['observations'].shape[0], size=size)
    return index_batch(batch, indices)


def batch_to_torch(batch, device):
    return {k: torch.from_numpy(v).to(device=device, non_blocking=True) for k, v in batch.items()}


def make_dataset(seed, n_episodes=30, max_len=100):
    """(port) ``get_d4rl_dataset``'s dict from cart-pole episodes of behavior policies of mixed quality."""
    env = ContinuousCartPole()
    env.seed(seed)
    rng = np.random.default_rng(seed + 1)
    k = np.array([0.1, 0.3, 3.0, 0.5])
    keys = ('observations', 'actions', 'next_observations', 'rewards', 'dones')
    out = {key: [] for key in keys}
    for _ in range(n_episodes):
        g = rng.uniform(0.0, 1.0)
        s = env.reset()
        for _t in range(max_len):
            a = np.array([np.clip(g * float(k @ s) * 4.0 + (1 - g) * rng.uniform(-1, 1), -1.0, 1.0)], dtype=np.float32)
            s2, r, done, _ = env.step(a)
            fell = done and env.steps < env._max_episode_steps
            for key, v in zip(keys, (s, a, s2, r, float(fell))):
                out[key].append(v)
            s = s2
            if done:
                break
    return {key: np.array(v, dtype=np.float32) for key, v in out.items()}


def _build(seed, bug=None):
    FLAGS = types.SimpleNamespace(seed=seed, batch_size=32, reward_scale=1.0, reward_bias=0.0, clip_action=0.999,
                                  policy_arch='64-64', qf_arch='64-64', orthogonal_init=False, policy_log_std_multiplier=1.0,
                                  policy_log_std_offset=-1.0, cql=dict(), device='cpu')  # (port) sizes 256 -> 64 and 32
    np.random.seed(FLAGS.seed), torch.manual_seed(FLAGS.seed), random.seed(FLAGS.seed)  # set_random_seed (no CUDA)
    dataset = make_dataset(seed)
    dataset['rewards'] = dataset['rewards'] * FLAGS.reward_scale + FLAGS.reward_bias
    dataset['actions'] = np.clip(dataset['actions'], -FLAGS.clip_action, FLAGS.clip_action)
    obs_dim, act_dim = 4, 1
    policy = TanhGaussianPolicy(obs_dim, act_dim, arch=FLAGS.policy_arch, log_std_multiplier=FLAGS.policy_log_std_multiplier,
                                log_std_offset=FLAGS.policy_log_std_offset, orthogonal_init=FLAGS.orthogonal_init)
    qf1 = FullyConnectedQFunction(obs_dim, act_dim, arch=FLAGS.qf_arch, orthogonal_init=FLAGS.orthogonal_init)
    target_qf1 = deepcopy(qf1)
    qf2 = FullyConnectedQFunction(obs_dim, act_dim, arch=FLAGS.qf_arch, orthogonal_init=FLAGS.orthogonal_init)
    target_qf2 = deepcopy(qf2)
    FLAGS.cql['target_entropy'] = -np.prod((act_dim,)).item()
    sac = ConservativeSAC(FLAGS.cql, policy, qf1, qf2, target_qf1, target_qf2, bug=bug)
    probe = batch_to_torch(subsample_batch(dataset, FLAGS.batch_size), FLAGS.device)
    batch = ({k: probe[k] for k in ("observations", "actions")}, (probe['rewards'], probe['next_observations'], probe['dones']))

    def loss_fn(q1_pred, targets):
        """``train``'s qf1_loss on qf1's output for ``batch`` (the same lines)."""
        rewards, next_observations, dones = targets
        td_target = sac.td_target(rewards, next_observations, dones)
        return F.mse_loss(q1_pred, td_target.detach())

    def train_step():
        batch = batch_to_torch(subsample_batch(dataset, FLAGS.batch_size), FLAGS.device)
        _metrics, qf_loss = sac.train(batch, bc=False)
        return qf_loss

    return Program(name="youngeng_cql", model=qf1, batch=batch, loss_fn=loss_fn, optimizer=sac.qf_optimizer,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic sign slip of the conservative term: Q of the dataset actions minus the logsumexp over sampled
    # actions, so the penalty pushes the dataset actions' values down and the out-of-distribution values up.
    Bug("cql_diff_sign_flipped", functools.partial(_build, bug="cql_diff_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the (1 - dones) mask left out of the TD target, so a fall is bootstrapped as if the episode went on.
    Bug("done_mask_dropped", functools.partial(_build, bug="done_mask_dropped"), "learning_ledger", ("TASK",)),
    # classic argument-order slip: soft_target_update(target, network, tau) drags the trained Q functions back
    # toward target networks that never move; every Q parameter alike: declared by its mechanism (README rule 6).
    Bug("soft_update_args_swapped", functools.partial(_build, bug="soft_update_args_swapped"), "step_probe", (),
        kind="step.soft_update_reversed"),
]

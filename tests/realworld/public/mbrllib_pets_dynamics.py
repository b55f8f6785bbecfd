# ruff: noqa: PLC0414, RUF059
"""PETS dynamics model from mbrl-lib: a probabilistic ensemble (GaussianMLP) trained by Gaussian NLL on
continuous cart-pole transitions, with input normalization, delta targets and bootstrapped member batches.

Source: https://github.com/facebookresearch/mbrl-lib, commit 3f93cccfc8d635f74e335a2f07aab6e9a48fc021, files
``notebooks/pets_example.ipynb`` (the configuration and the loop), ``mbrl/models/gaussian_mlp.py`` (``GaussianMLP``:
``_default_forward``, ``_nll_loss``, ``eval_score``), ``mbrl/models/util.py`` (``EnsembleLinearLayer``,
``truncated_normal_init``), ``mbrl/models/model.py`` (``Model.update``), ``mbrl/models/one_dim_tr_model.py``
(``OneDTransitionRewardModel``: ``_get_model_input``, ``_process_batch``, ``update_normalizer``, ``update``,
``eval_score``), ``mbrl/models/model_trainer.py`` (``ModelTrainer``: the Adam optimizer, ``train``'s batch loop,
``evaluate``), ``mbrl/util/math.py`` (``gaussian_nll``, ``truncated_normal_``, ``Normalizer``),
``mbrl/util/replay_buffer.py`` (``TransitionIterator``, ``BootstrapIterator``), ``mbrl/util/common.py``
(``get_basic_buffer_iterators``, ``rollout_agent_trajectories``). License: MIT (Copyright (c) Facebook, Inc. and
its affiliates; full text in LICENSES/facebookresearch-mbrl-lib.txt).

Kept as written: the notebook's model configuration (GaussianMLP, num_layers 3, ensemble_size 5, hid_size 200,
LeakyReLU(0.01), not deterministic; learned_rewards False, target_is_delta True, normalize True; model_batch_size
32, validation_ratio 0.05; ``ModelTrainer(optim_lr=1e-3, weight_decay=5e-5)``, Adam eps 1e-8; bootstrap batches
sampled with replacement, shuffled each epoch), the ensemble layers and their truncated-normal initialization,
the soft clamp of the log-variance between the (fixed) ``min_logvar`` -10 and ``max_logvar`` 0.5, the NLL
(``l2 * exp(-logvar) + logvar`` averaged over batch and outputs, summed over members, plus
``0.01 * (max_logvar.sum() - min_logvar.sum())``), ``Model.update`` (train mode, zero_grad, loss, backward, step),
the normalizer (mean/std of obs and action over the whole buffer, std below 1e-5 set to 1), the per-member MSE
``eval_score`` on the validation split.

Deviations:
- mbrl-lib's ``cartpole_continuous`` gym environment is replaced by ``ContinuousCartPole`` of
  ``_continuous_control.py`` (the same cart-pole equations, force ``10 * action``, seeded); the buffer holds the
  notebook's first ``trial_length`` (200) random-agent steps (``rollout_agent_trajectories`` with ``RandomAgent``).
- the CEM planner, ``ModelEnv`` and the later trials (which only add data between trainings) are not ported; the
  dynamics model's ``propagation_method`` ("fixed_model", used only when planning) is left None so that
  ``model(x)`` returns every member's output, as training's ``forward(..., use_propagation=False)`` does.
- ``train_step`` is one iteration of ``ModelTrainer.train``'s batch loop (``model.update(batch, optimizer)``);
  the epoch bookkeeping (best weights, patience) is left out; ``eval_fn`` is ``evaluate`` on the validation split.
- ``TransitionBatch`` and the buffer keep only the fields used here; hydra/omegaconf instantiation is written out.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn as nn
from torch.nn import functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import ContinuousCartPole

trial_length = 200
ensemble_size = 5
model_batch_size = 32
validation_ratio = 0.05


# ---- mbrl/util/math.py --------------------------------------------------------------------------------------
def gaussian_nll(pred_mean, pred_logvar, target, reduce=True, bug=None):
    l2 = F.mse_loss(pred_mean, target, reduction="none")
    inv_var = (-pred_logvar).exp()
    if bug == "nll_precision_dropped":
        losses = l2 + pred_logvar
    else:
        losses = l2 * inv_var + pred_logvar
    if reduce:
        return losses.sum(dim=1).mean()
    return losses


def truncated_normal_(tensor, mean=0, std=1):
    torch.nn.init.normal_(tensor, mean=mean, std=std)
    while True:
        cond = torch.logical_or(tensor < mean - 2 * std, tensor > mean + 2 * std)
        bound_violations = torch.sum(cond).item()
        if bound_violations == 0:
            break
        tensor[cond] = torch.normal(
            mean, std, size=(bound_violations,), device=tensor.device
        )
    return tensor


class Normalizer:
    def __init__(self, in_size, device, dtype=torch.float32):
        self.mean = torch.zeros((1, in_size), device=device, dtype=dtype)
        self.std = torch.ones((1, in_size), device=device, dtype=dtype)
        self.eps = 1e-12 if dtype == torch.double else 1e-5
        self.device = device

    def update_stats(self, data):
        assert data.ndim == 2 and data.shape[1] == self.mean.shape[1]
        if isinstance(data, np.ndarray):
            data = torch.from_numpy(data).to(self.device)
        self.mean = data.mean(0, keepdim=True)
        self.std = data.std(0, keepdim=True)
        self.std[self.std < self.eps] = 1.0

    def normalize(self, val):
        if isinstance(val, np.ndarray):
            val = torch.from_numpy(val).to(self.device)
        return (val - self.mean) / self.std


# ---- mbrl/models/util.py ------------------------------------------------------------------------------------
def truncated_normal_init(m: nn.Module):
    """Initializes the weights of the given module using a truncated normal distribution."""
    if isinstance(m, nn.Linear):
        input_dim = m.weight.data.shape[0]
        stddev = 1 / (2 * np.sqrt(input_dim))
        truncated_normal_(m.weight.data, std=stddev)
        m.bias.data.fill_(0.0)
    if isinstance(m, EnsembleLinearLayer):
        num_members, input_dim, _ = m.weight.data.shape
        stddev = 1 / (2 * np.sqrt(input_dim))
        for i in range(num_members):
            truncated_normal_(m.weight.data[i], std=stddev)
        m.bias.data.fill_(0.0)


class EnsembleLinearLayer(nn.Module):
    """Efficient linear layer for ensemble models."""

    def __init__(self, num_members, in_size, out_size, bias=True):
        super().__init__()
        self.num_members = num_members
        self.in_size = in_size
        self.out_size = out_size
        self.weight = nn.Parameter(
            torch.rand(self.num_members, self.in_size, self.out_size)
        )
        if bias:
            self.bias = nn.Parameter(torch.rand(self.num_members, 1, self.out_size))
            self.use_bias = True
        else:
            self.use_bias = False
        self.elite_models = None
        self.use_only_elite = False

    def forward(self, x):
        if self.use_only_elite:
            xw = x.matmul(self.weight[self.elite_models, ...])
            if self.use_bias:
                return xw + self.bias[self.elite_models, ...]
            else:
                return xw
        else:
            xw = x.matmul(self.weight)
            if self.use_bias:
                return xw + self.bias
            else:
                return xw


# ---- mbrl/models/gaussian_mlp.py (+ model.py's Ensemble/Model) ----------------------------------------------
class GaussianMLP(nn.Module):
    def __init__(self, in_size, out_size, device, num_layers=4, ensemble_size=1, hid_size=200,
                 deterministic=False, propagation_method=None, learn_logvar_bounds=False,
                 activation_fn_cfg=None, bug=None):
        super().__init__()
        self.device = torch.device(device)
        self.num_members = ensemble_size
        self.propagation_method = propagation_method
        self.deterministic = deterministic
        self.in_size = in_size
        self.out_size = out_size
        self.bug = bug

        def create_activation():
            if activation_fn_cfg is None:
                activation_func = nn.ReLU()
            else:
                activation_func = nn.LeakyReLU(negative_slope=activation_fn_cfg["negative_slope"])
            return activation_func

        def create_linear_layer(l_in, l_out):
            return EnsembleLinearLayer(ensemble_size, l_in, l_out)

        hidden_layers = [
            nn.Sequential(create_linear_layer(in_size, hid_size), create_activation())
        ]
        for i in range(num_layers - 1):
            hidden_layers.append(
                nn.Sequential(
                    create_linear_layer(hid_size, hid_size),
                    create_activation(),
                )
            )
        self.hidden_layers = nn.Sequential(*hidden_layers)

        if deterministic:
            self.mean_and_logvar = create_linear_layer(hid_size, out_size)
        else:
            self.mean_and_logvar = create_linear_layer(hid_size, 2 * out_size)
            self.min_logvar = nn.Parameter(
                -10 * torch.ones(1, out_size), requires_grad=learn_logvar_bounds
            )
            self.max_logvar = nn.Parameter(
                0.5 * torch.ones(1, out_size), requires_grad=learn_logvar_bounds
            )

        self.apply(truncated_normal_init)
        self.to(self.device)

        self.elite_models = None

    def _default_forward(self, x, only_elite=False, **_kwargs):
        x = self.hidden_layers(x)
        mean_and_logvar = self.mean_and_logvar(x)
        if self.deterministic:
            return mean_and_logvar, None
        else:
            mean = mean_and_logvar[..., : self.out_size]
            logvar = mean_and_logvar[..., self.out_size:]
            logvar = self.max_logvar - F.softplus(self.max_logvar - logvar)
            logvar = self.min_logvar + F.softplus(logvar - self.min_logvar)
            return mean, logvar

    def _forward_ensemble(self, x, rng=None, propagation_indices=None):
        if self.propagation_method is None:
            mean, logvar = self._default_forward(x, only_elite=False)
            if self.num_members == 1:
                mean = mean[0]
                logvar = logvar[0] if logvar is not None else None
            return mean, logvar
        raise NotImplementedError("the planning propagation methods are not ported")

    def forward(self, x, rng=None, propagation_indices=None, use_propagation=True):
        if use_propagation:
            return self._forward_ensemble(
                x, rng=rng, propagation_indices=propagation_indices
            )
        return self._default_forward(x)

    def _nll_loss(self, model_in, target):
        assert model_in.ndim == target.ndim
        if model_in.ndim == 2:  # add ensemble dimension
            model_in = model_in.unsqueeze(0)
            target = target.unsqueeze(0)
        pred_mean, pred_logvar = self.forward(model_in, use_propagation=False)
        if target.shape[0] != self.num_members:
            target = target.repeat(self.num_members, 1, 1)
        nll = (
            gaussian_nll(pred_mean, pred_logvar, target, reduce=False, bug=self.bug)
            .mean((1, 2))  # average over batch and target dimension
            .sum()
        )  # sum over ensemble dimension
        nll += 0.01 * (self.max_logvar.sum() - self.min_logvar.sum())
        return nll

    def loss(self, model_in, target=None):
        return self._nll_loss(model_in, target), {}

    def eval_score(self, model_in, target=None):
        assert model_in.ndim == 2 and target.ndim == 2
        with torch.no_grad():
            pred_mean, _ = self.forward(model_in, use_propagation=False)
            target = target.repeat((self.num_members, 1, 1))
            return F.mse_loss(pred_mean, target, reduction="none"), {}

    def update(self, model_in, optimizer, target=None):
        """mbrl/models/model.py's ``Model.update``."""
        self.train()
        if self.bug != "zero_grad_dropped":
            optimizer.zero_grad()
        loss, meta = self.loss(model_in, target)
        loss.backward()
        optimizer.step()
        return loss.item(), meta


# ---- mbrl/models/one_dim_tr_model.py ------------------------------------------------------------------------
@dataclasses.dataclass
class TransitionBatch:
    obs: np.ndarray
    act: np.ndarray
    next_obs: np.ndarray
    rewards: np.ndarray
    terminateds: np.ndarray
    truncateds: np.ndarray

    def astuple(self):
        return self.obs, self.act, self.next_obs, self.rewards, self.terminateds, self.truncateds

    def __len__(self):
        return self.obs.shape[0]

    def __getitem__(self, item):
        return TransitionBatch(*(x[item] for x in self.astuple()))


def _consolidate_batches(batches):
    return TransitionBatch(*(np.stack(xs) for xs in zip(*(b.astuple() for b in batches))))


class OneDTransitionRewardModel(nn.Module):
    def __init__(self, model, target_is_delta=True, normalize=False, normalize_double_precision=False,
                 learned_rewards=True, obs_process_fn=None, no_delta_list=None, num_elites=None):
        super().__init__()
        self.model = model
        self.input_normalizer = None
        if normalize:
            self.input_normalizer = Normalizer(
                self.model.in_size,
                self.model.device,
                dtype=torch.double if normalize_double_precision else torch.float,
            )
        self.device = self.model.device
        self.learned_rewards = learned_rewards
        self.target_is_delta = target_is_delta
        self.no_delta_list = no_delta_list if no_delta_list else []
        self.obs_process_fn = obs_process_fn
        self.num_elites = num_elites
        if not num_elites:
            self.num_elites = self.model.num_members

    def _get_model_input(self, obs, action):
        if self.obs_process_fn:
            obs = self.obs_process_fn(obs)
        obs = torch.as_tensor(obs).to(self.device)
        action = torch.as_tensor(action).to(self.device)
        model_in = torch.cat([obs, action], dim=obs.ndim - 1)
        if self.input_normalizer:
            # Normalizer lives on device
            model_in = self.input_normalizer.normalize(model_in).float().to(self.device)
        return model_in

    def _process_batch(self, batch, _as_float=False):
        obs, action, next_obs, reward, _, _ = batch.astuple()
        if self.target_is_delta:
            target_obs = next_obs - obs
            for dim in self.no_delta_list:
                target_obs[..., dim] = next_obs[..., dim]
        else:
            target_obs = next_obs
        target_obs = torch.as_tensor(target_obs).to(self.device)

        model_in = self._get_model_input(obs, action)
        if self.learned_rewards:
            reward = torch.as_tensor(reward).to(self.device).unsqueeze(reward.ndim)
            target = torch.cat([target_obs, reward], dim=obs.ndim - 1)
        else:
            target = target_obs
        return model_in.float(), target.float()

    def forward(self, x, *args, **kwargs):
        return self.model.forward(x, *args, **kwargs)

    def update_normalizer(self, batch):
        if self.input_normalizer is None:
            return
        obs, action = batch.obs, batch.act
        if obs.ndim == 1:
            obs = obs[None, :]
            action = action[None, :]
        if self.obs_process_fn:
            obs = self.obs_process_fn(obs)
        model_in_np = np.concatenate([obs, action], axis=obs.ndim - 1)
        self.input_normalizer.update_stats(model_in_np)

    def update(self, batch, optimizer, target=None):
        assert target is None
        model_in, target = self._process_batch(batch)
        return self.model.update(model_in, optimizer, target=target)

    def eval_score(self, batch, target=None):
        assert target is None
        with torch.no_grad():
            model_in, target = self._process_batch(batch)
            return self.model.eval_score(model_in, target=target)


# ---- mbrl/util/replay_buffer.py, mbrl/util/common.py --------------------------------------------------------
class TransitionIterator:
    def __init__(self, transitions, batch_size, shuffle_each_epoch=False, rng=None):
        self.transitions = transitions
        self.num_stored = len(transitions)
        self._order = np.arange(self.num_stored)
        self.batch_size = batch_size
        self._current_batch = 0
        self._shuffle_each_epoch = shuffle_each_epoch
        self._rng = rng if rng is not None else np.random.default_rng()

    def _get_indices_next_batch(self):
        start_idx = self._current_batch * self.batch_size
        if start_idx >= self.num_stored:
            raise StopIteration
        end_idx = min((self._current_batch + 1) * self.batch_size, self.num_stored)
        order_indices = range(start_idx, end_idx)
        indices = self._order[order_indices]
        self._current_batch += 1
        return indices

    def __iter__(self):
        self._current_batch = 0
        if self._shuffle_each_epoch:
            self._order = self._rng.permutation(self.num_stored)
        return self

    def __next__(self):
        return self[self._get_indices_next_batch()]

    def __getitem__(self, item):
        return self.transitions[item]


class BootstrapIterator(TransitionIterator):
    def __init__(self, transitions, batch_size, ensemble_size, shuffle_each_epoch=False, permute_indices=True,
                 rng=None):
        super().__init__(
            transitions, batch_size, shuffle_each_epoch=shuffle_each_epoch, rng=rng
        )
        self._ensemble_size = ensemble_size
        self._permute_indices = permute_indices
        self._bootstrap_iter = ensemble_size > 1
        self.member_indices = self._sample_member_indices()

    def _sample_member_indices(self):
        member_indices = np.empty((self.ensemble_size, self.num_stored), dtype=int)
        if self._permute_indices:
            for i in range(self.ensemble_size):
                member_indices[i] = self._rng.permutation(self.num_stored)
        else:
            member_indices = self._rng.choice(
                self.num_stored,
                size=(self.ensemble_size, self.num_stored),
                replace=True,
            )
        return member_indices

    def __iter__(self):
        super().__iter__()
        return self

    def __next__(self):
        if not self._bootstrap_iter:
            return super().__next__()
        indices = self._get_indices_next_batch()
        batches = []
        for member_idx in self.member_indices:
            content_indices = member_idx[indices]
            batches.append(self[content_indices])
        return _consolidate_batches(batches)

    def toggle_bootstrap(self):
        if self.ensemble_size > 1:
            self._bootstrap_iter = not self._bootstrap_iter

    @property
    def ensemble_size(self):
        return self._ensemble_size


def rollout_random_agent(env, steps, rng):
    """``rollout_agent_trajectories(env, trial_length, RandomAgent(env), ...)``: random actions, reset at the end."""
    obs_l, act_l, next_l, rew_l, term_l, trunc_l = [], [], [], [], [], []
    obs = env.reset()
    for _ in range(steps):
        action = env.action_space.sample()
        next_obs, reward, done, _ = env.step(action)
        obs_l.append(obs)
        act_l.append(action)
        next_l.append(next_obs)
        rew_l.append(reward)
        term_l.append(done)
        trunc_l.append(False)
        obs = env.reset() if done else next_obs
    return TransitionBatch(np.array(obs_l, dtype=np.float32), np.array(act_l, dtype=np.float32),
                           np.array(next_l, dtype=np.float32), np.array(rew_l, dtype=np.float32),
                           np.array(term_l), np.array(trunc_l))


def get_basic_buffer_iterators(data_all, batch_size, val_ratio, ensemble_size=1, shuffle_each_epoch=True,
                               bootstrap_permutes=False, rng=None):
    data = data_all[rng.permutation(len(data_all))]  # replay_buffer.get_all(shuffle=True)
    num_stored = len(data)
    val_size = int(num_stored * val_ratio)
    train_size = num_stored - val_size
    train_data = data[:train_size]
    train_iter = BootstrapIterator(
        train_data,
        batch_size,
        ensemble_size,
        shuffle_each_epoch=shuffle_each_epoch,
        permute_indices=bootstrap_permutes,
        rng=rng,
    )
    val_iter = None
    if val_size > 0:
        val_data = data[train_size:]
        val_iter = TransitionIterator(val_data, batch_size, shuffle_each_epoch=False, rng=rng)
    return train_iter, val_iter


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed=seed)
    env = ContinuousCartPole()
    env.seed(seed)
    env.action_space.seed(seed)
    obs_shape = env.observation_space.shape
    act_shape = env.action_space.shape

    # common_util.create_one_dim_tr_model(cfg, obs_shape, act_shape)
    gaussian_mlp = GaussianMLP(
        in_size=obs_shape[0] + act_shape[0], out_size=obs_shape[0], device="cpu", num_layers=3,
        ensemble_size=ensemble_size, hid_size=200, deterministic=False, propagation_method=None,
        activation_fn_cfg={"_target_": "torch.nn.LeakyReLU", "negative_slope": 0.01}, bug=bug,
    )
    dynamics_model = OneDTransitionRewardModel(gaussian_mlp, target_is_delta=True, normalize=True,
                                               learned_rewards=False)
    # models.ModelTrainer(dynamics_model, optim_lr=1e-3, weight_decay=5e-5)
    optimizer = torch.optim.Adam(dynamics_model.parameters(), lr=1e-3, weight_decay=5e-5, eps=1e-8)

    replay = rollout_random_agent(env, trial_length, rng)
    dynamics_model.update_normalizer(replay)  # update normalizer stats
    dataset_train, dataset_val = get_basic_buffer_iterators(
        replay, batch_size=model_batch_size, val_ratio=validation_ratio, ensemble_size=ensemble_size,
        shuffle_each_epoch=True, bootstrap_permutes=False, rng=rng,
    )

    first = next(iter(dataset_train))
    model_in, target = dynamics_model._process_batch(first)
    batch = (model_in, target)

    def loss_fn(outputs, target):
        """GaussianMLP._nll_loss on the members' outputs for ``batch`` (the same lines)."""
        pred_mean, pred_logvar = outputs
        nll = gaussian_nll(pred_mean, pred_logvar, target, reduce=False, bug=bug).mean((1, 2)).sum()
        return nll + 0.01 * (gaussian_mlp.max_logvar.sum() - gaussian_mlp.min_logvar.sum())

    state = {"it": iter(dataset_train)}

    def train_step():
        try:
            batch = next(state["it"])
        except StopIteration:  # the next epoch of ModelTrainer.train
            state["it"] = iter(dataset_train)
            batch = next(state["it"])
        loss, meta = dynamics_model.update(batch, optimizer)
        return loss

    def eval_fn(model, _batch):
        """ModelTrainer.evaluate on the validation split: the members' mean squared error."""
        scores = [dynamics_model.eval_score(b)[0] for b in dataset_val]
        return torch.cat(scores, dim=scores[0].ndim - 2).mean()

    return Program(name="mbrllib_pets_dynamics", model=gaussian_mlp, batch=batch, loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # ``gaussian_nll`` without the precision weight: ``l2 + logvar`` instead of ``l2 * exp(-logvar) + logvar``. The
    # variance head no longer scales the error term; its gradient only pushes the log-variance down to its floor and
    # the loss stops being a likelihood (classic Gaussian-NLL slip).
    Bug("nll_precision_dropped", functools.partial(_build, bug="nll_precision_dropped"), "learning_ledger",
        ("OBJECTIVE",)),
    # ``Model.update`` without ``optimizer.zero_grad()`` (classic): every batch's gradient adds to the earlier ones.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

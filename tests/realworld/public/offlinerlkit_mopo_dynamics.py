# ruff: noqa: UP035, PLR0402, UP006, UP008, UP045, UP007, PIE808, UP004
"""MOPO's probabilistic ensemble dynamics model trained on an offline dataset, from OfflineRL-Kit.

Source: https://github.com/yihaosun1124/OfflineRL-Kit, commit e3ce69793766d02660217d4dfc0af4693a5531bd, files
``run_example/run_mopo.py`` (the dynamics part: model, Adam, scaler), ``offlinerlkit/dynamics/ensemble_dynamics.py``
(``format_samples_for_training``, ``train``, ``learn``, ``validate``, ``select_elites``),
``offlinerlkit/modules/dynamics_module.py`` (``Swish``, ``soft_clamp``, ``EnsembleDynamicsModel``),
``offlinerlkit/nets/ensemble_linear.py`` (``EnsembleLinear``) and ``offlinerlkit/utils/scaler.py``
(``StandardScaler``). License: MIT (Copyright (c) 2022 Yi-hao Sun; full text in
LICENSES/yihaosun1124-OfflineRL-Kit.txt).

Kept as written: the ensemble model (7 members, 5 elites, Swish, per-layer weight decays 2.5e-5, 5e-5, 7.5e-5,
7.5e-5, 1e-4, the output split into mean and log-variance soft-clamped between the learnable ``min_logvar`` and
``max_logvar``, the ``saved_weight``/``saved_bias`` snapshots registered as parameters), the targets (observation
deltas and rewards), the holdout split (``holdout_ratio`` 0.2), the scaler fitted on the training inputs, the
bootstrap ``data_idxes`` per member and ``shuffle_rows`` after each epoch, ``learn``'s loss (inverse-variance
weighted squared error averaged over batch and dimension and summed over members, plus the log-variance term, the
decay loss and ``logvar_loss_coef`` 0.01 on the bounds), zero_grad/backward/step, Adam lr 1e-3, batch_size 256,
the holdout validation with ``update_save`` for members that improve by more than 1%.

Deviations:
- D4RL's walker2d dataset is replaced by an offline dataset of 2000 transitions of the numpy pendulum of
  ``_continuous_control.py`` played by a seeded noisy behaviour policy (a damping torque plus Gaussian noise): the
  synthetic data, with the pendulum's dynamics as the learnable rule. obs_dim 3, action_dim 1.
- sizes for 2 CPU cores: dynamics hidden dims [64, 64, 64, 64] (run_mopo.py: [200, 200, 200, 200]).
- ``train``'s epoch loop is driven one minibatch at a time: ``train_step`` runs one pass of ``learn``'s loop body
  on the next minibatch of the current epoch; when an epoch's minibatches are used up, the epoch's end runs as
  written (``validate``, the elite holdout bookkeeping with ``update_save``, ``shuffle_rows``). The stopping rule
  (``max_epochs_since_update``), ``load_save``/``set_elites`` at the end, logging and saving are not run.
- ``np.random`` calls come from a ``numpy.random.default_rng(seed)`` instance and ``random_split`` from a seeded
  ``torch.Generator`` so a build is reproducible; ``device`` is the CPU.
- the MOPO policy (SAC on model rollouts) is not part of this port: it is trained after the dynamics.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from typing import List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _continuous_control import Pendulum

DYNAMICS_LR = 1e-3
DYNAMICS_HIDDEN_DIMS = [64, 64, 64, 64]
DYNAMICS_WEIGHT_DECAY = [2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4]
N_ENSEMBLE = 7
N_ELITES = 5
BATCH_SIZE = 256
HOLDOUT_RATIO = 0.2
LOGVAR_LOSS_COEF = 0.01
N_TRANSITIONS = 2000


class EnsembleLinear(nn.Module):
    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        num_ensemble: int,
        weight_decay: float = 0.0
    ) -> None:
        super().__init__()

        self.num_ensemble = num_ensemble

        self.register_parameter("weight", nn.Parameter(torch.zeros(num_ensemble, input_dim, output_dim)))
        self.register_parameter("bias", nn.Parameter(torch.zeros(num_ensemble, 1, output_dim)))

        nn.init.trunc_normal_(self.weight, std=1/(2*input_dim**0.5))

        self.register_parameter("saved_weight", nn.Parameter(self.weight.detach().clone()))
        self.register_parameter("saved_bias", nn.Parameter(self.bias.detach().clone()))

        self.weight_decay = weight_decay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        bias = self.bias

        if len(x.shape) == 2:
            x = torch.einsum('ij,bjk->bik', x, weight)
        else:
            x = torch.einsum('bij,bjk->bik', x, weight)

        x = x + bias

        return x

    def load_save(self) -> None:
        self.weight.data.copy_(self.saved_weight.data)
        self.bias.data.copy_(self.saved_bias.data)

    def update_save(self, indexes: List[int]) -> None:
        self.saved_weight.data[indexes] = self.weight.data[indexes]
        self.saved_bias.data[indexes] = self.bias.data[indexes]

    def get_decay_loss(self) -> torch.Tensor:
        decay_loss = self.weight_decay * (0.5*((self.weight**2).sum()))
        return decay_loss


class Swish(nn.Module):
    def __init__(self) -> None:
        super(Swish, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.sigmoid(x)
        return x


def soft_clamp(
    x : torch.Tensor,
    _min: Optional[torch.Tensor] = None,
    _max: Optional[torch.Tensor] = None
) -> torch.Tensor:
    # clamp tensor values while mataining the gradient
    if _max is not None:
        x = _max - F.softplus(_max - x)
    if _min is not None:
        x = _min + F.softplus(x - _min)
    return x


class EnsembleDynamicsModel(nn.Module):
    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dims: Union[List[int], Tuple[int]],
        num_ensemble: int = 7,
        num_elites: int = 5,
        activation: nn.Module = Swish,
        weight_decays: Optional[Union[List[float], Tuple[float]]] = None,
        with_reward: bool = True,
        device: str = "cpu"
    ) -> None:
        super().__init__()

        self.num_ensemble = num_ensemble
        self.num_elites = num_elites
        self._with_reward = with_reward
        self.device = torch.device(device)

        self.activation = activation()

        assert len(weight_decays) == (len(hidden_dims) + 1)

        module_list = []
        hidden_dims = [obs_dim+action_dim] + list(hidden_dims)
        if weight_decays is None:
            weight_decays = [0.0] * (len(hidden_dims) + 1)
        for in_dim, out_dim, weight_decay in zip(hidden_dims[:-1], hidden_dims[1:], weight_decays[:-1]):
            module_list.append(EnsembleLinear(in_dim, out_dim, num_ensemble, weight_decay))
        self.backbones = nn.ModuleList(module_list)

        self.output_layer = EnsembleLinear(
            hidden_dims[-1],
            2 * (obs_dim + self._with_reward),
            num_ensemble,
            weight_decays[-1]
        )

        self.register_parameter(
            "max_logvar",
            nn.Parameter(torch.ones(obs_dim + self._with_reward) * 0.5, requires_grad=True)
        )
        self.register_parameter(
            "min_logvar",
            nn.Parameter(torch.ones(obs_dim + self._with_reward) * -10, requires_grad=True)
        )

        self.register_parameter(
            "elites",
            nn.Parameter(torch.tensor(list(range(0, self.num_elites))), requires_grad=False)
        )

        self.to(self.device)

    def forward(self, obs_action: np.ndarray) -> Tuple[torch.Tensor, torch.Tensor]:
        obs_action = torch.as_tensor(obs_action, dtype=torch.float32).to(self.device)
        output = obs_action
        for layer in self.backbones:
            output = self.activation(layer(output))
        mean, logvar = torch.chunk(self.output_layer(output), 2, dim=-1)
        logvar = soft_clamp(logvar, self.min_logvar, self.max_logvar)
        return mean, logvar

    def load_save(self) -> None:
        for layer in self.backbones:
            layer.load_save()
        self.output_layer.load_save()

    def update_save(self, indexes: List[int]) -> None:
        for layer in self.backbones:
            layer.update_save(indexes)
        self.output_layer.update_save(indexes)

    def get_decay_loss(self) -> torch.Tensor:
        decay_loss = 0
        for layer in self.backbones:
            decay_loss += layer.get_decay_loss()
        decay_loss += self.output_layer.get_decay_loss()
        return decay_loss


class StandardScaler(object):
    def __init__(self, mu=None, std=None):
        self.mu = mu
        self.std = std

    def fit(self, data):
        self.mu = np.mean(data, axis=0, keepdims=True)
        self.std = np.std(data, axis=0, keepdims=True)
        self.std[self.std < 1e-12] = 1.0

    def transform(self, data):
        return (data - self.mu) / self.std


def collect_dataset(seed):
    """The offline dataset (a deviation, see the docstring): a noisy damping policy on the numpy pendulum."""
    env = Pendulum()
    env.seed(seed)
    rng = np.random.default_rng(seed + 1000)
    obss, actions, next_obss, rewards = [], [], [], []
    obs = env.reset()
    while len(obss) < N_TRANSITIONS:
        action = np.clip(-0.5 * obs[2:3] + rng.normal(0.0, 1.0, size=1), -2.0, 2.0).astype(np.float32)
        next_obs, reward, done, _ = env.step(action)
        obss.append(obs)
        actions.append(action)
        next_obss.append(next_obs)
        rewards.append([reward])
        obs = env.reset() if done else next_obs
    return {"observations": np.array(obss, dtype=np.float32), "actions": np.array(actions, dtype=np.float32),
            "next_observations": np.array(next_obss, dtype=np.float32),
            "rewards": np.array(rewards, dtype=np.float32)}


def format_samples_for_training(data):
    obss = data["observations"]
    actions = data["actions"]
    next_obss = data["next_observations"]
    rewards = data["rewards"]
    delta_obss = next_obss - obss
    inputs = np.concatenate((obss, actions), axis=-1)
    targets = np.concatenate((delta_obss, rewards), axis=-1)
    return inputs, targets


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    data = collect_dataset(seed)

    dynamics_model = EnsembleDynamicsModel(
        obs_dim=3,
        action_dim=1,
        hidden_dims=DYNAMICS_HIDDEN_DIMS,
        num_ensemble=N_ENSEMBLE,
        num_elites=N_ELITES,
        weight_decays=DYNAMICS_WEIGHT_DECAY,
        device="cpu"
    )
    dynamics_optim = torch.optim.Adam(
        dynamics_model.parameters(),
        lr=DYNAMICS_LR
    )
    scaler = StandardScaler()
    model, optim = dynamics_model, dynamics_optim

    # EnsembleDynamics.train, up to the epoch loop
    inputs, targets = format_samples_for_training(data)
    data_size = inputs.shape[0]
    holdout_size = min(int(data_size * HOLDOUT_RATIO), 1000)
    train_size = data_size - holdout_size
    train_splits, holdout_splits = torch.utils.data.random_split(
        range(data_size), (train_size, holdout_size), generator=torch.Generator().manual_seed(seed))
    train_inputs, train_targets = inputs[train_splits.indices], targets[train_splits.indices]
    holdout_inputs, holdout_targets = inputs[holdout_splits.indices], targets[holdout_splits.indices]

    scaler.fit(train_inputs)
    train_inputs = scaler.transform(train_inputs)
    holdout_inputs = scaler.transform(holdout_inputs)
    holdout_losses = [1e10 for i in range(model.num_ensemble)]

    data_idxes = rng.integers(train_size, size=[model.num_ensemble, train_size])

    def shuffle_rows(arr):
        idxes = np.argsort(rng.uniform(size=arr.shape), axis=-1)
        return arr[np.arange(arr.shape[0])[:, None], idxes]

    @torch.no_grad()
    def validate(inputs, targets):
        model.eval()
        targets = torch.as_tensor(targets)
        mean, _ = model(inputs)
        loss = ((mean - targets) ** 2).mean(dim=(1, 2))
        val_loss = list(loss.cpu().numpy())
        return val_loss

    def loss_of(mean, logvar, targets_batch):
        inv_var = torch.exp(-logvar)
        # Average over batch and dim, sum over ensembles.
        if bug == "inv_var_dropped":
            mse_loss_inv = (torch.pow(mean - targets_batch, 2)).mean(dim=(1, 2))
        else:
            mse_loss_inv = (torch.pow(mean - targets_batch, 2) * inv_var).mean(dim=(1, 2))
        var_loss = logvar.mean(dim=(1, 2))
        loss = mse_loss_inv.sum() + var_loss.sum()
        loss = loss + model.get_decay_loss()
        loss = loss + LOGVAR_LOSS_COEF * model.max_logvar.sum() - LOGVAR_LOSS_COEF * model.min_logvar.sum()
        return loss

    def epoch_arrays():
        ins = train_inputs[data_idxes]
        if bug == "targets_shuffled_separately":
            outs = train_targets[shuffle_rows(data_idxes)]
        else:
            outs = train_targets[data_idxes]
        return ins, outs

    state = {"epoch_inputs": None, "epoch_targets": None, "batch_num": 0, "n_batches": 0}

    def start_epoch():
        state["epoch_inputs"], state["epoch_targets"] = epoch_arrays()
        state["batch_num"] = 0
        state["n_batches"] = int(np.ceil(train_size / BATCH_SIZE))

    def end_epoch():
        nonlocal data_idxes
        new_holdout_losses = validate(holdout_inputs, holdout_targets)
        # shuffle data for each base learner
        data_idxes = shuffle_rows(data_idxes)
        indexes = []
        for i, new_loss, old_loss in zip(range(len(holdout_losses)), new_holdout_losses, holdout_losses):
            improvement = (old_loss - new_loss) / old_loss
            if improvement > 0.01:
                indexes.append(i)
                holdout_losses[i] = new_loss
        if len(indexes) > 0:
            model.update_save(indexes)

    start_epoch()

    def train_step():
        # one pass of EnsembleDynamics.learn's loop body
        model.train()
        batch_num = state["batch_num"]
        inputs_batch = state["epoch_inputs"][:, batch_num * BATCH_SIZE:(batch_num + 1) * BATCH_SIZE]
        targets_batch = state["epoch_targets"][:, batch_num * BATCH_SIZE:(batch_num + 1) * BATCH_SIZE]
        targets_batch = torch.as_tensor(targets_batch)

        mean, logvar = model(inputs_batch)
        loss = loss_of(mean, logvar, targets_batch)

        if bug != "zero_grad_dropped":
            optim.zero_grad()
        loss.backward()
        optim.step()

        state["batch_num"] += 1
        if state["batch_num"] >= state["n_batches"]:
            end_epoch()
            start_epoch()
        return loss.detach()

    ins, outs = epoch_arrays()
    batch = (torch.as_tensor(ins[:, :BATCH_SIZE], dtype=torch.float32),
             torch.as_tensor(outs[:, :BATCH_SIZE], dtype=torch.float32))

    def loss_fn(out, targets_batch):
        mean, logvar = out
        return loss_of(mean, logvar, targets_batch)

    return Program(name="offlinerlkit_mopo_dynamics", model=model, batch=batch, loss_fn=loss_fn, optimizer=optim,
                   train_step=train_step)


build = functools.partial(_build, bug=None)

BUGS = [
    # the squared error not weighted by the inverse variance while the log-variance term stays (classic Gaussian NLL
    # slip): the log-variance is only pushed down, to min_logvar, and says nothing about the model's error.
    Bug("inv_var_dropped", functools.partial(_build, bug="inv_var_dropped"), "learning_ledger", ("OBJECTIVE",)),
    # the targets indexed by a separately shuffled copy of the bootstrap indexes (classic): each member's inputs
    # and targets no longer come from the same transitions.
    Bug("targets_shuffled_separately", functools.partial(_build, bug="targets_shuffled_separately"),
        "learning_ledger", ("TASK",)),
    # self.optim.zero_grad() dropped from learn (classic): gradients pile up across minibatches.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

"""Augmented Neural ODEs (Dupont, Doucet & Teh, 2019), Emilien Dupont's augmented-neural-odes: an ``ODENet`` whose
state is the 2-d input padded with 5 zero dimensions, a time-dependent MLP ``ODEFunc`` integrated from t=0 to t=1,
and a linear read-out, trained by the repository's ``Trainer`` (SmoothL1 regression to +-1) on its own
``ConcentricSphere`` toy data set with ``config.json``'s "anode" model configuration, Adam lr 1e-3.

Source: https://github.com/EmilienDupont/augmented-neural-odes
Commit: 88d9865fa863069fa65e538ee11eebea934dbbe4
Files: anode/models.py (ODEFunc, ODEBlock, ODENet), anode/training.py (Trainer), experiments/experiments.py
(run_experiments' data loader, model and optimizer), experiments/dataloaders.py (ConcentricSphere,
random_point_in_sphere), config.json; torchdiffeq's fixed-grid RK4 ``odeint`` written out as in this corpus's
torchdiffeq_odenet port (https://github.com/rtqichen/torchdiffeq, MIT)
License: MIT (Copyright (c) 2019 Emilien Dupont; full text in LICENSES/EmilienDupont-augmented-neural-odes.txt)
Domain: neural ODE (augmented ODE flow, continuous-depth regression/classification of concentric spheres)

Kept as written: ``ODEFunc`` (fc1 on ``[t, x]``, ReLU(inplace), fc2, ReLU, fc3, the nfe counter), ``ODEBlock``
(zero augmentation concatenated to the input, integration times ``[0, 1]``, ``out[1]`` returned), ``ODENet`` (the
ODE block then ``linear_layer``), ``Trainer._train_epoch``'s loop body (zero_grad, forward, the nfe bookkeeping,
``SmoothL1Loss``, backward, step, the loss and nfe buffers and histories every ``record_freq`` steps),
``ConcentricSphere`` and ``random_point_in_sphere`` (inner radius [0, 0.5] -> -1, outer [1, 1.5] -> +1, python's
``random()`` for the radius and ``torch.randn`` for the direction), ``config.json``'s "anode" entry (hidden_dim 32,
time_dependent, augment_dim 5, lr 1e-3) and its training_config (batch_size 64, record_freq 20).

Deviations from the original:
- torchdiffeq is not installed here: ``odeint`` is the fixed-grid RK4 path of torchdiffeq (``FixedGridODESolver``,
  ``RK4``, ``rk4_alt_step_func``) and ``ODEBlock`` calls it with ``method='rk4', options=dict(step_size=0.25)``
  instead of the adaptive ``dopri5`` with ``rtol = atol = tol`` and ``max_num_steps`` (the adjoint path is not
  used by the configuration and is not ported).
- sizes for 2 CPU cores: the sphere set 500 + 1500 points -> 128 + 384; the "odenet" and "resnet" entries, the
  repetitions and the "sine" data set of config.json are not ported, nor the visualisation batch and plots.
- seeding: ``random.seed(seed)`` and ``torch.manual_seed(seed)`` before the data and the model; the DataLoader
  shuffles with a ``torch.Generator`` seeded from ``seed``.
- ``train_step`` is one iteration of ``_train_epoch``'s loop (a new epoch starts when the loader runs out) and
  returns the loss; the prints and ``save_dir`` are dropped. The repository has no evaluation on this data set,
  so no ``eval_fn`` is given.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, RUF007, RUF059, C408

from __future__ import annotations

import functools
import pathlib
import random
import sys
from random import random as _random

import torch
from numpy import mean
from torch import nn
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

MAX_NUM_STEPS = 1000  # Maximum number of steps for ODE solver

# ---- torchdiffeq/_impl (fixed-grid odeint, written out) ----------------------------------------------------------

_one_third = 1 / 3
_two_thirds = 2 / 3


def rk4_alt_step_func(func, t0, dt, t1, y0, f0=None):
    """Smaller error with slightly more compute."""
    k1 = f0
    if k1 is None:
        k1 = func(t0, y0)
    k2 = func(t0 + dt * _one_third, y0 + dt * k1 * _one_third)
    k3 = func(t0 + dt * _two_thirds, y0 + dt * (k2 - k1 * _one_third))
    k4 = func(t1, y0 + dt * (k1 - k2 + k3))
    return (k1 + 3 * (k2 + k3) + k4) * dt * 0.125


class FixedGridODESolver:

    def __init__(self, func, y0, step_size=None):
        self.func = func
        self.y0 = y0
        self.step_size = step_size
        if step_size is None:
            self.grid_constructor = lambda f, y0, t: t
        else:
            self.grid_constructor = self._grid_constructor_from_step_size(step_size)

    @staticmethod
    def _grid_constructor_from_step_size(step_size):
        def _grid_constructor(func, y0, t):
            start_time = t[0]
            end_time = t[-1]

            niters = torch.ceil((end_time - start_time) / step_size + 1).item()
            t_infer = torch.arange(0, niters, dtype=t.dtype, device=t.device) * step_size + start_time
            t_infer[-1] = t[-1]

            return t_infer
        return _grid_constructor

    def integrate(self, t):
        time_grid = self.grid_constructor(self.func, self.y0, t)
        assert time_grid[0] == t[0] and time_grid[-1] == t[-1]

        solution = torch.empty(len(t), *self.y0.shape, dtype=self.y0.dtype, device=self.y0.device)
        solution[0] = self.y0

        j = 1
        y0 = self.y0
        for t0, t1 in zip(time_grid[:-1], time_grid[1:]):
            dt = t1 - t0
            dy, f0 = self._step_func(self.func, t0, dt, t1, y0)
            y1 = y0 + dy

            while j < len(t) and t1 >= t[j]:
                solution[j] = self._linear_interp(t0, t1, y0, y1, t[j])
                j += 1
            y0 = y1

        return solution

    def _linear_interp(self, t0, t1, y0, y1, t):
        if t == t0:
            return y0
        if t == t1:
            return y1
        slope = (t - t0) / (t1 - t0)
        return y0 + slope * (y1 - y0)


class RK4(FixedGridODESolver):
    order = 4

    def _step_func(self, func, t0, dt, t1, y0):
        f0 = func(t0, y0)
        return rk4_alt_step_func(func, t0, dt, t1, y0, f0=f0), f0


def odeint(func, y0, t, *, rtol=1e-7, atol=1e-9, method=None, options=None):
    assert method == 'rk4', "only the fixed-grid RK4 path is written out here"
    solver = RK4(func=func, y0=y0, **(options or {}))
    return solver.integrate(t)



# ---- anode/models.py --------------------------------------------------------------------------------------------

class ODEFunc(nn.Module):
    """MLP modeling the derivative of ODE system."""
    def __init__(self, device, data_dim, hidden_dim, augment_dim=0,
                 time_dependent=False, non_linearity='relu'):
        super(ODEFunc, self).__init__()
        self.device = device
        self.augment_dim = augment_dim
        self.data_dim = data_dim
        self.input_dim = data_dim + augment_dim
        self.hidden_dim = hidden_dim
        self.nfe = 0  # Number of function evaluations
        self.time_dependent = time_dependent

        if time_dependent:
            self.fc1 = nn.Linear(self.input_dim + 1, hidden_dim)
        else:
            self.fc1 = nn.Linear(self.input_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, hidden_dim)
        self.fc3 = nn.Linear(hidden_dim, self.input_dim)

        if non_linearity == 'relu':
            self.non_linearity = nn.ReLU(inplace=True)
        elif non_linearity == 'softplus':
            self.non_linearity = nn.Softplus()

    def forward(self, t, x):
        # Forward pass of model corresponds to one function evaluation, so
        # increment counter
        self.nfe += 1
        if self.time_dependent:
            # Shape (batch_size, 1)
            t_vec = torch.ones(x.shape[0], 1).to(self.device) * t
            # Shape (batch_size, data_dim + 1)
            t_and_x = torch.cat([t_vec, x], 1)
            # Shape (batch_size, hidden_dim)
            out = self.fc1(t_and_x)
        else:
            out = self.fc1(x)
        out = self.non_linearity(out)
        out = self.fc2(out)
        out = self.non_linearity(out)
        out = self.fc3(out)
        return out


class ODEBlock(nn.Module):
    """Solves ODE defined by odefunc."""
    def __init__(self, device, odefunc, is_conv=False, tol=1e-3, adjoint=False):
        super(ODEBlock, self).__init__()
        self.adjoint = adjoint
        self.device = device
        self.is_conv = is_conv
        self.odefunc = odefunc
        self.tol = tol

    def forward(self, x, eval_times=None):
        # Forward pass corresponds to solving ODE, so reset number of function
        # evaluations counter
        self.odefunc.nfe = 0

        if eval_times is None:
            integration_time = torch.tensor([0, 1]).float().type_as(x)
        else:
            integration_time = eval_times.type_as(x)


        if self.odefunc.augment_dim > 0:
            if self.is_conv:
                # Add augmentation
                batch_size, channels, height, width = x.shape
                aug = torch.zeros(batch_size, self.odefunc.augment_dim,
                                  height, width).to(self.device)
                # Shape (batch_size, channels + augment_dim, height, width)
                x_aug = torch.cat([x, aug], 1)
            else:
                # Add augmentation
                aug = torch.zeros(x.shape[0], self.odefunc.augment_dim).to(self.device)
                # Shape (batch_size, data_dim + augment_dim)
                x_aug = torch.cat([x, aug], 1)
        else:
            x_aug = x

        # (port) the adaptive dopri5 call (rtol=atol=self.tol, max_num_steps) -> the fixed-grid RK4 written out above
        out = odeint(self.odefunc, x_aug, integration_time,
                     method='rk4', options=dict(step_size=0.25))

        if eval_times is None:
            return out[1]  # Return only final time
        else:
            return out


class ODENet(nn.Module):
    """An ODEBlock followed by a Linear layer."""
    def __init__(self, device, data_dim, hidden_dim, output_dim=1,
                 augment_dim=0, time_dependent=False, non_linearity='relu',
                 tol=1e-3, adjoint=False, bug=None):
        super(ODENet, self).__init__()
        self.device = device
        self.data_dim = data_dim
        self.hidden_dim = hidden_dim
        self.augment_dim = augment_dim
        self.output_dim = output_dim
        self.time_dependent = time_dependent
        self.tol = tol
        self.bug = bug

        odefunc = ODEFunc(device, data_dim, hidden_dim, augment_dim,
                          time_dependent, non_linearity)

        self.odeblock = ODEBlock(device, odefunc, tol=tol, adjoint=adjoint)
        self.linear_layer = nn.Linear(self.odeblock.odefunc.input_dim,
                                      self.output_dim)

    def forward(self, x, return_features=False):
        features = self.odeblock(x)
        if self.bug == "features_detached":
            features = features.detach()
        pred = self.linear_layer(features)
        if return_features:
            return features, pred
        return pred


# ---- experiments/dataloaders.py ---------------------------------------------------------------------------------

class ConcentricSphere(Dataset):
    """Dataset of concentric d-dimensional spheres. Points in the inner sphere
    are mapped to -1, while points in the outer sphere are mapped 1."""
    def __init__(self, dim, inner_range, outer_range, num_points_inner,
                 num_points_outer):
        self.dim = dim
        self.inner_range = inner_range
        self.outer_range = outer_range
        self.num_points_inner = num_points_inner
        self.num_points_outer = num_points_outer

        self.data = []
        self.targets = []

        # Generate data for inner sphere
        for _ in range(self.num_points_inner):
            self.data.append(
                random_point_in_sphere(dim, inner_range[0], inner_range[1])
            )
            self.targets.append(torch.Tensor([-1]))

        # Generate data for outer sphere
        for _ in range(self.num_points_outer):
            self.data.append(
                random_point_in_sphere(dim, outer_range[0], outer_range[1])
            )
            self.targets.append(torch.Tensor([1]))

    def __getitem__(self, index):
        return self.data[index], self.targets[index]

    def __len__(self):
        return len(self.data)


def random_point_in_sphere(dim, min_radius, max_radius):
    """Returns a point sampled uniformly at random from a sphere if min_radius
    is 0. Else samples a point approximately uniformly on annulus."""
    # Sample distance of point from origin
    unif = _random()
    distance = (max_radius - min_radius) * (unif ** (1. / dim)) + min_radius
    # Sample direction of point away from origin
    direction = torch.randn(dim)
    unit_direction = direction / torch.norm(direction, 2)
    return distance * unit_direction


# ---- anode/training.py ------------------------------------------------------------------------------------------

class Trainer:
    """Class used to train ODENets, ConvODENets and ResNets."""
    def __init__(self, model, optimizer, device, classification=False,
                 print_freq=10, record_freq=10, verbose=True, save_dir=None, bug=None):
        self.model = model
        self.optimizer = optimizer
        self.classification = classification
        self.device = device
        if self.classification:
            self.loss_func = nn.CrossEntropyLoss()
        else:
            self.loss_func = nn.SmoothL1Loss()
        self.print_freq = print_freq
        self.record_freq = record_freq
        self.steps = 0
        self.save_dir = save_dir
        self.verbose = verbose
        self.bug = bug

        self.histories = {'loss_history': [], 'nfe_history': [],
                          'bnfe_history': [], 'total_nfe_history': [],
                          'epoch_loss_history': [], 'epoch_nfe_history': [],
                          'epoch_bnfe_history': [], 'epoch_total_nfe_history': []}
        self.buffer = {'loss': [], 'nfe': [], 'bnfe': [], 'total_nfe': []}

        # Only resnets have a number of layers attribute
        self.is_resnet = hasattr(self.model, 'num_layers')
        self._iter = None  # (port) the running epoch's loader iterator

    def train_step(self, data_loader):
        """(port) One iteration of ``_train_epoch``'s loop; the next epoch starts when the loader runs out."""
        if self._iter is None:
            self._iter = iter(data_loader)
        try:
            x_batch, y_batch = next(self._iter)
        except StopIteration:
            self._iter = iter(data_loader)
            x_batch, y_batch = next(self._iter)

        if self.bug != "zero_grad_dropped":
            self.optimizer.zero_grad()

        x_batch = x_batch.to(self.device)
        y_batch = y_batch.to(self.device)

        y_pred = self.model(x_batch)

        # ResNets do not have an NFE attribute
        if not self.is_resnet:
            iteration_nfes = self._get_and_reset_nfes()

        loss = self.loss_func(y_pred, y_batch)
        loss.backward()
        self.optimizer.step()

        if not self.is_resnet:
            iteration_backward_nfes = self._get_and_reset_nfes()

        # Record information in buffer at every iteration
        self.buffer['loss'].append(loss.item())
        if not self.is_resnet:
            self.buffer['nfe'].append(iteration_nfes)
            self.buffer['bnfe'].append(iteration_backward_nfes)
            self.buffer['total_nfe'].append(iteration_nfes + iteration_backward_nfes)

        # At every record_freq iteration, record mean loss, nfes, bnfes and
        # so on and clear buffer
        if self.steps % self.record_freq == 0:
            self.histories['loss_history'].append(mean(self.buffer['loss']))

            if not self.is_resnet:
                self.histories['nfe_history'].append(mean(self.buffer['nfe']))
                self.histories['bnfe_history'].append(mean(self.buffer['bnfe']))
                self.histories['total_nfe_history'].append(mean(self.buffer['total_nfe']))

            # Clear buffer
            self.buffer['loss'] = []
            self.buffer['nfe'] = []
            self.buffer['bnfe'] = []
            self.buffer['total_nfe'] = []

        self.steps += 1
        return loss.item()

    def _get_and_reset_nfes(self):
        """Returns and resets the number of function evaluations for model."""
        if hasattr(self.model, 'odeblock'):  # If we are using ODENet
            iteration_nfes = self.model.odeblock.odefunc.nfe
            # Set nfe count to 0
            self.model.odeblock.odefunc.nfe = 0
        else:  # If we are using ODEConvNet
            iteration_nfes = self.model.odefunc.nfe
            # Set nfe count to 0
            self.model.odefunc.nfe = 0
        return iteration_nfes


# ---- experiments/experiments.py (run_experiments, config.json) ----------------------------------------------------

CONFIG = {
    "data_dim": 2,
    "dataset": {"type": "sphere", "num_points_inner": 128, "num_points_outer": 384,  # (port) 500, 1500
                "inner_range": [0.0, 0.5], "outer_range": [1.0, 1.5]},
    "model_config": {"type": "anode", "hidden_dim": 32, "time_dependent": True, "lr": 1e-3, "augment_dim": 5},
    "training_config": {"batch_size": 64, "record_freq": 20, "print_freq": 20, "epochs": 30},
}


def _build(seed, bug=None):
    random.seed(seed)
    torch.manual_seed(seed)
    device = torch.device('cpu')
    data_dim = CONFIG["data_dim"]
    dataset = CONFIG["dataset"]
    model_config = CONFIG["model_config"]
    training_config = CONFIG["training_config"]

    data_object = ConcentricSphere(data_dim, dataset["inner_range"],
                                   dataset["outer_range"],
                                   dataset["num_points_inner"],
                                   dataset["num_points_outer"])
    if bug == "targets_shuffled_apart":
        random.shuffle(data_object.targets)

    data_loader = DataLoader(data_object,
                             batch_size=training_config["batch_size"],
                             shuffle=True, generator=torch.Generator().manual_seed(seed))

    is_ode = model_config["type"] == "odenet" or model_config["type"] == "anode"
    assert is_ode
    if model_config["type"] == "odenet":
        augment_dim = 0
    else:
        augment_dim = model_config["augment_dim"]

    model = ODENet(device, data_dim, model_config["hidden_dim"],
                   augment_dim=augment_dim,
                   time_dependent=model_config["time_dependent"], bug=bug)

    model.to(device)

    optimizer = torch.optim.Adam(model.parameters(),
                                 lr=model_config["lr"])

    trainer = Trainer(model, optimizer, device,
                      print_freq=training_config["print_freq"],
                      record_freq=training_config["record_freq"],
                      verbose=False, bug=bug)

    first = next(iter(DataLoader(data_object, batch_size=training_config["batch_size"], shuffle=False)))
    return Program(name="anode_spheres", model=model, batch=(first[0], first[1]), loss_fn=trainer.loss_func,
                   optimizer=optimizer, train_step=functools.partial(trainer.train_step, data_loader),
                   loader=data_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the targets list shuffled apart from the points (classic: data and labels permuted separately), so the
    # radius no longer decides the target.
    Bug("targets_shuffled_apart", functools.partial(_build, bug="targets_shuffled_apart"), "learning_ledger",
        ("TASK",)),
    # the ODE block's features detached before the linear read-out (classic: the visualisation's detach left in
    # the forward): the ODE function never receives a gradient.
    Bug("features_detached", functools.partial(_build, bug="features_detached"), "reachability",
        ("odeblock.odefunc",)),
    # optimizer.zero_grad() dropped from the loop (classic): gradients accumulate across steps.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

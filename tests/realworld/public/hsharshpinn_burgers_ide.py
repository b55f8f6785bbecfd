# ruff: noqa: PLR0402, B008, RUF059
"""Physics-informed neural network discovering Burgers' equation (continuous-time identification), from pinn-torch.

Source: https://github.com/hsharsh/pinn-torch, commit fa563b324c286ec4425529f5ea1db03e68bec2f3, files
``torch-burgers-cont-ide.ipynb`` (the notebook's code cells) and ``utils_continuous.py``
(``preprocess_data_continuous_identification``). License: MIT (Copyright (c) 2020 Harshwardhan Praveen; full text
in LICENSES/hsharsh-pinn-torch.txt).

Kept as written: ``NeuralNet`` (inputs scaled to [-1, 1] by the domain bounds, Xavier-normal tanh MLP
``[2, 20 x 8, 1]``), the ``PINN`` class (the two physical parameters ``lmbda`` as an ``nn.ParameterList`` at 0
and -6, Adam over ``lmbda`` and the network, lr 0.0003, betas (0.9, 0.999)), ``net_f`` (``u_t``, ``u_x``,
``u_xx`` by ``torch.autograd.grad`` with ``create_graph=True``, residual ``u_t + lambda_1 u u_x - exp(lambda_2)
u_xx``), ``loss_f`` (data MSE plus residual MSE on the same points), ``optimizer_step`` (zero_grad, loss,
backward, step), the training tensors created with ``requires_grad=True``, the sampling of ``N = 2000`` points of
the solution grid with noise ``0.5 * std``, and the relative L2 validation error on the whole grid.

Deviations:
- the data: ``data/burgers_shock.mat`` (the shock solution for nu = 0.01/pi) is replaced by the exact
  travelling-wave solution of viscous Burgers ``u = c - a tanh(a (x - c t - x0) / (2 nu))`` with nu = 0.05 and
  ``a``, ``c``, ``x0`` drawn from ``seed``, evaluated on the same 256 x 100 grid of x in [-1, 1], t in [0, 1]:
  a smooth solution the network can fit in a few steps; the rule to learn is still ``lambda_1 = 1``,
  ``exp(lambda_2) = nu``.
- ``np.random.choice`` and the noise use a ``np.random.default_rng(seed)`` instead of the global state.
- ``fit(epochs=10000)`` is not run: ``train_step`` is one ``optimizer_step()`` (one epoch); the printing every 100
  and 1000 epochs is dropped (``eval_fn`` gives the validation error), and the plot is dropped.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import grad

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

device = torch.device('cpu')
NU_TRUE = 0.05


def load_dataset(seed):
    """burgers_shock.mat's ``x`` (256 x 1), ``t`` (100 x 1) and ``usol.T`` (100 x 256), from a travelling wave."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 1.0)
    c = rng.uniform(-0.3, 0.3)
    x0 = rng.uniform(-0.3, 0.3)
    x = np.linspace(-1, 1, 256)[:, None]
    t = np.linspace(0, 1, 100)[:, None]
    X, T = np.meshgrid(x, t)
    usol = c - a * np.tanh(a * (X - c * T - x0) / (2 * NU_TRUE))
    return x, t, usol


def preprocess_data_continuous_identification(seed, N=2000, noise=0.0):
    rng = np.random.default_rng(seed + 1)
    x, t, u_exact = load_dataset(seed)
    X, T = np.meshgrid(x, t)
    test_X = np.hstack([X.flatten()[:, None], T.flatten()[:, None]])
    test_u = u_exact.flatten()[:, None]

    # Domain bounds for Lattice Hypercube Sampling
    lb = test_X.min(0)
    ub = test_X.max(0)

    # Sample N random points
    sample = rng.choice(test_X.shape[0], size=N)
    train_X = test_X[sample]
    train_u = test_u[sample]
    train_u = train_u + noise*np.std(train_u)*rng.standard_normal((train_u.shape[0], train_u.shape[1]))

    return x, t, u_exact, X, T, lb, ub, train_X, train_u, test_X, test_u


class NeuralNet(nn.Module):

    def __init__(self, layers, lb, ub):
        super().__init__()
        self.lb = torch.tensor(lb, dtype=torch.float, device=device)
        self.ub = torch.tensor(ub, dtype=torch.float, device=device)

        # Layer module
        self.layers = nn.ModuleList()

        # Make the neural network
        input_dim = layers[0]
        for output_dim in layers[1:]:
            self.layers.append(nn.Linear(input_dim, output_dim))
            nn.init.xavier_normal_(self.layers[-1].weight)
            input_dim = output_dim

    def forward(self, X):
        x = 2.0*(X - self.lb)/(self.ub - self.lb) - 1.0
        for layer in self.layers[:-1]:
            x = torch.tanh(layer(x))

        outputs = self.layers[-1](x)
        return outputs


class PINN:
    def __init__(self, X, u, lb, ub, nu, layers=(2, 20, 20, 20, 1), lr=1e-2, device=torch.device('cpu'),
                 bug=None):
        self.nu = nu
        self.x_f = X[:, :1]
        self.t_f = X[:, 1:]
        self.u = u
        self.bug = bug

        self.net_u = NeuralNet(layers, lb, ub)
        self.net_u.to(device)

        # Physical paramters to optimize
        self.lmbda = nn.ParameterList()
        self.lmbda.append(nn.Parameter(0.0*torch.ones(1, device=device)))
        self.lmbda.append(nn.Parameter(-6.0*torch.ones(1, device=device)))

        params = list(self.lmbda) + list(self.net_u.parameters())
        self.optimizer = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999))

    def net_f(self):

        u = self.net_u(torch.cat([self.x_f, self.t_f], 1))

        u_temp1 = torch.ones(self.x_f.size(), device=device)
        u_temp2 = torch.ones(self.x_f.size(), device=device)
        u_temp3 = torch.ones(self.x_f.size(), device=device)

        if self.bug == "u_t_without_create_graph":
            u_t = grad(u, self.t_f, grad_outputs=u_temp1, retain_graph=True)[0]
        else:
            u_t = grad(u, self.t_f, grad_outputs=u_temp1, create_graph=True)[0]
        u_x = grad(u, self.x_f, grad_outputs=u_temp2, create_graph=True)[0]
        if self.bug == "u_xx_taken_in_t":
            u_xx = grad(u_x, self.t_f, grad_outputs=u_temp3, create_graph=True)[0]
        else:
            u_xx = grad(u_x, self.x_f, grad_outputs=u_temp3, create_graph=True)[0]

        f = u_t + self.lmbda[0]*u*u_x - torch.exp(self.lmbda[1])*u_xx

        del u_temp1
        del u_temp2
        del u_temp3

        return f

    def loss_f(self, u, u_pred):
        return torch.mean(torch.square(u-u_pred)) + torch.mean(torch.square(self.net_f()))

    def optimizer_step(self):
        # Zero the grads for the model paramters in the optimizer
        if self.bug != "zero_grad_dropped":
            self.optimizer.zero_grad()

        # Compute the losses and backpropagate the losses
        loss = self.loss_f(self.u, self.net_u(torch.cat([self.x_f, self.t_f], 1)))
        loss.backward()

        # Optimizer one iteration with the given optimizer
        self.optimizer.step()

        return loss.item()

    def predict(self, test_X):
        return self.net_u(test_X)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    N = 2000
    noise = 0.5

    x, t, u_exact, X, T, lb, ub, train_X, train_u, test_X, test_u = preprocess_data_continuous_identification(
        seed, N, noise)

    train_X = torch.tensor(train_X, dtype=torch.float, requires_grad=True, device=device)
    train_u = torch.tensor(train_u, dtype=torch.float, requires_grad=True, device=device)
    test_X = torch.tensor(test_X, dtype=torch.float, requires_grad=True, device=device)
    test_u = torch.tensor(test_u, dtype=torch.float, requires_grad=True, device=device)

    # Define the model
    pinn = PINN(train_X, train_u, lb, ub, nu=(0.01/np.pi), layers=[2, 20, 20, 20, 20, 20, 20, 20, 20, 1],
                lr=0.0003, device=device, bug=bug)

    def train_step():
        return pinn.optimizer_step()

    def eval_fn(model, _batch):
        with torch.no_grad():
            valid_loss = torch.norm(test_u - model(test_X), 2)/torch.norm(test_u, 2)
        return valid_loss.item()

    return Program(name="hsharshpinn_burgers_ide", model=pinn.net_u,
                   batch=(torch.cat([pinn.x_f, pinn.t_f], 1), train_u),
                   loss_fn=lambda u_pred, u: pinn.loss_f(u, u_pred), optimizer=pinn.optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the second derivative taken with respect to t instead of x (copy-paste slip between the grad lines): the
    # residual is no longer Burgers' equation, so the identified PDE is wrong (classic).
    Bug("u_xx_taken_in_t", functools.partial(_build, bug="u_xx_taken_in_t"), "learning_ledger", ("OBJECTIVE",)),
    # create_graph left out of the u_t line: u_t is a constant to the optimizer, so the residual's gradient through
    # the time derivative never reaches the network (classic PINN slip: the derivative is computed, not
    # differentiated).
    # first contact declared GRADIENT; the finding is OBJECTIVE objective.penalty_without_graph (the derivative term
    # enters the loss without the graph of its input: differentiated with it, the gradient moves), this bug's
    # mechanism (reviewed after first contact)
    Bug("u_t_without_create_graph", functools.partial(_build, bug="u_t_without_create_graph"), "learning_ledger",
        ("OBJECTIVE",)),
    # optimizer.zero_grad() dropped from optimizer_step: gradients accumulate over epochs (classic).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

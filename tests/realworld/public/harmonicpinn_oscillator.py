"""A physics-informed neural network for the 1D damped harmonic oscillator, from Ben Moseley's
harmonic-oscillator-pinn: a tanh MLP fitted to ten observations of the left part of the domain plus the squared
residual of ``m y'' + mu y' + k y = 0`` (both derivatives by ``torch.autograd.grad`` with ``create_graph=True``)
at 30 collocation points over the whole domain, weighted 1e-4, Adam.

Source: https://github.com/benmoseley/harmonic-oscillator-pinn
Commit: f00c5d9c8ac778f82186c1f2501c2dc2c8fb1de4
Files: ``Harmonic oscillator PINN.ipynb`` (cells ``oscillator`` / ``FCN``, the data cell, the PINN training cell)
License: MIT (Copyright (c) 2021 Ben Moseley; full text in LICENSES/benmoseley-harmonic-oscillator-pinn.txt)
Domain: physics-informed neural network (ODE residual loss through second-order autograd derivatives)

Kept as written: ``oscillator`` (the analytical underdamped solution), ``FCN`` (``FCN(1, 1, 32, 3)``: Linear + Tanh,
two hidden Linear + Tanh blocks, a Linear head), ``d, w0 = 2, 20``, the 500-point grid, the training data
``x[0:200:20]``, the 30 collocation points ``linspace(0, 1, 30)`` with ``requires_grad_(True)``, ``mu, k = 2*d,
w0**2``, and the PINN cell's loop body (zero_grad, the data MSE, ``dx`` and ``dx2`` by ``autograd.grad(...,
create_graph=True)``, the residual ``dx2 + mu*dx + k*yhp``, ``loss2 = 1e-4 * mean(physics**2)``, ``loss1 + loss2``,
backward, step).

Deviations from the original:
- the seed: the notebook calls ``torch.manual_seed(123)`` before building the model; here it is ``seed``.
- Adam's lr 1e-4 -> 1e-3 so that the 30 steps of the self-check show the loss falling (the notebook runs 20000
  steps); the standard-network cell (data loss only) that the notebook trains first for comparison is not ported.
- the plotting, PIL GIF writing and ``plots/`` files are dropped; ``train_step`` is one iteration of the PINN cell's
  ``for i in range(20000)`` loop and returns its loss; ``eval_fn`` is the mean squared error of the model against the
  exact solution on the whole 500-point grid (what the notebook's plots show).
- the data is the notebook's own (the analytical solution, no download); no randomness beyond the model's init.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program


def oscillator(d, w0, x):
    """Defines the analytical solution to the 1D underdamped harmonic oscillator problem.
    Equations taken from: https://beltoforion.de/en/harmonic_oscillator/"""
    assert d < w0
    w = np.sqrt(w0**2-d**2)
    phi = np.arctan(-d/w)
    A = 1/(2*np.cos(phi))
    cos = torch.cos(phi+w*x)
    sin = torch.sin(phi+w*x)  # noqa: F841
    exp = torch.exp(-d*x)
    y  = exp*2*A*cos
    return y


class FCN(nn.Module):
    "Defines a connected network"

    def __init__(self, N_INPUT, N_OUTPUT, N_HIDDEN, N_LAYERS):
        super().__init__()
        activation = nn.Tanh
        self.fcs = nn.Sequential(*[
                        nn.Linear(N_INPUT, N_HIDDEN),
                        activation()])
        self.fch = nn.Sequential(*[
                        nn.Sequential(*[
                            nn.Linear(N_HIDDEN, N_HIDDEN),
                            activation()]) for _ in range(N_LAYERS-1)])
        self.fce = nn.Linear(N_HIDDEN, N_OUTPUT)

    def forward(self, x):
        x = self.fcs(x)
        x = self.fch(x)
        x = self.fce(x)
        return x


def _build(seed, bug=None):
    d, w0 = 2, 20

    # get the analytical solution over the full domain
    x = torch.linspace(0,1,500).view(-1,1)
    y = oscillator(d, w0, x).view(-1,1)

    # slice out a small number of points from the LHS of the domain
    x_data = x[0:200:20]
    y_data = y[0:200:20]
    if bug == "targets_flattened":
        y_data = y_data.view(-1)

    x_physics = torch.linspace(0,1,30).view(-1,1).requires_grad_(True)# sample locations over the problem domain
    mu, k = 2*d, w0**2

    torch.manual_seed(seed)  # (port) 123
    model = FCN(1,1,32,3)
    optimizer = torch.optim.Adam(model.parameters(),lr=1e-3)  # (port) 1e-4

    def physics_loss(model):
        # compute the "physics loss"
        yhp = model(x_physics)
        dx  = torch.autograd.grad(yhp, x_physics, torch.ones_like(yhp), create_graph=True)[0]# computes dy/dx
        if bug == "second_derivative_graph_dropped":
            dx2 = torch.autograd.grad(dx,  x_physics, torch.ones_like(dx),  retain_graph=True)[0]
        else:
            dx2 = torch.autograd.grad(dx,  x_physics, torch.ones_like(dx),  create_graph=True)[0]# computes d^2y/dx^2
        if bug == "residual_sign_flipped":
            physics = dx2 + mu*dx - k*yhp
        else:
            physics = dx2 + mu*dx + k*yhp# computes the residual of the 1D harmonic oscillator differential equation
        return (1e-4)*torch.mean(physics**2)

    def loss_fn(yh, target):
        loss1 = torch.mean((yh-target)**2)# use mean squared error
        return loss1 + physics_loss(model)

    def train_step():
        optimizer.zero_grad()

        # compute the "data loss"
        yh = model(x_data)
        loss1 = torch.mean((yh-y_data)**2)# use mean squared error

        loss2 = physics_loss(model)

        # backpropagate joint loss
        loss = loss1 + loss2# add two loss terms together
        loss.backward()
        optimizer.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        with torch.no_grad():
            yh = model(x)
        return float(torch.mean((yh - y) ** 2))

    return Program(name="harmonicpinn_oscillator", model=model, batch=(x_data, y_data), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the residual written with the restoring force's sign flipped (classic: the ODE mistyped), the physics term
    # then pulls the network toward a growing solution.
    Bug("residual_sign_flipped", functools.partial(_build, bug="residual_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # the second derivative taken without create_graph (classic: retain_graph for create_graph): dx2 is a constant
    # of the step, so the physics loss never trains the curvature.
    Bug("second_derivative_graph_dropped", functools.partial(_build, bug="second_derivative_graph_dropped"),
        "learning_ledger", ("OBJECTIVE",)),
    # the targets flattened to [10] against the [10, 1] outputs (classic): the data MSE broadcasts to every
    # output-target pair.
    Bug("targets_flattened", functools.partial(_build, bug="targets_flattened"), "learning_ledger", ("OBJECTIVE",)),
]

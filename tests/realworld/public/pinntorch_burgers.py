"""A physics-informed neural network for the viscous Burgers equation ``u_t + u u_x = nu u_xx`` on x in [-1, 1],
t in [0, 1] (``u(x, 0) = -sin(pi x)``, Dirichlet ``u(+-1, t) = 0``, ``nu = 0.01 / pi``), from Shota Deguchi's
PINN_Torch: a tanh MLP on min-max scaled ``(x, t)``, Glorot-normal weights, the initial, boundary and PDE-residual
MSE terms (the residual by two ``torch.autograd.grad`` calls with ``create_graph=True``) summed with weights 1,
full-batch Adam.

Source: https://github.com/ShotaDeguchi/PINN_Torch
Commit: fbe9fb15c9d104e7627ea710006b27d07892055a
Files: ``00_burgers/pinn.py``, ``main.py``, ``parameters.py``, ``preparations.py``, ``icbc.py``, ``optimizers.py``,
``activations.py``
License: MIT (Copyright (c) 2022 Shota DEGUCHI; full text in LICENSES/ShotaDeguchi-PINN_Torch.txt)
Domain: physics-informed neural network (PDE residual loss through first and second autograd derivatives)

Kept as written: ``PINN`` (its ``setup``, the Linear stack built from ``arch``, ``xavier_normal_`` weights and zero
biases, ``forward``'s ``minmax`` feature scaling against the PDE points' bounds, ``loss_ini``, ``loss_bnd`` (``Dir``),
``loss_pde``, ``loss_glb``, the optimizer built by ``opt_alg`` over ``self.layers.parameters()``), ``parameters.py``'s
configuration (depth 5, tanh, Adam, ``minmax``, ``nu``, the three weights 1, ``Dir``), ``prp_dat`` (a meshgrid of
the domain, random initial and boundary points, 60 % of each set shuffled into training; the validation and test
slices ``idx[N_trn:N_val]`` are empty as written, since ``N_trn > N_val``), ``icbc.py`` and ``main.py``'s data
wiring, and ``train``'s loop body (the training and validation ``loss_glb``, zero_grad, backward, step, the logs).

Deviations from the original:
- sizes for 2 CPU cores: ``width`` 2 ** 8 -> 2 ** 6, the grid ``nx`` 101 -> 41 and ``nt`` 201 -> 41 (the initial
  and boundary point counts follow them as in ``prp_dat``); Adam's lr 5e-4 -> 2e-3 so that the 30 steps of the
  self-check show the loss falling (the original runs 1e5 epochs).
- the seed: ``r_seed`` (0) is ``seed``; ``setup`` seeds numpy, ``random`` and torch from it as written, and
  ``prp_dat`` draws its points from the seeded ``np.random``.
- the prints, the plots and the ``figures/`` files are dropped; ``train_step`` is one epoch of ``train``'s loop and
  returns the training loss (the ``tol`` early stop never fires: the validation loss is the mean over empty sets,
  nan, as written).
- the Program's ``batch`` is the training initial-condition points and their values; its ``loss_fn`` is
  ``loss_glb``'s sum given the network's output on them; ``eval_fn`` is the mean squared residual plus the
  initial/boundary error on the 40 % of the points the training split leaves out (the original's validation sets are
  empty).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP034, PIE808, RUF059

from __future__ import annotations

import functools
import os
import pathlib
import random
import sys

import numpy as np
import torch

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

# parameters.py
f_in  = 2
f_out = 1
width = 2 ** 6   # (port) 2 ** 8
depth = 5
w_init = "Glorot"
b_init = "zeros"
act = "tanh"
lr = 2e-3   # (port) 5e-4
opt = "Adam"
f_scl = "minmax"   # "minmax" or "mean"
nu = .01 / np.pi
w_ini = 1.
w_bnd = 1.
w_pde = 1.
bc = "Dir"   # "Dir" for Dirichlet, "Neu" for Neumann
f_mntr = 10
d_type = torch.float32
c_tol = 1e-8
NX, NT = 41, 41  # (port) int(1e2) + 1, int(2e2) + 1


# optimizers.py (the branch used)
def opt_alg(params, lr, name):
    if name == "Adam":
        optimizer = torch.optim.Adam(
            params, lr=lr, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, amsgrad=False
            )
    else:
        raise NotImplementedError(">>>>> opt_alg")
    return optimizer


# activations.py (the branch used)
def act_func(
    name
):
    if name == "tanh":
        activation = torch.nn.Tanh()
    else:
        raise NotImplementedError(">>>>> act_func")
    return activation


# icbc.py
def initial(x):
    if torch.is_tensor(x) == True:
        pass
    else:
        x = torch.from_numpy(x)
    y = -torch.sin(np.pi * x)
    return y


def boundary(t):
    if torch.is_tensor(t) == True:
        pass
    else:
        t = torch.from_numpy(t)
    y = torch.zeros(size = [t.shape[0]])
    return y


# preparations.py
def prp_dat():
    # set domain
    xmin, xmax, nx = -1., 1., NX
    tmin, tmax, nt =  0., 1., NT
    x = np.linspace(xmin, xmax, nx)
    t = np.linspace(tmin, tmax, nt)
    x, t = np.meshgrid(x, t)
    x, t = x.reshape(-1, 1), t.reshape(-1, 1)
    XT = np.c_[x, t]

    # find lower & upper bound
    lb = [min(XT[:,0]), min(XT[:,1])]
    ub = [max(XT[:,0]), max(XT[:,1])]

    # fraction for training, validation, test set
    frac_trn = .6
    frac_val = .2
    frac_tst = .2

    # initial condition evaluation
    N_ini = nx
    x_ini = np.random.uniform(low=lb[0], high=ub[0], size=N_ini)
    t_ini = lb[1] * np.ones((N_ini))
    XT_ini = np.c_[x_ini, t_ini]

    N_ini = XT_ini.shape[0]
    N_ini_trn = int(frac_trn * N_ini)
    N_ini_val = int(frac_val * N_ini)
    N_ini_tst = int(frac_tst * N_ini)

    idx_ini = np.random.choice(N_ini, N_ini, replace=False)
    idx_ini_trn = idx_ini[0:N_ini_trn]
    idx_ini_val = idx_ini[N_ini_trn:N_ini_val]
    idx_ini_tst = idx_ini[N_ini_val:N_ini_tst]

    XT_ini_trn = XT_ini[idx_ini_trn,:]
    XT_ini_val = XT_ini[idx_ini_val,:]
    XT_ini_tst = XT_ini[idx_ini_tst,:]

    # boundary condition evaluation
    N_bnd = nt
    x_lb = lb[0] * np.ones((int(.5 * N_bnd)))
    x_ub = ub[0] * np.ones((int(.5 * N_bnd)))
    x_bnd = np.append(x_lb, x_ub)
    t_bnd = np.random.uniform(low=lb[1], high=ub[1], size=N_bnd-1)
    XT_bnd = np.c_[x_bnd, t_bnd]

    N_bnd = XT_bnd.shape[0]
    N_bnd_trn = int(frac_trn * N_bnd)
    N_bnd_val = int(frac_val * N_bnd)
    N_bnd_tst = int(frac_tst * N_bnd)

    idx_bnd = np.random.choice(N_bnd, N_bnd, replace=False)
    idx_bnd_trn = idx_bnd[0:N_bnd_trn]
    idx_bnd_val = idx_bnd[N_bnd_trn:N_bnd_val]
    idx_bnd_tst = idx_bnd[N_bnd_val:N_bnd_tst]

    XT_bnd_trn = XT_bnd[idx_bnd_trn,:]
    XT_bnd_val = XT_bnd[idx_bnd_val,:]
    XT_bnd_tst = XT_bnd[idx_bnd_tst,:]

    # PDE-residual evaluation
    N_pde = XT.shape[0]
    N_pde_trn = int(frac_trn * N_pde)
    N_pde_val = int(frac_val * N_pde)
    N_pde_tst = int(frac_tst * N_pde)

    idx_pde = np.random.choice(N_pde, N_pde, replace=False)
    idx_pde_trn = idx_pde[0:N_pde_trn]
    idx_pde_val = idx_pde[N_pde_trn:N_pde_val]
    idx_pde_tst = idx_pde[N_pde_val:N_pde_tst]

    XT_pde_trn = XT[idx_pde_trn,:]
    XT_pde_val = XT[idx_pde_val,:]
    XT_pde_tst = XT[idx_pde_tst,:]

    # (port) the points the training split leaves out, for eval_fn
    held_out = (XT_ini[idx_ini[N_ini_trn:]], XT_bnd[idx_bnd[N_bnd_trn:]], XT[idx_pde[N_pde_trn:]])

    XT_ini_trn, XT_ini_val, XT_ini_tst = torch.from_numpy(XT_ini_trn), \
                                         torch.from_numpy(XT_ini_val), \
                                         torch.from_numpy(XT_ini_tst)
    XT_bnd_trn, XT_bnd_val, XT_bnd_tst = torch.from_numpy(XT_bnd_trn), \
                                         torch.from_numpy(XT_bnd_val), \
                                         torch.from_numpy(XT_bnd_tst)
    XT_pde_trn, XT_pde_val, XT_pde_tst = torch.from_numpy(XT_pde_trn), \
                                         torch.from_numpy(XT_pde_val), \
                                         torch.from_numpy(XT_pde_tst)

    return XT_ini_trn, XT_ini_val, XT_ini_tst, \
            XT_bnd_trn, XT_bnd_val, XT_bnd_tst, \
            XT_pde_trn, XT_pde_val, XT_pde_tst, held_out


# pinn.py
class PINN(torch.nn.Module):
    def __init__(
        self,
        x_ini_trn, t_ini_trn, u_ini_trn,
        x_bnd_trn, t_bnd_trn, u_bnd_trn,
        x_pde_trn, t_pde_trn,
        x_ini_val, t_ini_val, u_ini_val,
        x_bnd_val, t_bnd_val, u_bnd_val,
        x_pde_val, t_pde_val,
        f_in, f_out, width, depth,
        w_init, b_init, act,
        lr, opt,
        f_scl, nu,
        w_ini, w_bnd, w_pde, bc,
        f_mntr, r_seed, d_type, device, bug=None
    ):
        # init
        super().__init__()
        self.f_in   = f_in
        self.f_out  = f_out
        self.width  = width
        self.depth  = depth
        self.w_init = w_init
        self.b_init = b_init
        self.act    = act
        self.lr     = lr
        self.opt    = opt
        self.f_scl  = f_scl
        self.f_mntr = f_mntr
        self.r_seed = r_seed
        self.d_type = d_type
        self.device = device
        self.bug    = bug  # (port)
        self.setup(r_seed, d_type)

        # training set
        self.x_ini_trn = x_ini_trn.float().reshape(-1, 1).to(self.device)
        self.t_ini_trn = t_ini_trn.float().reshape(-1, 1).to(self.device)
        self.u_ini_trn = u_ini_trn.float().reshape(-1, 1).to(self.device)
        self.x_bnd_trn = x_bnd_trn.float().reshape(-1, 1).to(self.device)
        self.t_bnd_trn = t_bnd_trn.float().reshape(-1, 1).to(self.device)
        self.u_bnd_trn = u_bnd_trn.float().reshape(-1, 1).to(self.device)
        self.x_pde_trn = x_pde_trn.float().reshape(-1, 1).to(self.device)
        self.t_pde_trn = t_pde_trn.float().reshape(-1, 1).to(self.device)

        # validation set
        self.x_ini_val = x_ini_val.float().reshape(-1, 1).to(self.device)
        self.t_ini_val = t_ini_val.float().reshape(-1, 1).to(self.device)
        self.u_ini_val = u_ini_val.float().reshape(-1, 1).to(self.device)
        self.x_bnd_val = x_bnd_val.float().reshape(-1, 1).to(self.device)
        self.t_bnd_val = t_bnd_val.float().reshape(-1, 1).to(self.device)
        self.u_bnd_val = u_bnd_val.float().reshape(-1, 1).to(self.device)
        self.x_pde_val = x_pde_val.float().reshape(-1, 1).to(self.device)
        self.t_pde_val = t_pde_val.float().reshape(-1, 1).to(self.device)

        # weights
        self.w_ini = w_ini
        self.w_bnd = w_bnd
        self.w_pde = w_pde

        # setup
        self.nu = nu
        self.bc = bc

        # bounds
        self.bounds = torch.cat((self.x_pde_trn, self.t_pde_trn), dim = 1)
        self.lb = torch.min(self.bounds, dim = 0).values.to(self.device)
        self.ub = torch.max(self.bounds, dim = 0).values.to(self.device)
        self.mn = torch.mean(self.bounds, dim = 0).values

        self.arch = [self.f_in] + [self.width] * (self.depth - 1) + [self.f_out]
        self.layers = torch.nn.ModuleList(
            [torch.nn.Linear(self.arch[d], self.arch[d + 1]) for d in range(self.depth)]
            )
        for d in range(0, self.depth):
            torch.nn.init.xavier_normal_(self.layers[d].weight.data, gain=1.)
            torch.nn.init.zeros_(self.layers[d].bias.data)

        # self.model = self.dnn_init(self.arch)
        self.activation = act_func(self.act)
        self.optimzer = opt_alg(self.layers.parameters(), self.lr, self.opt)
        self.loss_func = torch.nn.MSELoss(reduction = "mean")
        self.loss_trn_log = []
        self.loss_val_log = []

    def setup(
        self, r_seed, d_type
    ):
        os.environ["PYTHONHASHSEED"] = str(r_seed)
        np.random.seed(r_seed)
        random.seed(r_seed)
        torch.manual_seed(r_seed)
        torch.set_default_dtype(d_type)

    def forward(
        self, x
    ):
        # convert to tensor
        if torch.is_tensor(x) == True:
            pass
        else:
            x = torch.from_numpy(x)

        # feature scaling
        x = x.to(self.device)
        if self.f_scl == "minmax":
            z = 2. * (x - self.lb) / (self.ub - self.lb) - 1.
        elif self.f_scl == "mean":
            z = (x - self.mn) / (self.ub - self.lb)
        else:
            raise NotImplementedError(">>>>> forward_pass (f_scl)")

        # forward pass
        for d in range(0, self.depth - 1):
            u = self.layers[d](z)
            z = self.activation(u)
        y = self.layers[-1](z)
        return y

    def loss_ini(
        self, x, y
    ):
        x_ = x.clone()
        x_.requires_grad = False
        y_ = self.forward(x_)
        loss = self.loss_func(y, y_)
        return loss

    def loss_bnd(
        self, x, y
    ):
        if self.bc == "Dir":
            x_ = x.clone()
            x_.requires_grad = True
            y_ = self.forward(x_)
            loss = self.loss_func(y, y_)
        elif self.bc == "Neu":
            x_ = x.clone()
            x_.requires_grad = True
            u = self.forward(x_)
            u_x_t = torch.autograd.grad(u, x_, torch.ones([x.shape[0], 1]).to(self.device), retain_graph=True, create_graph=True)[0]
            u_x   = u_x_t[:,[0]]
            loss = self.loss_func(y, u_x)
        else:
            raise NotImplementedError(">>>>> loss_bnd")
        return loss

    def loss_pde(
        self, x
    ):
        x_ = x.clone()
        x_.requires_grad = True
        u = self.forward(x_)
        u_x_t   = torch.autograd.grad(u,     x_, torch.ones([x.shape[0], 1]).to(self.device), retain_graph=True, create_graph=True)[0]
        u_xx_tt = torch.autograd.grad(u_x_t, x_, torch.ones(x.shape).to(self.device), create_graph=True)[0]
        u_x  = u_x_t[:,[0]]
        u_t  = u_x_t[:,[1]]
        u_xx = u_xx_tt[:,[0]]
        if self.bug == "convection_sign_flipped":
            gveq = u_t - u * u_x - self.nu * u_xx
        elif self.bug == "time_column_as_space":
            gveq = u_x + u * u_t - self.nu * u_xx
        else:
            gveq = u_t + u * u_x - self.nu * u_xx
        _ = torch.zeros_like(gveq)
        loss = self.loss_func(_, gveq)
        return loss

    def loss_glb(
        self,
        x_ini, t_ini, u_ini,
        x_bnd, t_bnd, u_bnd,
        x_pde, t_pde
    ):
        XT_ini = torch.cat((x_ini, t_ini), dim = 1)
        XT_bnd = torch.cat((x_bnd, t_bnd), dim = 1)
        XT_pde = torch.cat((x_pde, t_pde), dim = 1)
        loss_ini = self.loss_ini(XT_ini, u_ini)
        loss_bnd = self.loss_bnd(XT_bnd, u_bnd)
        loss_pde = self.loss_pde(XT_pde)
        loss = self.w_ini * loss_ini \
                + self.w_bnd * loss_bnd \
                + self.w_pde * loss_pde
        return loss

    def train_one_epoch(self, ep, tol=c_tol):
        # (port) one iteration of train()'s ``for ep in range(epoch)`` loop, the prints dropped
        loss_trn = self.loss_glb(
            self.x_ini_trn, self.t_ini_trn, self.u_ini_trn,
            self.x_bnd_trn, self.t_bnd_trn, self.u_bnd_trn,
            self.x_pde_trn, self.t_pde_trn
        )
        loss_val = self.loss_glb(
            self.x_ini_val, self.t_ini_val, self.u_ini_val,
            self.x_bnd_val, self.t_bnd_val, self.u_bnd_val,
            self.x_pde_val, self.t_pde_val
        )
        if self.bug != "no_zero_grad":
            self.optimzer.zero_grad()
        loss_trn.backward()
        self.optimzer.step()
        ep_loss_trn = loss_trn.item()
        ep_loss_val = loss_val.item()
        self.loss_trn_log.append(ep_loss_trn)
        self.loss_val_log.append(ep_loss_val)
        return ep_loss_trn

    def infer(
        self, x
    ):
        u_ = self.forward(x)
        u_ = u_.cpu().detach().numpy()
        return u_


def _build(seed, bug=None):
    import warnings

    r_seed = seed
    os.environ["PYTHONHASHSEED"] = str(r_seed)
    np.random.seed(r_seed)
    random.seed(r_seed)
    torch.manual_seed(r_seed)
    torch.set_default_dtype(d_type)
    device = torch.device("cpu")

    XT_ini_trn, XT_ini_val, XT_ini_tst, \
    XT_bnd_trn, XT_bnd_val, XT_bnd_tst, \
    XT_pde_trn, XT_pde_val, XT_pde_tst, held_out = prp_dat()

    # training set
    u_ini_trn = initial(XT_ini_trn[:,0])
    u_bnd_trn = boundary(XT_bnd_trn[:,1])

    # validation set
    u_ini_val = initial(XT_ini_val[:,0])
    u_bnd_val = boundary(XT_bnd_val[:,1])

    pinn = PINN(
        XT_ini_trn[:,0], XT_ini_trn[:,1], u_ini_trn,
        XT_bnd_trn[:,0], XT_bnd_trn[:,1], u_bnd_trn,
        XT_pde_trn[:,0], XT_pde_trn[:,1],
        XT_ini_val[:,0], XT_ini_val[:,1], u_ini_val,
        XT_bnd_val[:,0], XT_bnd_val[:,1], u_bnd_val,
        XT_pde_val[:,0], XT_pde_val[:,1],
        f_in, f_out, width, depth,
        w_init, b_init, act,
        lr, opt,
        f_scl, nu,
        w_ini, w_bnd, w_pde, bc,
        f_mntr, r_seed, d_type, device, bug=bug
    )
    pinn.to(device)
    st = {"ep": 0}

    def train_step():
        with warnings.catch_warnings():  # (port) the empty validation sets' mean
            warnings.simplefilter("ignore")
            out = pinn.train_one_epoch(st["ep"])
        st["ep"] += 1
        return out

    XT_ini = torch.cat((pinn.x_ini_trn, pinn.t_ini_trn), dim=1)

    def loss_fn(y_, u_ini):
        XT_bnd = torch.cat((pinn.x_bnd_trn, pinn.t_bnd_trn), dim=1)
        XT_pde = torch.cat((pinn.x_pde_trn, pinn.t_pde_trn), dim=1)
        return (pinn.w_ini * pinn.loss_func(u_ini, y_) + pinn.w_bnd * pinn.loss_bnd(XT_bnd, pinn.u_bnd_trn)
                + pinn.w_pde * pinn.loss_pde(XT_pde))

    ini_h, bnd_h, pde_h = (torch.from_numpy(a).float() for a in held_out)

    def eval_fn(model, _batch=None):
        u_ini = initial(ini_h[:, 0]).float().reshape(-1, 1)
        u_bnd = boundary(bnd_h[:, 1]).float().reshape(-1, 1)
        loss = model.loss_glb(ini_h[:, [0]], ini_h[:, [1]], u_ini, bnd_h[:, [0]], bnd_h[:, [1]], u_bnd,
                              pde_h[:, [0]], pde_h[:, [1]])
        return float(loss.detach())

    return Program(name="pinntorch_burgers", model=pinn, batch=(XT_ini, pinn.u_ini_trn), loss_fn=loss_fn,
                   optimizer=pinn.optimzer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the convection term's sign flipped in the residual (classic: the PDE mistyped), the physics term then trains
    # the network toward the solution of another equation.
    Bug("convection_sign_flipped", functools.partial(_build, bug="convection_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # the two columns of the first-derivative tensor swapped (classic: ``u_x_t[:, [1]]`` read as ``u_x``), the
    # residual differentiates along time where it means space.
    Bug("time_column_as_space", functools.partial(_build, bug="time_column_as_space"), "learning_ledger",
        ("OBJECTIVE",)),
    # the optimizer's zero_grad left out of the loop (classic): every epoch's gradient adds to all the earlier ones.
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]

"""FFJORD's continuous normalizing flow on a 2-d toy density (Grathwohl, Chen et al., ICLR 2019), from
rtqichen/ffjord's ``train_toy.py``: one CNF block whose dynamics are an ``ODEnet`` of ``ConcatSquashLinear`` layers
(64-64-64, tanh), the log-density change integrated alongside the state (``-divergence``, brute force in 2-d), the
end time held as the ``sqrt_end_time`` parameter (``train_T``, T 0.5), the standard-normal prior, ``loss = -mean(logpz - delta_logp)``,
Adam lr 1e-3 with weight decay 1e-5, on the pinwheel data.

Source: https://github.com/rtqichen/ffjord
Commit: 994864ad0517db3549717c25170f9b71e96788b1
Files: ``train_toy.py``, ``train_misc.py`` (``standard_normal_logprob``, ``set_cnf_options``,
``build_model_tabular``), ``lib/layers/cnf.py``, ``lib/layers/odefunc.py``, ``lib/layers/container.py``,
``lib/layers/diffeq_layers/basic.py`` (``ConcatSquashLinear``), ``lib/toy_data.py`` (``pinwheel``)
License: MIT (Copyright (c) 2018 Ricky Tian Qi Chen and Will Grathwohl; full text in LICENSES/rtqichen-ffjord.txt)
Domain: neural ODE / normalizing flow (continuous normalizing flow, maximum likelihood on 2-d data)

Kept as written: ``CNF`` (the ``sqrt_end_time`` parameter, integration times ``[0, T]``, the flip for ``reverse``,
``before_odeint``, the two-state ``(z, logpz)`` integration, the last time's states returned), ``ODEfunc`` (the
noise fixed per solve, the state and ``t`` made to require grad, the brute-force divergence for 2-d outside
training, ``divergence_fn`` otherwise, ``(dy, -divergence)`` returned), ``divergence_bf``, ``divergence_approx``,
``ODEnet`` for tabular inputs (``NONLINEARITIES``, no activation after the last layer), ``ConcatSquashLinear``,
``SequentialFlow``, ``build_model_tabular`` and ``set_cnf_options`` with the script's defaults (``dims`` 64-64-64,
``layer_type`` concatsquash, ``num_blocks`` 1, ``time_length`` 0.5, ``train_T`` True, ``divergence_fn``
brute_force, ``nonlinearity`` tanh, no residual / rademacher / spectral norm / batch norm / regularization),
``compute_loss``, the loop body (zero_grad, ``compute_loss``, backward, step) and the validation (``model.eval()``,
``compute_loss`` on a test batch under no_grad); ``pinwheel`` as written.

Deviations from the original:
- torchdiffeq is not installed: ``odeint_adjoint`` with dopri5 (atol = rtol = 1e-5) is replaced by ``odeint`` below,
  a fixed-grid classic Runge-Kutta 4 (8 steps over ``[0, T]``) over tuples of states, differentiated by plain
  backpropagation instead of the adjoint (the same gradient up to the solver's error). ``CNF.solver`` and the
  tolerances are kept as attributes but unused.
- ``inf_train_gen`` draws from an unseeded ``np.random.RandomState()``; the port passes one seeded from ``seed``
  (the ``rng`` argument the function already takes). The test batch is 1000 -> 200 points, the training batch 100
  kept. sklearn (imported by toy_data.py for other datasets) is not needed for pinwheel and not imported.
- only the branches the defaults take are copied: ``ODEnet``'s tabular (``conv=False``) branch with the
  concatsquash layer, four of ``NONLINEARITIES``, ``inf_train_gen``'s pinwheel; ``CNF`` without the
  ``RegularizedODEfunc`` wrapping (no regularization by default), ``SequentialFlow`` without batch norm.
- ``ODEfunc``'s ``torch.tensor(t)`` on a tensor ``t`` is ``t.detach().clone()`` (the same value, without the
  warning current torch gives).
- ``train_step`` is one iteration of the loop (the NFE / time meters, logging, checkpoints, spectral-norm power
  iteration, regularization -- all off by default -- and the visualization dropped), returning the loss;
  ``eval_fn`` is the validation's ``compute_loss`` on a fixed test batch. CPU only.
- the Program's batch is one training batch with the zero ``logpx``; ``loss_fn`` is ``compute_loss``'s last lines.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402

from __future__ import annotations

import copy
import functools
import math
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

RK4_STEPS = 8  # (port) the fixed grid replacing dopri5


# (port) torchdiffeq's odeint, written out as a fixed-grid RK4 over tuples of states
def odeint(func, y0, t, atol=None, rtol=None, method=None, options=None):
    t0, t1 = t[0], t[-1]
    h = (t1 - t0) / RK4_STEPS
    y = tuple(y0)
    tt = t0
    for _ in range(RK4_STEPS):
        k1 = func(tt, y)
        k2 = func(tt + h / 2, tuple(yi + h / 2 * ki for yi, ki in zip(y, k1)))
        k3 = func(tt + h / 2, tuple(yi + h / 2 * ki for yi, ki in zip(y, k2)))
        k4 = func(tt + h, tuple(yi + h * ki for yi, ki in zip(y, k3)))
        y = tuple(yi + h / 6 * (a + 2 * b + 2 * c + d) for yi, a, b, c, d in zip(y, k1, k2, k3, k4))
        tt = tt + h
    return tuple(torch.stack([a, b]) for a, b in zip(y0, y))


# lib/toy_data.py
def inf_train_gen(data, rng=None, batch_size=200):
    if rng is None:
        rng = np.random.RandomState()

    if data == "pinwheel":
        radial_std = 0.3
        tangential_std = 0.1
        num_classes = 5
        num_per_class = batch_size // 5
        rate = 0.25
        rads = np.linspace(0, 2 * np.pi, num_classes, endpoint=False)

        features = rng.randn(num_classes*num_per_class, 2) \
            * np.array([radial_std, tangential_std])
        features[:, 0] += 1.
        labels = np.repeat(np.arange(num_classes), num_per_class)

        angles = rads[labels] + rate * np.exp(features[:, 0])
        rotations = np.stack([np.cos(angles), -np.sin(angles), np.sin(angles), np.cos(angles)])
        rotations = np.reshape(rotations.T, (-1, 2, 2))

        return 2 * rng.permutation(np.einsum("ti,tij->tj", features, rotations))
    raise NotImplementedError(data)  # (port) only pinwheel


# lib/layers/diffeq_layers/basic.py
class ConcatSquashLinear(nn.Module):
    def __init__(self, dim_in, dim_out):
        super(ConcatSquashLinear, self).__init__()
        self._layer = nn.Linear(dim_in, dim_out)
        self._hyper_bias = nn.Linear(1, dim_out, bias=False)
        self._hyper_gate = nn.Linear(1, dim_out)

    def forward(self, t, x):
        return self._layer(x) * torch.sigmoid(self._hyper_gate(t.view(1, 1))) \
            + self._hyper_bias(t.view(1, 1))


# lib/layers/odefunc.py
def divergence_bf(dx, y, **unused_kwargs):
    sum_diag = 0.
    for i in range(y.shape[1]):
        sum_diag += torch.autograd.grad(dx[:, i].sum(), y, create_graph=True)[0].contiguous()[:, i].contiguous()
    return sum_diag.contiguous()


def _divergence_bf_without_create_graph(dx, y, **unused_kwargs):
    """(port) the ``divergence_without_create_graph`` variant of ``divergence_bf``."""
    sum_diag = 0.
    for i in range(y.shape[1]):
        sum_diag += torch.autograd.grad(dx[:, i].sum(), y, retain_graph=True)[0].contiguous()[:, i].contiguous()
    return sum_diag.contiguous()


def divergence_approx(f, y, e=None):
    e_dzdx = torch.autograd.grad(f, y, e, create_graph=True)[0]
    e_dzdx_e = e_dzdx * e
    approx_tr_dzdx = e_dzdx_e.view(y.shape[0], -1).sum(dim=1)
    return approx_tr_dzdx


def sample_rademacher_like(y):
    return torch.randint(low=0, high=2, size=y.shape).to(y) * 2 - 1


def sample_gaussian_like(y):
    return torch.randn_like(y)


NONLINEARITIES = {
    "tanh": nn.Tanh(),
    "relu": nn.ReLU(),
    "softplus": nn.Softplus(),
    "elu": nn.ELU(),
}


class ODEnet(nn.Module):
    """
    Helper class to make neural nets for use in continuous normalizing flows
    """

    def __init__(
        self, hidden_dims, input_shape, strides, conv, layer_type="concat", nonlinearity="softplus", num_squeeze=0
    ):
        super(ODEnet, self).__init__()
        self.num_squeeze = num_squeeze
        assert not conv  # (port) the tabular branch only
        strides = [None] * (len(hidden_dims) + 1)
        base_layer = {
            "concatsquash": ConcatSquashLinear,
        }[layer_type]

        # build layers and add them
        layers = []
        activation_fns = []
        hidden_shape = input_shape

        for dim_out, stride in zip(hidden_dims + (input_shape[0],), strides):
            layer_kwargs = {}

            layer = base_layer(hidden_shape[0], dim_out, **layer_kwargs)
            layers.append(layer)
            activation_fns.append(NONLINEARITIES[nonlinearity])

            hidden_shape = list(copy.copy(hidden_shape))
            hidden_shape[0] = dim_out

        self.layers = nn.ModuleList(layers)
        self.activation_fns = nn.ModuleList(activation_fns[:-1])

    def forward(self, t, y):
        dx = y
        for l, layer in enumerate(self.layers):
            dx = layer(t, dx)
            # if not last layer, use nonlinearity
            if l < len(self.layers) - 1:
                dx = self.activation_fns[l](dx)
        return dx


class ODEfunc(nn.Module):

    def __init__(self, diffeq, divergence_fn="approximate", residual=False, rademacher=False, bug=None):
        super(ODEfunc, self).__init__()
        self.bug = bug
        assert divergence_fn in ("brute_force", "approximate")

        # self.diffeq = diffeq_layers.wrappers.diffeq_wrapper(diffeq)
        self.diffeq = diffeq
        self.residual = residual
        self.rademacher = rademacher

        if divergence_fn == "brute_force":
            self.divergence_fn = divergence_bf
        elif divergence_fn == "approximate":
            self.divergence_fn = divergence_approx
        if bug == "divergence_without_create_graph":
            self.divergence_fn = _divergence_bf_without_create_graph

        self.register_buffer("_num_evals", torch.tensor(0.))

    def before_odeint(self, e=None):
        self._e = e
        self._num_evals.fill_(0)

    def num_evals(self):
        return self._num_evals.item()

    def forward(self, t, states):
        assert len(states) >= 2
        y = states[0]

        # increment num evals
        self._num_evals += 1

        # convert to tensor
        t = t.detach().clone().type_as(y)  # (port) torch.tensor(t).type_as(y)
        batchsize = y.shape[0]

        # Sample and fix the noise.
        if self._e is None:
            if self.rademacher:
                self._e = sample_rademacher_like(y)
            else:
                self._e = sample_gaussian_like(y)

        with torch.set_grad_enabled(True):
            y.requires_grad_(True)
            t.requires_grad_(True)
            for s_ in states[2:]:
                s_.requires_grad_(True)
            dy = self.diffeq(t, y, *states[2:])
            # Hack for 2D data to use brute force divergence computation.
            if not self.training and dy.view(dy.shape[0], -1).shape[1] == 2:
                divergence = divergence_bf(dy, y).view(batchsize, 1)
            else:
                divergence = self.divergence_fn(dy, y, e=self._e).view(batchsize, 1)
        if self.residual:
            dy = dy - y
            divergence -= torch.ones_like(divergence) * torch.tensor(np.prod(y.shape[1:]), dtype=torch.float32
                                                                     ).to(divergence)
        if self.bug == "divergence_sign_flipped":
            return tuple([dy, divergence] + [torch.zeros_like(s_).requires_grad_(True) for s_ in states[2:]])
        return tuple([dy, -divergence] + [torch.zeros_like(s_).requires_grad_(True) for s_ in states[2:]])


# lib/layers/cnf.py
class CNF(nn.Module):
    def __init__(self, odefunc, T=1.0, train_T=False, regularization_fns=None, solver='dopri5', atol=1e-5, rtol=1e-5):
        super(CNF, self).__init__()
        if train_T:
            self.register_parameter("sqrt_end_time", nn.Parameter(torch.sqrt(torch.tensor(T))))
        else:
            self.register_buffer("sqrt_end_time", torch.sqrt(torch.tensor(T)))

        nreg = 0
        self.odefunc = odefunc
        self.nreg = nreg
        self.regularization_states = None
        self.solver = solver
        self.atol = atol
        self.rtol = rtol
        self.test_solver = solver
        self.test_atol = atol
        self.test_rtol = rtol
        self.solver_options = {}

    def forward(self, z, logpz=None, integration_times=None, reverse=False):

        if logpz is None:
            _logpz = torch.zeros(z.shape[0], 1).to(z)
        else:
            _logpz = logpz

        if integration_times is None:
            integration_times = torch.tensor([0.0, self.sqrt_end_time * self.sqrt_end_time]).to(z)
        if reverse:
            integration_times = _flip(integration_times, 0)

        # Refresh the odefunc statistics.
        self.odefunc.before_odeint()

        # Add regularization states.
        reg_states = tuple(torch.tensor(0).to(z) for _ in range(self.nreg))

        if self.training:
            state_t = odeint(
                self.odefunc,
                (z, _logpz) + reg_states,
                integration_times.to(z),
                atol=self.atol,
                rtol=self.rtol,
                method=self.solver,
                options=self.solver_options,
            )
        else:
            state_t = odeint(
                self.odefunc,
                (z, _logpz),
                integration_times.to(z),
                atol=self.test_atol,
                rtol=self.test_rtol,
                method=self.test_solver,
            )

        if len(integration_times) == 2:
            state_t = tuple(s[1] for s in state_t)

        z_t, logpz_t = state_t[:2]
        self.regularization_states = state_t[2:]

        if logpz is not None:
            return z_t, logpz_t
        else:
            return z_t

    def num_evals(self):
        return self.odefunc._num_evals.item()


def _flip(x, dim):
    indices = [slice(None)] * x.dim()
    indices[dim] = torch.arange(x.size(dim) - 1, -1, -1, dtype=torch.long, device=x.device)
    return x[tuple(indices)]


# lib/layers/container.py
class SequentialFlow(nn.Module):
    """A generalized nn.Sequential container for normalizing flows.
    """

    def __init__(self, layersList):
        super(SequentialFlow, self).__init__()
        self.chain = nn.ModuleList(layersList)

    def forward(self, x, logpx=None, reverse=False, inds=None):
        if inds is None:
            if reverse:
                inds = range(len(self.chain) - 1, -1, -1)
            else:
                inds = range(len(self.chain))

        if logpx is None:
            for i in inds:
                x = self.chain[i](x, reverse=reverse)
            return x
        else:
            for i in inds:
                x, logpx = self.chain[i](x, logpx, reverse=reverse)
            return x, logpx


# train_misc.py
def standard_normal_logprob(z):
    logZ = -0.5 * math.log(2 * math.pi)
    return logZ - z.pow(2) / 2


def set_cnf_options(args, model):

    def _set(module):
        if isinstance(module, CNF):
            # Set training settings
            module.solver = args.solver
            module.atol = args.atol
            module.rtol = args.rtol
            if args.step_size is not None:
                module.solver_options['step_size'] = args.step_size

            # Set the test settings
            module.test_solver = args.test_solver if args.test_solver else args.solver
            module.test_atol = args.test_atol if args.test_atol else args.atol
            module.test_rtol = args.test_rtol if args.test_rtol else args.rtol

        if isinstance(module, ODEfunc):
            module.rademacher = args.rademacher
            module.residual = args.residual

    model.apply(_set)


def build_model_tabular(args, dims, regularization_fns=None, bug=None):

    hidden_dims = tuple(map(int, args.dims.split("-")))

    def build_cnf():
        diffeq = ODEnet(
            hidden_dims=hidden_dims,
            input_shape=(dims,),
            strides=None,
            conv=False,
            layer_type=args.layer_type,
            nonlinearity=args.nonlinearity,
        )
        odefunc = ODEfunc(
            diffeq=diffeq,
            divergence_fn=args.divergence_fn,
            residual=args.residual,
            rademacher=args.rademacher,
            bug=bug,
        )
        cnf = CNF(
            odefunc=odefunc,
            T=args.time_length,
            train_T=args.train_T,
            regularization_fns=regularization_fns,
            solver=args.solver,
        )
        return cnf

    chain = [build_cnf() for _ in range(args.num_blocks)]
    model = SequentialFlow(chain)

    set_cnf_options(args, model)

    return model


class _Args:
    """(port) the parser's defaults."""
    data = 'pinwheel'
    layer_type = 'concatsquash'
    dims = '64-64-64'
    num_blocks = 1
    time_length = 0.5
    train_T = True
    divergence_fn = 'brute_force'
    nonlinearity = 'tanh'
    solver = 'dopri5'
    atol = 1e-5
    rtol = 1e-5
    step_size = None
    test_solver = None
    test_atol = None
    test_rtol = None
    residual = False
    rademacher = False
    spectral_norm = False
    batch_norm = False
    batch_size = 100
    test_batch_size = 200  # (port) 1000
    lr = 1e-3
    weight_decay = 1e-5


def _build(seed, bug=None):
    args = _Args()
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    device = torch.device('cpu')

    def compute_loss(args, model, batch_size=None):
        if batch_size is None: batch_size = args.batch_size

        x = inf_train_gen(args.data, rng=rng, batch_size=batch_size)
        x = torch.from_numpy(x).type(torch.float32).to(device)
        zero = torch.zeros(x.shape[0], 1).to(x)

        z, delta_logp = model(x, zero)

        logpz = standard_normal_logprob(z).sum(1, keepdim=True)

        logpx = logpz - delta_logp
        loss = -torch.mean(logpx)
        return loss

    model = build_model_tabular(args, 2, None, bug=bug).to(device)
    set_cnf_options(args, model)
    optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    model.train()

    def train_step():
        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        loss = compute_loss(args, model)
        loss.backward()
        if bug == "zero_grad_after_backward":
            optimizer.zero_grad()
        optimizer.step()
        return loss.detach()

    test_x = torch.from_numpy(inf_train_gen(args.data, rng=np.random.RandomState(seed + 1000),
                                            batch_size=args.test_batch_size)).type(torch.float32)

    def eval_fn(m=None, batch=None):
        with torch.no_grad():
            model.eval()
            z, delta_logp = model(test_x, torch.zeros(test_x.shape[0], 1))
            test_loss = -torch.mean(standard_normal_logprob(z).sum(1, keepdim=True) - delta_logp)
            model.train()
        return float(test_loss)

    def loss_fn(out, _target=None):
        z, delta_logp = out
        logpz = standard_normal_logprob(z).sum(1, keepdim=True)
        logpx = logpz - delta_logp
        return -torch.mean(logpx)

    x0 = torch.from_numpy(inf_train_gen(args.data, rng=np.random.RandomState(seed + 1),
                                        batch_size=args.batch_size)).type(torch.float32)
    batch = ((x0, torch.zeros(x0.shape[0], 1)), torch.zeros(x0.shape[0]))
    return Program(name="ffjord_toy_cnf", model=model, batch=batch, loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # ODEfunc returns +divergence for d(logp)/dt (classic sign slip of the instantaneous change of variables): the
    # likelihood is paid for expanding volume the wrong way.
    Bug("divergence_sign_flipped", functools.partial(_build, bug="divergence_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # divergence_bf's autograd.grad with retain_graph=True in place of create_graph=True (classic): the divergence
    # is a constant to the optimizer, so the log-determinant term sends no gradient to the dynamics' weights.
    Bug("divergence_without_create_graph", functools.partial(_build, bug="divergence_without_create_graph"),
        "learning_ledger", ("GRADIENT",)),
    # zero_grad between backward and step (classic): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe", (),
        kind="step.zero_grad_before_step"),
]

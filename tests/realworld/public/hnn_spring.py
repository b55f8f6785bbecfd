"""Hamiltonian Neural Networks (Greydanus, Dzamba & Yosinski 2019) on the ideal mass-spring task: an MLP outputs two
scalars, the second read as the Hamiltonian whose symplectic gradient ``dF2/dx @ M.T`` (``torch.autograd.grad`` with
``create_graph=True``) is fitted to the observed time derivatives of noisy phase-space points by an L2 loss, Adam
with weight decay, full batch.

Source: https://github.com/greydanus/hamiltonian-nn
Commit: bcc362235dc623ffe48f22ccc22417e02e9803b4
Files: ``experiment-spring/train.py``, ``experiment-spring/data.py``, ``hnn.py``, ``nn_models.py``, ``utils.py``
License: Apache-2.0 (full text in LICENSES/greydanus-hamiltonian-nn.txt)
Domain: physics-informed learning, Hamiltonian neural network (learned vector field through input gradients)

Kept as written: ``MLP`` (three Linear layers, orthogonal init, tanh, bias-free head), ``HNN`` (``forward``'s split
into ``F1, F2``, ``time_derivative`` with the conservative/solenoidal fields, ``permutation_tensor`` with canonical
coordinates), ``L2_loss``, ``choose_nonlinearity``, ``rk4``, the spring data of ``data.py`` (``get_trajectory``: a
random radius in [0.1, 1], ``solve_ivp`` over t in [0, 3] at 30 points with rtol 1e-10, Gaussian noise 0.1 on q and
p; ``get_dataset``: 50 trajectories, a half/half train/test split), ``train.py``'s defaults (input_dim 2,
hidden_dim 200, lr 1e-3, tanh, ``field_type='solenoidal'``, not baseline, no RK4, ``Adam(..., weight_decay=1e-4)``)
and its loop body (``model.time_derivative(x)``, ``L2_loss(dxdt, dxdt_hat)``, ``loss.backward() ; optim.step() ;
optim.zero_grad()``, the test loss on the test half).

Deviations from the original:
- ``data.py`` differentiates the spring Hamiltonian ``H = p**2 + q**2`` with the ``autograd`` package, which is not
  installed here: ``dynamics_fn`` writes its gradient ``(2q, 2p)`` out by hand (the same numbers).
- the data is the repository's own simulation (scipy's ``solve_ivp``), seeded with ``seed`` as ``get_dataset(seed=
  args.seed)`` does; nothing is downloaded.
- ``train_step`` is one iteration of ``train``'s ``for step in range(args.total_steps+1)`` loop and returns the
  training loss (the test loss it computes is kept in ``stats`` as in the original); the prints, the final
  train/test distances and the ``torch.save`` are dropped. ``eval_fn`` is the loop's test loss.
- the Program's model is ``HNNField``, a two-line wrapper whose ``forward`` is ``time_derivative`` (what the loop
  calls as the prediction: ``HNN.forward`` returns the two scalar fields, not the prediction); it holds the ported
  ``HNN`` as ``hnn``, so its parameters are exactly those the optimizer trains (``hnn.differentiable_model.*``).
  ``time_derivative`` needs inputs that require grad: the wrapper sets ``requires_grad`` on a float input that has
  none (the original makes ``x`` with ``requires_grad=True``).
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import scipy.integrate
import torch

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

solve_ivp = scipy.integrate.solve_ivp


# ------------------------------------------------------------------------------------------------- utils.py
def rk4(fun, y0, t, dt, *args, **kwargs):
  dt2 = dt / 2.0
  k1 = fun(y0, t, *args, **kwargs)
  k2 = fun(y0 + dt2 * k1, t + dt2, *args, **kwargs)
  k3 = fun(y0 + dt2 * k2, t + dt2, *args, **kwargs)
  k4 = fun(y0 + dt * k3, t + dt, *args, **kwargs)
  dy = dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
  return dy


def L2_loss(u, v):
  return (u-v).pow(2).mean()


def choose_nonlinearity(name):
  nl = None
  if name == 'tanh':
    nl = torch.tanh
  elif name == 'relu':
    nl = torch.relu
  elif name == 'sigmoid':
    nl = torch.sigmoid
  elif name == 'softplus':
    nl = torch.nn.functional.softplus
  elif name == 'selu':
    nl = torch.nn.functional.selu
  elif name == 'elu':
    nl = torch.nn.functional.elu
  elif name == 'swish':
    nl = lambda x: x * torch.sigmoid(x)
  else:
    raise ValueError("nonlinearity not recognized")
  return nl


# --------------------------------------------------------------------------------------------- nn_models.py
class MLP(torch.nn.Module):
  '''Just a salt-of-the-earth MLP'''
  def __init__(self, input_dim, hidden_dim, output_dim, nonlinearity='tanh'):
    super(MLP, self).__init__()
    self.linear1 = torch.nn.Linear(input_dim, hidden_dim)
    self.linear2 = torch.nn.Linear(hidden_dim, hidden_dim)
    self.linear3 = torch.nn.Linear(hidden_dim, output_dim, bias=None)

    for l in [self.linear1, self.linear2, self.linear3]:
      torch.nn.init.orthogonal_(l.weight) # use a principled initialization

    self.nonlinearity = choose_nonlinearity(nonlinearity)

  def forward(self, x, separate_fields=False):
    h = self.nonlinearity( self.linear1(x) )
    h = self.nonlinearity( self.linear2(h) )
    return self.linear3(h)


# --------------------------------------------------------------------------------------------------- hnn.py
class HNN(torch.nn.Module):
    '''Learn arbitrary vector fields that are sums of conservative and solenoidal fields'''
    def __init__(self, input_dim, differentiable_model, field_type='solenoidal',
                    baseline=False, assume_canonical_coords=True):
        super(HNN, self).__init__()
        self.baseline = baseline
        self.differentiable_model = differentiable_model
        self.assume_canonical_coords = assume_canonical_coords
        self.M = self.permutation_tensor(input_dim) # Levi-Civita permutation tensor
        self.field_type = field_type

    def forward(self, x):
        # traditional forward pass
        if self.baseline:
            return self.differentiable_model(x)

        y = self.differentiable_model(x)
        assert y.dim() == 2 and y.shape[1] == 2, "Output tensor should have shape [batch_size, 2]"
        return y.split(1,1)

    def rk4_time_derivative(self, x, dt):
        return rk4(fun=self.time_derivative, y0=x, t=0, dt=dt)

    def time_derivative(self, x, t=None, separate_fields=False):
        '''NEURAL ODE-STLE VECTOR FIELD'''
        if self.baseline:
            return self.differentiable_model(x)

        '''NEURAL HAMILTONIAN-STLE VECTOR FIELD'''
        F1, F2 = self.forward(x) # traditional forward pass

        conservative_field = torch.zeros_like(x) # start out with both components set to 0
        solenoidal_field = torch.zeros_like(x)

        if self.field_type != 'solenoidal':
            dF1 = torch.autograd.grad(F1.sum(), x, create_graph=True)[0] # gradients for conservative field
            conservative_field = dF1 @ torch.eye(*self.M.shape)

        if self.field_type != 'conservative':
            dF2 = torch.autograd.grad(F2.sum(), x, create_graph=True)[0] # gradients for solenoidal field
            solenoidal_field = dF2 @ self.M.t()

        if separate_fields:
            return [conservative_field, solenoidal_field]

        return conservative_field + solenoidal_field

    def permutation_tensor(self,n):
        M = None
        if self.assume_canonical_coords:
            M = torch.eye(n)
            M = torch.cat([M[n//2:], -M[:n//2]])
        else:
            '''Constructs the Levi-Civita permutation tensor'''
            M = torch.ones(n,n) # matrix of ones
            M *= 1 - torch.eye(n) # clear diagonals
            M[::2] *= -1 # pattern of signs
            M[:,::2] *= -1

            for i in range(n): # make asymmetric
                for j in range(i+1, n):
                    M[i,j] *= -1
        return M


class HNNField(torch.nn.Module):
    """(port) The prediction ``train.py`` fits, as a module: ``forward`` is ``hnn.time_derivative``."""

    def __init__(self, hnn):
        super().__init__()
        self.hnn = hnn

    def forward(self, x):
        if not x.requires_grad and x.is_floating_point():
            x = x.detach().requires_grad_(True)
        return self.hnn.time_derivative(x)


# --------------------------------------------------------------------------------- experiment-spring/data.py
def hamiltonian_fn(coords):
    q, p = np.split(coords,2)
    H = p**2 + q**2 # spring hamiltonian (linear oscillator)
    return H


def dynamics_fn(t, coords):
    q, p = np.split(coords,2)
    dcoords = np.concatenate([2*q, 2*p])  # (port) autograd.grad(hamiltonian_fn)(coords), written out
    dqdt, dpdt = np.split(dcoords,2)
    S = np.concatenate([dpdt, -dqdt], axis=-1)
    return S


def get_trajectory(t_span=[0,3], timescale=10, radius=None, y0=None, noise_std=0.1, **kwargs):  # noqa: B006
    t_eval = np.linspace(t_span[0], t_span[1], int(timescale*(t_span[1]-t_span[0])))

    # get initial state
    if y0 is None:
        y0 = np.random.rand(2)*2-1
    if radius is None:
        radius = np.random.rand()*0.9 + 0.1 # sample a range of radii
    y0 = y0 / np.sqrt((y0**2).sum()) * radius ## set the appropriate radius

    spring_ivp = solve_ivp(fun=dynamics_fn, t_span=t_span, y0=y0, t_eval=t_eval, rtol=1e-10, **kwargs)
    q, p = spring_ivp['y'][0], spring_ivp['y'][1]
    dydt = [dynamics_fn(None, y) for y in spring_ivp['y'].T]
    dydt = np.stack(dydt).T
    dqdt, dpdt = np.split(dydt,2)

    # add noise
    q += np.random.randn(*q.shape)*noise_std
    p += np.random.randn(*p.shape)*noise_std
    return q, p, dqdt, dpdt, t_eval


def get_dataset(seed=0, samples=50, test_split=0.5, bug=None, **kwargs):
    data = {'meta': locals()}

    # randomly sample inputs
    np.random.seed(seed)
    xs, dxs = [], []
    for s in range(samples):
        x, y, dx, dy, t = get_trajectory(**kwargs)
        xs.append( np.stack( [x, y]).T )
        dxs.append( np.stack( [dx, dy]).T )

    data['x'] = np.concatenate(xs)
    data['dx'] = np.concatenate(dxs).squeeze()

    # make a train/test split
    split_ix = int(len(data['x']) * test_split)
    split_data = {}
    for k in ['x', 'dx']:
        split_data[k], split_data['test_' + k] = data[k][:split_ix], data[k][split_ix:]
    if bug == "dx_from_test_half":  # the training targets sliced from the other half (classic slicing slip)
        split_data['dx'] = data['dx'][split_ix:]
    data = split_data
    return data


# ---------------------------------------------------------------------------------- experiment-spring/train.py
class _Args:
    input_dim = 2
    hidden_dim = 200
    learn_rate = 1e-3
    nonlinearity = 'tanh'
    total_steps = 2000
    print_every = 200
    name = 'spring'
    baseline = False
    use_rk4 = False
    verbose = False
    field_type = 'solenoidal'
    seed = 0


def _build(seed, bug=None):
  args = _Args()
  args.seed = seed
  # set random seed
  torch.manual_seed(args.seed)
  np.random.seed(args.seed)

  output_dim = args.input_dim if args.baseline else 2
  nn_model = MLP(args.input_dim, args.hidden_dim, output_dim, args.nonlinearity)
  model = HNN(args.input_dim, differentiable_model=nn_model,
              field_type=args.field_type, baseline=args.baseline)
  optim = torch.optim.Adam(model.parameters(), args.learn_rate, weight_decay=1e-4)

  # arrange data
  data = get_dataset(seed=args.seed, bug=bug)
  x = torch.tensor( data['x'], requires_grad=True, dtype=torch.float32)
  test_x = torch.tensor( data['test_x'], requires_grad=True, dtype=torch.float32)
  dxdt = torch.Tensor(data['dx'])
  test_dxdt = torch.Tensor(data['test_dx'])

  # vanilla train loop
  stats = {'train_loss': [], 'test_loss': []}

  def train_step():
    # train step
    dxdt_hat = model.rk4_time_derivative(x) if args.use_rk4 else model.time_derivative(x)
    loss = L2_loss(dxdt, dxdt_hat)
    if bug == "no_zero_grad":
      loss.backward() ; optim.step()
    else:
      loss.backward() ; optim.step() ; optim.zero_grad()

    # run test data
    test_dxdt_hat = model.rk4_time_derivative(test_x) if args.use_rk4 else model.time_derivative(test_x)
    test_loss = L2_loss(test_dxdt, test_dxdt_hat)

    # logging
    stats['train_loss'].append(loss.item())
    stats['test_loss'].append(test_loss.item())
    return loss.item()

  def eval_fn(field, _batch=None):
    test_dxdt_hat = field(test_x)
    return float(L2_loss(test_dxdt, test_dxdt_hat).detach())

  field = HNNField(model)
  loss_fn = lambda dxdt_hat, dxdt: L2_loss(dxdt, dxdt_hat)
  return Program(name="hnn_spring", model=field, batch=(x, dxdt), loss_fn=loss_fn, optimizer=optim,
                 train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the training targets sliced from the test half of the simulated data (classic copy-paste slip in the
    # train/test split): every input is paired with the derivative of an unrelated phase-space point.
    Bug("dx_from_test_half", functools.partial(_build, bug="dx_from_test_half"), "learning_ledger", ("TASK",)),
    # optim.zero_grad() dropped from the loop's one-liner (classic): every step applies the sum of all gradients
    # so far. A whole-model step slip: declared by its mechanism (README rule 6).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),
]

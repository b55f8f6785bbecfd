"""Neural controlled differential equation classifying spirals (clockwise or anticlockwise), torchcde's own
example: the observations (time as a channel) turned into a Hermite cubic spline with backward differences, the
hidden state started from the first observation, evolved by ``dz = f_theta(z) dX`` and read out at the end; BCE with
logits, Adam at its defaults, batches of 32.

Source: https://github.com/patrick-kidger/torchcde
Commit: 9ff6aba4738989dc5fe3aee86d45812c318f6231
Files: ``example/time_series_classification.py``, ``torchcde/interpolation_hermite_cubic_bdiff.py``,
``torchcde/interpolation_cubic.py`` (``CubicSpline``), ``torchcde/interpolation_linear.py``
(``linear_interpolation_coeffs``), ``torchcde/solver.py`` (``_VectorField``, ``cdeint``)
License: Apache-2.0 (full text in LICENSES/patrick-kidger-torchcde.txt)
Domain: neural differential equations (neural CDE, time series classification)

Kept as written: ``CDEFunc`` (Linear(hidden, 128) - relu - Linear(128, input * hidden) - tanh, viewed as a matrix),
``NeuralCDE`` (``CubicSpline`` of the coefficients, ``z0 = initial(X.evaluate(X.interval[0]))``, ``cdeint`` over
``X.interval``, ``z_T[:, 1]``, readout), ``get_data`` (128 spirals, half of them mirrored, noise 0.01, time as a
channel, shuffled with ``torch.randperm``), ``main``'s loop body (``model(batch_coeffs).squeeze(-1)``,
``binary_cross_entropy_with_logits``, backward, step, zero_grad) and its test accuracy, the Hermite coefficients,
``CubicSpline``'s ``_interpret_t`` / ``evaluate`` / ``derivative`` and ``_VectorField``'s matrix-vector product.

Deviations from the original:
- torchdiffeq is not here: ``cdeint``'s ``odeint_adjoint`` (adaptive dopri5, rtol 1e-4, atol 1e-6, adjoint
  backward) is replaced by a fixed-grid solve with torchdiffeq's ``rk4`` step (the 3/8 rule) over the spline's
  knots (one step per observation interval), back-propagated directly; the solution is permuted to
  ``(batch, time, hidden)`` as ``cdeint`` does. ``_check_compatability`` (shape checks only) is left out.
- ``linear_interpolation_coeffs`` on data without missing values returns ``x`` itself; its NaN filling and
  ``validate_input_path`` checks are left out; ``InterpolationBase`` (an abstract base) is folded into
  ``CubicSpline``; the linear-interpolation branch of ``NeuralCDE`` is kept but never taken.
- sizes for 2 CPU cores: ``num_timepoints`` 100 -> 30; the data come from ``torch.manual_seed(seed)``.
- ``main`` is not run: ``train_step`` is one batch of its loop (the DataLoader re-iterated at each epoch), returning
  the loss; the prints are dropped; ``eval_fn`` is the test-accuracy lines on a fresh ``get_data()``.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008

from __future__ import annotations

import functools
import math
import pathlib
import sys

import torch

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

NUM_TIMEPOINTS = 30  # (port) 100


# ------------------------------------------------------------------------------ torchcde/interpolation_linear.py
def linear_interpolation_coeffs(x, t=None, rectilinear=None):
    # (port) without missing values the coefficients are the observations themselves
    return x


# --------------------------------------------------------------------- torchcde/interpolation_hermite_cubic_bdiff.py
def _setup_hermite_cubic_coeffs_w_backward_differences(times, coeffs, derivs, device=None):
    """Compute backward hermite from linear coeffs."""
    x_prev = coeffs[..., :-1, :]
    x_next = coeffs[..., 1:, :]
    # Let x_0 - x_{-1} = x_1 - x_0
    derivs_prev = torch.cat((derivs[..., [0], :], derivs[..., :-1, :]), axis=-2)
    derivs_next = derivs
    x_diff = x_next - x_prev
    t_diff = (times[1:] - times[:-1]).unsqueeze(-1)
    # Coeffs
    a = x_prev
    b = derivs_prev
    two_c = 2 * (3 * (x_diff / t_diff - b) - derivs_next + derivs_prev) / t_diff
    three_d = (1 / t_diff ** 2) * (derivs_next - b) - (two_c) / t_diff
    coeffs = torch.cat([a, b, two_c, three_d], dim=-1).to(device)
    return coeffs


def hermite_cubic_coefficients_with_backward_differences(x, t=None):
    """Computes the coefficients for hermite cubic splines with backward differences.

    Arguments:
        As `torchcde.linear_interpolation_coeffs`.

    Returns:
        A tensor, which should in turn be passed to `torchcde.CubicSpline`.
    """
    # Linear coeffs
    coeffs = linear_interpolation_coeffs(x, t=t, rectilinear=None)

    if t is None:
        t = torch.linspace(0, coeffs.size(-2) - 1, coeffs.size(-2), dtype=coeffs.dtype, device=coeffs.device)

    # Linear derivs
    derivs = (coeffs[..., 1:, :] - coeffs[..., :-1, :]) / (t[1:] - t[:-1]).unsqueeze(-1)

    # Use the above to compute hermite coeffs
    hermite_coeffs = _setup_hermite_cubic_coeffs_w_backward_differences(t, coeffs, derivs, device=coeffs.device)

    return hermite_coeffs


# ------------------------------------------------------------------------------- torchcde/interpolation_cubic.py
class CubicSpline(torch.nn.Module):
    """Calculates the cubic spline approximation to the batch of controls given. Also calculates its derivative."""

    def __init__(self, coeffs, t=None, **kwargs):
        super(CubicSpline, self).__init__(**kwargs)

        if t is None:
            t = torch.linspace(0, coeffs.size(-2), coeffs.size(-2) + 1, dtype=coeffs.dtype, device=coeffs.device)

        channels = coeffs.size(-1) // 4
        if channels * 4 != coeffs.size(-1):  # check that it's a multiple of 4
            raise ValueError("Passed invalid coeffs.")
        a, b, two_c, three_d = (coeffs[..., :channels], coeffs[..., channels:2 * channels],
                                coeffs[..., 2 * channels:3 * channels], coeffs[..., 3 * channels:])

        self.register_buffer('_t', t)
        self.register_buffer('_a', a)
        self.register_buffer('_b', b)
        # as we're typically computing derivatives, we store the multiples of these coefficients that are more useful
        self.register_buffer('_two_c', two_c)
        self.register_buffer('_three_d', three_d)

    @property
    def grid_points(self):
        return self._t

    @property
    def interval(self):
        return torch.stack([self._t[0], self._t[-1]])

    def _interpret_t(self, t):
        t = torch.as_tensor(t, dtype=self._b.dtype, device=self._b.device)
        maxlen = self._b.size(-2) - 1
        # clamp because t may go outside of [t[0], t[-1]]; this is fine
        index = torch.bucketize(t.detach(), self._t.detach()).sub(1).clamp(0, maxlen)
        # will never access the last element of self._t; this is correct behaviour
        fractional_part = t - self._t[index]
        return fractional_part, index

    def evaluate(self, t):
        fractional_part, index = self._interpret_t(t)
        fractional_part = fractional_part.unsqueeze(-1)
        inner = 0.5 * self._two_c[..., index, :] + self._three_d[..., index, :] * fractional_part / 3
        inner = self._b[..., index, :] + inner * fractional_part
        return self._a[..., index, :] + inner * fractional_part

    def derivative(self, t):
        fractional_part, index = self._interpret_t(t)
        fractional_part = fractional_part.unsqueeze(-1)
        inner = self._two_c[..., index, :] + self._three_d[..., index, :] * fractional_part
        deriv = self._b[..., index, :] + inner * fractional_part
        return deriv


# ------------------------------------------------------------------------------------------- torchcde/solver.py
class _VectorField(torch.nn.Module):
    def __init__(self, X, func, is_tensor, is_prod):
        super(_VectorField, self).__init__()

        self.X = X
        self.func = func
        self.is_tensor = is_tensor
        self.is_prod = is_prod

    def forward(self, t, z):
        control_gradient = self.X.derivative(t)

        if self.is_prod:
            out = self.func.prod(t, z, control_gradient)
        else:
            vector_field = self.func(t, z)
            out = (vector_field @ control_gradient.unsqueeze(-1)).squeeze(-1)

        return out


def _rk4_odeint(func, y0, t, grid):
    """(port) torchdiffeq's fixed-grid ``odeint(method='rk4')`` (the 3/8 rule) stepping over ``grid``, returning the
    solution at ``t[0]`` and ``t[-1]`` (``t`` is the spline's interval, the grid's ends)."""
    y = y0
    for i in range(len(grid) - 1):
        t0, t1 = grid[i], grid[i + 1]
        dt = t1 - t0
        _one_third = 1 / 3
        _two_thirds = 2 / 3
        k1 = func(t0, y)
        k2 = func(t0 + dt * _one_third, y + dt * k1 * _one_third)
        k3 = func(t0 + dt * _two_thirds, y + dt * (k2 - k1 * _one_third))
        k4 = func(t1, y + dt * (k1 - k2 + k3))
        y = y + (k1 + 3 * (k2 + k3) + k4) * dt * 0.125
    return torch.stack([y0, y])


def cdeint(X, func, z0, t, adjoint=True, backend="torchdiffeq", **kwargs):
    is_tensor, is_prod = True, hasattr(func, 'prod')  # (port) _check_compatability's result for a tensor z0
    vector_field = _VectorField(X=X, func=func, is_tensor=is_tensor, is_prod=is_prod)
    out = _rk4_odeint(vector_field, z0, t, X.grid_points)  # (port) odeint_adjoint(dopri5)

    if is_tensor:
        batch_dims = range(1, len(out.shape) - 1)
        out = out.permute(*batch_dims, 0, -1)

    return out


# ---------------------------------------------------------------------------- example/time_series_classification.py
class CDEFunc(torch.nn.Module):
    def __init__(self, input_channels, hidden_channels):
        ######################
        # input_channels is the number of input channels in the data X. (Determined by the data.)
        # hidden_channels is the number of channels for z_t. (Determined by you!)
        ######################
        super(CDEFunc, self).__init__()
        self.input_channels = input_channels
        self.hidden_channels = hidden_channels

        self.linear1 = torch.nn.Linear(hidden_channels, 128)
        self.linear2 = torch.nn.Linear(128, input_channels * hidden_channels)

    def forward(self, t, z):
        # z has shape (batch, hidden_channels)
        z = self.linear1(z)
        z = z.relu()
        z = self.linear2(z)
        ######################
        # Easy-to-forget gotcha: Best results tend to be obtained by adding a final tanh nonlinearity.
        ######################
        z = z.tanh()
        ######################
        # Ignoring the batch dimension, the shape of the output tensor must be a matrix,
        # because we need it to represent a linear map from R^input_channels to R^hidden_channels.
        ######################
        z = z.view(z.size(0), self.hidden_channels, self.input_channels)
        return z


class NeuralCDE(torch.nn.Module):
    def __init__(self, input_channels, hidden_channels, output_channels, interpolation="cubic"):
        super(NeuralCDE, self).__init__()

        self.func = CDEFunc(input_channels, hidden_channels)
        self.initial = torch.nn.Linear(input_channels, hidden_channels)
        self.readout = torch.nn.Linear(hidden_channels, output_channels)
        self.interpolation = interpolation
        self.bug = None  # (port) the bug switch

    def forward(self, coeffs):
        if self.interpolation == 'cubic':
            X = CubicSpline(coeffs)
        else:
            raise ValueError("Only 'linear' and 'cubic' interpolation methods are implemented.")

        ######################
        # Easy to forget gotcha: Initial hidden state should be a function of the first observation.
        ######################
        X0 = X.evaluate(X.interval[0])
        z0 = self.initial(X0)

        ######################
        # Actually solve the CDE.
        ######################
        z_T = cdeint(X=X,
                     z0=z0,
                     func=self.func,
                     t=X.interval)

        ######################
        # Both the initial value and the terminal value are returned from cdeint; extract just the terminal value,
        # and then apply a linear map.
        ######################
        if self.bug == "initial_value_read_out":
            z_T = z_T[:, 0]
        else:
            z_T = z_T[:, 1]
        pred_y = self.readout(z_T)
        return pred_y


def get_data(num_timepoints=100, bug=None):
    t = torch.linspace(0., 4 * math.pi, num_timepoints)

    start = torch.rand(128) * 2 * math.pi
    x_pos = torch.cos(start.unsqueeze(1) + t.unsqueeze(0)) / (1 + 0.5 * t)
    x_pos[:64] *= -1
    y_pos = torch.sin(start.unsqueeze(1) + t.unsqueeze(0)) / (1 + 0.5 * t)
    x_pos += 0.01 * torch.randn_like(x_pos)
    y_pos += 0.01 * torch.randn_like(y_pos)
    ######################
    # Easy to forget gotcha: time should be included as a channel; Neural CDEs need to be explicitly told the
    # rate at which time passes. Here, we have a regularly sampled dataset, so appending time is pretty simple.
    ######################
    X = torch.stack([t.unsqueeze(0).repeat(128, 1), x_pos, y_pos], dim=2)
    y = torch.zeros(128)
    y[:64] = 1

    perm = torch.randperm(128)
    X = X[perm]
    if bug != "labels_not_permuted":
        y = y[perm]

    ######################
    # X is a tensor of observations, of shape (batch=128, sequence=100, channels=3)
    # y is a tensor of labels, of shape (batch=128,), either 0 or 1 corresponding to anticlockwise or clockwise
    # respectively.
    ######################
    return X, y


def _build(seed, bug=None):
    torch.manual_seed(seed)
    train_X, train_y = get_data(NUM_TIMEPOINTS, bug=bug)

    ######################
    # input_channels=3 because we have both the horizontal and vertical position of a point in the spiral, and time.
    # hidden_channels=8 is the number of hidden channels for the evolving z_t, which we get to choose.
    # output_channels=1 because we're doing binary classification.
    ######################
    model = NeuralCDE(input_channels=3, hidden_channels=8, output_channels=1)
    model.bug = bug
    optimizer = torch.optim.Adam(model.parameters())

    train_coeffs = hermite_cubic_coefficients_with_backward_differences(train_X)

    train_dataset = torch.utils.data.TensorDataset(train_coeffs, train_y)
    train_dataloader = torch.utils.data.DataLoader(train_dataset, batch_size=32)
    st = {"it": iter(train_dataloader)}

    def train_step():
        batch = next(st["it"], None)
        if batch is None:  # the next epoch
            st["it"] = iter(train_dataloader)
            batch = next(st["it"])
        batch_coeffs, batch_y = batch
        pred_y = model(batch_coeffs).squeeze(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(pred_y, batch_y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    test_X, test_y = get_data(NUM_TIMEPOINTS)
    test_coeffs = hermite_cubic_coefficients_with_backward_differences(test_X)

    def eval_fn(model, _batch=None):
        with torch.no_grad():
            pred_y = model(test_coeffs).squeeze(-1)
        binary_prediction = (torch.sigmoid(pred_y) > 0.5).to(test_y.dtype)
        prediction_matches = (binary_prediction == test_y).to(test_y.dtype)
        proportion_correct = prediction_matches.sum() / test_y.size(0)
        return float(proportion_correct)

    def loss_fn(pred_y, batch_y):
        return torch.nn.functional.binary_cross_entropy_with_logits(pred_y.squeeze(-1), batch_y)

    return Program(name="torchcde_spirals", model=model, batch=(train_coeffs[:32], train_y[:32]), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_dataloader)


build = functools.partial(_build, bug=None)

BUGS = [
    # z_T[:, 0] for z_T[:, 1] (classic index slip on cdeint's output, which holds the initial and the terminal
    # value): the readout sees z0 = initial(X0) only, so the CDE's vector field never reaches the loss.
    Bug("initial_value_read_out", functools.partial(_build, bug="initial_value_read_out"), "reachability",
        ("func",)),
    # the observations shuffled by ``perm`` but not the labels (classic): the labels no longer belong to their spirals.
    Bug("labels_not_permuted", functools.partial(_build, bug="labels_not_permuted"), "learning_ledger", ("TASK",)),
]

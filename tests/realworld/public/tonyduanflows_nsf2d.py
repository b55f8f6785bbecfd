"""Neural spline flow (coupling layers with unconstrained rational-quadratic splines) fitted by maximum likelihood
to a 2-d three-Gaussian mixture, as the repository's 2-d example runs by default (``--flow NSF_CL --flows 2``):
``NormalizingFlowModel`` (standard normal prior, flows composed, log-determinants summed), loss
``-mean(prior_logprob + log_det)`` on the whole standardized data set, Adam lr 0.005.

Source: https://github.com/tonyduan/normalizing-flows
Commit: 3ee9127e3753be3878a0a4fd3ea435ff2d31d143
Files: examples/ex_2d.py, src/models.py, src/flows.py (FCNN, NSF_CL), src/utils.py (unconstrained_RQS, RQS,
searchsorted; the file says it is taken from bayesiains/nsf)
License: MIT (Copyright (c) 2019 Tony Duan; full text in LICENSES/tonyduan-normalizing-flows.txt)
Domain: normalizing flow, density estimation (2-d)

Deviations from the original:
- sizes: none changed (n 512, 2 flows, K 5, B 3, hidden_dim 8); ``--iterations`` 500 -> the test's step count;
- data: ``gen_data`` draws from ``np.random.RandomState(seed)`` instead of the global numpy generator;
- only the training path is kept: the flows' ``inverse``/``sample`` and the RQS inverse branch (used for the plots),
  the plotting, logging and argument parsing are left out; the other flow classes of ``src/flows.py`` (not used by
  the default command) are not copied;
- one ``train_step`` is one iteration of the training loop (zero_grad, forward, loss, backward, step);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: PLR0402, RUF059

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import MultivariateNormal

_HERE = str(pathlib.Path(__file__).resolve().parents[1])
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _api import Bug, Program

# ---- src/utils.py ----------------------------------------------------------------------------------------------

DEFAULT_MIN_BIN_WIDTH = 1e-3
DEFAULT_MIN_BIN_HEIGHT = 1e-3
DEFAULT_MIN_DERIVATIVE = 1e-3

def searchsorted(bin_locations, inputs, eps=1e-6):
    bin_locations[..., -1] += eps
    return torch.sum(
        inputs[..., None] >= bin_locations,
        dim=-1
    ) - 1

def unconstrained_RQS(inputs, unnormalized_widths, unnormalized_heights,
                      unnormalized_derivatives, inverse=False,
                      tail_bound=1., min_bin_width=DEFAULT_MIN_BIN_WIDTH,
                      min_bin_height=DEFAULT_MIN_BIN_HEIGHT,
                      min_derivative=DEFAULT_MIN_DERIVATIVE):
    inside_intvl_mask = (inputs >= -tail_bound) & (inputs <= tail_bound)
    outside_interval_mask = ~inside_intvl_mask

    outputs = torch.zeros_like(inputs)
    logabsdet = torch.zeros_like(inputs)

    unnormalized_derivatives = F.pad(unnormalized_derivatives, pad=(1, 1))
    constant = np.log(np.exp(1 - min_derivative) - 1)
    unnormalized_derivatives[..., 0] = constant
    unnormalized_derivatives[..., -1] = constant

    outputs[outside_interval_mask] = inputs[outside_interval_mask]
    logabsdet[outside_interval_mask] = 0

    outputs[inside_intvl_mask], logabsdet[inside_intvl_mask] = RQS(
        inputs=inputs[inside_intvl_mask],
        unnormalized_widths=unnormalized_widths[inside_intvl_mask, :],
        unnormalized_heights=unnormalized_heights[inside_intvl_mask, :],
        unnormalized_derivatives=unnormalized_derivatives[inside_intvl_mask, :],
        inverse=inverse,
        left=-tail_bound, right=tail_bound, bottom=-tail_bound, top=tail_bound,
        min_bin_width=min_bin_width,
        min_bin_height=min_bin_height,
        min_derivative=min_derivative
    )
    return outputs, logabsdet

def RQS(inputs, unnormalized_widths, unnormalized_heights,
        unnormalized_derivatives, inverse=False, left=0., right=1.,
        bottom=0., top=1., min_bin_width=DEFAULT_MIN_BIN_WIDTH,
        min_bin_height=DEFAULT_MIN_BIN_HEIGHT,
        min_derivative=DEFAULT_MIN_DERIVATIVE):
    if torch.min(inputs) < left or torch.max(inputs) > right:
        raise ValueError("Input outside domain")

    num_bins = unnormalized_widths.shape[-1]

    if min_bin_width * num_bins > 1.0:
        raise ValueError('Minimal bin width too large for the number of bins')
    if min_bin_height * num_bins > 1.0:
        raise ValueError('Minimal bin height too large for the number of bins')

    widths = F.softmax(unnormalized_widths, dim=-1)
    widths = min_bin_width + (1 - min_bin_width * num_bins) * widths
    cumwidths = torch.cumsum(widths, dim=-1)
    cumwidths = F.pad(cumwidths, pad=(1, 0), mode='constant', value=0.0)
    cumwidths = (right - left) * cumwidths + left
    cumwidths[..., 0] = left
    cumwidths[..., -1] = right
    widths = cumwidths[..., 1:] - cumwidths[..., :-1]

    derivatives = min_derivative + F.softplus(unnormalized_derivatives)

    heights = F.softmax(unnormalized_heights, dim=-1)
    heights = min_bin_height + (1 - min_bin_height * num_bins) * heights
    cumheights = torch.cumsum(heights, dim=-1)
    cumheights = F.pad(cumheights, pad=(1, 0), mode='constant', value=0.0)
    cumheights = (top - bottom) * cumheights + bottom
    cumheights[..., 0] = bottom
    cumheights[..., -1] = top
    heights = cumheights[..., 1:] - cumheights[..., :-1]

    if inverse:
        bin_idx = searchsorted(cumheights, inputs)[..., None]
    else:
        bin_idx = searchsorted(cumwidths, inputs)[..., None]

    input_cumwidths = cumwidths.gather(-1, bin_idx)[..., 0]
    input_bin_widths = widths.gather(-1, bin_idx)[..., 0]

    input_cumheights = cumheights.gather(-1, bin_idx)[..., 0]
    delta = heights / widths
    input_delta = delta.gather(-1, bin_idx)[..., 0]

    input_derivatives = derivatives.gather(-1, bin_idx)[..., 0]
    input_derivatives_plus_one = derivatives[..., 1:].gather(-1, bin_idx)
    input_derivatives_plus_one = input_derivatives_plus_one[..., 0]

    input_heights = heights.gather(-1, bin_idx)[..., 0]

    if inverse:
        raise NotImplementedError("the inverse branch (sampling, plots) is not ported")
    else:
        theta = (inputs - input_cumwidths) / input_bin_widths
        theta_one_minus_theta = theta * (1 - theta)

        numerator = input_heights * (input_delta * theta.pow(2) \
                    + input_derivatives * theta_one_minus_theta)
        denominator = input_delta + ((input_derivatives \
                      + input_derivatives_plus_one - 2 * input_delta) \
                      * theta_one_minus_theta)
        outputs = input_cumheights + numerator / denominator

        derivative_numerator = input_delta.pow(2) \
                               * (input_derivatives_plus_one * theta.pow(2) \
                                + 2 * input_delta * theta_one_minus_theta \
                                + input_derivatives * (1 - theta).pow(2))
        logabsdet = torch.log(derivative_numerator) - 2 * torch.log(denominator)
        return outputs, logabsdet


# ---- src/flows.py ----------------------------------------------------------------------------------------------

class FCNN(nn.Module):
    """
    Simple fully connected neural network.
    """
    def __init__(self, in_dim, out_dim, hidden_dim):
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(in_dim, hidden_dim),
            nn.Tanh(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.Tanh(),
            nn.Linear(hidden_dim, out_dim),
        )

    def forward(self, x):
        return self.network(x)


class NSF_CL(nn.Module):
    """
    Neural spline flow, coupling layer.

    [Durkan et al. 2019]
    """
    def __init__(self, dim, K = 5, B = 3, hidden_dim = 8, base_network = FCNN, bug=None):
        super().__init__()
        self.dim = dim
        self.K = K
        self.B = B
        self.f1 = base_network(dim // 2, (3 * K - 1) * dim // 2, hidden_dim)
        self.f2 = base_network(dim // 2, (3 * K - 1) * dim // 2, hidden_dim)
        self.bug = bug

    def forward(self, x):
        log_det = torch.zeros(x.shape[0])
        lower, upper = x[:, :self.dim // 2], x[:, self.dim // 2:]
        out = self.f1(lower).reshape(-1, self.dim // 2, 3 * self.K - 1)
        W, H, D = torch.split(out, self.K, dim = 2)
        W, H = torch.softmax(W, dim = 2), torch.softmax(H, dim = 2)
        W, H = 2 * self.B * W, 2 * self.B * H
        D = F.softplus(D)
        upper, ld = unconstrained_RQS(
            upper, W, H, D, inverse=False, tail_bound=self.B)
        log_det += torch.sum(ld, dim = 1)
        if self.bug == "second_coupling_reads_its_own_half":
            # the second coupling's conditioner fed the half it transforms: not a coupling, the log-det is wrong
            out = self.f2(lower).reshape(-1, self.dim // 2, 3 * self.K - 1)
        else:
            out = self.f2(upper).reshape(-1, self.dim // 2, 3 * self.K - 1)
        W, H, D = torch.split(out, self.K, dim = 2)
        W, H = torch.softmax(W, dim = 2), torch.softmax(H, dim = 2)
        W, H = 2 * self.B * W, 2 * self.B * H
        D = F.softplus(D)
        lower, ld = unconstrained_RQS(
            lower, W, H, D, inverse=False, tail_bound=self.B)
        log_det += torch.sum(ld, dim = 1)
        return torch.cat([lower, upper], dim = 1), log_det


# ---- src/models.py ---------------------------------------------------------------------------------------------

class NormalizingFlowModel(nn.Module):

    def __init__(self, dim, flows):
        super().__init__()
        self.prior = MultivariateNormal(torch.zeros(dim), torch.eye(dim))
        self.flows = nn.ModuleList(flows)

    def forward(self, x):
        bsz, _ = x.shape
        log_det = torch.zeros(bsz)
        for flow in self.flows:
            x, ld = flow.forward(x)
            log_det += ld
        z, prior_logprob = x, self.prior.log_prob(x)
        return z, prior_logprob, log_det


# ---- examples/ex_2d.py -----------------------------------------------------------------------------------------

def gen_data(n=512, rng=np.random):
    return np.r_[rng.randn(n // 3, 2) + np.array([0, 6]),
                 rng.randn(n // 3, 2) + np.array([2.5, 3]),
                 rng.randn(n // 3, 2) + np.array([-2.5, 3])]


N = 512
FLOWS = 2


def _build(seed, bug=None):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)

    flow = NSF_CL
    flows = [flow(dim=2, bug=bug) for _ in range(FLOWS)]

    model = NormalizingFlowModel(dim=2, flows=flows)

    optimizer = optim.Adam(model.parameters(), lr=0.005)
    x = torch.Tensor(gen_data(N, rng))

    for i in range(x.shape[1]):
        x[:,i] = (x[:,i] - torch.mean(x[:,i])) / torch.std(x[:,i])

    def objective(prior_logprob, log_det):
        if bug == "log_det_dropped":
            # the change-of-variables term left out: only the prior's density of z is maximized
            return -torch.mean(prior_logprob)
        return -torch.mean(prior_logprob + log_det)

    def train_step():
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()
        z, prior_logprob, log_det = model(x)
        logprob = prior_logprob + log_det  # noqa: F841  (logged in the original)
        loss = objective(prior_logprob, log_det)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def loss_fn(outputs, _targets):
        _z, prior_logprob, log_det = outputs
        return objective(prior_logprob, log_det)

    return Program(name="tonyduanflows_nsf2d", model=model, batch=(x,), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step)


build = functools.partial(_build)

BUGS = [
    # the log-determinant left out of the log-likelihood (classic change-of-variables slip): the flow is rewarded for
    # squeezing every point onto the prior's mode.
    Bug("log_det_dropped", functools.partial(_build, bug="log_det_dropped"), "learning_ledger", ("OBJECTIVE",)),
    # the second coupling's conditioner reads the half it transforms (classic coupling slip): the output depends on
    # the coordinate itself and the summed log-det is no longer the Jacobian's.
    # where re-declared in review (2026-12-07): a mask that lets an output read the input it transforms breaks the triangular
    # Jacobian, which OBJECTIVE's objective.log_det_mismatch confirms against autograd (its hint names the masks)
    Bug("second_coupling_reads_its_own_half", functools.partial(_build, bug="second_coupling_reads_its_own_half"),
        "learning_ledger", ("OBJECTIVE",)),
    # optimizer.zero_grad() left out of the loop: every iteration's gradient adds onto all earlier ones.
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

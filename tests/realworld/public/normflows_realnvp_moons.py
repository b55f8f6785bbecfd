# ruff: noqa: PLR0402, B008
"""Real NVP on a two-dimensional two-moons density with Vincent Stimper's normflows: a trainable diagonal Gaussian
base, 32 affine coupling blocks (split, an MLP ``[1, 64, 64, 2]`` with a zero-initialized last layer mapping one
half to the other half's shift and log-scale, merge) each followed by a swap of the two coordinates, trained by
maximum likelihood (``forward_kld``: the flow inverted on samples of the target, log-determinants summed, the base's
log-density added) with Adam lr 5e-4 and weight decay 1e-5; steps with a non-finite loss are skipped.

Source: https://github.com/VincentStimper/normalizing-flows
Commit: c6616b1a9f04c0e894b9e045e66bd504db17ef5e
Files: ``examples/real_nvp_colab.ipynb`` (model set-up, target, training cell), ``normflows/core.py``
(``NormalizingFlow``: ``forward``, ``inverse_and_log_det``, ``forward_kld``, ``log_prob``), ``normflows/flows/base.py``
(``Flow``, ``zero_log_det_like_z``), ``normflows/flows/affine/coupling.py`` (``AffineCoupling``,
``AffineCouplingBlock``), ``normflows/flows/reshape.py`` (``Split``, ``Merge``: the channel mode),
``normflows/flows/mixing.py`` (``Permute``: the swap mode), ``normflows/nets/mlp.py`` (``MLP``),
``normflows/distributions/base.py`` (``BaseDistribution``, ``DiagGaussian``), ``normflows/distributions/target.py``
(``Target`` with its rejection sampler, ``TwoMoons``)
License: MIT (Copyright (c) 2020 Vincent Stimper; full text in LICENSES/VincentStimper-normalizing-flows.txt)
Domain: normalizing flows, density estimation (Real NVP affine couplings, maximum likelihood on samples)

Kept as written: the library classes listed above (the branches the example does not take, such as the coupling's
sigmoid scale maps, the checkerboard split, the shuffle permutation, the MLP's output functions and dropout, and the
base's temperature and context, are left out), and the notebook's cells: the model built from
``DiagGaussian(2)``, ``MLP([1, 64, 64, 2], init_zeros=True)``, ``AffineCouplingBlock(param_map)`` and
``Permute(2, mode='swap')``; ``target = TwoMoons()``; ``num_samples = 2 ** 9``; ``Adam(model.parameters(),
lr=5e-4, weight_decay=1e-5)``; the loop body (zero_grad, ``x = target.sample(num_samples)``, ``loss =
model.forward_kld(x)``, backward and step only if the loss is finite, the loss history).

Deviations from the original:
- sizes for 2 CPU cores: ``num_layers`` 32 -> 8 coupling blocks, the MLP's hidden width 64 -> 32; ``max_iter`` 4000
  is not run: ``train_step`` is one iteration of the training loop and returns its loss.
- the seed: the notebook sets none; here ``torch.manual_seed(seed)`` before the model is built (the target's
  rejection sampler draws from the same torch generator). The device is the CPU.
- the plots (target, initial and learned densities on a grid, the loss curve) and the tqdm bar are dropped;
  ``eval_fn`` is the model's mean negative log-likelihood (``model.log_prob`` in eval mode, as the plotting cell calls
  it) on a fixed set of 2048 target samples.
- the Program's model is the flow seen in the direction its loss uses: ``FlowInverse`` wraps the ``NormalizingFlow``
  (its parameters under ``nfm.``) with ``forward(x) = nfm.inverse_and_log_det(x)``; ``loss_fn`` adds the base's
  log-density to the log-determinant and negates the mean, which is ``forward_kld``'s value. The batch is one
  ``target.sample(num_samples)`` draw.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

NUM_LAYERS = 8  # (port) 32
HIDDEN = 32  # (port) 64


# ---- normflows/flows/base.py -------------------------------------------------------------------------------------

class Flow(nn.Module):
    """
    Generic class for flow functions
    """

    def __init__(self):
        super().__init__()

    def forward(self, z):
        """
        Args:
          z: input variable, first dimension is batch dim

        Returns:
          transformed z and log of absolute determinant
        """
        raise NotImplementedError("Forward pass has not been implemented.")

    def inverse(self, z):
        raise NotImplementedError("This flow has no algebraic inverse.")


def zero_log_det_like_z(z):
    return torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)


# ---- normflows/flows/reshape.py (channel mode) -------------------------------------------------------------------

class Split(Flow):
    """
    Split features into two sets
    """

    def __init__(self, mode="channel"):
        super().__init__()
        self.mode = mode

    def forward(self, z):
        if self.mode == "channel":
            z1, z2 = z.chunk(2, dim=1)
        elif self.mode == "channel_inv":
            z2, z1 = z.chunk(2, dim=1)
        else:
            raise NotImplementedError("Mode " + self.mode + " is not implemented.")
        log_det = 0
        return [z1, z2], log_det

    def inverse(self, z):
        z1, z2 = z
        if self.mode == "channel":
            z = torch.cat([z1, z2], 1)
        elif self.mode == "channel_inv":
            z = torch.cat([z2, z1], 1)
        else:
            raise NotImplementedError("Mode " + self.mode + " is not implemented.")
        log_det = 0
        return z, log_det


class Merge(Split):
    """
    Same as Split but with forward and backward pass interchanged
    """

    def __init__(self, mode="channel"):
        super().__init__(mode)

    def forward(self, z):
        return super().inverse(z)

    def inverse(self, z):
        return super().forward(z)


# ---- normflows/flows/affine/coupling.py ---------------------------------------------------------------------------

class AffineCoupling(Flow):
    """
    Affine Coupling layer as introduced RealNVP paper, see arXiv: 1605.08803
    """

    def __init__(self, param_map, scale=True, scale_map="exp"):
        super().__init__()
        self.add_module("param_map", param_map)
        self.scale = scale
        self.scale_map = scale_map

    def forward(self, z):
        z1, z2 = z
        param = self.param_map(z1)
        if self.scale:
            shift = param[:, 0::2, ...]
            scale_ = param[:, 1::2, ...]
            if self.scale_map == "exp":
                z2 = z2 * torch.exp(scale_) + shift
                log_det = torch.sum(scale_, dim=list(range(1, shift.dim())))
            else:
                raise NotImplementedError("This scale map is not implemented.")
        else:
            z2 = z2 + param
            log_det = zero_log_det_like_z(z2)
        return [z1, z2], log_det

    def inverse(self, z):
        z1, z2 = z
        param = self.param_map(z1)
        if self.scale:
            shift = param[:, 0::2, ...]
            scale_ = param[:, 1::2, ...]
            if self.scale_map == "exp":
                z2 = (z2 - shift) * torch.exp(-scale_)
                log_det = -torch.sum(scale_, dim=list(range(1, shift.dim())))
            else:
                raise NotImplementedError("This scale map is not implemented.")
        else:
            z2 = z2 - param
            log_det = zero_log_det_like_z(z2)
        return [z1, z2], log_det


class AffineCouplingBlock(Flow):
    """
    Affine Coupling layer including split and merge operation
    """

    def __init__(self, param_map, scale=True, scale_map="exp", split_mode="channel"):
        super().__init__()
        self.flows = nn.ModuleList([])
        # Split layer
        self.flows += [Split(split_mode)]
        # Affine coupling layer
        self.flows += [AffineCoupling(param_map, scale, scale_map)]
        # Merge layer
        self.flows += [Merge(split_mode)]

    def forward(self, z):
        log_det_tot = torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
        for flow in self.flows:
            z, log_det = flow(z)
            log_det_tot += log_det
        return z, log_det_tot

    def inverse(self, z):
        log_det_tot = torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
        for i in range(len(self.flows) - 1, -1, -1):
            z, log_det = self.flows[i].inverse(z)
            log_det_tot += log_det
        return z, log_det_tot


# ---- normflows/flows/mixing.py (swap mode) ------------------------------------------------------------------------

class Permute(Flow):
    """
    Permutation features along the channel dimension
    """

    def __init__(self, num_channels, mode="shuffle"):
        super().__init__()
        self.mode = mode
        self.num_channels = num_channels

    def forward(self, z, context=None):
        if self.mode == "swap":
            z1 = z[:, : self.num_channels // 2, ...]
            z2 = z[:, self.num_channels // 2 :, ...]
            z = torch.cat([z2, z1], dim=1)
        else:
            raise NotImplementedError("The mode " + self.mode + " is not implemented.")
        log_det = torch.zeros(len(z), device=z.device)
        return z, log_det

    def inverse(self, z, context=None):
        if self.mode == "swap":
            z1 = z[:, : (self.num_channels + 1) // 2, ...]
            z2 = z[:, (self.num_channels + 1) // 2 :, ...]
            z = torch.cat([z2, z1], dim=1)
        else:
            raise NotImplementedError("The mode " + self.mode + " is not implemented.")
        log_det = torch.zeros(len(z), device=z.device)
        return z, log_det


# ---- normflows/nets/mlp.py ----------------------------------------------------------------------------------------

class MLP(nn.Module):
    """
    A multilayer perceptron with Leaky ReLU nonlinearities
    """

    def __init__(self, layers, leaky=0.0, init_zeros=False):
        super().__init__()
        net = nn.ModuleList([])
        for k in range(len(layers) - 2):
            net.append(nn.Linear(layers[k], layers[k + 1]))
            net.append(nn.LeakyReLU(leaky))
        net.append(nn.Linear(layers[-2], layers[-1]))
        if init_zeros:
            nn.init.zeros_(net[-1].weight)
            nn.init.zeros_(net[-1].bias)
        self.net = nn.Sequential(*net)

    def forward(self, x):
        return self.net(x)


# ---- normflows/distributions/base.py ------------------------------------------------------------------------------

class BaseDistribution(nn.Module):
    """
    Base distribution of a flow-based model
    Parameters do not depend of target variable (as is the case for a VAE encoder)
    """

    def __init__(self):
        super().__init__()

    def forward(self, num_samples=1):
        raise NotImplementedError

    def log_prob(self, z):
        raise NotImplementedError

    def sample(self, num_samples=1, **kwargs):
        z, _ = self.forward(num_samples, **kwargs)
        return z


class DiagGaussian(BaseDistribution):
    """
    Multivariate Gaussian distribution with diagonal covariance matrix
    """

    def __init__(self, shape, trainable=True):
        super().__init__()
        if isinstance(shape, int):
            shape = (shape,)
        if isinstance(shape, list):
            shape = tuple(shape)
        self.shape = shape
        self.n_dim = len(shape)
        self.d = np.prod(shape)
        if trainable:
            self.loc = nn.Parameter(torch.zeros(1, *self.shape))
            self.log_scale = nn.Parameter(torch.zeros(1, *self.shape))
        else:
            self.register_buffer("loc", torch.zeros(1, *self.shape))
            self.register_buffer("log_scale", torch.zeros(1, *self.shape))

    def forward(self, num_samples=1, context=None):
        eps = torch.randn(
            (num_samples,) + self.shape, dtype=self.loc.dtype, device=self.loc.device
        )
        log_scale = self.log_scale
        z = self.loc + torch.exp(log_scale) * eps
        log_p = -0.5 * self.d * np.log(2 * np.pi) - torch.sum(
            log_scale + 0.5 * torch.pow(eps, 2), list(range(1, self.n_dim + 1))
        )
        return z, log_p

    def log_prob(self, z, context=None):
        log_scale = self.log_scale
        log_p = -0.5 * self.d * np.log(2 * np.pi) - torch.sum(
            log_scale + 0.5 * torch.pow((z - self.loc) / torch.exp(log_scale), 2),
            list(range(1, self.n_dim + 1)),
        )
        return log_p


# ---- normflows/distributions/target.py ----------------------------------------------------------------------------

class Target(nn.Module):
    """
    Sample target distributions to test models
    """

    def __init__(self, prop_scale=torch.tensor(6.0), prop_shift=torch.tensor(-3.0)):
        super().__init__()
        self.register_buffer("prop_scale", prop_scale)
        self.register_buffer("prop_shift", prop_shift)

    def log_prob(self, z):
        raise NotImplementedError("The log probability is not implemented yet.")

    def rejection_sampling(self, num_steps=1):
        eps = torch.rand(
            (num_steps, self.n_dims),
            dtype=self.prop_scale.dtype,
            device=self.prop_scale.device,
        )
        z_ = self.prop_scale * eps + self.prop_shift
        prob = torch.rand(
            num_steps, dtype=self.prop_scale.dtype, device=self.prop_scale.device
        )
        prob_ = torch.exp(self.log_prob(z_) - self.max_log_prob)
        accept = prob_ > prob
        z = z_[accept, :]
        return z

    def sample(self, num_samples=1):
        z = torch.zeros(
            (0, self.n_dims), dtype=self.prop_scale.dtype, device=self.prop_scale.device
        )
        while len(z) < num_samples:
            z_ = self.rejection_sampling(num_samples)
            ind = np.min([len(z_), num_samples - len(z)])
            z = torch.cat([z, z_[:ind, :]], 0)
        return z


class TwoMoons(Target):
    """
    Bimodal two-dimensional distribution
    """

    def __init__(self):
        super().__init__()
        self.n_dims = 2
        self.max_log_prob = 0.0

    def log_prob(self, z):
        a = torch.abs(z[:, 0])
        log_prob = (
            -0.5 * ((torch.norm(z, dim=1) - 2) / 0.2) ** 2
            - 0.5 * ((a - 2) / 0.3) ** 2
            + torch.log(1 + torch.exp(-4 * a / 0.09))
        )
        return log_prob


# ---- normflows/core.py --------------------------------------------------------------------------------------------

class NormalizingFlow(nn.Module):
    """
    Normalizing Flow model to approximate target distribution
    """

    def __init__(self, q0, flows, p=None, bug=None):
        super().__init__()
        self.q0 = q0
        self.flows = nn.ModuleList(flows)
        self.p = p
        self.bug = bug

    def forward(self, z):
        for flow in self.flows:
            z, _ = flow(z)
        return z

    def inverse_and_log_det(self, x):
        log_det = torch.zeros(len(x), device=x.device)
        for i in range(len(self.flows) - 1, -1, -1):
            x, log_d = self.flows[i].inverse(x)
            log_det += log_d
        return x, log_det

    def forward_kld(self, x):
        """Estimates forward KL divergence, see [arXiv 1912.02762](https://arxiv.org/abs/1912.02762)"""
        log_q = torch.zeros(len(x), device=x.device)
        z = x
        for i in range(len(self.flows) - 1, -1, -1):
            z, log_det = self.flows[i].inverse(z)
            if self.bug != "log_det_dropped":
                log_q += log_det
        log_q += self.q0.log_prob(z)
        return -torch.mean(log_q)

    def log_prob(self, x):
        log_q = torch.zeros(len(x), dtype=x.dtype, device=x.device)
        z = x
        for i in range(len(self.flows) - 1, -1, -1):
            z, log_det = self.flows[i].inverse(z)
            log_q += log_det
        log_q += self.q0.log_prob(z)
        return log_q


class FlowInverse(nn.Module):
    """(port) the flow in the direction ``forward_kld`` uses, for the Program (the same ``NormalizingFlow``)."""

    def __init__(self, nfm):
        super().__init__()
        self.nfm = nfm

    def forward(self, x):
        return self.nfm.inverse_and_log_det(x)


# ---- examples/real_nvp_colab.ipynb --------------------------------------------------------------------------------

def _build(seed, bug=None):
    torch.manual_seed(seed)  # (port) the notebook sets no seed

    # Define 2D Gaussian base distribution
    base = DiagGaussian(2)

    # Define list of flows
    num_layers = NUM_LAYERS  # (port) 32
    flows = []
    for _i in range(num_layers):
        # Neural network with two hidden layers having 64 units each
        # Last layer is initialized by zeros making training more stable
        param_map = MLP([1, HIDDEN, HIDDEN, 2], init_zeros=True)  # (port) [1, 64, 64, 2]
        # Add flow layer
        flows.append(AffineCouplingBlock(param_map))
        # Swap dimensions
        flows.append(Permute(2, mode='swap'))

    # Construct flow model
    model = NormalizingFlow(base, flows, bug=bug)

    # Move model on GPU if available
    device = torch.device('cpu')  # (port) cuda if available
    model = model.to(device)

    # Define target distribution
    target = TwoMoons()

    # Train model
    num_samples = 2 ** 9
    loss_hist = []  # (port) np.array([]), appended to with np.append

    if bug == "base_left_out_of_optimizer":
        optimizer = torch.optim.Adam(model.flows.parameters(), lr=5e-4, weight_decay=1e-5)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=5e-4, weight_decay=1e-5)

    def train_step():
        if bug != "zero_grad_dropped":
            optimizer.zero_grad()

        # Get training samples
        x = target.sample(num_samples).to(device)

        # Compute loss
        loss = model.forward_kld(x)

        # Do backprop and optimizer step
        if ~(torch.isnan(loss) | torch.isinf(loss)):
            loss.backward()
            optimizer.step()

        # Log loss
        loss_hist.append(loss.to('cpu').data.numpy())
        return loss.item()

    x_eval = target.sample(2048)
    x_batch = target.sample(num_samples)

    def eval_fn(flow, _batch=None):
        nfm = flow.nfm if isinstance(flow, FlowInverse) else flow
        nfm.eval()
        with torch.no_grad():
            nll = -nfm.log_prob(x_eval).mean()
        nfm.train()
        return float(nll)

    def loss_fn(outputs, _targets=None):
        """``forward_kld`` on the inverted flow's outputs: minus the mean of log-det plus the base log-density."""
        z, log_det = outputs
        if bug == "log_det_dropped":
            log_det = torch.zeros_like(log_det)
        return -torch.mean(log_det + model.q0.log_prob(z))

    return Program(name="normflows_realnvp_moons", model=FlowInverse(model), batch=(x_batch,), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn)


build = functools.partial(_build, bug=None)

BUGS = [
    # the log-determinants left out of ``forward_kld`` (classic: the change of variables without its Jacobian):
    # the flow is rewarded for squeezing every sample onto the base's mode.
    Bug("log_det_dropped", functools.partial(_build, bug="log_det_dropped"), "learning_ledger", ("OBJECTIVE",)),
    # the optimizer built over ``model.flows.parameters()`` only (classic): the trainable base's ``loc`` and
    # ``log_scale`` never move.
    Bug("base_left_out_of_optimizer", functools.partial(_build, bug="base_left_out_of_optimizer"),
        "four_structures", ("q0",)),
    # ``optimizer.zero_grad()`` left out of the loop (classic): every step applies the sum of all past gradients.
    # Every parameter is touched alike: declared by its mechanism (README rule 6).
    Bug("zero_grad_dropped", functools.partial(_build, bug="zero_grad_dropped"), "step_probe", (),
        kind="step.grad_accumulation"),
]

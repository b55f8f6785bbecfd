# ruff: noqa: UP008, UP032, SIM101, F841, PLR0402
"""A RealNVP-style flow on the 2-D checkerboard, from SurVAE Flows' ``examples/toy_flow.py``: four affine coupling
bijections (MLP 1-200-100-2 coupling nets, ``ElementwiseParams(2)``, ``exp`` scale) interleaved with ActNorm
bijections (data-dependent initialization on the first training batch) and ``Reverse`` permutations, a
standard-normal base distribution, maximum likelihood (``loss = -model.log_prob(x).mean()``), Adam lr 1e-3,
batch 128.

Source: https://github.com/didriknielsen/survae_flows
Commit: 271a31d11cf00fad83270a9f699ff68a03da44ab
Files: ``examples/toy_flow.py``, ``survae/flows/flow.py``, ``survae/distributions/base.py``,
``survae/distributions/normal.py``, ``survae/transforms/base.py``, ``survae/transforms/bijections/base.py``,
``survae/transforms/bijections/coupling/coupling.py``, ``survae/transforms/bijections/coupling/coupling_linear.py``,
``survae/transforms/bijections/actnorm.py``, ``survae/transforms/bijections/permute.py``,
``survae/nn/layers/elementwise_params.py``, ``survae/utils/tensors.py``, ``survae/data/datasets/toy/plane.py``
License: MIT (Copyright (c) 2020 Didrik Nielsen; full text in LICENSES/didriknielsen-survae_flows.txt)
Domain: density estimation (normalizing flow: affine coupling, ActNorm, maximum likelihood)

Kept as written: the script's model (``net()``, the eleven transforms), ``Adam(model.parameters(), lr=1e-3)``,
batch 128 and the loop body (``zero_grad``, ``loss = -model.log_prob(x).mean()``, ``backward``, ``step``); the
library classes it uses (``Flow.log_prob`` / ``sample``, ``StandardNormal``, ``Transform``, ``Bijection``,
``CouplingBijection``, ``AffineCouplingBijection``, ``_ActNormBijection`` / ``ActNormBijection``, ``Permute`` /
``Reverse``, ``ElementwiseParams``, ``sum_except_batch``, ``SequentialTransform``) and ``CheckerboardDataset``.

Deviations from the original:
- sizes for 2 CPU cores: 128*1000 -> 128*20 training points (the batch of 128 and the coupling nets' widths kept);
- data: ``CheckerboardDataset`` draws from torch's global generator as written; ``torch.manual_seed(seed)`` runs
  before the model and the datasets are built, so a build is reproducible (the checkerboard is the learnable rule);
  the ``DataLoader`` keeps ``shuffle=False``;
- the library's package layout (``survae.*`` imports, the abstract ``Distribution`` / ``Transform`` hooks the flow
  does not use, ``DataParallelDistribution``) is reduced to the classes above in one file; the unused conditional
  / 1d / 2d variants are left out;
- the epoch printing, the sampling and the matplotlib figure are left out; ``train_step`` is one iteration of the
  batch loop and returns ``loss``;
- the declared ``model`` is survae's own ``SequentialTransform`` over the flow's transforms (the same modules and
  parameters; ``Flow.forward`` takes a ``mode`` keyword), ``loss_fn`` adds the base distribution's log-density to
  its log-determinant as ``Flow.log_prob`` does; ``eval_fn`` is the mean negative log-likelihood on the test split;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import math
import pathlib
import sys
from collections.abc import Iterable

import torch
import torch.nn as nn
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

_BUG = {"name": None}


# ------------------------------------------------------------------------------------ survae/utils/tensors.py

def sum_except_batch(x, num_dims=1):
    '''
    Sums all dimensions except the first.
    '''
    return x.reshape(*x.shape[:num_dims], -1).sum(-1)


# ------------------------------------------------------------------------------- survae/distributions/*.py

class Distribution(nn.Module):
    """Distribution base class."""

    def log_prob(self, x):
        raise NotImplementedError()

    def sample(self, num_samples):
        raise NotImplementedError()

    def forward(self, *args, mode, **kwargs):
        if mode == 'log_prob':
            return self.log_prob(*args, **kwargs)
        else:
            raise RuntimeError("Mode {} not supported.".format(mode))


class StandardNormal(Distribution):
    """A multivariate Normal with zero mean and unit covariance."""

    def __init__(self, shape):
        super(StandardNormal, self).__init__()
        self.shape = torch.Size(shape)
        self.register_buffer('buffer', torch.zeros(1))

    def log_prob(self, x):
        log_base =  - 0.5 * math.log(2 * math.pi)
        log_inner = - 0.5 * x**2
        return sum_except_batch(log_base+log_inner)

    def sample(self, num_samples):
        return torch.randn(num_samples, *self.shape, device=self.buffer.device, dtype=self.buffer.dtype)


# -------------------------------------------------------------------------------------- survae/transforms/*.py

class Transform(nn.Module):
    """Base class for Transform"""

    has_inverse = True

    @property
    def bijective(self):
        raise NotImplementedError()

    @property
    def stochastic_forward(self):
        raise NotImplementedError()

    @property
    def stochastic_inverse(self):
        raise NotImplementedError()

    @property
    def lower_bound(self):
        return self.stochastic_forward

    def forward(self, x):
        raise NotImplementedError()

    def inverse(self, z):
        raise NotImplementedError()


class SequentialTransform(Transform):
    """
    Chains multiple Transform objects sequentially.
    """

    def __init__(self, transforms):
        super(SequentialTransform, self).__init__()
        if isinstance(transforms, Transform): transforms = [transforms]
        assert isinstance(transforms, Iterable)
        assert all(isinstance(transform, Transform) for transform in transforms)
        self.has_inverse = all(transform.has_inverse for transform in transforms)
        self.transforms = nn.ModuleList(transforms)

    @property
    def bijective(self):
        return all(transform.bijective for transform in self.transforms)

    @property
    def stochastic_forward(self):
        return any(transform.stochastic_forward for transform in self.transforms)

    @property
    def stochastic_inverse(self):
        return any(transform.stochastic_inverse for transform in self.transforms)

    def forward(self, x):
        batch_size = x.shape[0]
        x, ldj = self.transforms[0].forward(x)
        for transform in self.transforms[1:]:
            x, l = transform.forward(x)
            ldj += l
        return x, ldj

    def inverse(self, z):
        for transform in reversed(self.transforms):
            z = transform.inverse(z)
        return z


class Bijection(Transform):
    """Base class for Bijection"""

    bijective = True
    stochastic_forward = False
    stochastic_inverse = False
    lower_bound = False


class CouplingBijection(Bijection):
    """Transforms each input variable with an invertible elementwise bijection.

    This input variables are split in two parts. The second part is transformed conditioned on the first part.
    The coupling network takes the first part as input and outputs trasnformations for the second part.
    """

    def __init__(self, coupling_net, split_dim=1, num_condition=None):
        super(CouplingBijection, self).__init__()
        assert split_dim >= 1
        self.coupling_net = coupling_net
        self.split_dim = split_dim
        self.num_condition = num_condition

    def split_input(self, input):
        if self.num_condition:
            split_proportions = (self.num_condition, input.shape[self.split_dim] - self.num_condition)
            return torch.split(input, split_proportions, dim=self.split_dim)
        else:
            return torch.chunk(input, 2, dim=self.split_dim)

    def forward(self, x):
        id, x2 = self.split_input(x)
        if _BUG["name"] == "coupling_net_on_transformed_half":
            elementwise_params = self.coupling_net(x2)  # (bug) conditioned on the half it transforms
        else:
            elementwise_params = self.coupling_net(id)
        z2, ldj = self._elementwise_forward(x2, elementwise_params)
        z = torch.cat([id, z2], dim=self.split_dim)
        return z, ldj

    def inverse(self, z):
        with torch.no_grad():
            id, z2 = self.split_input(z)
            elementwise_params = self.coupling_net(id)
            x2 = self._elementwise_inverse(z2, elementwise_params)
            x = torch.cat([id, x2], dim=self.split_dim)
        return x

    def _output_dim_multiplier(self):
        raise NotImplementedError()

    def _elementwise_forward(self, x, elementwise_params):
        raise NotImplementedError()

    def _elementwise_inverse(self, z, elementwise_params):
        raise NotImplementedError()


class AffineCouplingBijection(CouplingBijection):
    '''
    Affine coupling bijection.
    '''

    def __init__(self, coupling_net, split_dim=1, num_condition=None, scale_fn=lambda s: torch.exp(s)):
        super(AffineCouplingBijection, self).__init__(coupling_net=coupling_net, split_dim=split_dim, num_condition=num_condition)
        assert callable(scale_fn)
        self.scale_fn = scale_fn

    def _output_dim_multiplier(self):
        return 2

    def _elementwise_forward(self, x, elementwise_params):
        assert elementwise_params.shape[-1] == self._output_dim_multiplier()
        unconstrained_scale, shift = self._unconstrained_scale_and_shift(elementwise_params)
        scale = self.scale_fn(unconstrained_scale)
        z = scale * x + shift
        ldj = sum_except_batch(torch.log(scale))
        return z, ldj

    def _elementwise_inverse(self, z, elementwise_params):
        assert elementwise_params.shape[-1] == self._output_dim_multiplier()
        unconstrained_scale, shift = self._unconstrained_scale_and_shift(elementwise_params)
        scale = self.scale_fn(unconstrained_scale)
        x = (z - shift) / scale
        return x

    def _unconstrained_scale_and_shift(self, elementwise_params):
        unconstrained_scale = elementwise_params[..., 0]
        shift = elementwise_params[..., 1]
        return unconstrained_scale, shift


class _ActNormBijection(Bijection):
    '''
    Base class for activation normalization [1].
    '''

    def __init__(self, num_features, data_dep_init=True, eps=1e-6):
        super(_ActNormBijection, self).__init__()
        self.num_features = num_features
        self.data_dep_init = data_dep_init
        self.eps = eps

        self.register_buffer('initialized', torch.zeros(1) if data_dep_init else torch.ones(1))
        self.register_params()

    def data_init(self, x):
        if _BUG["name"] != "actnorm_init_every_batch":  # (bug: the flag never set, the init reruns on every batch)
            self.initialized += 1.
        with torch.no_grad():
            x_mean, x_std = self.compute_stats(x)
            self.shift.data = x_mean
            self.log_scale.data = torch.log(x_std + self.eps)

    def forward(self, x):
        if self.training and not self.initialized: self.data_init(x)
        z = (x - self.shift) * torch.exp(-self.log_scale)
        ldj = torch.sum(-self.log_scale).expand([x.shape[0]]) * self.ldj_multiplier(x)
        return z, ldj

    def inverse(self, z):
        return self.shift + z * torch.exp(self.log_scale)

    def register_params(self):
        '''Register parameters shift and log_scale'''
        raise NotImplementedError()

    def compute_stats(self, x):
        '''Compute x_mean and x_std'''
        raise NotImplementedError()

    def ldj_multiplier(self, x):
        '''Multiplier for ldj'''
        raise NotImplementedError()


class ActNormBijection(_ActNormBijection):
    '''
    Activation normalization [1] for inputs on the form (B,D).
    '''

    def register_params(self):
        '''Register parameters shift and log_scale'''
        self.register_parameter('shift', nn.Parameter(torch.zeros(1, self.num_features)))
        self.register_parameter('log_scale', nn.Parameter(torch.zeros(1, self.num_features)))

    def compute_stats(self, x):
        '''Compute x_mean and x_std'''
        x_mean = torch.mean(x, dim=0, keepdim=True)
        x_std = torch.std(x, dim=0, keepdim=True)
        return x_mean, x_std

    def ldj_multiplier(self, x):
        '''Multiplier for ldj'''
        return 1


class Permute(Bijection):
    """
    Permutes inputs on a given dimension using a given permutation.
    """

    def __init__(self, permutation, dim=1):
        super(Permute, self).__init__()
        assert isinstance(dim, int), 'dim must be an integer'
        assert dim >= 1, 'dim must be >= 1 (0 corresponds to batch dimension)'
        assert isinstance(permutation, torch.Tensor) or isinstance(permutation, Iterable), 'permutation must be a torch.Tensor or Iterable'
        if isinstance(permutation, torch.Tensor):
            assert permutation.ndimension() == 1, 'permutation must be a 1D tensor, but was of shape {}'.format(permutation.shape)
        else:
            permutation = torch.tensor(permutation)

        self.dim = dim
        self.register_buffer('permutation', permutation)

    @property
    def inverse_permutation(self):
        return torch.argsort(self.permutation)

    def forward(self, x):
        return torch.index_select(x, self.dim, self.permutation), torch.zeros(x.shape[0], device=x.device, dtype=x.dtype)

    def inverse(self, z):
        return torch.index_select(z, self.dim, self.inverse_permutation)


class Reverse(Permute):
    """
    Reverses inputs on a given dimension.
    """

    def __init__(self, dim_size, dim=1):
        super(Reverse, self).__init__(torch.arange(dim_size - 1, -1, -1), dim)


# ---------------------------------------------------------------------------- survae/nn/layers/elementwise_params.py

class ElementwiseParams(nn.Module):
    '''
    Move elementwise parameters to last dimension.
    '''

    def __init__(self, num_params, mode='interleaved'):
        super(ElementwiseParams, self).__init__()
        assert mode in {'interleaved', 'sequential'}
        self.num_params = num_params
        self.mode = mode

    def forward(self, x):
        assert x.dim() == 2, 'Expected input of shape (B,D)'
        if self.num_params != 1:
            assert x.shape[1] % self.num_params == 0
            dims = x.shape[1] // self.num_params
            # x.shape = (bs, num_params * dims)
            if self.mode == 'interleaved':
                x = x.reshape(x.shape[0:1] + (self.num_params, dims))
                # x.shape = (bs, num_params, dims)
                x = x.permute([0,2,1])
                # x.shape = (bs, dims, num_params)
            elif self.mode == 'sequential':
                x = x.reshape(x.shape[0:1] + (dims, self.num_params))
                # x.shape = (bs, dims, num_params)
        return x


# ------------------------------------------------------------------------------------------ survae/flows/flow.py

class Flow(Distribution):
    """
    Base class for Flow.
    """

    def __init__(self, base_dist, transforms):
        super(Flow, self).__init__()
        assert isinstance(base_dist, Distribution)
        if isinstance(transforms, Transform): transforms = [transforms]
        assert isinstance(transforms, Iterable)
        assert all(isinstance(transform, Transform) for transform in transforms)
        self.base_dist = base_dist
        self.transforms = nn.ModuleList(transforms)
        self.lower_bound = any(transform.lower_bound for transform in transforms)

    def log_prob(self, x):
        log_prob = torch.zeros(x.shape[0], device=x.device)
        for transform in self.transforms:
            x, ldj = transform(x)
            if _BUG["name"] != "ldj_dropped":  # (bug: the log-determinants never added)
                log_prob += ldj
        log_prob += self.base_dist.log_prob(x)
        return log_prob

    def sample(self, num_samples):
        z = self.base_dist.sample(num_samples)
        for transform in reversed(self.transforms):
            z = transform.inverse(z)
        return z


# ------------------------------------------------------------------------------ survae/data/datasets/toy/plane.py

class PlaneDataset(Dataset):
    def __init__(self, num_points, flip_axes=False):
        self.num_points = num_points
        self.flip_axes = flip_axes
        self.data = None
        self.reset()

    def __getitem__(self, item):
        return self.data[item]

    def __len__(self):
        return self.num_points

    def reset(self):
        self._create_data()
        if self.flip_axes:
            x1 = self.data[:, 0]
            x2 = self.data[:, 1]
            self.data = torch.stack([x2, x1]).t()

    def _create_data(self):
        raise NotImplementedError


class CheckerboardDataset(PlaneDataset):
    def _create_data(self):
        x1 = torch.rand(self.num_points) * 4 - 2
        x2_ = torch.rand(self.num_points) - torch.randint(0, 2, [self.num_points]).float() * 2
        x2 = x2_ + torch.floor(x1) % 2
        self.data = torch.stack([x1, x2]).t() * 2


# ------------------------------------------------------------------------------------------ examples/toy_flow.py

def _build(seed, bug=None):
    _BUG["name"] = bug
    torch.manual_seed(seed)

    ##########
    ## Data ##
    ##########

    train = CheckerboardDataset(num_points=128*20)  # (port) 128*1000
    test = CheckerboardDataset(num_points=128*4)  # (port) 128*1000
    train_loader = DataLoader(train, batch_size=128, shuffle=False)

    ###########
    ## Model ##
    ###########

    def net():
      return nn.Sequential(nn.Linear(1, 200), nn.ReLU(),
                           nn.Linear(200, 100), nn.ReLU(),
                           nn.Linear(100, 2), ElementwiseParams(2))

    model = Flow(base_dist=StandardNormal((2,)),
                 transforms=[
                   AffineCouplingBijection(net()), ActNormBijection(2), Reverse(2),
                   AffineCouplingBijection(net()), ActNormBijection(2), Reverse(2),
                   AffineCouplingBijection(net()), ActNormBijection(2), Reverse(2),
                   AffineCouplingBijection(net()), ActNormBijection(2),
                 ])

    ###########
    ## Optim ##
    ###########

    optimizer = Adam(model.parameters(), lr=1e-3)

    state = {"it": None}

    def next_x():
        try:
            return next(state["it"])
        except (StopIteration, TypeError):
            state["it"] = iter(train_loader)
            return next(state["it"])

    def train_step():
        _BUG["name"] = bug
        x = next_x()
        optimizer.zero_grad()
        loss = -model.log_prob(x).mean()
        loss.backward()
        optimizer.step()
        return loss.detach()

    transforms = SequentialTransform(list(model.transforms))

    def loss_fn(outputs, _targets):
        z, ldj = outputs
        if bug == "ldj_dropped":
            return -model.base_dist.log_prob(z).mean()
        return -(ldj + model.base_dist.log_prob(z)).mean()

    def eval_fn(m, batch):
        model.eval()
        with torch.no_grad():
            nll = -model.log_prob(test.data).mean()
        model.train()
        return float(nll)

    x0 = train.data[:128]
    return Program(name="survaeflows_checkerboard", model=transforms, batch=(x0, x0), loss_fn=loss_fn,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the log-determinants left out of ``Flow.log_prob`` (``log_prob += ldj`` dropped): the flow maximizes
    # the base density of its output alone and is free to shrink everything to the origin.
    Bug("ldj_dropped", functools.partial(_build, bug="ldj_dropped"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the coupling net fed the half it transforms (``coupling_net(x2)`` for ``coupling_net(id)``): the
    # transform is no longer triangular, the log-determinant no longer its Jacobian's, and the likelihood is
    # inflated by reading the very value being scored.
    # Re-declared after first contact (public-34, measured as DEPENDENCY): the OBJECTIVE FAIL names this defect, the
    # log-determinant the flow reports no longer its Jacobian's.
    Bug("coupling_net_on_transformed_half", functools.partial(_build, bug="coupling_net_on_transformed_half"),
        "learning_ledger", ("OBJECTIVE",), kind="objective.log_det_mismatch"),
    # classic: ActNorm's ``initialized`` flag never set: the data-dependent initialization reruns on every training
    # batch and overwrites what the optimizer did to shift and log_scale.
    Bug("actnorm_init_every_batch", functools.partial(_build, bug="actnorm_init_every_batch"), "step_probe",
        ("transforms.1.",)),
]

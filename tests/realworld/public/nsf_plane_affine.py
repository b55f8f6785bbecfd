# ruff: noqa: UP032
"""The 2-D plane density-estimation experiment of Neural Spline Flows, run with its affine base transform, from
bayesiains/nsf ``experiments/plane.py``: two ``AffineCouplingTransform`` layers with alternating binary masks
(``sigmoid(s + 2) + 1e-3`` scales) whose transform nets are ``ResidualNet`` (32 hidden features, two pre-activation
residual blocks with batch norm, near-zero-initialized last layers), a standard-normal base, the diamond data set,
``loss = -mean(flow.log_prob(batch))``, Adam lr 5e-4 with ``CosineAnnealingLR`` stepped by the step index, gradient
norm clipped at 5.

Source: https://github.com/bayesiains/nsf
Commit: eaa9377f75df1193025f6b2487524cf266874472
Files: ``experiments/plane.py``, ``nde/flows/base.py``, ``nde/distributions/base.py``,
``nde/distributions/normal.py``, ``nde/transforms/base.py``, ``nde/transforms/coupling.py``, ``nn/resnet.py``,
``utils/torchutils.py``, ``data/plane.py``, ``data/base.py``
License: MIT (Copyright (c) 2019 Conor Durkan, Artur Bekasov, Iain Murray, George Papamakarios; full text in
LICENSES/bayesiains-nsf.txt)
Domain: density estimation (normalizing flow: affine coupling with residual transform nets, maximum likelihood)

Kept as written: ``plane.py``'s model (``args.base_transform_type = 'affine'`` as the script sets it, so
``create_base_transform`` builds ``AffineCouplingTransform`` with
``create_alternating_binary_mask(features=dim, even=(i % 2 == 0))`` and ``ResidualNet(hidden_features=32,
num_blocks=2, use_batch_norm=True)``; two of them in a ``CompositeTransform``), ``StandardNormal((2,))``, the
``Flow``, ``optim.Adam(flow.parameters(), lr=5e-4)``, ``CosineAnnealingLR(optimizer, num_training_steps, 0)``,
the loop body (``flow.train()``, ``zero_grad``, ``scheduler.step(step)``, ``next(train_loader)``,
``loss = -torch.mean(flow.log_prob(batch))``, ``backward``, ``clip_grad_norm_(flow.parameters(), 5.)``,
``step``), batch 512, ``DiamondDataset`` (width 20, bound 2.5, std 0.04, rotated), ``InfiniteLoader``.

Deviations from the original:
- sizes for 2 CPU cores: ``n_data_points`` 1e6 -> 4096 (batch 512 kept); ``num_training_steps`` (the cosine
  period) kept at 5e5;
- data: ``DiamondDataset`` draws from NumPy's global generator as written; ``np.random.seed(seed)`` and
  ``torch.manual_seed(seed)`` replace the script's fixed seed 1638128 so each build follows ``seed``;
  ``InfiniteLoader`` shuffles with a ``torch.Generator(seed)``;
- ``scheduler.step(step)`` (the deprecated epoch argument, removed from recent torch) is written as setting
  ``scheduler.last_epoch = step - 1`` then ``scheduler.step()``, which gives the same closed-form cosine lr;
- the package layout (``nde.*``, ``nn``, ``utils``, ``data``) is reduced to the classes the script uses in one file
  (``Distribution`` / ``Flow`` keep their public ``log_prob`` wrappers; the unused spline transforms, context
  handling branches that never run, and the other plane data sets are left out); the CUDA default tensor type,
  argparse, tensorboard, tqdm, the grid evaluation plots and the checkpoints are left out;
- ``train_step`` is one iteration of ``for step in tbar`` and returns ``loss``; the declared ``model`` is the
  ``CompositeTransform`` (the flow's only parameters), ``loss_fn`` adds the base log-density as ``Flow._log_prob``
  does; ``eval_fn`` is the mean negative log-likelihood of a held-out diamond sample in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.nn import init
from torch.nn.utils import clip_grad_norm_
from torch.utils import data

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

_BUG = {"name": None}


# ------------------------------------------------------------------------------------------ utils/torchutils.py

def sum_except_batch(x, num_batch_dims=1):
    """Sums all elements of `x` except for the first `num_batch_dims` dimensions."""
    reduce_dims = list(range(num_batch_dims, x.ndimension()))
    return torch.sum(x, dim=reduce_dims)


def create_alternating_binary_mask(features, even=True):
    """
    Creates a binary mask of a given dimension which alternates its masking.
    """
    mask = torch.zeros(features).byte()
    start = 0 if even else 1
    mask[start::2] += 1
    return mask


# ------------------------------------------------------------------------------------------------- nn/resnet.py

class ResidualBlock(nn.Module):
    """A general-purpose residual block. Works only with 1-dim inputs."""

    def __init__(self,
                 features,
                 context_features,
                 activation=F.relu,
                 dropout_probability=0.,
                 use_batch_norm=False,
                 zero_initialization=True):
        super().__init__()
        self.activation = activation

        self.use_batch_norm = use_batch_norm
        if use_batch_norm:
            self.batch_norm_layers = nn.ModuleList([
                nn.BatchNorm1d(features, eps=1e-3)
                for _ in range(2)
            ])
        if context_features is not None:
            self.context_layer = nn.Linear(context_features, features)
        self.linear_layers = nn.ModuleList([
            nn.Linear(features, features)
            for _ in range(2)
        ])
        self.dropout = nn.Dropout(p=dropout_probability)
        if zero_initialization:
            init.uniform_(self.linear_layers[-1].weight, -1e-3, 1e-3)
            init.uniform_(self.linear_layers[-1].bias, -1e-3, 1e-3)

    def forward(self, inputs, context=None):
        temps = inputs
        if self.use_batch_norm:
            temps = self.batch_norm_layers[0](temps)
        temps = self.activation(temps)
        temps = self.linear_layers[0](temps)
        if self.use_batch_norm:
            temps = self.batch_norm_layers[1](temps)
        temps = self.activation(temps)
        temps = self.dropout(temps)
        temps = self.linear_layers[1](temps)
        if context is not None:
            temps = F.glu(
                torch.cat(
                    (temps, self.context_layer(context)),
                    dim=1
                ),
                dim=1
            )
        return inputs + temps


class ResidualNet(nn.Module):
    """A general-purpose residual network. Works only with 1-dim inputs."""

    def __init__(self,
                 in_features,
                 out_features,
                 hidden_features,
                 context_features=None,
                 num_blocks=2,
                 activation=F.relu,
                 dropout_probability=0.,
                 use_batch_norm=False):
        super().__init__()
        self.hidden_features = hidden_features
        self.context_features = context_features
        if context_features is not None:
            self.initial_layer = nn.Linear(in_features + context_features, hidden_features)
        else:
            self.initial_layer = nn.Linear(in_features, hidden_features)
        self.blocks = nn.ModuleList([
            ResidualBlock(
                features=hidden_features,
                context_features=context_features,
                activation=activation,
                dropout_probability=dropout_probability,
                use_batch_norm=use_batch_norm,
            ) for _ in range(num_blocks)
        ])
        self.final_layer = nn.Linear(hidden_features, out_features)

    def forward(self, inputs, context=None):
        if context is None:
            temps = self.initial_layer(inputs)
        else:
            temps = self.initial_layer(
                torch.cat((inputs, context), dim=1)
            )
        for block in self.blocks:
            temps = block(temps, context=context)
        outputs = self.final_layer(temps)
        return outputs


# ------------------------------------------------------------------------- nde/transforms/base.py, coupling.py

class Transform(nn.Module):
    """Base class for all transform objects."""

    def forward(self, inputs, context=None):
        raise NotImplementedError()

    def inverse(self, inputs, context=None):
        raise NotImplementedError()


class CompositeTransform(Transform):
    """Composes several transforms into one, in the order they are given."""

    def __init__(self, transforms):
        super().__init__()
        self._transforms = nn.ModuleList(transforms)

    @staticmethod
    def _cascade(inputs, funcs, context):
        batch_size = inputs.shape[0]
        outputs = inputs
        total_logabsdet = torch.zeros(batch_size)
        for func in funcs:
            outputs, logabsdet = func(outputs, context)
            total_logabsdet += logabsdet
        return outputs, total_logabsdet

    def forward(self, inputs, context=None):
        funcs = self._transforms
        return self._cascade(inputs, funcs, context)

    def inverse(self, inputs, context=None):
        funcs = (transform.inverse for transform in self._transforms[::-1])
        return self._cascade(inputs, funcs, context)


class CouplingTransform(Transform):
    """A base class for coupling layers. Supports 2D inputs (NxD), as well as 4D inputs for
    images (NxCxHxW). For images the splitting is done on the channel dimension, using the
    provided 1D mask."""

    def __init__(self,
                 mask,
                 transform_net_create_fn,
                 unconditional_transform=None):
        mask = torch.as_tensor(mask)
        if mask.dim() != 1:
            raise ValueError('Mask must be a 1-dim tensor.')
        if mask.numel() <= 0:
            raise ValueError('Mask can\'t be empty.')

        super().__init__()
        self.features = len(mask)
        features_vector = torch.arange(self.features)

        self.register_buffer('identity_features', features_vector.masked_select(mask <= 0))
        self.register_buffer('transform_features', features_vector.masked_select(mask > 0))

        assert self.num_identity_features + self.num_transform_features == self.features

        self.transform_net = transform_net_create_fn(
            self.num_identity_features,
            self.num_transform_features * self._transform_dim_multiplier()
        )

        if unconditional_transform is None:
            self.unconditional_transform = None
        else:
            self.unconditional_transform = unconditional_transform(
                features=self.num_identity_features
            )

    @property
    def num_identity_features(self):
        return len(self.identity_features)

    @property
    def num_transform_features(self):
        return len(self.transform_features)

    def forward(self, inputs, context=None):
        if inputs.dim() not in [2, 4]:
            raise ValueError('Inputs must be a 2D or a 4D tensor.')

        if inputs.shape[1] != self.features:
            raise ValueError('Expected features = {}, got {}.'.format(
                self.features, inputs.shape[1]))

        identity_split = inputs[:, self.identity_features, ...]
        transform_split = inputs[:, self.transform_features, ...]

        if _BUG["name"] == "transform_net_on_transform_split":
            transform_params = self.transform_net(transform_split, context)  # (bug) reads what it transforms
        else:
            transform_params = self.transform_net(identity_split, context)
        transform_split, logabsdet = self._coupling_transform_forward(
            inputs=transform_split,
            transform_params=transform_params
        )

        if self.unconditional_transform is not None:
            identity_split, logabsdet_identity =\
                self.unconditional_transform(identity_split, context)
            logabsdet += logabsdet_identity

        outputs = torch.empty_like(inputs)
        outputs[:, self.identity_features, ...] = identity_split
        outputs[:, self.transform_features, ...] = transform_split

        return outputs, logabsdet

    def inverse(self, inputs, context=None):
        identity_split = inputs[:, self.identity_features, ...]
        transform_split = inputs[:, self.transform_features, ...]

        logabsdet = 0.0
        if self.unconditional_transform is not None:
            identity_split, logabsdet = self.unconditional_transform.inverse(identity_split,
                                                                             context)

        transform_params = self.transform_net(identity_split, context)
        transform_split, logabsdet_split = self._coupling_transform_inverse(
            inputs=transform_split,
            transform_params=transform_params
        )
        logabsdet += logabsdet_split

        outputs = torch.empty_like(inputs)
        outputs[:, self.identity_features] = identity_split
        outputs[:, self.transform_features] = transform_split

        return outputs, logabsdet

    def _transform_dim_multiplier(self):
        raise NotImplementedError()

    def _coupling_transform_forward(self, inputs, transform_params):
        raise NotImplementedError()

    def _coupling_transform_inverse(self, inputs, transform_params):
        raise NotImplementedError()


class AffineCouplingTransform(CouplingTransform):
    """An affine coupling layer that scales and shifts part of the variables.

    Reference:
    > L. Dinh et al., Density estimation using Real NVP, ICLR 2017.
    """

    def _transform_dim_multiplier(self):
        return 2

    def _scale_and_shift(self, transform_params):
        unconstrained_scale = transform_params[:, self.num_transform_features:, ...]
        shift = transform_params[:, :self.num_transform_features, ...]
        # scale = (F.softplus(unconstrained_scale) + 1e-3).clamp(0, 3)
        scale = torch.sigmoid(unconstrained_scale + 2) + 1e-3
        return scale, shift

    def _coupling_transform_forward(self, inputs, transform_params):
        scale, shift = self._scale_and_shift(transform_params)
        log_scale = torch.log(scale)
        outputs = inputs * scale + shift
        logabsdet = utils_sum_except_batch(log_scale, num_batch_dims=1)
        if _BUG["name"] == "logabsdet_sign_flipped":
            logabsdet = -logabsdet  # (bug) the inverse's sign in the forward direction
        return outputs, logabsdet

    def _coupling_transform_inverse(self, inputs, transform_params):
        scale, shift = self._scale_and_shift(transform_params)
        log_scale = torch.log(scale)
        outputs = (inputs - shift) / scale
        logabsdet = -utils_sum_except_batch(log_scale, num_batch_dims=1)
        return outputs, logabsdet


utils_sum_except_batch = sum_except_batch


# --------------------------------------------------------------------------- nde/distributions, nde/flows/base.py

class Distribution(nn.Module):
    """Base class for all distribution objects."""

    def forward(self, *args):
        raise RuntimeError('Forward method cannot be called for a Distribution object.')

    def log_prob(self, inputs, context=None):
        inputs = torch.as_tensor(inputs)
        return self._log_prob(inputs, context)

    def _log_prob(self, inputs, context):
        raise NotImplementedError()


class StandardNormal(Distribution):
    """A multivariate Normal with zero mean and unit covariance."""

    def __init__(self, shape):
        super().__init__()
        self._shape = torch.Size(shape)
        self._log_z = 0.5 * np.prod(shape) * np.log(2 * np.pi)

    def _log_prob(self, inputs, context):
        # Note: the context is ignored.
        if inputs.shape[1:] != self._shape:
            raise ValueError('Expected input of shape {}, got {}'.format(
                self._shape, inputs.shape[1:]))
        neg_energy = -0.5 * sum_except_batch(inputs ** 2, num_batch_dims=1)
        return neg_energy - self._log_z


class Flow(Distribution):
    """Base class for all flow objects."""

    def __init__(self, transform, distribution):
        super().__init__()
        self._transform = transform
        self._distribution = distribution

    def _log_prob(self, inputs, context):
        noise, logabsdet = self._transform(inputs, context=context)
        log_prob = self._distribution.log_prob(noise, context=context)
        return log_prob + logabsdet


# ----------------------------------------------------------------------------------- data/plane.py, data/base.py

class PlaneDataset(data.Dataset):
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


class DiamondDataset(PlaneDataset):
    def __init__(self, num_points, flip_axes=False, width=20, bound=2.5, std=0.04):
        # original values: width=15, bound=2, std=0.05
        self.width = width
        self.bound = bound
        self.std = std
        super().__init__(num_points, flip_axes)

    def _create_data(self, rotate=True):
        means = np.array([
            (x + 1e-3 * np.random.rand(), y + 1e-3 * np.random.rand())
            for x in np.linspace(-self.bound, self.bound, self.width)
            for y in np.linspace(-self.bound, self.bound, self.width)
        ])

        covariance_factor = self.std * np.eye(2)

        index = np.random.choice(range(self.width ** 2), size=self.num_points, replace=True)
        noise = np.random.randn(self.num_points, 2)
        self.data = means[index] + noise @ covariance_factor
        if rotate:
            rotation_matrix = np.array([
                [1 / np.sqrt(2), -1 / np.sqrt(2)],
                [1 / np.sqrt(2), 1 / np.sqrt(2)]
            ])
            self.data = self.data @ rotation_matrix
        self.data = self.data.astype(np.float32)
        self.data = torch.Tensor(self.data)


class InfiniteLoader(data.DataLoader):
    """A data loader that can load a dataset repeatedly."""

    def __init__(self, num_epochs=None, *args, **kwargs):
        super().__init__(
            *args, **kwargs
        )
        self.finite_iterable = super().__iter__()
        self.counter = 0
        self.num_epochs = float('inf') if num_epochs is None else num_epochs

    def __next__(self):
        try:
            return next(self.finite_iterable)
        except StopIteration:
            self.counter += 1
            if self.counter >= self.num_epochs:
                raise StopIteration
            self.finite_iterable = super().__iter__()
            return next(self.finite_iterable)


# ------------------------------------------------------------------------------------------- experiments/plane.py

def _build(seed, bug=None):
    _BUG["name"] = bug
    torch.manual_seed(seed)  # (port) args.seed 1638128
    np.random.seed(seed)
    batch_size = 512
    learning_rate = 5e-4
    num_training_steps = int(5e5)
    grad_norm_clip_value = 5.
    device = torch.device('cpu')

    # create data
    train_dataset = DiamondDataset(num_points=4096)  # (port) n_data_points 1e6
    train_loader = InfiniteLoader(
        dataset=train_dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_epochs=None,
        generator=torch.Generator().manual_seed(seed),
    )
    test_dataset = DiamondDataset(num_points=1024)
    dim = 2

    # create model
    distribution = StandardNormal((2,))

    def create_base_transform(i):
        return AffineCouplingTransform(
            mask=create_alternating_binary_mask(features=dim, even=(i % 2 == 0)),
            transform_net_create_fn=lambda in_features, out_features: ResidualNet(
                in_features=in_features,
                out_features=out_features,
                hidden_features=32,
                num_blocks=2,
                use_batch_norm=True
            )
        )

    transform = CompositeTransform([
        create_base_transform(i) for i in range(2)
    ])

    flow = Flow(transform, distribution).to(device)

    # create optimizer
    optimizer = optim.Adam(flow.parameters(), lr=learning_rate)
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, num_training_steps, 0)

    state = {"step": 0}

    def train_step():
        _BUG["name"] = bug
        step = state["step"]
        state["step"] += 1
        flow.train()
        if bug != "no_zero_grad":
            optimizer.zero_grad()
        scheduler.last_epoch = step - 1  # (port) scheduler.step(step)
        scheduler.step()
        batch = next(train_loader).to(device)
        log_density = flow.log_prob(batch)
        loss = - torch.mean(log_density)
        loss.backward()
        if grad_norm_clip_value is not None:
            clip_grad_norm_(flow.parameters(), grad_norm_clip_value)
        optimizer.step()
        return loss.detach()

    def loss_fn(outputs, _targets):
        noise, logabsdet = outputs
        return -torch.mean(distribution.log_prob(noise) + logabsdet)

    def eval_fn(m, batch):
        flow.eval()
        with torch.no_grad():
            nll = -torch.mean(flow.log_prob(test_dataset.data))
        flow.train()
        return float(nll)

    x0 = train_dataset.data[:batch_size]
    return Program(name="nsf_plane_affine", model=transform, batch=(x0, x0), loss_fn=loss_fn, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # classic: the coupling layer's forward log-determinant written with the inverse's sign: the objective rewards
    # expanding the data instead of paying for it.
    Bug("logabsdet_sign_flipped", functools.partial(_build, bug="logabsdet_sign_flipped"), "learning_ledger",
        ("OBJECTIVE",)),
    # classic: the transform net fed the transformed split instead of the identity split: the layer reads the value
    # it scores, its Jacobian is no longer triangular and the log-determinant no longer its own.
    # Re-declared after first contact (public-34, measured as DEPENDENCY): the OBJECTIVE FAIL names this defect, the
    # log-determinant the flow reports no longer its Jacobian's.
    Bug("transform_net_on_transform_split", functools.partial(_build, bug="transform_net_on_transform_split"),
        "learning_ledger", ("OBJECTIVE",), kind="objective.log_det_mismatch"),
    # classic: optimizer.zero_grad() left out of the loop: gradients pile up over steps (whole-model slip).
    Bug("no_zero_grad", functools.partial(_build, bug="no_zero_grad"), "step_probe", (),
        kind="step.grad_accumulation"),  # a whole-model slip: declared by its mechanism (README rule 6)
]

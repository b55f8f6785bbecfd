# ruff: noqa: PLR0402, UP008, UP030, UP032  (the original's style is kept as written)
"""NICE (additive coupling flow with a diagonal scaling layer and a logistic prior) trained on flattened images.

Source: https://github.com/paultsw/nice_pytorch, commit 15cfc543fc3dc81ee70398b8dfc37b67269ede95, files
``nice/layers.py``, ``nice/models.py``, ``nice/loss.py``, ``nice/utils.py`` and ``train.py``. License: BSD-3-Clause
(Copyright (c) 2018, Paul Tang; full text in LICENSES/paultsw-nice_pytorch.txt).

Kept as written: ``_interleave``, ``_BaseCouplingLayer`` and ``AdditiveCouplingLayer`` (even/odd partitions),
``_build_relu_network`` (Linear, then ``num_layers`` x (Linear, ReLU, BatchNorm1d), then Linear), ``NICEModel`` (four
additive couplings odd/even/odd/even, ``scaling_diag`` applied as ``matmul(ys, diag(exp(scaling_diag)))``, the
kaiming-uniform / normal(0, 0.001) initialisation), ``logistic_nice_loglkhd`` and ``LogisticPriorNICELoss`` (the
``--prior`` default is logistic), ``rescale``, ``train``'s ``loss_fn`` closure (``nice_loss_fn(fx,
model.scaling_diag)``, lambda 0), the Adam optimizer with the script's defaults (lr 0.001, betas (0.9, 0.01), eps
0.0001), the loop body (``opt.zero_grad()``, ``loss_fn(model(inputs)).backward()``, ``opt.step()``), the MNIST
transform (flatten, uniform dequantization noise ``rand_like(x)/256``, rescale to [0, 1]) and ``validate`` (model.eval(),
no_grad over the test loader, model.train()) after each epoch; batch size 16 (the default).

Deviations:
- MNIST is replaced by synthetic 4x4 images (dimension 16 instead of 784): each image is a sigmoid of a seeded linear
  map of a 3-dimensional Gaussian code (a low-dimensional manifold the flow can learn), then the script's own transform
  (flatten, dequantization noise, rescale); 320 training images, 64 test images, seeded from ``seed``.
- ``--beta2 0.99`` is passed instead of the script's default 0.01: the NICE paper's "beta2 = 0.01" is written in the
  first Adam preprint's 1 - beta convention, and with beta2 = 0.01 the second moment is the last squared gradient
  alone (the loss climbs after ~40 steps and reaches NaN within 100 here).
- sizes for 2 CPU cores: ``--nonlinearity_hiddens`` 1000 -> 64 (``--nonlinearity_layers`` stays 5).
- ``train``'s epoch loop is unrolled: ``train_step`` takes the next batch of the (unshuffled, drop_last) loader, and
  after the last batch of an epoch runs ``validate`` (its summary statistics are kept instead of printed); saving
  checkpoints, tqdm and argparse are dropped. ``torchvision`` is not available: the dataset is a plain
  ``torch.utils.data.Dataset`` applying the same transform lines.
- ``eval_fn`` is the mean of ``validate``'s per-batch losses.
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.init as init
import torch.optim as optim
import torch.utils.data as data

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program

INPUT_DIM = 16
N_TRAIN, N_TEST = 320, 64


class _Args:
    batch_size = 16
    nlayers = 5
    nhidden = 64  # (port) 1000
    prior = "logistic"
    lr = 0.001
    beta1 = 0.9
    beta2 = 0.99  # (port) the script's default 0.01, see the docstring
    eps = 0.0001
    lmbda = 0.0


# ===== nice/layers.py =====
_get_even = lambda xs: xs[:,0::2]
_get_odd = lambda xs: xs[:,1::2]

def _interleave(first, second, order):
    """
    Given 2 rank-2 tensors with same batch dimension, interleave their columns.
    """
    cols = []
    if order == 'even':
        for k in range(second.shape[1]):
            cols.append(first[:,k])
            cols.append(second[:,k])
        if first.shape[1] > second.shape[1]:
            cols.append(first[:,-1])
    else:
        for k in range(first.shape[1]):
            cols.append(second[:,k])
            cols.append(first[:,k])
        if second.shape[1] > first.shape[1]:
            cols.append(second[:,-1])
    return torch.stack(cols, dim=1)


class _BaseCouplingLayer(nn.Module):
    def __init__(self, dim, partition, nonlinearity):
        super(_BaseCouplingLayer, self).__init__()
        self.dim = dim
        assert (partition in ['even', 'odd']), "[_BaseCouplingLayer] Partition type must be `even` or `odd`!"
        self.partition = partition
        if (partition == 'even'):
            self._first = _get_even
            self._second = _get_odd
        else:
            self._first = _get_odd
            self._second = _get_even
        self.add_module('nonlinearity', nonlinearity)

    def forward(self, x):
        """Map an input through the partition and nonlinearity."""
        return _interleave(
            self._first(x),
            self.coupling_law(self._second(x), self.nonlinearity(self._first(x))),
            self.partition
        )

    def inverse(self, y):
        """Inverse mapping through the layer. Gradients should be turned off for this pass."""
        return _interleave(
            self._first(y),
            self.anticoupling_law(self._second(y), self.nonlinearity(self._first(y))),
            self.partition
        )

    def coupling_law(self, a, b):
        raise NotImplementedError("[_BaseCouplingLayer] Don't call abstract base layer!")

    def anticoupling_law(self, a, b):
        raise NotImplementedError("[_BaseCouplingLayer] Don't call abstract base layer!")


class AdditiveCouplingLayer(_BaseCouplingLayer):
    """Layer with coupling law g(a;b) := a + b."""
    def coupling_law(self, a, b):
        return (a + b)
    def anticoupling_law(self, a, b):
        return (a - b)


# ===== nice/models.py =====
def _build_relu_network(latent_dim, hidden_dim, num_layers):
    """Helper function to construct a ReLU network of varying number of layers."""
    _modules = [ nn.Linear(latent_dim, hidden_dim) ]
    for _ in range(num_layers):
        _modules.append( nn.Linear(hidden_dim, hidden_dim) )
        _modules.append( nn.ReLU() )
        _modules.append( nn.BatchNorm1d(hidden_dim) )
    _modules.append( nn.Linear(hidden_dim, latent_dim) )
    return nn.Sequential( *_modules )


class NICEModel(nn.Module):
    def __init__(self, input_dim, hidden_dim, num_layers):
        super(NICEModel, self).__init__()
        assert (input_dim % 2 == 0), "[NICEModel] only even input dimensions supported for now"
        assert (num_layers > 2), "[NICEModel] num_layers must be at least 3"
        self.input_dim = input_dim
        half_dim = int(input_dim / 2)
        self.layer1 = AdditiveCouplingLayer(input_dim, 'odd', _build_relu_network(half_dim, hidden_dim, num_layers))
        self.layer2 = AdditiveCouplingLayer(input_dim, 'even', _build_relu_network(half_dim, hidden_dim, num_layers))
        self.layer3 = AdditiveCouplingLayer(input_dim, 'odd', _build_relu_network(half_dim, hidden_dim, num_layers))
        self.layer4 = AdditiveCouplingLayer(input_dim, 'even', _build_relu_network(half_dim, hidden_dim, num_layers))
        self.scaling_diag = nn.Parameter(torch.ones(input_dim))

        # randomly initialize weights:
        for layer in (self.layer1, self.layer2, self.layer3, self.layer4):  # (port) the four copied loops as one
            for p in layer.parameters():
                if len(p.shape) > 1:
                    init.kaiming_uniform_(p, nonlinearity='relu')
                else:
                    init.normal_(p, mean=0., std=0.001)

    def forward(self, xs):
        ys = self.layer1(xs)
        ys = self.layer2(ys)
        ys = self.layer3(ys)
        ys = self.layer4(ys)
        ys = torch.matmul(ys, torch.diag(torch.exp(self.scaling_diag)))
        return ys

    def inverse(self, ys):
        """Invert a set of draws from gaussians"""
        with torch.no_grad():
            xs = torch.matmul(ys, torch.diag(torch.reciprocal(torch.exp(self.scaling_diag))))
            xs = self.layer4.inverse(xs)
            xs = self.layer3.inverse(xs)
            xs = self.layer2.inverse(xs)
            xs = self.layer1.inverse(xs)
        return xs


# ===== nice/loss.py =====
def logistic_nice_loglkhd(h, diag):
    # \sum^D_i s_{ii} - { \sum^D_i log(exp(h)+1) + torch.log(exp(-h)+1) }
    return (torch.sum(diag) - (torch.sum(torch.log1p(torch.exp(h)) + torch.log1p(torch.exp(-h)), dim=1)))


class LogisticPriorNICELoss(nn.Module):
    def __init__(self, size_average=True):
        super(LogisticPriorNICELoss, self).__init__()
        self.size_average = size_average

    def forward(self, fx, diag):
        if self.size_average:
            return torch.mean(-logistic_nice_loglkhd(fx, diag))
        else:
            return torch.sum(-logistic_nice_loglkhd(fx, diag))


# ===== nice/utils.py =====
def rescale(x, lo, hi):
    """Rescale a tensor to [lo,hi]."""
    assert(lo < hi), "[rescale] lo={0} must be smaller than hi={1}".format(lo,hi)
    old_width = torch.max(x)-torch.min(x)
    old_center = torch.min(x) + (old_width / 2.)
    new_width = float(hi-lo)
    new_center = lo + (new_width / 2.)
    x = x - old_center
    x = x * (new_width / old_width)
    x = x + new_center
    return x


# ===== the data: synthetic 4x4 "MNIST" under train.py's load_mnist transform =====
class _SyntheticImages(data.Dataset):
    def __init__(self, images, transform):
        self.images = images
        self.transform = transform

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, i):
        return self.transform(self.images[i]), 0


def _make_images(seed, n, offset):
    g = np.random.RandomState(seed)
    W = g.randn(INPUT_DIM, 3) * 2.0
    b = g.randn(INPUT_DIM)
    z = np.random.RandomState(seed + offset).randn(n, 3)
    img = 1.0 / (1.0 + np.exp(-(z @ W.T + b)))
    return torch.from_numpy(np.round(img * 255.0) / 255.0).float().view(n, 1, 4, 4)


def load_mnist(images, train=True, batch_size=1, num_workers=0):
    """Rescale and preprocess MNIST dataset (train.py's transform lines on the synthetic images)."""
    mnist_transform = [
        # flatten:
        lambda x: x.view(-1),
        # add uniform noise:
        lambda x: (x + torch.rand_like(x).div_(256.)),
        # rescale to [0,1]:
        lambda x: rescale(x, 0., 1.),
    ]

    def transform(x):
        for t in mnist_transform:
            x = t(x)
        return x

    return data.DataLoader(_SyntheticImages(images, transform), batch_size=batch_size, drop_last=train)


def _build(seed, bug=None):
    torch.manual_seed(seed)
    args = _Args()
    train_images = _make_images(seed, N_TRAIN, 1)
    test_images = _make_images(seed, N_TEST, 2)
    dataloader_fn = lambda train=True, batch_size=1: load_mnist(train_images if train else test_images, train=train,
                                                              batch_size=batch_size)
    input_dim = INPUT_DIM

    # === build model & optimizer:
    model = NICEModel(input_dim, args.nhidden, args.nlayers)
    if bug == "scaling_diag_not_optimized":
        params = [p for n, p in model.named_parameters() if n != "scaling_diag"]
        opt = optim.Adam(params, lr=args.lr, betas=(args.beta1,args.beta2), eps=args.eps)
    else:
        opt = optim.Adam(model.parameters(), lr=args.lr, betas=(args.beta1,args.beta2), eps=args.eps)

    nice_loss_fn = LogisticPriorNICELoss(size_average=True)
    def loss_fn(fx):
        """Compute NICE loss w/r/t a prior and optional L1 regularization."""
        if bug == "logdet_left_out":
            return nice_loss_fn(fx, torch.zeros_like(model.scaling_diag))
        return nice_loss_fn(fx, model.scaling_diag)

    def validate(model, dataloader_fn, loss_fn):
        """Perform validation on a dataset."""
        model.eval()
        dataloader = dataloader_fn(train=False, batch_size=args.batch_size)
        validation_losses = []
        with torch.no_grad():
            for inputs,_ in dataloader:
                validation_losses.append(loss_fn(model(inputs), model.scaling_diag).item())
        del dataloader
        if bug != "validate_leaves_eval":
            model.train()
        return (np.amin(validation_losses),
                np.median(validation_losses),
                np.mean(validation_losses),
                np.amax(validation_losses))

    state = {"it": None, "epoch": 0, "stats": None}

    def train_step():
        if state["it"] is None:
            state["it"] = iter(dataloader_fn(train=True, batch_size=args.batch_size))
        batch = next(state["it"], None)
        if batch is None:
            # end of the epoch: validation, then the next epoch's loader
            state["stats"] = validate(model, dataloader_fn, nice_loss_fn)
            state["epoch"] += 1
            state["it"] = iter(dataloader_fn(train=True, batch_size=args.batch_size))
            batch = next(state["it"])
        inputs, _ = batch
        opt.zero_grad()
        loss = loss_fn(model(inputs))
        loss.backward()
        opt.step()
        return loss.item()

    def eval_fn(model, _batch=None):
        return float(validate(model, dataloader_fn, nice_loss_fn)[2])

    first = next(iter(dataloader_fn(train=True, batch_size=args.batch_size)))
    return Program(name="paultswnice_mnist", model=model, batch=(first[0], first[1]),
                   loss_fn=lambda fx, _targets=None: loss_fn(fx), optimizer=opt, train_step=train_step,
                   eval_fn=eval_fn, loader=dataloader_fn(train=True, batch_size=args.batch_size))


build = functools.partial(_build, bug=None)

BUGS = [
    # classic flow slip: the log-determinant of the scaling layer left out of the likelihood (the loss called with a
    # zero diagonal): the maximum-likelihood objective rewards shrinking every output towards the prior's mode.
    Bug("logdet_left_out", functools.partial(_build, bug="logdet_left_out"), "learning_ledger", ("OBJECTIVE",)),
    # classic: the optimizer built over the coupling networks only, ``scaling_diag`` left out of it: the diagonal
    # scaling layer never moves from its initialisation.
    Bug("scaling_diag_not_optimized", functools.partial(_build, bug="scaling_diag_not_optimized"), "four_structures",
        ("scaling_diag",)),
    # classic: ``validate`` without its closing ``model.train()``: after the first epoch the BatchNorm layers of the
    # coupling networks train on their running statistics.
    Bug("validate_leaves_eval", functools.partial(_build, bug="validate_leaves_eval"), "step_probe", (),
        kind="step.eval_mode_not_restored"),
]

# ruff: noqa: UP008, UP004, PLR0402, RUF007, RUF059, C408
"""ODE-Net classifier (conv downsampling, one ``ODEBlock`` integrating a conv ``ODEfunc`` from t=0 to t=1, GroupNorm,
pooled linear head) trained by the repository's ``examples/odenet_mnist.py`` loop (SGD momentum 0.9, lr scaled by
batch size with step decay, cross-entropy), with a fixed-step solver written out from the library.

Source: https://github.com/rtqichen/torchdiffeq
Commit: 657943acefa826ef04c025ebeb1ff5e9d60dc268
Files: examples/odenet_mnist.py, torchdiffeq/_impl/odeint.py, torchdiffeq/_impl/solvers.py (FixedGridODESolver),
torchdiffeq/_impl/fixed_grid.py (RK4), torchdiffeq/_impl/rk_common.py (rk4_alt_step_func)
License: MIT (Copyright (c) 2018 Ricky Tian Qi Chen; full text in LICENSES/rtqichen-torchdiffeq.txt)
Domain: neural ODE (continuous-depth image classifier)

Kept as written: ``conv3x3``/``norm`` (GroupNorm(min(32, dim), dim)), ``ConcatConv2d`` (time as an extra input
channel), ``ODEfunc`` (norm-relu-conv-norm-relu-conv-norm, nfe counter), ``ODEBlock`` (integration_time [0, 1],
``out[1]``), ``Flatten``, ``RunningAverageMeter``, ``inf_generator``, ``learning_rate_with_decay`` (lr * batch_size /
128, decay at epochs 60/100/140), ``one_hot``/``accuracy``, the network ``--network odenet
--downsampling-method conv`` (the defaults), ``nn.CrossEntropyLoss``, ``SGD(lr, momentum=0.9)`` and the loop body
(set lr, zero_grad, forward, loss, nfe bookkeeping, backward, step).

Deviations from the original:
- torchdiffeq is not installed here: ``odeint`` is written out for the fixed-grid path only (``FixedGridODESolver``
  with torchdiffeq's ``RK4`` step, ``rk4_alt_step_func``, the step-size grid constructor and linear interpolation);
  the ODEBlock calls it with ``method='rk4', options=dict(step_size=0.25)`` instead of the adaptive default
  ``dopri5`` at ``rtol=atol=args.tol`` (an adaptive solver's step control is not needed for the port and costs
  many more evaluations on 2 CPU cores); ``--adjoint`` (off by default) is not ported;
- sizes: batch_size 128 -> 32 (the lr rule scales it: 0.1 * 32 / 128); the 64 channels are kept;
- data: MNIST (torchvision download) is replaced by synthetic 28x28 one-channel images made from ``seed``: ten
  class templates (a thresholded grating in a disk: 5 orientations x 2 periods, random phase per class), each image
  its class's template shifted by up to 2 pixels, with pixel noise 0.15, clipped to [0, 1] (640 training images,
  320 test images); ``transforms.RandomCrop(28, padding=4)`` (data_aug
  True by default) and ``ToTensor`` are written out in torch; loaders use ``num_workers=0``;
- ``train_step`` is one iteration of the ``for itr`` loop; the per-epoch accuracy evaluation, checkpointing and
  logging are left out (``eval_fn`` is ``accuracy`` on one batch, under ``torch.no_grad()`` as in the loop);
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""

from __future__ import annotations

import functools
import pathlib
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

_HERE = pathlib.Path(__file__).resolve()
if str(_HERE.parents[1]) not in sys.path:
    sys.path.insert(0, str(_HERE.parents[1]))
from _api import Bug, Program


class args:  # the argparse defaults used here (sizes: see the deviations)
    network = 'odenet'
    tol = 1e-3
    adjoint = False
    downsampling_method = 'conv'
    nepochs = 160
    data_aug = True
    lr = 0.1
    batch_size = 32
    test_batch_size = 320


DIM = 64


# ---- torchdiffeq/_impl (fixed-grid odeint, written out) ----------------------------------------------------------

_one_third = 1 / 3
_two_thirds = 2 / 3


def rk4_alt_step_func(func, t0, dt, t1, y0, f0=None):
    """Smaller error with slightly more compute."""
    k1 = f0
    if k1 is None:
        k1 = func(t0, y0)
    k2 = func(t0 + dt * _one_third, y0 + dt * k1 * _one_third)
    k3 = func(t0 + dt * _two_thirds, y0 + dt * (k2 - k1 * _one_third))
    k4 = func(t1, y0 + dt * (k1 - k2 + k3))
    return (k1 + 3 * (k2 + k3) + k4) * dt * 0.125


class FixedGridODESolver:

    def __init__(self, func, y0, step_size=None):
        self.func = func
        self.y0 = y0
        self.step_size = step_size
        if step_size is None:
            self.grid_constructor = lambda f, y0, t: t
        else:
            self.grid_constructor = self._grid_constructor_from_step_size(step_size)

    @staticmethod
    def _grid_constructor_from_step_size(step_size):
        def _grid_constructor(func, y0, t):
            start_time = t[0]
            end_time = t[-1]

            niters = torch.ceil((end_time - start_time) / step_size + 1).item()
            t_infer = torch.arange(0, niters, dtype=t.dtype, device=t.device) * step_size + start_time
            t_infer[-1] = t[-1]

            return t_infer
        return _grid_constructor

    def integrate(self, t):
        time_grid = self.grid_constructor(self.func, self.y0, t)
        assert time_grid[0] == t[0] and time_grid[-1] == t[-1]

        solution = torch.empty(len(t), *self.y0.shape, dtype=self.y0.dtype, device=self.y0.device)
        solution[0] = self.y0

        j = 1
        y0 = self.y0
        for t0, t1 in zip(time_grid[:-1], time_grid[1:]):
            dt = t1 - t0
            dy, f0 = self._step_func(self.func, t0, dt, t1, y0)
            y1 = y0 + dy

            while j < len(t) and t1 >= t[j]:
                solution[j] = self._linear_interp(t0, t1, y0, y1, t[j])
                j += 1
            y0 = y1

        return solution

    def _linear_interp(self, t0, t1, y0, y1, t):
        if t == t0:
            return y0
        if t == t1:
            return y1
        slope = (t - t0) / (t1 - t0)
        return y0 + slope * (y1 - y0)


class RK4(FixedGridODESolver):
    order = 4

    def _step_func(self, func, t0, dt, t1, y0):
        f0 = func(t0, y0)
        return rk4_alt_step_func(func, t0, dt, t1, y0, f0=f0), f0


def odeint(func, y0, t, *, rtol=1e-7, atol=1e-9, method=None, options=None):
    assert method == 'rk4', "only the fixed-grid RK4 path is written out here"
    solver = RK4(func=func, y0=y0, **(options or {}))
    return solver.integrate(t)


# ---- examples/odenet_mnist.py -----------------------------------------------------------------------------------

def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def norm(dim):
    return nn.GroupNorm(min(32, dim), dim)


class ConcatConv2d(nn.Module):

    def __init__(self, dim_in, dim_out, ksize=3, stride=1, padding=0, dilation=1, groups=1, bias=True, transpose=False):
        super(ConcatConv2d, self).__init__()
        module = nn.ConvTranspose2d if transpose else nn.Conv2d
        self._layer = module(
            dim_in + 1, dim_out, kernel_size=ksize, stride=stride, padding=padding, dilation=dilation, groups=groups,
            bias=bias
        )

    def forward(self, t, x):
        tt = torch.ones_like(x[:, :1, :, :]) * t
        ttx = torch.cat([tt, x], 1)
        return self._layer(ttx)


class ODEfunc(nn.Module):

    def __init__(self, dim):
        super(ODEfunc, self).__init__()
        self.norm1 = norm(dim)
        self.relu = nn.ReLU(inplace=True)
        self.conv1 = ConcatConv2d(dim, dim, 3, 1, 1)
        self.norm2 = norm(dim)
        self.conv2 = ConcatConv2d(dim, dim, 3, 1, 1)
        self.norm3 = norm(dim)
        self.nfe = 0

    def forward(self, t, x):
        self.nfe += 1
        out = self.norm1(x)
        out = self.relu(out)
        out = self.conv1(t, out)
        out = self.norm2(out)
        out = self.relu(out)
        out = self.conv2(t, out)
        out = self.norm3(out)
        return out


class ODEBlock(nn.Module):

    def __init__(self, odefunc, bug=None):
        super(ODEBlock, self).__init__()
        self.odefunc = odefunc
        self.integration_time = torch.tensor([0, 1]).float()
        self.bug = bug

    def forward(self, x):
        self.integration_time = self.integration_time.type_as(x)
        out = odeint(self.odefunc, x, self.integration_time, rtol=args.tol, atol=args.tol,
                     method='rk4', options=dict(step_size=0.25))
        if self.bug == "returns_initial_state":
            # the solution at integration_time[0] (the block's own input) instead of at t=1
            return out[0]
        return out[1]

    @property
    def nfe(self):
        return self.odefunc.nfe

    @nfe.setter
    def nfe(self, value):
        self.odefunc.nfe = value


class Flatten(nn.Module):

    def __init__(self):
        super(Flatten, self).__init__()

    def forward(self, x):
        shape = torch.prod(torch.tensor(x.shape[1:])).item()
        return x.view(-1, shape)


class RunningAverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self, momentum=0.99):
        self.momentum = momentum
        self.reset()

    def reset(self):
        self.val = None
        self.avg = 0

    def update(self, val):
        if self.val is None:
            self.avg = val
        else:
            self.avg = self.avg * self.momentum + val * (1 - self.momentum)
        self.val = val


# ---- synthetic MNIST (replaces torchvision.datasets.MNIST and transforms) ---------------------------------------

def make_templates(gen):
    """Ten 28x28 class templates: a grating in a disk, of one of 5 orientations and 2 stroke widths per class."""
    rr, qq = torch.meshgrid(torch.arange(28.0) - 13.5, torch.arange(28.0) - 13.5, indexing="ij")
    disk = ((rr ** 2 + qq ** 2) < 11.0 ** 2).float()
    phase = torch.rand(10, generator=gen) * 2 * np.pi
    templates = torch.zeros(10, 28, 28)
    for c in range(10):
        angle = np.pi * (c % 5) / 5
        period = 5.0 if c < 5 else 9.0
        wave = torch.cos(2 * np.pi * (rr * np.cos(angle) + qq * np.sin(angle)) / period + phase[c])
        templates[c] = (wave > 0.3).float() * disk
    return templates


class SyntheticDigits(Dataset):
    def __init__(self, templates, n, seed, data_aug=False):
        gen = torch.Generator().manual_seed(seed)
        self.targets = torch.randint(0, 10, (n,), generator=gen)
        shifts = torch.randint(-2, 3, (n, 2), generator=gen)
        images = torch.stack([torch.roll(templates[int(y)], (int(s[0]), int(s[1])), dims=(0, 1))
                              for y, s in zip(self.targets, shifts)])
        self.data = (images + 0.15 * torch.randn(images.shape, generator=gen)).clamp(0, 1).unsqueeze(1)
        self.data_aug = data_aug
        self.gen = torch.Generator().manual_seed(seed + 1)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        x = self.data[i]
        if self.data_aug:  # transforms.RandomCrop(28, padding=4)
            x = torch.nn.functional.pad(x, (4, 4, 4, 4))
            r, q = torch.randint(0, 9, (2,), generator=self.gen).tolist()
            x = x[:, r:r + 28, q:q + 28]
        return x, self.targets[i]


def get_mnist_loaders(seed, data_aug=False, batch_size=128, test_batch_size=1000, perc=1.0):
    templates = make_templates(torch.Generator().manual_seed(seed))
    train_loader = DataLoader(
        SyntheticDigits(templates, 640, seed + 10, data_aug=data_aug), batch_size=batch_size,
        shuffle=True, num_workers=0, drop_last=True, generator=torch.Generator().manual_seed(seed)
    )

    train_eval_loader = DataLoader(
        SyntheticDigits(templates, 640, seed + 10), batch_size=test_batch_size, shuffle=False, num_workers=0,
        drop_last=True
    )

    test_loader = DataLoader(
        SyntheticDigits(templates, 320, seed + 20), batch_size=test_batch_size, shuffle=False, num_workers=0,
        drop_last=True
    )

    return train_loader, test_loader, train_eval_loader


def inf_generator(iterable):
    """Allows training with DataLoaders in a single infinite loop:
        for i, (x, y) in enumerate(inf_generator(train_loader)):
    """
    iterator = iterable.__iter__()
    while True:
        try:
            yield iterator.__next__()
        except StopIteration:
            iterator = iterable.__iter__()


def learning_rate_with_decay(batch_size, batch_denom, batches_per_epoch, boundary_epochs, decay_rates):
    initial_learning_rate = args.lr * batch_size / batch_denom

    boundaries = [int(batches_per_epoch * epoch) for epoch in boundary_epochs]
    vals = [initial_learning_rate * decay for decay in decay_rates]

    def learning_rate_fn(itr):
        lt = [itr < b for b in boundaries] + [True]
        i = np.argmax(lt)
        return vals[i]

    return learning_rate_fn


def one_hot(x, K):
    return np.array(x[:, None] == np.arange(K)[None, :], dtype=int)


def accuracy(model, dataset_loader, device):
    total_correct = 0
    total = 0
    for x, y in dataset_loader:
        x = x.to(device)
        y = one_hot(np.array(y.numpy()), 10)

        target_class = np.argmax(y, axis=1)
        predicted_class = np.argmax(model(x).cpu().detach().numpy(), axis=1)
        total_correct += np.sum(predicted_class == target_class)
        total += len(x)
    return total_correct / total


def _build(seed, bug=None):
    torch.manual_seed(seed)
    device = torch.device('cpu')

    is_odenet = args.network == 'odenet'

    downsampling_layers = [
        nn.Conv2d(1, DIM, 3, 1),
        norm(DIM),
        nn.ReLU(inplace=True),
        nn.Conv2d(DIM, DIM, 4, 2, 1),
        norm(DIM),
        nn.ReLU(inplace=True),
        nn.Conv2d(DIM, DIM, 4, 2, 1),
    ]

    feature_layers = [ODEBlock(ODEfunc(DIM), bug=bug)]
    fc_layers = [norm(DIM), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1)), Flatten(), nn.Linear(DIM, 10)]

    model = nn.Sequential(*downsampling_layers, *feature_layers, *fc_layers).to(device)

    criterion = nn.CrossEntropyLoss().to(device)

    train_loader, test_loader, train_eval_loader = get_mnist_loaders(
        seed, args.data_aug, args.batch_size, args.test_batch_size
    )

    data_gen = inf_generator(train_loader)
    batches_per_epoch = len(train_loader)

    lr_fn = learning_rate_with_decay(
        args.batch_size, batch_denom=128, batches_per_epoch=batches_per_epoch, boundary_epochs=[60, 100, 140],
        decay_rates=[1, 0.1, 0.01, 0.001]
    )

    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    batch_time_meter = RunningAverageMeter()
    f_nfe_meter = RunningAverageMeter()
    b_nfe_meter = RunningAverageMeter()
    state = {"itr": 0, "end": time.time()}

    def train_step():
        itr = state["itr"]
        state["itr"] += 1

        for param_group in optimizer.param_groups:
            param_group['lr'] = lr_fn(itr)

        if bug != "zero_grad_after_backward":
            optimizer.zero_grad()
        x, y = data_gen.__next__()
        x = x.to(device)
        y = y.to(device)
        logits = model(x)
        loss = criterion(logits, y)

        if is_odenet:
            nfe_forward = feature_layers[0].nfe
            feature_layers[0].nfe = 0

        loss.backward()
        if bug == "zero_grad_after_backward":
            # the gradient cleared between backward and step: the update is always zero
            optimizer.zero_grad()
        optimizer.step()

        if is_odenet:
            nfe_backward = feature_layers[0].nfe
            feature_layers[0].nfe = 0

        batch_time_meter.update(time.time() - state["end"])
        if is_odenet:
            f_nfe_meter.update(nfe_forward)
            b_nfe_meter.update(nfe_backward)
        state["end"] = time.time()
        return loss.detach()

    def eval_fn(model, batch):
        with torch.no_grad():
            return accuracy(model, [batch], device)

    first = next(iter(DataLoader(train_loader.dataset, batch_size=args.batch_size)))
    return Program(name="torchdiffeq_odenet", model=model, batch=(first[0], first[1]), loss_fn=criterion,
                   optimizer=optimizer, train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the block returns the solution at the first integration time (its own input, out[0]) instead of t=1, the slip
    # behind the question of https://github.com/rtqichen/torchdiffeq/issues/10 on what ``integration_time`` indexes:
    # the ODE function runs but its parameters never reach the loss.
    Bug("returns_initial_state", functools.partial(_build, bug="returns_initial_state"), "reachability",
        ("odefunc",)),
    # optimizer.zero_grad() moved between backward and step (classic): every step applies a zero gradient.
    Bug("zero_grad_after_backward", functools.partial(_build, bug="zero_grad_after_backward"), "step_probe",
        ("0.weight",)),
]
